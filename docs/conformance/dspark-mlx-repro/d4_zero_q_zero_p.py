"""D4 (docs/conformance/dspark-mlx-findings.md): a draft with q(x) = 0 is accepted even where p(x) = 0.

verify.py: ratio = 1.0 if qd <= 0.0 else min(1.0, p / qd), then accept iff rng.random() < ratio:
a draft its own law gives probability 0 is always accepted, and emitted, whatever the target
gives it. SPEC S5: accept x_j iff u * q_j(x_j) < p_j(x_j), which at q = 0 accepts iff p > 0
(or, declared, always rejects): never a token of target probability 0.

Run: PYTHONPATH=<dspark-mlx dir> python docs/conformance/dspark-mlx-repro/d4_zero_q_zero_p.py
"""
import numpy as np

from dspark_mlx.verify import speculative_sample_accept

q = np.array([[0.0, 1.0, 0.0, 0.0]], dtype=np.float32)           # the draft law: x = 0 has q = 0
p = np.array([[0.0, 0.0, 1.0, 0.0], [0.25] * 4], dtype=np.float32)  # the target: p_1(0) = 0
accepted = sum(speculative_sample_accept(np.array([0]), q, p, np.random.default_rng(s)).n_accepted for s in range(100))
print(f"draft 0 (q = 0, p = 0) accepted in {accepted} of 100 rounds (SPEC: 0)")
