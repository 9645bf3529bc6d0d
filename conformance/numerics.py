"""SPEC S0: the two levels of "equal" for values that another order of the same arithmetic
may compute (a batched GEMM against step-by-step adds, a float32 product against a
float64 one).

* Conformance: ``|got - expected| <= bound`` elementwise, with a bound derived from the
  dtype's unit roundoff and the operands' magnitudes by the test that calls
  :func:`compare` (the derivation sits next to it). Missing it fails the test.
* Bit identity, the stricter level: ``got`` equals ``expected`` rounded into ``got``'s
  dtype (the same bits when the dtypes agree). Reported apart (``bit_identical`` in
  results.json, a column of the matrix); missing it is not a failure.

Exact paths (token ids, accept counts, anything a greedy rule or explicit noise
determines) never come here: they are compared bit for bit.

The plugin's ``numeric_check`` fixture records a :class:`Comparison` on the test's report
and then asserts it, as ``stat_check`` does for a :class:`~conformance.stats.StatResult`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import torch

__all__ = ["Comparison", "compare", "combine"]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The record of one bounded comparison (SPEC S0).

    Fields: ``name`` (what was compared, opening with the case id), ``elements`` (how many
    values), ``max_abs_diff`` (largest ``|got - expected|``), ``worst_ratio`` (largest
    ``|got - expected| / bound``: <= 1 within the bound; ``inf`` where a nonzero difference
    meets a zero bound), ``within_bound``, ``bit_identical`` and, at the element of
    ``worst_ratio`` (flat index ``worst_index``), ``got`` / ``expected`` / ``bound``.
    """

    name: str
    elements: int
    max_abs_diff: float
    worst_ratio: float
    within_bound: bool
    bit_identical: bool
    worst_index: int
    got: float
    expected: float
    bound: float

    def message(self) -> str:
        return (
            f"{self.name}: differ beyond the derived SPEC S0 bound at flat index {self.worst_index}: got "
            f"{self.got!r}, expected {self.expected!r}, |diff| {abs(self.got - self.expected):.3g} > bound "
            f"{self.bound:.3g} ({self.worst_ratio:.3g} x the bound; max |diff| {self.max_abs_diff:.3g} "
            f"over {self.elements} values)"
        )

    def assert_ok(self) -> Comparison:
        """Return ``self`` if within the bound.

        Raises:
            AssertionError: with :meth:`message`.
        """
        if not self.within_bound:
            raise AssertionError(self.message())
        return self

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-serialisable values (an infinite ratio as the string ``"inf"``)."""
        fields = dataclasses.asdict(self)
        return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in fields.items()}


def compare(name: str, got: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor) -> Comparison:
    """Compare ``got`` with ``expected`` under ``bound`` (SPEC S0), without asserting.

    The arithmetic runs on ``got``'s device (a CUDA comparison reads back one small tensor).

    Args:
        name: what is compared, opening with the case id (it heads the failure message).
        got: the implementation's values, any float dtype and device.
        expected: the same shape, any float dtype and device (a second evaluation or a
            float64 oracle).
        bound: the derived bound, broadcastable to that shape, >= 0 (float64 advised).
    Returns:
        A :class:`Comparison`; NaN anywhere in ``got`` or ``expected`` is outside any bound.
    Raises:
        ValueError: ``got`` and ``expected`` differ in shape, or the bound is negative or NaN.
    """
    if tuple(got.shape) != tuple(expected.shape):
        raise ValueError(f"{name}: got has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    got = got.detach()
    expected = expected.detach().to(got.device)
    bound = torch.as_tensor(bound, dtype=torch.float64).to(got.device).expand(got.shape)
    if got.numel() == 0:
        return Comparison(name=name, elements=0, max_abs_diff=0.0, worst_ratio=0.0, within_bound=True,
                          bit_identical=True, worst_index=0, got=0.0, expected=0.0, bound=0.0)
    error = (got.double() - expected.double()).abs().nan_to_num(nan=math.inf).flatten()
    ratio = torch.where(error == 0, 0.0, error / bound.flatten())
    worst = torch.argmax(ratio)
    # One read-back: the bound's validity, the extremes, identity and the worst element's values.
    summary = torch.stack([
        ((bound < 0) | bound.isnan()).any().double(), bound.min().double(), error.max(), ratio.max(),
        (ratio <= 1).all().double(), (got == expected.to(got.dtype)).all().double(), worst.double(),
        got.flatten()[worst].double(), expected.flatten()[worst].double(), bound.flatten()[worst],
    ]).tolist()
    bad_bound, least_bound, max_abs_diff, worst_ratio, within, identical, worst_index, *at_worst = summary
    if bad_bound:
        raise ValueError(f"{name}: the bound must be >= 0 everywhere, got min {least_bound!r}")
    return Comparison(
        name=name, elements=got.numel(), max_abs_diff=max_abs_diff, worst_ratio=worst_ratio,
        within_bound=bool(within), bit_identical=bool(identical), worst_index=int(worst_index),
        got=at_worst[0], expected=at_worst[1], bound=at_worst[2],
    )


def combine(name: str, parts: Sequence[Comparison]) -> Comparison:
    """One :class:`Comparison` of a tensor compared slice by slice: ``parts`` compare its
    consecutive flat slices, in order (each ``compare``'d on its own, to bound memory).

    The worst element is the first one of the largest ratio, as one :func:`compare` of the
    whole would pick; its ``worst_index`` is counted from the start of the whole.

    Raises:
        ValueError: ``parts`` is empty.
    """
    if not parts:
        raise ValueError(f"{name}: parts: expected at least one comparison, got none")
    offset, worst, worst_offset = 0, parts[0], 0
    for part in parts:
        if part.worst_ratio > worst.worst_ratio:
            worst, worst_offset = part, offset
        offset += part.elements
    return Comparison(
        name=name, elements=offset, max_abs_diff=max(p.max_abs_diff for p in parts),
        worst_ratio=worst.worst_ratio, within_bound=all(p.within_bound for p in parts),
        bit_identical=all(p.bit_identical for p in parts), worst_index=worst_offset + worst.worst_index,
        got=worst.got, expected=worst.expected, bound=worst.bound,
    )
