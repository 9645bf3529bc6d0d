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
from typing import Any

import torch

__all__ = ["Comparison", "compare"]


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
    got, expected = got.detach().cpu(), expected.detach().cpu()
    bound = torch.as_tensor(bound, dtype=torch.float64).cpu().expand(got.shape)
    if bool((bound < 0).any()) or bool(bound.isnan().any()):
        raise ValueError(f"{name}: the bound must be >= 0 everywhere, got min {float(bound.min())!r}")
    error = (got.double() - expected.double()).abs().nan_to_num(nan=math.inf).flatten()
    ratio = torch.where(error == 0, 0.0, error / bound.flatten())
    worst = int(torch.argmax(ratio)) if ratio.numel() else 0
    at_worst = [float(t.flatten()[worst]) if ratio.numel() else 0.0 for t in (got, expected, bound)]
    return Comparison(
        name=name, elements=got.numel(),
        max_abs_diff=float(error.max()) if error.numel() else 0.0,
        worst_ratio=float(ratio.max()) if ratio.numel() else 0.0,
        within_bound=bool((ratio <= 1).all()),
        bit_identical=torch.equal(got, expected.to(got.dtype)),
        worst_index=worst, got=at_worst[0], expected=at_worst[1], bound=at_worst[2],
    )
