"""False-failure rate of every recorded statistical assertion, replayed on data from its null.

The seeded calibration runs (:mod:`conformance.power.calibration`) bound the whole-run
false-failure rate only as far as a few hundred clean runs can (about 1e-2); a direct
bound at the family-wise budget 1e-3 needs thousands of runs. This module bounds each
assertion's level instead: every :class:`~conformance.stats.StatResult` records its design
(rule, ``n``, ``alpha``, pooled null bins, rule parameters), so the same rule can be run
on data drawn exactly from its null hypothesis, many times, and its rejections counted.
By the union bound (Bonferroni, valid under any dependence) the sum of the levels bounds
the probability that a whole run fails spuriously.

Null laws and how each level is measured:

* ``goodness_of_fit``: counts ~ Multinomial(n, pooled expected / n) on the recorded pooled
  bins (the pooled counts of multinomial data are multinomial on the pooled bins, so the
  law of the statistic is the one the suite's data have under H0; bins of probability 0
  are never hit under H0). Two bins: the exact level, the probability of every count
  the rule rejects summed. More bins: ``replicates`` Monte Carlo draws, statistic and
  p-value by ``scipy.stats.power_divergence`` (the rule's call) over a whole chunk.
* ``binomial``: k ~ Binomial(n, p0); the exact level: the rule (``stats.binomial``) is
  run at the edges of its rejection region, found by bisection (scipy's p-value falls
  monotonically away from the mode on each side: two-sided it sums the outcomes no more
  likely than k, one-sided it is a tail), and the region's probability is summed.
* ``two_sample_mean``: two independent normal samples of the recorded sizes and SDs with
  equal means, drawn through their sufficient statistics (sample mean normal, sample
  variance scaled chi-square, independent), p-value by ``scipy.stats.ttest_ind_from_stats``
  (the Welch statistic ``ttest_ind`` computes from the raw samples). Monte Carlo.
* ``one_sample_mean``: a normal sample of the recorded size and SD with the null mean,
  drawn through its sufficient statistics, p-value ``2 * sf(|t|)`` of Student's t with
  ``n - 1`` degrees of freedom (the statistic ``ttest_1samp`` computes). Monte Carlo.
* a vacuous design (fewer than 2 pooled bins, or constant samples) cannot fail under
  H0: exact level 0.

What is bounded: the probability that the assertion's rule, as implemented, rejects data
drawn from the null model its design states. Not bounded here: the suite's premise that a
correct implementation's data follow that model (independent draws, expected
probabilities computed right); the seeded calibration runs check that at coarser levels.

Monte Carlo bounds are one-sided 95% Clopper-Pearson upper bounds. With 0 rejections in
``N`` replicates the bound is ``1 - 0.05^(1/N)`` (3.0e-6 at N = 1e6); a rule exactly at
alpha = 5e-6 rejects about 5 times in 1e6 replicates, which bounds its level near 1.05e-5,
about twice alpha: a million replicates bound one assertion near, not at, its alpha. The
whole-run bound pools the Monte Carlo assertions: ``K`` rejections in ``A N`` independent
trials whose probabilities have mean ``m``; by Hoeffding (1956, Theorem 4) the lower tail
of such a count is no heavier than Binomial(A N, m)'s below ``A N m - 1``, where every
one-sided Clopper-Pearson bound lies, so the Clopper-Pearson upper bound ``u`` for ``K`` in
``A N`` bounds ``m`` at 95% and ``A u`` bounds the sum of the A levels. Exact levels are
added as they are.

An assertion is *flagged* when its level is shown above its alpha: an exact level above
alpha, or a Monte Carlo count whose one-sided binomial p-value against alpha is at most
``FLAG_LEVEL / A`` (so a valid suite has every flag clear with probability >= 0.95).
"""

from __future__ import annotations

import dataclasses
import math
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Iterable, Mapping

import numpy as np
from scipy import stats as sps

from conformance import budget, stats
from conformance.seeds import derive_seed

NULL_RULES = ("goodness_of_fit", "binomial", "two_sample_mean", "one_sample_mean")
CHUNK = 20_000  # replicates per draw: [CHUNK, bins] int64 counts, 19 MB at 118 bins
CONFIDENCE = 0.95
FLAG_LEVEL = 0.05
NULL_SEED = 1


