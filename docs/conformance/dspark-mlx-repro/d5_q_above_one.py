"""D5 (docs/conformance/dspark-mlx-findings.md): a handed-over q(x) slightly above 1 is not read as 1.

speculative_sample_accept accepts iff rng.random() < min(1, p / q): with q(x) = 1 + 2^-7 (a
bfloat16 rounding of 1) and p(x) = 1 the ratio is 0.9922, so about 0.8% of such drafts are
rejected although the target gives them all its mass. SPEC S5: a q that rounds slightly above
1 is read as 1 (u * q < p holds for every u < 1).

Run: PYTHONPATH=<dspark-mlx dir> python docs/conformance/dspark-mlx-repro/d5_q_above_one.py
"""
import numpy as np

from dspark_mlx.verify import speculative_sample_accept

q = np.array([[1 + 2.0**-7, 0.0, 0.0, 0.0]], dtype=np.float32)  # x = 0, q(0) = 1 + 2^-7
p = np.array([[1.0, 0.0, 0.0, 0.0], [0.25] * 4], dtype=np.float32)  # p(0) = 1
rng = np.random.default_rng(0)
rejected = sum(speculative_sample_accept(np.array([0]), q, p, rng).n_accepted == 0 for _ in range(20000))
print(f"{rejected} of 20000 drafts with p(x) = 1 rejected (SPEC: 0)")
