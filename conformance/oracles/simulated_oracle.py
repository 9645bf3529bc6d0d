"""The laws of SPEC S6's simulated acceptance, exact from the SPEC text: the two-point law of
``match-expected`` and the clamped, rounded normal of ``multinomial``. Read by the S6 tests;
shares no code with ``dspark_ref``.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats

__all__ = ["match_expected_support", "multinomial_law"]


def match_expected_support(value: float, max_len: int) -> tuple[int, int, float]:
    """SPEC S6: clamp into [1, max_len]; lower = floor; upper = lower + 1 if lower < max_len
    else lower; P(upper) = value - lower. Returns (lower, upper, P(upper))."""
    clamped = min(max(value, 1.0), float(max_len))
    lower = math.floor(clamped)
    upper = lower + 1 if lower < max_len else lower
    return lower, upper, clamped - lower


def multinomial_law(value: float, max_len: int) -> np.ndarray:
    """P(k), k = 1..max_len, of round(clamp(N(value, 1), 1, max_len)): the clamp folds the
    tails into 1 and max_len (ties at k + 1/2 have probability 0)."""
    edges = np.array([-np.inf] + [k + 0.5 for k in range(1, max_len)] + [np.inf])
    return np.diff(scipy.stats.norm.cdf(edges - value))
