"""Inputs and the exact oracle for the SPEC S8 production scheduler (stale confidences).

The oracle restates SPEC S8's production paragraph with exact fractions: every request first
gets its minimum length; the extra candidates are positions ``min_r <= j < max_r`` (0-based)
with stale survival ``a > 0``; admitting the ``k`` highest gives ``B = R + sum(min) + k`` and
``tau = R + (stale survivals of every admitted position)``; a budget is correct when it
maximises ``tau / cost(B)`` over ``k = 0 .. #candidates`` (brute force). SPEC S8 orders no
ties, so any maximiser is accepted, and any set of the ``k`` highest (ties across requests
in any order). It shares no code with ``dspark_ref``.

Exactness: confidences are multiples of 1/16 and ``gamma <= 4``, so survivals are multiples
of ``16^-4`` (at least ``1.5e-5`` when positive, above SGLang's ``survival_eps`` 1e-6) and
every survival, product and sum is exact in float32 and float64; costs are multiples of
1/4096 in ``[1, 64)``, never falling with ``b`` (a profiled step cost; the ``"seconds"`` shape
divides a jagged table by 256: step times in seconds, 3.9 to 246 ms, multiples of ``2^-20``;
every objective scales by that power of two exactly). A float objective ``tau / cost`` is then one correctly rounded
division of exact operands (two for ``tau * (1 / cost)``: relative error below ``2^-51``), so
equal fractions stay equal and an order between fractions that differ by more than a
relative ``NEAR_TIE = 1e-9`` survives rounding; generators redraw instances with a closer
near-tie at the top, so the exact oracle is the float argmax of every sound implementation.
"""

from __future__ import annotations

import dataclasses
import random
from fractions import Fraction

from conformance.oracles.prefix_schedule import survival

__all__ = [
    "Instance",
    "COST_QUANTUM",
    "NEAR_TIE",
    "objectives",
    "check_lengths",
    "instances",
    "SIXTEENTHS",
]

COST_QUANTUM = 4096
NEAR_TIE = 1e-9
SIXTEENTHS = [k / 16 for k in range(17)] + [1.0] * 4  # extra ones: survival ties along a row
POSITIVE_SIXTEENTHS = [k / 16 for k in range(1, 17)]
HALVES = [0.0, 0.5, 1.0, 1.0]


@dataclasses.dataclass(frozen=True)
class Instance:
    """One scheduler input: stale confidences ``[R][gamma]``, bounds ``[R]``, the cost table
    ``cost[b - 1]`` for ``b = 1 .. R * (gamma + 1)``."""

    stale: list[list[float]]
    min_lengths: list[int]
    max_lengths: list[int]
    cost: list[float]

    def describe(self) -> str:
        return (f"stale confidences {self.stale}, min {self.min_lengths}, max {self.max_lengths}, "
                f"cost {self.cost}")


def _candidates(inst: Instance, a: list[list[Fraction]]) -> list[tuple[int, int]]:
    return [(r, j) for r in range(len(a)) for j in range(inst.min_lengths[r], inst.max_lengths[r]) if a[r][j] > 0]


def objectives(inst: Instance) -> list[Fraction]:
    """Exact ``tau / cost(B)`` after admitting ``k = 0 .. #candidates`` extra positions."""
    a = survival(inst.stale, exact=True)
    rows = len(a)
    forced = sum(inst.min_lengths)
    tau = rows + sum(a[r][j] for r in range(rows) for j in range(inst.min_lengths[r]))
    values = sorted((a[r][j] for r, j in _candidates(inst, a)), reverse=True)
    out = []
    for k in range(len(values) + 1):
        out.append((tau + sum(values[:k])) / Fraction(inst.cost[rows + forced + k - 1]))
    return out