@dataclasses.dataclass(frozen=True)
class NullLevel:
    """The level of one assertion under its null.

    ``method``: ``exact`` (``level`` is the probability of failing, ``replicates`` 0),
    ``monte-carlo`` (``rejected`` of ``replicates`` failed; ``level`` is their fraction)
    or ``vacuous`` (cannot fail: level 0). ``level_upper95``: the exact level, or the
    one-sided 95% Clopper-Pearson upper bound. ``excess_p``: one-sided binomial p-value of
    ``rejected`` against ``alpha`` (None when exact). ``bins``: pooled bins (None for a
    binomial or two-sample design).
    """

    name: str
    rule: str
    n: int
    bins: int | None
    alpha: float
    method: str
    replicates: int
    rejected: int
    level: float
    level_upper95: float
    excess_p: float | None


# --------------------------------------------------------------------------- designs


def _design(result: Mapping[str, Any]) -> dict[str, Any]:
    design = result.get("design")
    if not design or design.get("rule") not in NULL_RULES:
        raise ValueError(f"result: expected a design with rule in {NULL_RULES}, got {design!r} "
                         f"for {result.get('name')!r}")
    return design


def _null_probs(result: Mapping[str, Any]) -> np.ndarray:
    """The pooled null probabilities ``[bins]`` float64 of a goodness-of-fit record, checked
    to be a fixed point of the rule's pooling (every pooled bin's expected count >= min_expected)."""
    expected = np.asarray(result["expected"] or (), dtype=np.float64)
    min_expected = result["design"]["min_expected"]
    if expected.size >= 2 and (expected < min_expected * (1 - 1e-9)).any():
        raise ValueError(f"result: {result['name']!r} records pooled bins with expected counts below "
                         f"min_expected = {min_expected:g}; not a record of stats.goodness_of_fit")
    return expected / expected.sum() if expected.size else expected


def _gof_failures(counts: np.ndarray, probs: np.ndarray, n: int, alpha: float, lambda_: str) -> np.ndarray:
    """Which rows of ``counts [m, bins]`` (each summing to ``n``) the rule fails (``p <= alpha``)."""
    _, p_values = sps.power_divergence(counts, n * probs, lambda_=lambda_, axis=1)
    return ~(p_values > alpha)


def _exact_two_bins(result: Mapping[str, Any], probs: np.ndarray) -> float:
    n, alpha, design = result["n"], result["alpha"], result["design"]
    first = np.arange(n + 1)
    failed = _gof_failures(np.stack([first, n - first], axis=1), probs, n, alpha, design["lambda_"])
    return float(math.fsum(sps.binom.pmf(first[failed], n, probs[0])))


def _binomial_fails(result: Mapping[str, Any], k: int) -> bool:
    design = result["design"]
    return not stats.binomial(k, result["n"], design["p0"], name=result["name"], alpha=result["alpha"],
                              min_effect=result["min_effect"], alternative=design["alternative"]).passed


def _edge(fails, passing: int, failing: int) -> int:
    """The last failing count between ``passing`` (the rule passes) and ``failing`` (it
    fails), for a rule whose verdict changes once between them."""
    while abs(passing - failing) > 1:
        mid = (passing + failing) // 2
        passing, failing = (passing, mid) if fails(mid) else (mid, failing)
    return failing


def _exact_binomial(result: Mapping[str, Any]) -> float:
    n, p0, alternative = result["n"], result["design"]["p0"], result["design"]["alternative"]
    mode = min(n, math.floor((n + 1) * p0))

    def fails(k: int) -> bool:
        return _binomial_fails(result, k)

    if fails(mode):
        raise ValueError(f"result: {result['name']!r}: the rule fails at the mode k = {mode}; its alpha "
                         f"{result['alpha']} is too large for an exact level by rejection region")
    level = 0.0
    if alternative in ("two-sided", "less") and fails(0):
        level += float(sps.binom.cdf(_edge(fails, mode, 0), n, p0))
    if alternative in ("two-sided", "greater") and fails(n):
        level += float(sps.binom.sf(_edge(fails, mode, n) - 1, n, p0))
    return level


def _mc_chunk(result: Mapping[str, Any], size: int, seed: int) -> int:
    """Failures of the rule on ``size`` data sets drawn from the null (one chunk)."""
    rng = np.random.default_rng(seed)
    design, n, alpha = result["design"], result["n"], result["alpha"]
    if design["rule"] == "goodness_of_fit":
        probs = _null_probs(result)
        counts = rng.multinomial(n, probs, size=size)
        return int(_gof_failures(counts, probs, n, alpha, design["lambda_"]).sum())
    if design["rule"] == "one_sample_mean":
        sd = design["sd"]
        mean = rng.normal(0.0, sd / math.sqrt(n), size)
        std = sd * np.sqrt(rng.chisquare(n - 1, size) / (n - 1))
        p_values = 2 * sps.t.sf(np.abs(mean / (std / math.sqrt(n))), n - 1)
        return int((~(p_values > alpha)).sum())
    n_x, n_y, sd_x, sd_y = design["n_x"], design["n_y"], design["sd_x"], design["sd_y"]
    mean_x, mean_y = rng.normal(0.0, sd_x / math.sqrt(n_x), size), rng.normal(0.0, sd_y / math.sqrt(n_y), size)
    std_x = sd_x * np.sqrt(rng.chisquare(n_x - 1, size) / (n_x - 1))
    std_y = sd_y * np.sqrt(rng.chisquare(n_y - 1, size) / (n_y - 1))
    p_values = sps.ttest_ind_from_stats(mean_x, std_x, n_x, mean_y, std_y, n_y, equal_var=False).pvalue
    return int((~(p_values > alpha)).sum())


