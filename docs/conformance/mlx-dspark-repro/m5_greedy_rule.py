"""M5 (docs/conformance/mlx-dspark-findings.md): a row at 0 < T < 1e-5 is sampled, not greedy.

_sample_arr samples every row with temperature > 0.0, at T itself. On logits 5e-6 apart
(argmax: token 7), T = 1e-6 draws token 6 about 0.7% of the time. SPEC S3's temperature rule
(the nearest to mlx-dspark's) says a row at T < 1e-5 is greedy.

Run from a checkout: PYTHONPATH=<mlx-dspark dir>:. python docs/conformance/mlx-dspark-repro/m5_greedy_rule.py
"""
from _engine import generate, mx

row = mx.arange(8).astype(mx.float32) * 5e-6  # argmax 7
mx.random.seed(0)
draws = mx.stack([generate._sample_arr(row, 1e-6) for _ in range(20000)])
print(f"T = 1e-6: token 7 (argmax) drawn {(draws == 7).astype(mx.float32).mean().item():.4f} of the time; SPEC: 1.0000")