def check_lengths(where: str, inst: Instance, lengths: list[int]) -> None:
    """Assert that ``lengths`` are a correct production schedule of ``inst`` (module note)."""
    a = survival(inst.stale, exact=True)
    objective = objectives(inst)
    best = max(objective)
    maximisers = [k for k, value in enumerate(objective) if value == best]
    where = f"{where}: {inst.describe()}; budgets maximising tau / cost: {maximisers} extra drafts"
    admitted = [(r, j) for r in range(len(a)) for j in range(inst.min_lengths[r], lengths[r])]
    zero = [(r, j) for r, j in admitted if a[r][j] == 0]
    assert not zero, f"{where}; got lengths {lengths}, admitting zero-survival positions (r, j) {zero}"
    passed_over = [a[r][j] for r, j in _candidates(inst, a) if j >= lengths[r]]
    low = min((a[r][j] for r, j in admitted), default=None)
    assert low is None or not passed_over or low >= max(passed_over), (
        f"{where}; got lengths {lengths}: admits a stale survival {float(low)} while passing over "
        f"{float(max(passed_over))} (highest survivals first, prefixes only)"
    )
    assert len(admitted) in maximisers, (
        f"{where}; got lengths {lengths}: {len(admitted)} extra drafts, objective "
        f"{float(objective[len(admitted)])} < best {float(best)}"
    )


# ----------------------------------------------------------------------------- generators
def _quantized(value: float) -> float:
    return max(COST_QUANTUM, round(value * COST_QUANTUM)) / COST_QUANTUM


def _bucketed_cost(rng: random.Random, size: int, rows: int) -> list[float]:
    """Affine cost over padded sizes, ``base + slope * ceil(b / bucket) * bucket``."""
    base, bucket = rng.uniform(1.0, 4.0), rng.choice([1, 1, 2, 4])
    slope = rng.uniform(0.02, 1.0) * base / max(rows, 1)
    return [_quantized(base + slope * -(-b // bucket) * bucket) for b in range(1, size + 1)]


def _jagged_cost(rng: random.Random, size: int, rows: int) -> list[float]:
    """A rising cost with plateaus and cliffs (x1.1..2), below 64 (never falling: a profiled
    step cost, as vLLM's table builder makes it with a running maximum)."""
    value, table = rng.uniform(1.0, 2.0), []
    for _ in range(size):
        table.append(_quantized(value))
        u = rng.random()
        step = rng.uniform(1.1, 2.0) if u < 0.2 else 1.0 if u < 0.45 else rng.uniform(1.0, 1.08)
        value = min(63.0, value * step)
    return table


SECONDS_SCALE = 256


def _seconds_cost(rng: random.Random, size: int, rows: int) -> list[float]:
    """A jagged table in seconds: :func:`_jagged_cost` / 256, in ``[2^-8, 63 / 256]`` (below 1,
    as profiled step times are; the scale is a power of two, so the argmax is unchanged)."""
    return [c / SECONDS_SCALE for c in _jagged_cost(rng, size, rows)]


COST_SHAPES = {"bucketed": _bucketed_cost, "jagged": _jagged_cost, "seconds": _seconds_cost}


def _bounds(rng: random.Random, rows: int, gamma: int, kind: str) -> tuple[list[int], list[int]]:
    if kind == "full":
        return [0] * rows, [gamma] * rows
    if kind == "batch-wide":
        low = rng.randint(0, gamma)
        high = rng.randint(low, gamma)
        return [low] * rows, [high] * rows
    low = [rng.randint(0, gamma) if kind == "per-request" else 0 for _ in range(rows)]
    return low, [rng.randint(lo, gamma) for lo in low]


def _near_tie(inst: Instance) -> bool:
    objective = objectives(inst)
    best = max(objective)
    return any(0 < (best - value) / best < NEAR_TIE for value in objective)


def instances(rng: random.Random, count: int, *, values: str = "sixteenths", cost: str = "bucketed",
              bounds: str = "full", max_rows: int = 6, max_gamma: int = 4):
    """``count`` instances from ``rng``: confidences from ``values`` (``"sixteenths"``,
    ``"positive"`` or ``"halves"``), a cost shape of :data:`COST_SHAPES`, bounds ``"full"``
    (0 and gamma), ``"batch-wide"`` (one min and one max), ``"per-request"`` or
    ``"per-request-max"`` (minimum 0, a maximum per request); instances with
    a near-tie at the top are redrawn (module note)."""
    pool = {"sixteenths": SIXTEENTHS, "positive": POSITIVE_SIXTEENTHS, "halves": HALVES}[values]
    made = []
    while len(made) < count:
        rows, gamma = rng.randint(1, max_rows), rng.randint(1, max_gamma)
        stale = [[rng.choice(pool) for _ in range(gamma)] for _ in range(rows)]
        low, high = _bounds(rng, rows, gamma, bounds)
        inst = Instance(stale, low, high, COST_SHAPES[cost](rng, rows * (gamma + 1), rows))
        if not _near_tie(inst):
            made.append(inst)
    return made