def method_of(result: Mapping[str, Any]) -> str:
    """``exact``, ``monte-carlo`` or ``vacuous``: how :func:`null_level` measures ``result``.

    Raises:
        ValueError: no design, or a rule not in :data:`NULL_RULES`.
    """
    design = _design(result)
    if design["rule"] == "binomial":
        return "exact"
    if design["rule"] == "two_sample_mean":
        return "vacuous" if design["sd_x"] == 0 and design["sd_y"] == 0 else "monte-carlo"
    if design["rule"] == "one_sample_mean":
        return "vacuous" if design["sd"] == 0 else "monte-carlo"
    bins = _null_probs(result).size
    return "vacuous" if bins < 2 else "exact" if bins == 2 else "monte-carlo"


def chunk_seeds(name: str, replicates: int, seed: int) -> list[tuple[int, int]]:
    """``(size, seed)`` of each chunk of ``replicates``: chunk ``i`` draws from
    ``derive_seed(seed, f"{name}#null-{i}")``, so a replay is the same at any ``jobs``."""
    sizes = [CHUNK] * (replicates // CHUNK) + ([replicates % CHUNK] if replicates % CHUNK else [])
    return [(size, derive_seed(seed, f"{name}#null-{i}")) for i, size in enumerate(sizes)]


def _finish(result: Mapping[str, Any], method: str, replicates: int, rejected: int, level: float) -> NullLevel:
    alpha = result["alpha"]
    if method == "monte-carlo":
        upper = float(sps.beta.ppf(CONFIDENCE, rejected + 1, replicates - rejected)) if rejected < replicates else 1.0
        excess = float(sps.binomtest(rejected, replicates, alpha, alternative="greater").pvalue)
    else:
        upper, excess = level, None
    expected = result.get("expected")
    bins = len(expected) if result["design"]["rule"] == "goodness_of_fit" and expected is not None else None
    return NullLevel(name=result["name"], rule=result["design"]["rule"], n=result["n"], bins=bins, alpha=alpha,
                     method=method, replicates=replicates, rejected=rejected, level=level,
                     level_upper95=upper, excess_p=excess)


def null_level(result: Mapping[str, Any], *, replicates: int, seed: int = NULL_SEED) -> NullLevel:
    """The level of one recorded assertion under its null (serial; see :func:`null_levels`).

    Args:
        result: a ``StatResult.to_dict()`` (as in results.json) with a design of
            :data:`NULL_RULES`.
        replicates: Monte Carlo data sets (>= 1; unused by exact and vacuous designs).
        seed: base seed of the chunks (:func:`chunk_seeds`).

    Raises:
        ValueError: ``replicates`` < 1, no design, a rule not replayed, pooled bins below
            the rule's ``min_expected``.
    """
    return null_levels([result], replicates=replicates, seed=seed, jobs=1)[0]


def null_levels(results: Iterable[Mapping[str, Any]], *, replicates: int, seed: int = NULL_SEED,
                jobs: int | None = 1) -> list[NullLevel]:
    """:func:`null_level` of every result, Monte Carlo chunks spread over ``jobs`` processes
    (default 1: in this process; None: the CPU count). Same numbers at any ``jobs``.

    Raises:
        ValueError: as :func:`null_level`; ``jobs`` < 1.
    """
    if not isinstance(replicates, int) or isinstance(replicates, bool) or replicates < 1:
        raise ValueError(f"replicates: expected an int >= 1, got {replicates!r}")
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs: expected None or an int >= 1, got {jobs!r}")
    results = [dict(r) for r in results]
    methods = [method_of(r) for r in results]
    tasks = [(i, size, chunk_seed) for i, (r, m) in enumerate(zip(results, methods)) if m == "monte-carlo"
             for size, chunk_seed in chunk_seeds(r["name"], replicates, seed)]
    rejected = [0] * len(results)
    workers = jobs or os.cpu_count() or 1
    if workers == 1:
        counts = [_mc_chunk(results[i], size, s) for i, size, s in tasks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            counts = list(pool.map(_mc_chunk, [results[i] for i, _, _ in tasks], [t[1] for t in tasks],
                                   [t[2] for t in tasks], chunksize=1))
    for (i, _, _), count in zip(tasks, counts):
        rejected[i] += count
    out = []
    for i, (r, m) in enumerate(zip(results, methods)):
        if m == "monte-carlo":
            out.append(_finish(r, m, replicates, rejected[i], rejected[i] / replicates))
        elif m == "exact":
            level = _exact_binomial(r) if r["design"]["rule"] == "binomial" else _exact_two_bins(r, _null_probs(r))
            out.append(_finish(r, m, 0, 0, level))
        else:
            out.append(_finish(r, m, 0, 0, 0.0))
    return out


# --------------------------------------------------------------------------- whole run


def pooled_upper(rejected: int, trials: int, confidence: float = CONFIDENCE) -> float:
    """One-sided Clopper-Pearson upper bound on the mean failure probability of ``trials``
    independent trials with ``rejected`` failures (valid for unequal probabilities: see
    the module docstring, Hoeffding 1956).

    Raises:
        ValueError: ``trials`` < 1 or ``rejected`` not in [0, trials].
    """
    if not isinstance(trials, int) or trials < 1 or not 0 <= rejected <= trials:
        raise ValueError(f"rejected, trials: expected 0 <= rejected <= trials, trials >= 1, got {rejected}, {trials}")
    return 1.0 if rejected == trials else float(sps.beta.ppf(confidence, rejected + 1, trials - rejected))


def flag_threshold(assertions: int) -> float:
    """The excess p-value at or below which a Monte Carlo level is flagged (``FLAG_LEVEL / A``)."""
    return FLAG_LEVEL / max(assertions, 1)


def summarize(levels: list[NullLevel], *, budget_alpha: float = budget.FAMILY_WISE_ALPHA) -> dict[str, Any]:
    """The whole-run numbers: exact levels summed, Monte Carlo ones pooled, flags.

    Returns a dict: ``assertions``, ``by_method`` (counts), ``replicates``, ``exact_sum``,
    ``mc_rejected``, ``mc_trials``, ``mc_mean_upper95``, ``run_upper95`` (bound on the sum of
    all levels, hence on the whole-run false-failure rate, at 95%), ``budget``, ``bounded``
    (``run_upper95 <= budget``), ``alpha_sum`` (the alphas summed), ``flagged`` (names),
    ``flag_threshold`` and ``levels`` (each :class:`NullLevel` as a dict).

    Raises:
        ValueError: no levels, or Monte Carlo levels of different replicate counts.
    """
    if not levels:
        raise ValueError("levels: expected at least one assertion's level, got none")
    mc = [lv for lv in levels if lv.method == "monte-carlo"]
    replicates = {lv.replicates for lv in mc}
    if len(replicates) > 1:
        raise ValueError(f"levels: expected one replicate count for the Monte Carlo levels, got {sorted(replicates)}")
    exact_sum = math.fsum(lv.level for lv in levels if lv.method != "monte-carlo")
    k, trials = sum(lv.rejected for lv in mc), sum(lv.replicates for lv in mc)
    mean_upper = pooled_upper(k, trials) if mc else 0.0
    threshold = flag_threshold(len(levels))
    flagged = [lv.name for lv in levels
               if (lv.level > lv.alpha if lv.excess_p is None else lv.excess_p <= threshold)]
    run_upper = exact_sum + len(mc) * mean_upper
    return {
        "assertions": len(levels),
        "by_method": {m: sum(lv.method == m for lv in levels) for m in ("exact", "monte-carlo", "vacuous")},
        "replicates": replicates.pop() if replicates else 0,
        "exact_sum": exact_sum, "mc_rejected": k, "mc_trials": trials, "mc_mean_upper95": mean_upper,
        "run_upper95": run_upper, "budget": budget_alpha, "bounded": run_upper <= budget_alpha,
        "alpha_sum": math.fsum(lv.alpha for lv in levels),
        "flagged": flagged, "flag_threshold": threshold,
        "levels": [dataclasses.asdict(lv) for lv in levels],
    }


def designs(payloads: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every assertion record of the results.json ``payloads``, the first of each name kept
    (e.g. a CPU run, then a GPU run for the GPU-only assertions)."""
    seen, out = set(), []
    for payload in payloads:
        for test in payload["tests"]:
            for s in test["stats"]:
                if s["name"] not in seen:
                    seen.add(s["name"])
                    out.append(s)
    return out
