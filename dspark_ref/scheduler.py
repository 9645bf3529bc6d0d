"""Hardware-aware prefix scheduler (SPEC S8, paper Algorithm 1, Section 5.2, Appendix A).

Given calibrated confidences ``c[R, gamma]`` (SPEC S7) and a profiled steps-per-second curve
``SPS(B)``, choose per-request verification lengths ``l[R]`` maximising the expected token
throughput ``Theta = tau * SPS(B)`` with ``B = sum_r (1 + l_r)`` tokens sent to the target and
``tau = sum_r (1 + sum_{j<=l_r} a[r, j])`` expected accepted tokens, ``a = cumprod(c)``.

All three schedulers walk the same admission path: draft positions ``(r, j)`` with
``a[r, j] > 0``, sorted by ``a`` descending with a stable sort over row-major ``(r, j)``
(so on ties ``(r, j-1)`` comes before ``(r, j)``, and lower rows first). They differ in where
they cut the path:

* :func:`schedule_prefixes` -- Algorithm 1: stop at the first admission that does not raise
  ``Theta``. Non-anticipating, hence lossless.
* :func:`schedule_prefixes_retrospective` -- the global argmax of ``Theta`` over the whole
  path. NOT lossless when ``c`` depends on sampled tokens (Appendix A).
* :func:`schedule_prefixes_async_topk` -- Section 5.2: the retrospective cut of stale
  confidences fixes a capacity ``K``; the current confidences fill it.

:func:`schedule_prefixes_production` is the SPEC S8 production variant: everything it reads
is stale (confidences computed before the current block was drawn); the verify budget is the
argmax of ``(R + sum of admitted survivals) / cost(B)`` over all budgets, filled with the
highest stale survivals in prefix order, within per-request minimum and maximum lengths.

``sps`` is a callable ``sps(B) -> float`` or a table (sequence or 1-D tensor) whose entry
``sps[B - 1]`` is ``SPS(B)`` for ``B = 1 .. len(sps)``. Arithmetic is float64.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, Sequence, Union

import torch

from dspark_ref._checks import (
    FLOAT_DTYPES,
    check_float,
    check_int,
    check_same_device,
    check_tensor,
)

__all__ = [
    "SPSCurve",
    "AdmissionRule",
    "schedule_prefixes",
    "schedule_prefixes_retrospective",
    "schedule_prefixes_async_topk",
    "ProductionRule",
    "schedule_prefixes_production",
    "expected_throughput",
    "appendix_a_first_token_law",
]

SPSCurve = Union[Callable[[int], float], Sequence[float], torch.Tensor]
"""Steps-per-second curve: ``sps(B)``, or a table with ``sps[B - 1] = SPS(B)``."""

Scheduler = Callable[[torch.Tensor, SPSCurve], torch.Tensor]


class AdmissionRule:
    """The two choices of Algorithm 1 in :func:`schedule_prefixes`, one overridable method
    each (SPEC S8): the order candidates are admitted in, and when an admission counts as
    an improvement.

    An instance of this class is the paper's rule; a subclass that overrides one method
    changes that choice alone (validation, the early stop and the lengths stay those of
    ``schedule_prefixes``).

    Example:
        >>> class KeepTies(AdmissionRule):  # Theta >= best instead of Theta > best
        ...     def improves(self, theta, best):
        ...         return theta >= best
    """

    def path(self, survival: torch.Tensor) -> list[tuple[int, int]]:
        """Candidates ``(r, k)`` (0-based ``k``: draft position ``j = k + 1``) with
        ``a = survival[r, k] > 0`` (``survival [R, gamma]`` float64 on the CPU), ``a``
        descending, ties in row-major order, so each row's prefix order holds."""
        return _admission_path(survival)

    def improves(self, theta: float, best: float) -> bool:
        """Whether an admission with throughput ``theta`` is kept against ``best``: a strict
        increase."""
        return theta > best


_PAPER_RULE = AdmissionRule()


