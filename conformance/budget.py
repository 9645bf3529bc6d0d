"""The family-wise false-failure budget of the conformance suite, declared in one place.

Every distributional assertion of the suite goes through ``conformance/stats.py``, which
takes its defaults from here (DESIGN.md "Statistics policy"). How the numbers follow:

* ``FAMILY_WISE_ALPHA = 1e-3``: a whole default run on a correct implementation fails
  spuriously with probability at most 1e-3.
* ``MAX_STATISTICAL_ASSERTIONS = 200``: the declared number of statistical assertions
  (comparisons) a default run may execute. By Bonferroni (a union bound, valid under any
  dependence between the assertions) ``PER_ASSERTION_ALPHA = 1e-3 / 200 = 5e-6`` keeps the
  family-wise rate within budget: P(any false failure) <= 200 * 5e-6 = 1e-3.
* ``DEFAULT_MIN_TV = 0.01``: the smallest total-variation distance between the observed
  and the expected token distribution that an assertion must detect.
* ``TARGET_POWER = 0.999``: the probability of detecting a fault of that size; sample sizes
  are computed from (alpha, effect, power) by ``stats.sample_size_for_*``.
* Tiers: the cases marked ``gpu_tier`` (batched draws of one capability, cheap on a GPU)
  are sized at ``GPU_TIER_MIN_TV = 0.002`` when the run's device is CUDA and at the CPU
  tier's ``DEFAULT_MIN_TV`` otherwise (:func:`tier_min_tv`; the plugin's ``tier_min_tv``
  fixture). Alpha and power are the same in both tiers; the chi-square noncentrality is
  ``4 n TV^2``, so a GPU-tier assertion draws about ``(0.01 / 0.002)^2 = 25`` times the
  CPU tier's samples. Resizing an assertion this way declares no new assertion.

A :class:`StatLedger` records each statistical assertion id executed in a run (the plugin
keeps one per run, filled by its ``stat_check`` fixture), so the run can check that it
stayed within the declared count and alpha.

To add an assertion: give it a unique id ``<section>/<family>/<detail>``, call a
``stats`` function with that id as ``name``; raise ``MAX_STATISTICAL_ASSERTIONS`` only
together with the per-assertion alpha it implies (it is derived, never set by hand).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "FAMILY_WISE_ALPHA",
    "MAX_STATISTICAL_ASSERTIONS",
    "PER_ASSERTION_ALPHA",
    "DEFAULT_MIN_TV",
    "TARGET_POWER",
    "GPU_TIER_MIN_TV",
    "TIERS",
    "tier_of",
    "tier_min_tv",
    "SAMPLE_SCALE",
    "set_sample_scale",
    "StatLedger",
]

FAMILY_WISE_ALPHA = 1e-3
MAX_STATISTICAL_ASSERTIONS = 200
PER_ASSERTION_ALPHA = FAMILY_WISE_ALPHA / MAX_STATISTICAL_ASSERTIONS
DEFAULT_MIN_TV = 0.01
TARGET_POWER = 0.999
GPU_TIER_MIN_TV = 0.002
#: tier name -> the declared minimum TV of its ``gpu_tier`` cases
TIERS = {"cpu": DEFAULT_MIN_TV, "gpu": GPU_TIER_MIN_TV}


def tier_of(device_type: str) -> str:
    """The tier a run on ``device_type`` belongs to: ``"gpu"`` for ``"cuda"``, else ``"cpu"``.

    Raises:
        ValueError: ``device_type`` not ``"cpu"`` or ``"cuda"``.

    Example:
        >>> tier_of("cuda"), tier_of("cpu")
        ('gpu', 'cpu')
    """
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type: expected 'cpu' or 'cuda', got {device_type!r}")
    return "gpu" if device_type == "cuda" else "cpu"


def tier_min_tv(device_type: str, gpu_tier: bool) -> float:
    """The minimum TV a case must detect: its tier's (:data:`TIERS`) for a ``gpu_tier`` case,
    ``DEFAULT_MIN_TV`` for every other case, on any device.

    Raises:
        ValueError: as :func:`tier_of`.

    Example:
        >>> tier_min_tv("cuda", True), tier_min_tv("cpu", True), tier_min_tv("cuda", False)
        (0.002, 0.01, 0.01)
    """
    tier = tier_of(device_type)
    return TIERS[tier] if gpu_tier else DEFAULT_MIN_TV

#: Run-wide factor on every computed sample size, set by ``--dspark-budget`` (default 1):
#: below 1 a run is faster and has less power, above 1 more. Alpha never changes, so the
#: false-failure budget holds at any factor; each StatResult reports the power achieved.
SAMPLE_SCALE = 1.0


#: The largest factor: every assertion already has power 0.999 at factor 1, and sample sizes
#: grow linearly with it, so past this the draws outgrow memory (at 1e15 their sizes overflow
#: int64) long before the added power matters.
MAX_SAMPLE_SCALE = 1000.0


def checked_sample_scale(factor: object) -> float:
    """``factor`` as a sample-size factor (:data:`SAMPLE_SCALE`), checked.

    Raises:
        ValueError: ``factor`` not a number in ``(0, MAX_SAMPLE_SCALE]`` (the message leaves the
            option to the caller).
    """
    if isinstance(factor, bool) or not (isinstance(factor, (int, float)) and 0 < factor <= MAX_SAMPLE_SCALE):
        raise ValueError(f"expected a factor in (0, {MAX_SAMPLE_SCALE:g}], got {factor!r}")
    return float(factor)


def set_sample_scale(factor: float) -> None:
    """Set :data:`SAMPLE_SCALE` for this process.

    Raises:
        ValueError: ``factor`` not a number in ``(0, MAX_SAMPLE_SCALE]`` (the message names
            ``--dspark-budget``).
    """
    global SAMPLE_SCALE
    try:
        SAMPLE_SCALE = checked_sample_scale(factor)
    except ValueError as exc:
        raise ValueError(f"--dspark-budget: {exc}") from None


class StatLedger:
    """Records the statistical assertions executed in a run, keyed by assertion id.

    An id executed twice (a retry, a replay) is one comparison; its alpha is the largest
    alpha it was run at. Results are any objects with an ``alpha`` attribute
    (``stats.StatResult``).

    Example:
        >>> ledger = StatLedger(max_assertions=2)
        >>> from types import SimpleNamespace
        >>> ledger.record("S3/race/uniform", SimpleNamespace(alpha=PER_ASSERTION_ALPHA))
        >>> len(ledger), ledger.ids
        (1, ('S3/race/uniform',))
    """

    def __init__(
        self,
        *,
        max_assertions: int = MAX_STATISTICAL_ASSERTIONS,
        family_wise_alpha: float = FAMILY_WISE_ALPHA,
    ) -> None:
        self.max_assertions = max_assertions
        self.family_wise_alpha = family_wise_alpha
        self._results: dict[str, list[Any]] = {}

    def record(self, assertion_id: str, result: Any) -> None:
        """Append ``result`` under ``assertion_id``."""
        self._results.setdefault(assertion_id, []).append(result)

    @property
    def ids(self) -> tuple[str, ...]:
        """The distinct assertion ids recorded, in first-execution order."""
        return tuple(self._results)

    def results(self, assertion_id: str) -> tuple[Any, ...]:
        """Every result recorded under ``assertion_id`` (empty if none)."""
        return tuple(self._results.get(assertion_id, ()))

    def __len__(self) -> int:
        return len(self._results)

    def spent_alpha(self) -> float:
        """Sum over distinct ids of the largest alpha each was run at (the Bonferroni bound)."""
        return math.fsum(max(r.alpha for r in rs) for rs in self._results.values())

    def check_within_budget(self) -> None:
        """Raise ``AssertionError`` if the run exceeded the declared count or alpha.

        Raises:
            AssertionError: more distinct ids than ``max_assertions``, or a spent alpha
                above ``family_wise_alpha`` (relative tolerance 1e-9 for rounding).
        """
        if len(self) > self.max_assertions:
            raise AssertionError(
                f"{len(self)} statistical assertions executed, more than the declared "
                f"MAX_STATISTICAL_ASSERTIONS={self.max_assertions}; raise the declared count "
                f"in conformance/budget.py (PER_ASSERTION_ALPHA follows from it)"
            )
        spent = self.spent_alpha()
        if spent > self.family_wise_alpha * (1 + 1e-9):
            raise AssertionError(
                f"statistical assertions spent alpha {spent:.3g}, more than the family-wise "
                f"budget {self.family_wise_alpha:.3g}; use stats' default alpha "
                f"(PER_ASSERTION_ALPHA={PER_ASSERTION_ALPHA:.3g})"
            )

    def clear(self) -> None:
        """Forget every record (start of a new run)."""
        self._results.clear()
