"""Harness of the S6 cases: the exact support check of drawn lengths (SPEC S6: a length
outside its support is impossible, so one such draw fails the case).

Fast on the law cases' 110,000-250,000 draws (set operations in C, issue 45); the per-draw
check, which names the first bad draw, runs only where the fast one cannot pass.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

__all__ = ["check_support"]

_PLAIN_INT = frozenset({int})


def check_support(label: str, values: Sequence, allowed: set[int], what: str) -> None:
    """Every value is an integer (``numbers.Integral``) in ``allowed``.

    Args:
        label: names the case in the message (its case id).
        values: the draws, a list (of Python ints when the IUT conforms).
        allowed: the support, a set of ints.
        what: names the draws in the message (``match-expected(4.7, max_len=6)``).

    Raises:
        AssertionError: ``{label}: {what}: draw {i} is {value!r} ({type}); expected an int in
            [...]``, naming the first draw that is no integer or lies outside ``allowed``.

    Example:
        >>> check_support("S6/x", [4, 5, 4], {4, 5}, "match-expected(4.7, max_len=6)")
        >>> check_support("S6/x", [4, 3.0], {4, 5}, "lengths")
        Traceback (most recent call last):
        AssertionError: S6/x: lengths: draw 1 is 3.0 (float); expected an int in [4, 5]
    """
    if _PLAIN_INT.issuperset(map(type, values)) and allowed.issuperset(values):
        return  # plain ints, all in the support
    for i, value in enumerate(values):
        if not isinstance(value, numbers.Integral) or int(value) not in allowed:
            raise AssertionError(
                f"{label}: {what}: draw {i} is {value!r} ({type(value).__name__}); expected an int in "
                f"{sorted(allowed)}"
            )