def schedule_prefixes(
    confidences: torch.Tensor, sps: SPSCurve, *, rule: AdmissionRule | None = None
) -> torch.Tensor:
    """Causal hardware-aware prefix scheduler, exactly paper Algorithm 1 (SPEC S8).

    Start from ``l = 0``, ``B = R``, ``tau = R``, ``best = R * SPS(R)``; admit candidates in
    path order (``l_r = j; B += 1; tau += a[r, j]; Theta = tau * SPS(B)``), keeping each
    admission that strictly raises ``Theta`` and stopping at the first that does not. The
    early stop makes the admission of ``(r, j)`` depend only on candidates ranked before it,
    never on ``a[r, j+1]`` (which sees the sampled ``x_{r,j}``): that is the losslessness.

    Args:
        confidences: ``[R, gamma]`` float confidences ``c`` in ``[0, 1]`` (``R``, ``gamma``
            may be 0).
        sps: the steps-per-second curve (module note); a table must cover every batch size
            the path can reach, ``R + #{(r, j): a[r, j] > 0}``.
        rule: the order and improvement test, an :class:`AdmissionRule` (default
            ``AdmissionRule()``, the paper's); a subclass replaces one of them.

    Returns:
        ``[R]`` int64 lengths in ``[0, gamma]``, on the device of ``confidences``;
        ``l_r > 0`` only where ``a[r, l_r] > 0``.

    Raises:
        TypeError: non-tensor / non-float ``confidences``; ``sps`` neither callable nor
            table; ``rule`` not an AdmissionRule.
        ValueError: not 2-D, NaN or values outside ``[0, 1]``; a table too short, or an SPS
            value that is not finite and non-negative.

    Example:
        >>> schedule_prefixes(torch.tensor([[0.8, 0.9]], dtype=torch.float64), [1.0, 0.5, 0.45])
        tensor([0])
    """
    survival, sps_of = _check_schedule(confidences, sps, rule=rule)
    rule = _PAPER_RULE if rule is None else rule
    order = rule.path(survival)
    admitted = _cut(survival, order, sps_of, rule.improves, early_stop=True)
    return _lengths_of(order[:admitted], confidences)


def schedule_prefixes_retrospective(confidences: torch.Tensor, sps: SPSCurve) -> torch.Tensor:
    """Algorithm 1 without the early stop: the global argmax of ``Theta`` along the path.

    NOT lossless (paper Appendix A): the cut can land after ``(r, j+1)``, whose survival
    ``a[r, j+1]`` depends on the sampled token ``x_{r,j}``, so admitting ``x_{r,j}`` depends on
    ``x_{r,j}`` itself. Kept as the paper's counterexample and as the cut applied to stale
    confidences by :func:`schedule_prefixes_async_topk`. Ties in ``Theta`` keep the shorter
    path (only a strict increase moves the argmax).

    Args, returns and errors as :func:`schedule_prefixes` (SPEC S8).
    """
    survival, sps_of = _check_schedule(confidences, sps)
    order = _admission_path(survival)
    admitted = _cut(survival, order, sps_of, _PAPER_RULE.improves, early_stop=False)
    return _lengths_of(order[:admitted], confidences)


def schedule_prefixes_async_topk(
    stale_confidences: torch.Tensor, sps: SPSCurve, *, confidences: torch.Tensor
) -> torch.Tensor:
    """Production asynchronous top-K scheduler (paper Section 5.2, SPEC S8).

    Our reading of Section 5.2: the capacity ``K`` (draft tokens sent to the target, so
    ``B = R + K``) must be known before the current step finishes, so it is computed from
    the confidences of two steps earlier, by the retrospective search (no early stop, which
    steps over jagged SPS cliffs). The current step then admits the ``K`` best current
    candidates in path order (top-K by up-to-date ``a``, prefix order on ties), capped at the
    number of candidates with ``a > 0``. This stays non-anticipating: ``K`` is fixed before
    the current tokens exist, and ``(r, j+1)`` never ranks ahead of ``(r, j)``.

    Args:
        stale_confidences: ``[R_stale, gamma_stale]`` confidences from two steps earlier (the
            batch may differ from the current one).
        sps: the steps-per-second curve; a table must cover the stale path (see
            :func:`schedule_prefixes`).
        confidences: ``[R, gamma]`` current confidences in ``[0, 1]``.

    Returns:
        ``[R]`` int64 lengths in ``[0, gamma]`` summing to ``min(K, #{a > 0})``.

    Raises:
        As :func:`schedule_prefixes`, naming ``stale_confidences`` or ``confidences``.
    """
    stale_survival, sps_of = _check_schedule(stale_confidences, sps, name="stale_confidences")
    survival = _check_confidences("confidences", confidences)
    capacity = _cut(
        stale_survival, _admission_path(stale_survival), sps_of, _PAPER_RULE.improves, early_stop=False
    )
    return _lengths_of(_admission_path(survival)[:capacity], confidences)


