"""M3 (docs/conformance/mlx-dspark-findings.md): a handed-over q(x) slightly above 1 is not read as 1.

_spec_sample_accept accepts draft x iff u < min(1, p(x) / max(q(x), 1e-9)): with q(x) = 1 + 2^-7
(a bfloat16 rounding of 1) and p(x) = 1 about 0.8% of such drafts are rejected. SPEC S5: a q
that rounds slightly above 1 is read as 1.

Run from a checkout: PYTHONPATH=<mlx-dspark dir>:. python docs/conformance/mlx-dspark-repro/m3_q_above_one.py
"""
import numpy as np

from _engine import generate, mx

target = mx.array([[0.0, -float("inf"), -float("inf"), -float("inf")], [0.0, 0.0, 0.0, 0.0]])  # p_1(0) = 1
q = mx.array([[1 + 2.0**-7, 0.0, 0.0, 0.0]])
mx.random.seed(0)
rejected = sum(generate._spec_sample_accept(target, np.array([0]), q, 1.0)[0] == 0 for _ in range(5000))
print(f"{rejected} of 5000 drafts with p(x) = 1 rejected (SPEC: 0)")
