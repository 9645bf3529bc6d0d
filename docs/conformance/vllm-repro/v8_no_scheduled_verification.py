"""V8 (docs/conformance/vllm-findings.md): vLLM 0.25.0-0.27.1 verify every draft of every request:
no confidence-scheduled verification (SPEC S8), so a request whose drafts all have survival 0
still verifies gamma drafts, where SPEC S8's scheduler admits none of them.

Adaptive verification (``AdaptiveVerificationManager``, SpeculativeConfig's
``enable_adaptive_verification``) first ships in 0.28.0. This prints, for the installed vLLM,
whether its V2 model runner has that module and whether its rejection sampler's draft count is
anything but the fixed ``num_speculative_tokens``; the suite's replay line in the finding shows
the verify lengths it returns.

Run from a dspark-conformance checkout: PYTHONPATH=<vllm dir>:. python
docs/conformance/vllm-repro/v8_no_scheduled_verification.py (no kernel runs).
"""
from pathlib import Path

from conformance.adapters.vllm.loader import load_vllm

m = load_vllm()  # registers vLLM's packages bare; m.root holds the installed files
spec_decode = Path(m.root, "vllm/v1/worker/gpu/spec_decode")
sampler = (spec_decode / "rejection_sampler.py").read_text()
print(f"vllm=={m.version}")
print(f"  adaptive_verification.py shipped: {(spec_decode / 'adaptive_verification.py').exists()}")
print(f"  'enable_adaptive_verification' in vllm/config/speculative.py: "
      f"{'enable_adaptive_verification' in Path(m.root, 'vllm/config/speculative.py').read_text()}")
print("  rejection sampler's draft count: "
      + next(line.strip() for line in sampler.splitlines() if "self.num_speculative_steps =" in line))