class ProductionRule:
    """The choices of :func:`schedule_prefixes_production`, one overridable method each
    (SPEC S8 production variant): which confidences feed the budget and the fill, the order
    extra candidates are admitted in, the budget picked from the objectives, and the lengths
    an admitted set makes. An instance is the SPEC's rule; a subclass changes one choice.

    Example:
        >>> class RankByCurrent(ProductionRule):  # paper Section 5.2: the current block fills K
        ...     def inputs(self, stale_confidences, confidences):
        ...         return stale_confidences, confidences
    """

    def inputs(
        self, stale_confidences: torch.Tensor, confidences: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(budget confidences, fill confidences)``, both ``[R, gamma]``: the stale ones for
        both (the current block's ``confidences``, possibly None, are never read)."""
        return stale_confidences, stale_confidences

    def ranked(self, survival: torch.Tensor, low: list[int], high: list[int]) -> list[tuple[int, int]]:
        """Extra candidates ``(r, k)`` (0-based ``k``) with ``low[r] <= k < high[r]`` and
        ``survival[r, k] > 0``, survival descending, ties in row-major (prefix) order."""
        return [(r, k) for r, k in _admission_path(survival) if low[r] <= k < high[r]]

    def budget(self, objectives: list[float]) -> int:
        """The number of extras to admit: the first (smallest) argmax of ``objectives[k]``."""
        best = 0
        for k, value in enumerate(objectives):
            if value > objectives[best]:
                best = k
        return best

    def admit(self, low: list[int], high: list[int], admitted: list[tuple[int, int]]) -> list[int]:
        """Lengths: each request's minimum plus its admitted extras."""
        lengths = list(low)
        for r, _ in admitted:
            lengths[r] += 1
        return lengths


_PRODUCTION_RULE = ProductionRule()


def schedule_prefixes_production(
    stale_confidences: torch.Tensor,
    cost: SPSCurve,
    *,
    min_lengths: torch.Tensor | None = None,
    max_lengths: torch.Tensor | None = None,
    confidences: torch.Tensor | None = None,
    rule: ProductionRule | None = None,
) -> torch.Tensor:
    """Production stale-confidence scheduler (SPEC S8, "Production variant").

    Every input it reads is stale: ``stale_confidences`` were computed before the current
    block's tokens were drawn, so nothing the current block samples can move an admission
    (non-anticipation), and one request's lengths never see another's current values.

    Each request ``r`` first gets its ``min_lengths[r]`` drafts. The extra candidates are the
    positions ``(r, j)`` with ``min_lengths[r] <= j < max_lengths[r]`` (0-based ``j``) and
    stale survival ``a[r, j] > 0``, ranked by ``a`` descending, ties in row-major order (so
    ``(r, j-1)`` before ``(r, j)``: prefixes only). Admitting the first ``k`` of them gives
    ``B = R + sum(min_lengths) + k`` target tokens and ``tau = R + (survivals of every
    admitted position, the minimum ones included)``; the budget ``k`` maximises
    ``tau / cost(B)`` over ``k = 0 .. #candidates`` (brute force; on ties the smallest ``k``).

    Args:
        stale_confidences: ``[R, gamma]`` float confidences in ``[0, 1]`` (``R``, ``gamma``
            may be 0); survivals ``a = cumprod`` along each row, float64.
        cost: step cost (seconds per target step) as a callable ``cost(B)`` or a table with
            ``cost[B - 1] = cost(B)``, finite and ``> 0``; a table must cover
            ``R + sum(min_lengths) + #candidates``.
        min_lengths: ``[R]`` int64/int32 in ``[0, gamma]`` (None: zeros).
        max_lengths: ``[R]`` int64/int32 in ``[min_lengths, gamma]`` (None: ``gamma``).
        confidences: the current block's ``[R, gamma]`` confidences; the SPEC rule never
            reads them (a ``rule`` may, see :class:`ProductionRule`).
        rule: a :class:`ProductionRule` (default ``ProductionRule()``, the SPEC's).

    Returns:
        ``[R]`` int64 lengths in ``[min_lengths, max_lengths]``, on the device of
        ``stale_confidences``.

    Raises:
        TypeError: non-tensor / non-float confidences, non-integer bounds, ``cost`` neither
            callable nor table, ``rule`` not a ProductionRule.
        ValueError: not 2-D, NaN or values outside ``[0, 1]``; bounds of the wrong shape,
            device or range; a table too short, or a cost that is not finite and ``> 0``.

    Example:
        >>> stale = torch.tensor([[0.9, 0.5], [0.5, 0.5]], dtype=torch.float64)
        >>> schedule_prefixes_production(stale, [1.0, 1.0, 1.25, 1.5, 2.0, 2.5])
        tensor([1, 0])
    """
    if rule is not None and not isinstance(rule, ProductionRule):
        raise TypeError(f"rule: expected a ProductionRule or None, got {type(rule).__name__}")
    rule = _PRODUCTION_RULE if rule is None else rule
    device = _check_production_forms(stale_confidences, min_lengths, max_lengths, confidences)
    stale_confidences, min_lengths, max_lengths, confidences = _to_host(
        stale_confidences, min_lengths, max_lengths, confidences)
    survival, low, high = _check_production(stale_confidences, min_lengths, max_lengths)
    if confidences is not None:
        _check_confidences("confidences", confidences)
    budget_conf, fill_conf = rule.inputs(stale_confidences, confidences)
    budget_survival = _check_confidences("budget confidences", budget_conf)
    rows = survival.shape[0]
    a = budget_survival.tolist()
    forced = sum(low)
    tau = float(rows) + sum(a[r][k] for r in range(rows) for k in range(low[r]))
    extra = rule.ranked(budget_survival, low, high)
    cost_of = _cost_function(cost, rows + forced + len(extra))
    objectives = [tau / cost_of(rows + forced)] if rows else [0.0]
    for count, (r, k) in enumerate(extra, start=1):
        tau += a[r][k]
        objectives.append(tau / cost_of(rows + forced + count))
    budget = rule.budget(objectives)
    fill = rule.ranked(_check_confidences("fill confidences", fill_conf), low, high)
    lengths = rule.admit(low, high, fill[:budget])
    return torch.tensor(lengths, dtype=torch.int64).to(device, non_blocking=True)  # staged: no wait on the device


def expected_throughput(confidences: torch.Tensor, lengths: torch.Tensor, sps: SPSCurve) -> float:
    """Expected token throughput ``Theta = tau * SPS(B)`` of given lengths (SPEC S8).

    ``B = sum_r (1 + l_r)``, ``tau = sum_r (1 + sum_{j<=l_r} a[r, j])`` with
    ``a = cumprod(confidences)``. E.g. Appendix A: ``[[0.8, 0.9]]`` with ``l = 0, 1, 2`` gives
    ``1.0, 0.9, 1.134`` under ``SPS = (1.0, 0.5, 0.45)``.

    Args:
        confidences: ``[R, gamma]`` float confidences in ``[0, 1]``, ``R >= 1``.
        lengths: ``[R]`` int64/int32 lengths in ``[0, gamma]``.
        sps: the steps-per-second curve; a table must cover ``B``.

    Returns:
        ``Theta`` as a Python float.

    Raises:
        TypeError / ValueError: as :func:`schedule_prefixes`; ``lengths`` of the wrong shape,
            dtype or range; ``R = 0``.
    """
    survival, sps_of = _check_throughput(confidences, lengths, sps)
    admitted = torch.arange(survival.shape[1], device=lengths.device) < lengths[:, None]
    batch = survival.shape[0] + int(lengths.sum())
    tau = survival.shape[0] + float(survival[admitted].sum())
    return tau * sps_of(batch)


def appendix_a_first_token_law(schedule_fn: Scheduler) -> tuple[float, float]:
    """Exact law ``(Pr(Y=A), Pr(Y=B))`` of the first output token of paper Appendix A.

    One request, ``gamma = 2``, vocabulary ``{A, B}``, target ``p_t = (0.7, 0.3)``, draft
    ``p_d = (0.5, 0.5)``, ``SPS(1..3) = (1.0, 0.5, 0.45)``, ``c1 = 0.8`` and ``c2 = 0.9`` after
    ``x1 = A``, ``0`` after ``x1 = B``. For each draft ``x1`` the scheduler sees the
    confidences ``[[c1, c2(x1)]]``; if it admits ``x1`` (``l >= 1``) standard speculative
    acceptance applies (accept with ``min(1, p_t/p_d)``, else draw from
    ``normalize(max(p_t - p_d, 0))``), otherwise the target draws a fresh token from ``p_t``.
    Probabilities are summed exactly as fractions. A lossless scheduler yields
    ``(0.7, 0.3)``; the retrospective one yields ``(0.85, 0.15)`` (SPEC S8).

    Args:
        schedule_fn: ``(confidences[1, 2] float64, sps) -> lengths[1] int``, e.g.
            :func:`schedule_prefixes`.

    Returns:
        ``(Pr(Y=A), Pr(Y=B))`` as Python floats (exact fractions rounded once).

    Raises:
        TypeError: ``schedule_fn`` not callable, or its result not an integer tensor.
        ValueError: its result not of shape ``[1]`` or outside ``[0, 2]``.
    """
    if not callable(schedule_fn):
        raise TypeError(f"schedule_fn: expected a callable, got {type(schedule_fn).__name__}")
    target = {"A": Fraction(7, 10), "B": Fraction(3, 10)}
    draft = {"A": Fraction(1, 2), "B": Fraction(1, 2)}
    c2_after = {"A": 0.9, "B": 0.0}
    residual_mass = sum(max(target[v] - draft[v], 0) for v in target)
    law = {"A": Fraction(0), "B": Fraction(0)}
    for x1, p_draw in draft.items():
        lengths = schedule_fn(
            torch.tensor([[0.8, c2_after[x1]]], dtype=torch.float64), (1.0, 0.5, 0.45)
        )
        check_tensor("schedule_fn result", lengths, shape=(1,), dtypes=(torch.int64, torch.int32))
        check_int("schedule_fn result", int(lengths[0]), minimum=0, maximum=2)
        if int(lengths[0]) == 0:
            for v in law:
                law[v] += p_draw * target[v]
            continue
        accept = min(Fraction(1), target[x1] / draft[x1])
        law[x1] += p_draw * accept
        for v in law:
            law[v] += p_draw * (1 - accept) * max(target[v] - draft[v], 0) / residual_mass
    return float(law["A"]), float(law["B"])


def _admission_path(survival: torch.Tensor) -> list[tuple[int, int]]:
    """Path candidates ``(r, k)`` (0-based ``k``: draft position ``j = k + 1``) with ``a > 0``.

    Sorted by ``a`` descending; the stable sort keeps row-major order on ties, hence each
    row's prefix order (``a`` is non-increasing along a row).
    """
    # Python's sort is stable (reverse=True included), as torch.sort(stable=True) is: the
    # same order, without a torch call per step of the few-candidate scheduler calls of S8.
    flat = survival.reshape(-1).tolist()
    candidates = [i for i, a in enumerate(flat) if a > 0]
    candidates.sort(key=flat.__getitem__, reverse=True)
    order = [divmod(i, survival.shape[1]) for i in candidates]
    seen = [0] * survival.shape[0]
    for r, k in order:
        assert seen[r] == k, f"prefix order broken at request {r}, position {k + 1}"
        seen[r] = k + 1
    return order


def _cut(
    survival: torch.Tensor,
    order: list[tuple[int, int]],
    sps_of: Callable[[int], float],
    improves: Callable[[float, float], bool],
    *,
    early_stop: bool,
) -> int:
    """Number of path candidates admitted: Algorithm 1 lines 5-16, optionally without break."""
    rows = survival.shape[0]
    if rows == 0:
        return 0
    a = survival.tolist()
    batch, tau = rows, float(rows)
    best, best_count = tau * sps_of(batch), 0
    for count, (r, k) in enumerate(order, start=1):
        batch += 1
        tau += a[r][k]
        theta = tau * sps_of(batch)
        if improves(theta, best):
            best, best_count = theta, count
        elif early_stop:
            break
    return best_count


def _lengths_of(admitted: list[tuple[int, int]], confidences: torch.Tensor) -> torch.Tensor:
    lengths = [0] * confidences.shape[0]
    for r, k in admitted:  # the last admission of a row is its length
        lengths[r] = k + 1
    # Copied without waiting on the device (the list is staged before the copy returns).
    return torch.tensor(lengths, dtype=torch.int64).to(confidences.device, non_blocking=True)


def _sps_function(sps: SPSCurve, max_batch: int, name: str = "sps") -> Callable[[int], float]:
    """Validate ``sps`` (called ``name`` in errors) and return ``B -> SPS(B)``; a table must
    cover ``max_batch``."""
    if isinstance(sps, (str, bytes)) or not (
        callable(sps) or isinstance(sps, (Sequence, torch.Tensor))
    ):
        raise TypeError(
            f"{name}: expected a callable or a table (sequence / 1-D tensor), got {type(sps).__name__}"
        )
    if callable(sps):
        return lambda batch: check_float(f"{name}({batch})", sps(batch), minimum=0.0)
    if isinstance(sps, torch.Tensor):
        check_tensor(name, sps, ndim=1, dtypes=FLOAT_DTYPES)
    table = [check_float(f"{name}[{i}]", float(v), minimum=0.0) for i, v in enumerate(sps)]
    if len(table) < max_batch:
        raise ValueError(
            f"{name}: expected a table covering batch sizes 1..{max_batch} ({name}[B - 1] = value at B), "
            f"got {len(table)} entries"
        )
    return lambda batch: table[batch - 1]


def _cost_function(cost: SPSCurve, max_batch: int) -> Callable[[int], float]:
    """Validate a step-cost curve (as an SPS curve, then ``> 0``); returns ``B -> cost(B)``."""
    values = _sps_function(cost, max_batch, "cost")

    def cost_of(batch: int) -> float:
        value = values(batch)
        if not value > 0.0:
            raise ValueError(f"cost({batch}): expected a step cost > 0, got {value}")
        return value

    return cost_of


def _bound_values(bounds: torch.Tensor | None, default: int, rows: int) -> list[int]:
    """A per-request bound as a list (``default`` for each request where None)."""
    return [default] * rows if bounds is None else [int(v) for v in bounds.tolist()]


def _check_production_forms(
    stale_confidences: torch.Tensor, min_lengths: torch.Tensor | None, max_lengths: torch.Tensor | None,
    confidences: torch.Tensor | None,
) -> torch.device:
    """The type, shape and device checks of a production-scheduler call, before any value is
    read; returns the device of ``stale_confidences``."""
    check_tensor("stale_confidences", stale_confidences, ndim=2, dtypes=FLOAT_DTYPES)
    rows = stale_confidences.shape[0]
    device = stale_confidences.device
    for name, bounds in (("min_lengths", min_lengths), ("max_lengths", max_lengths)):
        if bounds is not None:
            check_tensor(name, bounds, shape=(rows,), dtypes=(torch.int64, torch.int32))
            if bounds.device != device:
                raise ValueError(f"{name}: expected a tensor on {device} (the confidences' device), "
                                 f"got {bounds.device}")
    if confidences is not None:
        check_tensor("confidences", confidences, ndim=2, dtypes=FLOAT_DTYPES)
    return device


def _to_host(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """CPU copies of a call's tensors (None stays None), read back at once per device.

    A read-back of a CUDA tensor waits for the device; the production scheduler reads its four
    inputs with one wait (the S8 production cases make 600-900 calls each). The values go
    through float64, exact for confidences of any float dtype and for integers below 2^53.
    """
    remote = [i for i, t in enumerate(tensors) if t is not None and t.device.type != "cpu"]
    host = list(tensors)
    for device in dict.fromkeys(tensors[i].device for i in remote):
        group = [i for i in remote if tensors[i].device == device]
        flat = torch.cat([tensors[i].detach().reshape(-1).double() for i in group]).cpu()
        for i, part in zip(group, flat.split([tensors[i].numel() for i in group])):
            host[i] = part.reshape(tensors[i].shape).to(tensors[i].dtype)
    return host


def _check_production(
    stale_confidences: torch.Tensor, min_lengths: torch.Tensor | None, max_lengths: torch.Tensor | None
) -> tuple[torch.Tensor, list[int], list[int]]:
    """Validate the values of a production-scheduler call (on the host, their forms checked by
    :func:`_check_production_forms`); returns the stale survival and the bounds."""
    survival = _check_confidences("stale_confidences", stale_confidences)
    rows, gamma = survival.shape
    low = _bound_values(min_lengths, 0, rows)
    high = _bound_values(max_lengths, gamma, rows)
    bad = [r for r in range(rows) if not 0 <= low[r] <= high[r] <= gamma]
    if bad:
        r = bad[0]
        raise ValueError(
            f"min_lengths / max_lengths: expected 0 <= min <= max <= gamma = {gamma} per request, "
            f"got min {low[r]}, max {high[r]} at request {r}"
        )
    return survival, low, high


def _check_confidences(name: str, confidences: torch.Tensor) -> torch.Tensor:
    """Validate ``[R, gamma]`` confidences; returns their float64 prefix survival."""
    check_tensor(name, confidences, ndim=2, dtypes=FLOAT_DTYPES)
    empty = confidences.numel() == 0
    # One read-back for the range and NaN (aminmax propagates NaN to both ends).
    low, high = (0.0, 0.0) if empty else torch.stack(torch.aminmax(confidences)).tolist()
    if math.isnan(low):
        raise ValueError(f"{name}: expected values in [0, 1], got NaN")
    if low < 0.0 or high > 1.0:
        raise ValueError(f"{name}: expected values in [0, 1], got range [{low}, {high}]")
    return torch.cumprod(confidences.double(), dim=1)


def _check_schedule(
    confidences: torch.Tensor, sps: SPSCurve, *, name: str = "confidences", rule: object = None
) -> tuple[torch.Tensor, Callable[[int], float]]:
    """Validate a scheduler call; the SPS table must cover the whole admission path.
    Returns the float64 prefix survival on the CPU, where the path and the walk read it, and
    ``B -> SPS(B)``. The confidences are read back once, before their checks: a CUDA call of
    the few-candidate scheduler waits on the device once (S8's sampled case makes 146,499)."""
    if rule is not None and not isinstance(rule, AdmissionRule):
        raise TypeError(f"rule: expected an AdmissionRule or None, got {type(rule).__name__}")
    check_tensor(name, confidences, ndim=2, dtypes=FLOAT_DTYPES)  # a clear error before the read-back
    survival = _check_confidences(name, confidences.detach().cpu())
    max_batch = survival.shape[0] + int(torch.count_nonzero(survival))  # survival >= 0: nonzero is a > 0
    return survival, _sps_function(sps, max_batch)


def _check_throughput(
    confidences: torch.Tensor, lengths: torch.Tensor, sps: SPSCurve
) -> tuple[torch.Tensor, Callable[[int], float]]:
    survival = _check_confidences("confidences", confidences)
    rows, gamma = survival.shape
    if rows == 0:
        raise ValueError("confidences: expected at least one request, got R = 0")
    check_tensor("lengths", lengths, shape=(rows,), dtypes=(torch.int64, torch.int32))
    check_same_device(confidences=confidences, lengths=lengths)
    if int(lengths.min()) < 0 or int(lengths.max()) > gamma:
        raise ValueError(f"lengths: expected values in [0, {gamma}], got {lengths.tolist()}")
    return survival, _sps_function(sps, rows + int(lengths.sum()))
