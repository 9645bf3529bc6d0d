"""Power of a recorded statistical assertion at its declared minimum effect, by simulation.

Every :class:`~conformance.stats.StatResult` records its design: the rule, ``n``, ``alpha``,
``min_effect`` and, for frequency tests, the (pooled) null bins. :func:`replay_power` draws
``replicates`` data sets of the same size from the *least favourable* alternative at exactly
the declared minimum effect, runs the same rule (``stats.goodness_of_fit`` or
``stats.binomial``: the code the suite asserts with) on each, and counts rejections. The
analytic power in the record is an approximation (noncentral chi-square, normal binomial);
the replay measures it.

Least favourable alternatives:

* goodness of fit at TV distance ``d``: the noncentrality ``n * sum((p1 - p0)^2 / p0)`` of
  every alternative at TV ``d`` is at least ``4 n d^2``, with equality when ``|p1 - p0|`` is
  proportional to ``p0`` on two halves of mass 1/2 each (Cauchy-Schwarz). The bins are split
  greedily (largest bin first, onto the lighter half), which is near even but not always the
  most even split; the mass ``d`` moves from the heavier half into the lighter one in
  proportion to ``p0``. The split's imbalance is reported as the noncentrality over
  ``4 n d^2``: above 1, the alternative is that much easier to detect than the least
  favourable one (one bin above 1/2 forces it).
* binomial: ``p0 + min_effect`` and ``p0 - min_effect`` (the sides the alternative names);
  the power reported is the smaller.
* two-sample mean: normal samples of the recorded sizes and SDs whose means differ by
  exactly ``min_effect`` (the Welch test's power depends on the data only through them,
  up to the normal approximation).
* one-sample mean: a normal sample of the recorded size and SD whose mean is
  ``min_effect`` above the null mean.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
from scipy import stats as sps

from conformance import stats
from conformance.budget import StatLedger
from conformance.seeds import derive_seed

REPLAYED_RULES = ("goodness_of_fit", "binomial", "two_sample_mean", "one_sample_mean")


@dataclasses.dataclass(frozen=True)
class ReplayedPower:
    """Measured power of one assertion at its declared minimum effect.

    ``rejected`` of ``replicates`` simulated data sets failed the assertion (for a
    two-sided binomial: the worse side). ``power_lower95`` is the two-sided Clopper-Pearson
    95% lower bound; ``analytic_power`` is the record's ``power_at_min_effect``;
    ``noncentrality_ratio`` is the alternative's chi-square noncentrality over the least
    possible ``4 n d^2`` (1.0 for a perfect split; None for a binomial).
    """

    name: str
    rule: str
    n: int
    alpha: float
    min_effect: float
    analytic_power: float
    replicates: int
    rejected: int
    power_lower95: float
    noncentrality_ratio: float | None


def least_favourable_alternative(probs: np.ndarray, min_tv: float) -> tuple[np.ndarray, float]:
    """The alternative at TV distance ``min_tv`` from ``probs`` hardest for a chi-square test.

    Args:
        probs: null probabilities ``[k]``, float64, all > 0, summing to 1.
        min_tv: the TV distance of the alternative, in (0, 1).

    Returns:
        ``(p1 [k] float64, ratio)``: the alternative, and its noncentrality over ``4 n min_tv^2``.

    Raises:
        ValueError: ``probs`` not positive or not summing to 1, fewer than 2 bins, or
            ``min_tv`` above the mass of the heavier half.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 1 or probs.size < 2 or (probs <= 0).any() or abs(probs.sum() - 1.0) > 1e-9:
        raise ValueError(f"probs: expected >= 2 positive probabilities summing to 1, got {probs!r}")
    if not 0.0 < min_tv < 1.0:
        raise ValueError(f"min_tv: expected a value in (0, 1), got {min_tv!r}")
    first = np.zeros(probs.size, dtype=bool)
    mass_first = mass_second = 0.0
    for i in np.argsort(-probs, kind="stable"):
        if mass_first <= mass_second:
            first[i], mass_first = True, mass_first + probs[i]
        else:
            mass_second += probs[i]
    # Mass moves into the lighter half, so the heavier one (>= 1/2) always has enough to give.
    light = first if mass_first <= mass_second else ~first
    mass_light, mass_heavy = sorted((mass_first, mass_second))
    if min_tv > mass_heavy:
        raise ValueError(f"min_tv: the heavier half of the bins holds {mass_heavy:.4g}, less than min_tv = {min_tv}")
    alternative = np.where(light, probs * (1 + min_tv / mass_light), probs * (1 - min_tv / mass_heavy))
    ratio = 1.0 / (4.0 * mass_light * mass_heavy)
    return alternative, ratio


