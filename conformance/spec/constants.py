"""The SPEC's numbers, one definition each, with the sentence of docs/SPEC.md it reads.

Plain Python floats and ints (no torch, no NumPy): a caller compares or clamps with them in
its own dtype.
"""

from __future__ import annotations

__all__ = ["TEMPERATURE_FLOOR", "GREEDY_TEMPERATURE_BELOW", "GREEDY_TOP_K_AT_MOST", "RESIDUAL_MASS_FLOOR"]

#: SPEC S3 "A sampling row uses temperature ``T`` clamped to at least ``1e-5``" (and, under
#: degenerate inputs, "0 < T < 1e-5 is clamped to 1e-5"): every tempered law of the suite is
#: ``softmax(L / max(T, TEMPERATURE_FLOOR))``.
TEMPERATURE_FLOOR = 1e-5

#: SPEC S3 greedy rule ``"temperature"`` (vLLM's): a row is greedy iff ``temperature < 1e-5``
#: (strictly below). The same number as :data:`TEMPERATURE_FLOOR`, another sentence of the SPEC.
GREEDY_TEMPERATURE_BELOW = 1e-5

#: SPEC S3 greedy rule ``"top_k"`` (SGLang's draft sampler): a row is greedy iff ``top_k <= 1``.
GREEDY_TOP_K_AT_MOST = 1

#: SPEC S5 "Rejected at j: the correction is drawn from ``normalize(max(p_j - q_j, 0))``; if
#: that mass is ~0, from ``p_j``": the reading the reference declares (its docstring), a
#: residual mass ``sum(max(p - q, 0)) <= 1e-12`` counts as zero.
RESIDUAL_MASS_FLOOR = 1e-12
