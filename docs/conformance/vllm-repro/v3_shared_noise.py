"""V3 (docs/conformance/vllm-findings.md): the verifier's correction reuses the drafter's noise.

One round, gamma = 1, V = 4, wired as vLLM wires it: the DSpark drafter (DSparkSpeculator.
_sample_sequential -> gumbel_sample, key (seed, sample_pos - 1)) proposes from q, and
rejection_sample verifies against p with the same request seed and the verify position of
the anchor (= sample_pos - 1). The committed token must follow p (SPEC S5 lossless).

Run from a dspark-conformance checkout: PYTHONPATH=<vllm dir>:. TRITON_INTERPRET=1 N=10000 python
docs/conformance/vllm-repro/v3_shared_noise.py (drop TRITON_INTERPRET on a GPU, where N can be 10**6).
"""
import os

import torch
from scipy import stats

from conformance.adapters.vllm.loader import load_vllm
from conformance.adapters.vllm.markov import VLLMHead, run_markov_loop
from conformance.adapters.vllm.verify import verify_rows

m = load_vllm()
device = "cuda" if torch.cuda.is_available() else "cpu"
n, V = int(os.environ.get("N", "4000")), 4
p = torch.tensor([0.4, 0.3, 0.2, 0.1]); q = torch.tensor([0.1, 0.2, 0.3, 0.4])
g = torch.Generator().manual_seed(0)
seeds = torch.randint(0, 1 << 62, (n,), generator=g).to(device)
anchor_pos = torch.randint(1, 1 << 20, (n,), generator=g).to(device)
head = VLLMHead(torch.zeros(V, 1, device=device), torch.zeros(V, 1, device=device))  # zero Markov bias: q drafts
base = q.log().to(device).expand(n, 1, V).contiguous()
temps = torch.ones(n, device=device)
drafts, cache = run_markov_loop(m, head, base, torch.zeros(n, dtype=torch.int64, device=device), temps, seeds,
                                anchor_pos)
target = torch.stack([p.log(), p.log()]).to(device).expand(n, 2, V).contiguous()
accepted, tokens = verify_rows(m, drafts, target, cache, temps, seeds, anchor_pos + 1,
                               torch.ones(n, dtype=torch.int64, device=device))
drafts, accepted, tokens = drafts.cpu(), accepted.cpu(), tokens.cpu()
law = torch.bincount(tokens[:, 0], minlength=V).float() / n
print(m.version, "drafted", (torch.bincount(drafts[:, 0], minlength=V).float() / n).tolist())
print(m.version, "committed first token", [round(x, 3) for x in law.tolist()], "target p", p.tolist(),
      "TV", round(0.5 * (law - p).abs().sum().item(), 4), "accept rate", accepted.float().mean().item())
counts = torch.bincount(tokens[:, 0], minlength=V).numpy()
print(m.version, "chi-square against p: p-value", stats.chisquare(counts, (p * n).numpy()).pvalue)