def _replay_goodness_of_fit(result: Mapping[str, Any], rng: np.random.Generator, replicates: int,
                            ledger: StatLedger) -> tuple[int, float]:
    expected = np.asarray(result["expected"], dtype=np.float64)
    probs = expected / expected.sum()
    alternative, ratio = least_favourable_alternative(probs, result["min_effect"])
    design = result["design"]
    rejected = sum(
        not stats.goodness_of_fit(counts, probs, name=result["name"], alpha=result["alpha"],
                                  min_tv=result["min_effect"], min_expected=design["min_expected"],
                                  lambda_=design["lambda_"], ledger=ledger).passed
        for counts in rng.multinomial(result["n"], alternative, size=replicates)
    )
    return rejected, ratio


def _replay_binomial(result: Mapping[str, Any], rng: np.random.Generator, replicates: int,
                     ledger: StatLedger) -> tuple[int, None]:
    design = result["design"]
    sides = stats.proportion_alternatives(design["p0"], result["min_effect"], design["alternative"])
    rejected = min(
        sum(not stats.binomial(int(k), result["n"], design["p0"], name=result["name"], alpha=result["alpha"],
                               min_effect=result["min_effect"], alternative=design["alternative"],
                               ledger=ledger).passed
            for k in rng.binomial(result["n"], p1, size=replicates))
        for p1 in sides
    )
    return rejected, None


def _replay_two_sample_mean(result: Mapping[str, Any], rng: np.random.Generator, replicates: int,
                            ledger: StatLedger) -> tuple[int, None]:
    design = result["design"]
    rejected = sum(
        not stats.two_sample_mean(rng.normal(result["min_effect"], max(design["sd_x"], 1e-12), design["n_x"]),
                                  rng.normal(0.0, max(design["sd_y"], 1e-12), design["n_y"]), name=result["name"],
                                  alpha=result["alpha"], min_effect=result["min_effect"], ledger=ledger).passed
        for _ in range(replicates)
    )
    return rejected, None


def _replay_one_sample_mean(result: Mapping[str, Any], rng: np.random.Generator, replicates: int,
                            ledger: StatLedger) -> tuple[int, None]:
    design = result["design"]
    rejected = sum(
        not stats.one_sample_mean(rng.normal(design["mean"] + result["min_effect"], max(design["sd"], 1e-12),
                                             design["n"]), design["mean"], name=result["name"],
                                  alpha=result["alpha"], min_effect=result["min_effect"], ledger=ledger).passed
        for _ in range(replicates)
    )
    return rejected, None


_REPLAYS = {"goodness_of_fit": _replay_goodness_of_fit, "binomial": _replay_binomial,
            "two_sample_mean": _replay_two_sample_mean, "one_sample_mean": _replay_one_sample_mean}


def replay_power(result: Mapping[str, Any], *, replicates: int, seed: int) -> ReplayedPower:
    """Measure the power of a recorded assertion at its declared minimum effect.

    Args:
        result: a ``StatResult.to_dict()`` (as in results.json) whose ``design['rule']`` is
            one of :data:`REPLAYED_RULES`.
        replicates: simulated data sets (>= 1); 2000 bound the power below by 0.998 when all reject.
        seed: base seed; the stream is ``derive_seed(seed, name)`` so each assertion replays alike.

    Raises:
        ValueError: ``replicates`` < 1, a record without a design, or a rule not replayed.
    """
    if not isinstance(replicates, int) or replicates < 1:
        raise ValueError(f"replicates: expected an int >= 1, got {replicates!r}")
    design = result.get("design")
    if not design or design.get("rule") not in REPLAYED_RULES:
        raise ValueError(f"result: expected a design with rule in {REPLAYED_RULES}, got {design!r} "
                         f"for {result.get('name')!r}")
    rng = np.random.default_rng(derive_seed(seed, result["name"]))
    replay = _REPLAYS[design["rule"]]
    rejected, ratio = replay(result, rng, replicates, StatLedger())
    low = sps.binomtest(rejected, replicates).proportion_ci(0.95, method="exact").low
    return ReplayedPower(
        name=result["name"], rule=design["rule"], n=result["n"], alpha=result["alpha"],
        min_effect=result["min_effect"], analytic_power=result["power_at_min_effect"],
        replicates=replicates, rejected=rejected, power_lower95=low, noncentrality_ratio=ratio,
    )
