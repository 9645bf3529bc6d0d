"""D2 (docs/conformance/dspark-mlx-findings.md): a sampled row holding one NaN logit draws id 0,
even where id 0's logit is -inf.

recipe.sample(logits, T > 0) takes mx.softmax(logits / T): one NaN makes the whole law NaN,
and mx.argmax over the all-NaN race returns index 0. SPEC S3: rows containing NaN never
yield a token whose logit is -inf.

Run: PYTHONPATH=<dspark-mlx dir> python docs/conformance/dspark-mlx-repro/d2_nan_row.py
"""
import mlx.core as mx

from dspark_mlx.recipe import sample

row = mx.array([[-float("inf"), 1.0, float("nan"), 0.5]])
draws = []
for seed in range(20):
    mx.random.seed(seed)
    draws.append(sample(row, 1.0).item())
print(f"T = 1 draws over 20 seeds: {sorted(set(draws))} (id 0 has logit -inf; SPEC: never drawn)")
