"""The bins of a frequency test by name: which outcomes are furthest from their expectation.

A failed goodness-of-fit test (``conformance.stats.goodness_of_fit``) says that the counts
differ from the law, not where; its record keeps the pooled ``observed`` / ``expected``
counts and a label per bin (``bin_labels``: the outcome, e.g. ``length 3`` or ``bin 17``
for index 17 of the counts, a token id where the counts are a ``bincount`` of tokens). The
failure message and the reports name the bins with the largest Pearson residuals
``(O - E) / sqrt(E)``. Plain Python: the reports import it without numpy or torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: How many bins a failure names.
NAMED_BINS = 3


def default_labels(size: int) -> list[str]:
    """``["bin 0", ..., "bin {size-1}"]``: the index into the counts vector."""
    return [f"bin {i}" for i in range(size)]


def largest_residuals(observed: Sequence[float], expected: Sequence[float], labels: Sequence[str] | None = None,
                      count: int = NAMED_BINS) -> str:
    """The ``count`` bins with the largest ``|O - E| / sqrt(E)``, largest first, in one
    phrase: ``"largest Pearson residuals (O - E)/sqrt(E): length 2 +41.3 (O 812, E 530.2);
    ..."``.

    Args:
        observed, expected: counts per bin ``[k]`` (expected > 0: pooled bins).
        labels: a name per bin ``[k]``; None (an older record): :func:`default_labels`.

    Raises:
        ValueError: ``observed``, ``expected`` and ``labels`` of different lengths.
    """
    labels = default_labels(len(observed)) if labels is None else list(labels)
    if not len(observed) == len(expected) == len(labels):
        raise ValueError(f"observed, expected, labels: expected one value per bin each, got lengths "
                         f"{len(observed)}, {len(expected)}, {len(labels)}")
    residuals = [((o - e) / math.sqrt(e) if e > 0 else math.inf, label, o, e)
                 for o, e, label in zip(observed, expected, labels)]
    worst = sorted(residuals, key=lambda r: -abs(r[0]))[:count]
    return "largest Pearson residuals (O - E)/sqrt(E): " + "; ".join(
        f"{label} {r:+.3g} (O {o:.0f}, E {e:.1f})" for r, label, o, e in worst)
