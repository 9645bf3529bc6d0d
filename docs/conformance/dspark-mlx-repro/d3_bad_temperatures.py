"""D3 (docs/conformance/dspark-mlx-findings.md): T = NaN and T = +inf are neither rejected nor greedy.

recipe.sample tests only T == 0, then divides by max(T, 1e-5): at T = NaN (max(nan, 1e-5) is
nan) and at T = +inf (-inf / inf is NaN) the law is NaN and the draw is id 0 whatever the
logits, here an id whose logit is -inf. The sampled verifier given that NaN law
(speculative_sample_accept) accepts every draft (min(1.0, nan) is 1.0) and draws the bonus
from its uniform fallback. SPEC S3 / S5: such temperatures are rejected with a clear error or
handled by a declared rule (e.g. greedy).

Run: PYTHONPATH=<dspark-mlx dir> python docs/conformance/dspark-mlx-repro/d3_bad_temperatures.py
"""
import mlx.core as mx
import numpy as np

from dspark_mlx.recipe import sample
from dspark_mlx.verify import speculative_sample_accept

logits = mx.array([[-float("inf"), 1.0, 3.0, 0.5]])  # argmax 2; id 0 is -inf
for temperature in (float("nan"), float("inf"), -0.5):
    mx.random.seed(0)
    print(f"sample at T = {temperature}: {[sample(logits, temperature).item() for _ in range(8)]} (argmax: 2)")

# the verifier on the NaN law recipe.sample's formula gives at T = NaN: q and p NaN everywhere
law = mx.softmax(logits / max(float("nan"), 1e-5), axis=-1)
p = np.array(mx.concatenate([law, law]))
result = speculative_sample_accept(np.array([0]), np.array(law), p, np.random.default_rng(0))
print(f"verify draft 0 under the T = NaN law: accepted {result.n_accepted}, tokens {result.tokens.tolist()} "
      "(draft 0 has target logit -inf)")
