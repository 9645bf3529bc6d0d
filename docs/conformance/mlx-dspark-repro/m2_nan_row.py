"""M2 (docs/conformance/mlx-dspark-findings.md): a sampled row holding one NaN logit draws id 0,
even where id 0's logit is -inf (and so does T = +inf on a row with a -inf logit).

_sample_arr(row, T > 0) samples mx.random.categorical(log(softmax(row / T) + 1e-20)): one NaN
makes the law NaN and the draw is id 0 whatever its logit. SPEC S3: rows containing NaN never
yield a token whose logit is -inf; an infinite T is rejected or handled by a declared rule.

Run from a checkout: PYTHONPATH=<mlx-dspark dir>:. python docs/conformance/mlx-dspark-repro/m2_nan_row.py
"""
from _engine import generate, mx

nan_row = mx.array([-float("inf"), 1.0, float("nan"), 0.5])
live_row = mx.array([-float("inf"), 1.0, 3.0, 0.5])
for seed in range(3):
    mx.random.seed(seed)
    print(f"seed {seed}: NaN row at T = 1 -> {generate._sample_arr(nan_row, 1.0).item()}, "
          f"finite row at T = inf -> {generate._sample_arr(live_row, float('inf')).item()} (id 0 has logit -inf)")
