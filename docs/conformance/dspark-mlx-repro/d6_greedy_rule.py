"""D6 (docs/conformance/dspark-mlx-findings.md): a row at 0 < T < 1e-5 is sampled at T = 1e-5.

recipe.sample is greedy only at temperature == 0; any other T is clamped to 1e-5 and sampled.
On logits 5e-6 apart (argmax: token 7), T = 1e-6 draws other tokens. SPEC S3's temperature
rule (the nearest to dspark-mlx's) says a row at T < 1e-5 is greedy.

Run: PYTHONPATH=<dspark-mlx dir> python docs/conformance/dspark-mlx-repro/d6_greedy_rule.py
"""
import mlx.core as mx

from dspark_mlx.recipe import sample

logits = mx.broadcast_to(mx.arange(8).astype(mx.float32) * 5e-6, (2000, 8))  # argmax 7
mx.random.seed(0)
drawn = sample(logits, 1e-6)
print(f"T = 1e-6: token 7 (argmax) drawn {(drawn == 7).astype(mx.float32).mean().item():.3f} of the time; "
      f"at T = 0: {(sample(logits, 0.0) == 7).astype(mx.float32).mean().item():.3f}; SPEC: 1.000")
