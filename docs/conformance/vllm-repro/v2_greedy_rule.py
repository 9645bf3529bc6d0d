"""V2 (docs/conformance/vllm-findings.md): a request at 0 < T < 1e-5 is sampled at T = 1e-2.

vLLM's SamplingParams floors 0 < T < 1e-2 to 1e-2 before its greedy test (T < 1e-5), so
SamplingParams(temperature=1e-6) stores temperature 1e-2. This feeds that state to vLLM's
gumbel_sample on logits [0, 5e-6] (argmax: token 1). SPEC S3's vLLM rule says greedy.

Run from a dspark-conformance checkout: PYTHONPATH=<vllm dir>:. TRITON_INTERPRET=1 python
docs/conformance/vllm-repro/v2_greedy_rule.py (drop TRITON_INTERPRET on a GPU).
"""
import inspect

import torch

from conformance.adapters.vllm.loader import load_vllm  # registers vLLM's packages bare

m = load_vllm()
gumbel_sample = m["gumbel"].gumbel_sample
device = "cuda" if torch.cuda.is_available() else "cpu"
extra = {"is_drafting": False} if "is_drafting" in inspect.signature(gumbel_sample).parameters else {}
n = 2000
logits = torch.tensor([[0.0, 5e-6]], device=device).repeat(n, 1)
out = gumbel_sample(logits, torch.arange(n, dtype=torch.int32, device=device), torch.full((n,), 1e-2, device=device),
                    torch.arange(n, device=device), torch.zeros(n, dtype=torch.int64, device=device),
                    apply_temperature=True, **extra)
print(f"vllm=={m.version}: token 1 (argmax) drawn {(out == 1).float().mean().item():.3f} of the time; SPEC: 1.000")
