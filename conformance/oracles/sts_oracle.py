"""The SPEC S7 STS fit, written out independently: a float64 NumPy oracle.

SPEC S7: STS fits ``t_k`` left to right by 1-D grid search minimising the ECE of the
cumulative product ``a_k = prod_{i<=k} sigmoid(raw_i / t_i)`` against the prefix-accepted
labels, earlier positions held fixed. :func:`position_curve` is one such 1-D search (the
ECE of every grid temperature at position ``k`` given ``t_1 .. t_{k-1}``);
:func:`fit_sequential` chains them. Shares no code with ``dspark_ref``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ORACLE_GRID", "ORACLE_GRID_RATIO", "ece", "position_curve", "fit_sequential", "relative_gap"]

#: 2001 temperatures spaced geometrically over [0.01, 100]: consecutive ratio 10^(4/2000).
ORACLE_GRID = np.logspace(-2.0, 2.0, 2001)
ORACLE_GRID_RATIO = 10.0 ** (4.0 / 2000.0)


def ece(prob: np.ndarray, label: np.ndarray, n_bins: int = 15) -> float:
    """Equal-width binned ECE ``sum_b |sum_{i in b} (label_i - prob_i)| / N`` (bin ``b`` holds
    ``[b/n, (b+1)/n)``, the last bin also 1), float64; ``prob``, ``label`` ``[N]``."""
    prob = np.asarray(prob, dtype=np.float64)
    label = np.asarray(label, dtype=np.float64)
    bins = np.minimum(np.floor(prob * n_bins).astype(np.int64), n_bins - 1)
    gaps = np.zeros(n_bins)
    np.add.at(gaps, bins, label - prob)
    return float(np.abs(gaps).sum() / prob.size)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def position_curve(raw: np.ndarray, accepted: np.ndarray, earlier: np.ndarray,
                   grid: np.ndarray = ORACLE_GRID) -> np.ndarray:
    """ECE of the cumulative product at position ``k = len(earlier)`` for every ``t`` of ``grid``.

    Args:
        raw: ``[N, gamma]`` raw confidence logits (float64).
        accepted: ``[N, gamma]`` bool prefix-accepted labels.
        earlier: ``[k]`` temperatures ``t_1 .. t_k`` held fixed (``k < gamma``).
        grid: 1-D positive temperatures.
    Returns:
        ``[len(grid)]`` float64 ECE values.
    """
    raw = np.asarray(raw, dtype=np.float64)
    k = len(earlier)
    prefix = np.ones(raw.shape[0])
    for i, t in enumerate(earlier):
        prefix = prefix * _sigmoid(raw[:, i] / float(t))
    return np.array([ece(prefix * _sigmoid(raw[:, k] / t), accepted[:, k]) for t in grid])


def fit_sequential(raw: np.ndarray, accepted: np.ndarray, grid: np.ndarray = ORACLE_GRID) -> np.ndarray:
    """The SPEC's left-to-right fit: ``[gamma]`` float64 temperatures (ties: the first grid entry)."""
    temperatures: list[float] = []
    for _ in range(np.asarray(raw).shape[1]):
        temperatures.append(float(grid[int(np.argmin(position_curve(raw, accepted, np.array(temperatures), grid)))]))
    return np.array(temperatures)


def relative_gap(a: float, b: float) -> float:
    """``|ln(a / b)|`` for positive ``a``, ``b``: how far apart two temperatures are, as a log ratio."""
    return abs(math.log(a / b))
