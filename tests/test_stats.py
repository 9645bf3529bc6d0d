"""Tests of the statistics engine (conformance/stats.py) and the budget (conformance/budget.py).

Exact checks on hand-computed cases (p-values via math.erfc / math.comb),
calibration of every rule on exact samples (false-positive rate under H0 at alpha = 0.05,
power at the declared minimum effect with the computed sample size, both judged with
scipy.stats.binomtest), sample-size properties, pooling, seeds and bad inputs.

Calibration draws come from numpy generators seeded by ``derive_seed(BASE_SEED, test id)``,
so each test is deterministic; a calibration check of a correct rule fails for a given
seed with probability <= CALIBRATION_ALPHA.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.budget import (
    DEFAULT_MIN_TV,
    FAMILY_WISE_ALPHA,
    MAX_STATISTICAL_ASSERTIONS,
    PER_ASSERTION_ALPHA,
    TARGET_POWER,
    StatLedger,
)
from conformance.seeds import derive_seed
from conformance.stats import (
    binomial,
    goodness_of_fit,
    power_chisquare,
    power_proportion,
    sample_size_for_proportion,
    sample_size_for_tv,
    two_sample_mean,
    one_sample_mean,
)

BASE_SEED = 20260
CALIBRATION_ALPHA = 1e-3
REPETITIONS = 400
TEST_ALPHA = 0.05  # large, so that false positives are frequent enough to count
TEST_TV = 0.1  # large, so that the sample sizes stay small
P0 = np.array([0.1, 0.2, 0.3, 0.4])
# Least favourable alternative at TV = TEST_TV: d = +-2 TV p0 on two halves of mass 1/2
# ({0.1, 0.4} up, {0.2, 0.3} down), so sum(d^2 / p0) = (2 TV)^2 exactly.
P1 = P0 * (1 + 2 * TEST_TV * np.array([1, -1, -1, 1]))
SCRATCH = StatLedger()  # a ledger of its own for the results checked here


def _rng(case_id: str) -> np.random.Generator:
    return np.random.default_rng(derive_seed(BASE_SEED, case_id))


def _check_rate(case: str, rejections: int, reps: int, rate: float, alternative: str) -> None:
    """Fail if ``rejections / reps`` is significantly ``alternative`` than ``rate``."""
    p = scipy.stats.binomtest(rejections, reps, rate, alternative=alternative).pvalue
    assert p > CALIBRATION_ALPHA, (
        f"{case}: {rejections}/{reps} rejections, significantly {alternative} than {rate} (p = {p:.3g})"
    )


def _chi2_sf_df1(x: float) -> float:
    return math.erfc(math.sqrt(x / 2))


# --------------------------------------------------------------------------- budget


def test_budget_bonferroni_split():
    assert FAMILY_WISE_ALPHA == 1e-3
    assert math.isclose(PER_ASSERTION_ALPHA * MAX_STATISTICAL_ASSERTIONS, FAMILY_WISE_ALPHA)
    assert (DEFAULT_MIN_TV, TARGET_POWER) == (0.01, 0.999)


def test_ledger_counts_distinct_ids_at_their_largest_alpha():
    ledger = StatLedger()
    goodness_of_fit([5, 5], [0.5, 0.5], name="a", alpha=1e-6, ledger=ledger)
    goodness_of_fit([5, 5], [0.5, 0.5], name="a", alpha=2e-6, ledger=ledger)
    goodness_of_fit([5, 5], [0.5, 0.5], name="b", alpha=1e-6, ledger=ledger)
    assert ledger.ids == ("a", "b") and len(ledger) == 2 and len(ledger.results("a")) == 2
    assert math.isclose(ledger.spent_alpha(), 3e-6)
    ledger.check_within_budget()
    ledger.clear()
    assert len(ledger) == 0


def test_ledger_over_count_fails():
    ledger = StatLedger(max_assertions=1)
    for name in ("a", "b"):
        binomial(1, 2, 0.5, name=name, min_effect=0.4, ledger=ledger)
    with pytest.raises(AssertionError, match="MAX_STATISTICAL_ASSERTIONS=1"):
        ledger.check_within_budget()


def test_ledger_over_alpha_fails():
    ledger = StatLedger()
    binomial(1, 2, 0.5, name="a", alpha=2 * FAMILY_WISE_ALPHA, min_effect=0.4, ledger=ledger)
    with pytest.raises(AssertionError, match="family-wise"):
        ledger.check_within_budget()


def test_rules_record_only_into_a_ledger_they_are_given():
    run = StatLedger()
    result = goodness_of_fit([5, 5], [0.5, 0.5], name="S0/demo/default-ledger", ledger=run)
    assert run.results("S0/demo/default-ledger") == (result,)
    assert result.alpha == PER_ASSERTION_ALPHA and result.min_effect == DEFAULT_MIN_TV
    goodness_of_fit([5, 5], [0.5, 0.5], name="S0/demo/no-ledger")
    assert run.ids == ("S0/demo/default-ledger",)


# --------------------------------------------------------------------------- StatResult


def test_result_message_names_case_p_value_effect_and_bound():
    result = goodness_of_fit([30, 70], [0.5, 0.5], name="S3/race/coin", alpha=0.05, ledger=SCRATCH)
    message = result.message()
    for part in ("S3/race/coin", "FAILED", f"p = {result.p_value:.3g}", "TV(observed, probs) = 0.2",
                 f"upper bound {result.effect_ci_upper:.4g}", "alpha = 0.05"):
        assert part in message
    with pytest.raises(AssertionError, match="S3/race/coin: FAILED"):
        result.assert_ok()
    record = json.loads(json.dumps(result.to_dict()))
    assert record["p_value"] == result.p_value and record["passed"] is False


def test_result_assert_ok_returns_the_passing_result():
    result = goodness_of_fit([50, 50], [0.5, 0.5], name="S3/race/fair", ledger=SCRATCH)
    assert result.assert_ok() is result
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.passed = False  # type: ignore[misc]


# --------------------------------------------------------------------------- goodness of fit


def test_gof_exact_fit_passes_with_zero_effect():
    result = goodness_of_fit([25, 25, 50], [0.25, 0.25, 0.5], name="gof/exact", ledger=SCRATCH)
    assert (result.statistic, result.p_value, result.effect, result.passed, result.n) == (0.0, 1.0, 0.0, True, 100)


def test_gof_pearson_and_g_hand_computed():
    pearson = goodness_of_fit([30, 70], [0.5, 0.5], name="gof/pearson", alpha=0.05, ledger=SCRATCH)
    assert math.isclose(pearson.statistic, 16.0)  # 2 * 20^2 / 50
    assert math.isclose(pearson.p_value, _chi2_sf_df1(16.0), rel_tol=1e-9)
    assert math.isclose(pearson.effect, 0.2)
    # Weissman radius for k = 2 at delta = alpha: sqrt(2 (log(2^2 - 2) - log alpha) / n)
    radius = math.sqrt(2 * (math.log(2) - math.log(0.05)) / 100)
    assert math.isclose(pearson.effect_ci_upper, 0.2 + radius / 2)
    g = goodness_of_fit([30, 70], [0.5, 0.5], name="gof/g", alpha=0.05, lambda_="log-likelihood", ledger=SCRATCH)
    g_stat = 2 * (30 * math.log(30 / 50) + 70 * math.log(70 / 50))
    assert math.isclose(g.statistic, g_stat, rel_tol=1e-9)
    assert math.isclose(g.p_value, _chi2_sf_df1(g_stat), rel_tol=1e-9)


def test_gof_zero_probability_hit_fails_exactly():
    result = goodness_of_fit([10**6, 10**6, 1], [0.5, 0.5, 0.0], name="gof/impossible", ledger=SCRATCH)
    assert (result.p_value, result.statistic, result.passed) == (0.0, math.inf, False)
    assert result.effect > 0
    with pytest.raises(AssertionError, match="gof/impossible"):
        result.assert_ok()


def test_gof_zero_probability_bin_without_hits_is_dropped():
    result = goodness_of_fit([5, 5, 0], [0.5, 0.5, 0.0], name="gof/impossible-unseen", ledger=SCRATCH)
    assert (result.p_value, result.passed) == (1.0, True)
    assert "2 bins tested" in result.null and "1 impossible bins" in result.null


def test_gof_pooled_rest_below_min_expected_merges_into_smallest_bin():
    # expected [50, 30, 19, 0.5, 0.5]: the rest (1.0) joins the 19 bin -> [50, 30, 20]
    probs = [0.5, 0.3, 0.19, 0.005, 0.005]
    result = goodness_of_fit([50, 30, 18, 1, 1], probs, name="gof/pool-merge", ledger=SCRATCH)
    assert result.statistic == 0.0 and "3 bins tested (5 given" in result.null
    unpooled = goodness_of_fit([50, 30, 18, 1, 1], probs, name="gof/no-pool", min_expected=0.0, ledger=SCRATCH)
    assert math.isclose(unpooled.statistic, 1 / 19 + 2 * 0.5**2 / 0.5)


def test_gof_pooled_rest_at_min_expected_stays_a_bin():
    # expected [40, 30, 20] + 25 tail bins of 0.4: the rest (10) is its own bin
    probs = [0.4, 0.3, 0.2] + [0.004] * 25
    all_in_one_tail_bin = [40, 30, 20, 10] + [0] * 24
    result = goodness_of_fit(all_in_one_tail_bin, probs, name="gof/pool-rest", ledger=SCRATCH)
    assert math.isclose(result.statistic, 0.0, abs_tol=1e-12) and "4 bins tested (28 given" in result.null
    shifted = goodness_of_fit([40, 30, 25, 5] + [0] * 24, probs, name="gof/pool-rest-shift", ledger=SCRATCH)
    assert math.isclose(shifted.statistic, 5**2 / 20 + 5**2 / 10)
    assert math.isclose(shifted.p_value, scipy.stats.chi2.sf(3.75, 3))


def test_gof_accepts_tensors_and_probs_within_tolerance():
    counts = torch.tensor([50, 50], dtype=torch.int64)
    probs = torch.tensor([0.5, 0.5 + 5e-7], dtype=torch.float32)
    result = goodness_of_fit(counts, probs, name="gof/tensors", ledger=SCRATCH)
    assert result.passed and result.n == 100


@pytest.mark.parametrize("lambda_", ["pearson", "log-likelihood"])
@pytest.mark.parametrize(
    "probs",
    [P0, np.array([0.3, 0.3, 0.2, 0.1] + [0.0125] * 8)],  # the second pools 8 sparse bins
    ids=["dense", "sparse-tail"],
)
def test_gof_false_positive_rate(lambda_, probs):
    n = sample_size_for_tv(4, min_tv=TEST_TV, alpha=TEST_ALPHA, power=TARGET_POWER) // 4
    draws = _rng(f"gof-fp/{lambda_}/{probs.size}").multinomial(n, probs, size=REPETITIONS)
    rejections = sum(
        not goodness_of_fit(c, probs, name="gof/fp", alpha=TEST_ALPHA, lambda_=lambda_, ledger=SCRATCH).passed
        for c in draws
    )
    _check_rate("gof false positives", rejections, REPETITIONS, TEST_ALPHA, "greater")


@pytest.mark.parametrize("lambda_", ["pearson", "log-likelihood"])
def test_gof_power_at_min_tv(lambda_):
    n = sample_size_for_tv(P0, min_tv=TEST_TV, alpha=TEST_ALPHA, power=TARGET_POWER)
    draws = _rng(f"gof-power/{lambda_}").multinomial(n, P1, size=REPETITIONS)
    results = [
        goodness_of_fit(c, P0, name="gof/power", alpha=TEST_ALPHA, min_tv=TEST_TV, lambda_=lambda_, ledger=SCRATCH)
        for c in draws
    ]
    assert results[0].power_at_min_effect >= TARGET_POWER
    _check_rate("gof power", sum(not r.passed for r in results), REPETITIONS, TARGET_POWER, "less")
    uncovered = sum(r.effect_ci_upper < TEST_TV for r in results)  # the true TV is TEST_TV
    _check_rate("gof TV upper bound", uncovered, REPETITIONS, TEST_ALPHA, "greater")


def test_gof_power_is_lost_below_the_computed_n():
    n = sample_size_for_tv(P0, min_tv=TEST_TV, alpha=TEST_ALPHA, power=TARGET_POWER)
    draws = _rng("gof-underpowered").multinomial(n // 4, P1, size=REPETITIONS)
    rejections = sum(
        not goodness_of_fit(c, P0, name="gof/under", alpha=TEST_ALPHA, ledger=SCRATCH).passed for c in draws
    )
    assert rejections < 0.9 * REPETITIONS  # power ~0.6 at n/4: the computed n is needed


# --------------------------------------------------------------------------- sample size (chi-square)


def test_sample_size_for_tv_is_minimal():
    n = sample_size_for_tv(10, min_tv=0.05, alpha=1e-3, power=0.99)
    assert power_chisquare(n, 10, 0.05, 1e-3) >= 0.99 > power_chisquare(n - 1, 10, 0.05, 1e-3)


def test_sample_size_for_tv_two_bins_matches_normal_approximation():
    # df = 1: power ~ Phi(2 TV sqrt(n) - z_{1-alpha/2}), so n ~ ((z_{1-alpha/2} + z_power) / (2 TV))^2
    z = statistics.NormalDist().inv_cdf
    expected = ((z(1 - PER_ASSERTION_ALPHA / 2) + z(TARGET_POWER)) / (2 * DEFAULT_MIN_TV)) ** 2
    assert abs(sample_size_for_tv(2) - expected) <= 2


def test_sample_size_for_tv_declared_defaults():
    # Produced by: python -c "from conformance.stats import sample_size_for_tv as f; print([f(k) for k in (2, 10, 100)])"
    assert [sample_size_for_tv(k) for k in (2, 10, 100)] == [146499, 200976, 388630]


def test_sample_size_for_tv_counts_only_possible_bins():
    assert sample_size_for_tv([0.5, 0.0, 0.5], min_tv=0.1) == sample_size_for_tv(2, min_tv=0.1)


@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(2, 200),
    min_tv=st.floats(0.01, 0.5),
    alpha=st.floats(1e-6, 0.1),
    power=st.floats(0.5, 0.999),
)
def test_sample_size_for_tv_monotone(k, min_tv, alpha, power):
    n = sample_size_for_tv(k, min_tv=min_tv, alpha=alpha, power=power)
    assert sample_size_for_tv(k, min_tv=min_tv / 2, alpha=alpha, power=power) >= n
    assert sample_size_for_tv(k, min_tv=min_tv, alpha=alpha / 10, power=power) >= n
    assert sample_size_for_tv(k, min_tv=min_tv, alpha=alpha, power=(1 + power) / 2) >= n
    assert sample_size_for_tv(k + 10, min_tv=min_tv, alpha=alpha, power=power) >= n


# --------------------------------------------------------------------------- binomial


def test_binomial_hand_computed():
    fair = binomial(50, 100, 0.5, name="bin/fair", min_effect=0.1, ledger=SCRATCH)
    assert (fair.p_value, fair.effect, fair.passed) == (1.0, 0.0, True)
    none = binomial(0, 20, 0.5, name="bin/none", alpha=0.05, min_effect=0.1, ledger=SCRATCH)
    assert math.isclose(none.p_value, 2 * 0.5**20) and not none.passed and none.effect == 0.5
    greater = binomial(15, 20, 0.5, name="bin/greater", alpha=0.05, min_effect=0.2, alternative="greater",
                       ledger=SCRATCH)
    assert math.isclose(greater.p_value, sum(math.comb(20, j) for j in range(15, 21)) / 2**20)
    assert greater.effect == 0.25 and greater.effect_ci_upper > 0.25


def test_binomial_effect_bound_is_clopper_pearson():
    result = binomial(3, 10, 0.5, name="bin/ci", alpha=0.05, min_effect=0.2, ledger=SCRATCH)
    # Clopper-Pearson lower end: the Beta(k, n - k + 1) alpha/2 quantile
    low = scipy.stats.beta.ppf(0.025, 3, 8)
    assert math.isclose(result.effect_ci_upper, 0.5 - low, rel_tol=1e-6)


@pytest.mark.parametrize("p_true", [0.3, 0.2, 0.4], ids=["null", "below", "above"])
def test_binomial_false_positive_rate_and_power(p_true):
    n = sample_size_for_proportion(0.3, 0.1, TEST_ALPHA, TARGET_POWER)
    reps = REPETITIONS // 2  # each exact Clopper-Pearson interval costs a root search
    ks = _rng(f"binomial/{p_true}").binomial(n, p_true, size=reps)
    results = [binomial(int(k), n, 0.3, name="bin/cal", alpha=TEST_ALPHA, min_effect=0.1, ledger=SCRATCH)
               for k in ks]
    rejections = sum(not r.passed for r in results)
    if p_true == 0.3:
        _check_rate("binomial false positives", rejections, reps, TEST_ALPHA, "greater")
    else:
        assert results[0].power_at_min_effect >= TARGET_POWER
        _check_rate("binomial power", rejections, reps, TARGET_POWER, "less")


@pytest.mark.parametrize("shift", [0.0, 0.25], ids=["null", "min-effect"])
def test_two_sample_mean_false_positive_rate_and_power(shift):
    """Skewed, discrete samples (like per-sequence mean accept lengths): Welch's level and
    its normal-approximation power hold at n = 400 per arm."""
    rng = _rng(f"two-sample/{shift}")
    reps = REPETITIONS // 2
    results = [two_sample_mean(rng.poisson(2.0, 400) / 2 + shift, rng.poisson(2.0, 400) / 2, name="mean/cal",
                               alpha=TEST_ALPHA, min_effect=0.25, ledger=SCRATCH) for _ in range(reps)]
    rejections = sum(not r.passed for r in results)
    if shift == 0.0:
        _check_rate("two-sample false positives", rejections, reps, TEST_ALPHA, "greater")
    else:
        power = min(r.power_at_min_effect for r in results)
        _check_rate("two-sample power", rejections, reps, power * 0.98, "less")


def test_two_sample_mean_rejects_bad_input():
    with pytest.raises(ValueError, match="x: expected at least 2 values"):
        two_sample_mean([1.0], [1.0, 2.0], name="mean/bad", min_effect=0.1)
    with pytest.raises(ValueError, match="min_effect"):
        two_sample_mean([1.0, 2.0], [1.0, 2.0], name="mean/bad", min_effect=0.0)


@pytest.mark.parametrize("shift", [0.0, 0.25], ids=["null", "min-effect"])
def test_one_sample_mean_false_positive_rate_and_power(shift):
    """Skewed, discrete values (like per-sequence sums of accept lengths minus their
    expectations): Student's level and its normal-approximation power hold at n = 200."""
    rng = _rng(f"one-sample/{shift}")
    reps = REPETITIONS // 2
    results = [one_sample_mean(rng.poisson(2.0, 200) / 2 + shift, 1.0, name="mean1/cal", alpha=TEST_ALPHA,
                               min_effect=0.25, ledger=SCRATCH) for _ in range(reps)]
    rejections = sum(not r.passed for r in results)
    if shift == 0.0:
        _check_rate("one-sample false positives", rejections, reps, TEST_ALPHA, "greater")
    else:
        power = min(r.power_at_min_effect for r in results)
        _check_rate("one-sample power", rejections, reps, power * 0.98, "less")


def test_one_sample_mean_rejects_bad_input():
    with pytest.raises(ValueError, match="x: expected at least 2 values"):
        one_sample_mean([1.0], 1.0, name="mean1/bad", min_effect=0.1)
    with pytest.raises(ValueError, match="min_effect"):
        one_sample_mean([1.0, 2.0], 1.0, name="mean1/bad", min_effect=0.0)
    with pytest.raises(ValueError, match="mean"):
        one_sample_mean([1.0, 2.0], float("nan"), name="mean1/bad", min_effect=0.1)


def test_sample_size_for_proportion_minimal_and_monotone():
    n = sample_size_for_proportion(0.3, 0.1, 0.01, 0.99)
    assert power_proportion(n, 0.3, 0.1, 0.01) >= 0.99 > power_proportion(n - 1, 0.3, 0.1, 0.01)
    assert sample_size_for_proportion(0.3, 0.05, 0.01, 0.99) > n
    assert sample_size_for_proportion(0.3, 0.1, 0.001, 0.99) > n
    assert sample_size_for_proportion(0.3, 0.1, 0.01, 0.999) > n
    assert sample_size_for_proportion(0.3, 0.1, 0.01, 0.99, alternative="greater") < n


# --------------------------------------------------------------------------- seeds


def test_derive_seed_is_stable_across_processes():
    # Produced by: python -c "import hashlib; print(int.from_bytes(hashlib.blake2b(
    #   b'0\x00S3/race/uniform', digest_size=8).digest(), 'big') >> 1)"  (unsalted, unlike hash())
    assert derive_seed(0, "S3/race/uniform") == 1205360600513370085


def test_derive_seed_distinct_and_63_bit():
    seeds = {derive_seed(base, f"S{i}/family/case") for base in (0, 1, 2**63) for i in range(300)}
    assert len(seeds) == 900
    assert all(0 <= s < 2**63 for s in seeds)


# --------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "counts, probs, kwargs, error, match",
    [
        ([5, -1], [0.5, 0.5], {}, ValueError, "^counts:"),
        ([5, 1.5], [0.5, 0.5], {}, ValueError, "^counts:"),
        ([[5, 5]], [0.5, 0.5], {}, ValueError, "^counts:"),
        ([], [], {}, ValueError, "^counts:"),
        ([0, 0], [0.5, 0.5], {}, ValueError, "^counts:"),
        ([True, False], [0.5, 0.5], {}, TypeError, "^counts:"),
        ([5, 5], [0.5, 0.4], {}, ValueError, "^probs:"),
        ([5, 5], [1.5, -0.5], {}, ValueError, "^probs:"),
        ([5, 5], [0.5, math.nan], {}, ValueError, "^probs:"),
        ([5, 5], [0.5, 0.25, 0.25], {}, ValueError, "^probs:"),
        ([5, 5], [0.5, 0.5], {"alpha": 0.0}, ValueError, "^alpha:"),
        ([5, 5], [0.5, 0.5], {"alpha": 1.0}, ValueError, "^alpha:"),
        ([5, 5], [0.5, 0.5], {"min_tv": 0.0}, ValueError, "^min_tv:"),
        ([5, 5], [0.5, 0.5], {"min_expected": -1.0}, ValueError, "^min_expected:"),
        ([5, 5], [0.5, 0.5], {"lambda_": "neyman"}, ValueError, "^lambda_:"),
        ([5, 5], [0.5, 0.5], {"name": ""}, ValueError, "^name:"),
        ([5, 5], [0.5, 0.5], {"name": 3}, TypeError, "^name:"),
    ],
)
def test_gof_bad_inputs(counts, probs, kwargs, error, match):
    with pytest.raises(error, match=match):
        goodness_of_fit(counts, probs, **{"name": "bad", "ledger": SCRATCH, **kwargs})


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: binomial(11, 10, 0.5, name="bad", min_effect=0.1), ValueError, "^k:"),
        (lambda: binomial(1, 0, 0.5, name="bad", min_effect=0.1), ValueError, "^n:"),
        (lambda: binomial(1, 10, 1.5, name="bad", min_effect=0.1), ValueError, "^p0:"),
        (lambda: binomial(1, 10, 0.5, name="bad", min_effect=0.1, alternative="up"), ValueError, "^alternative:"),
        (lambda: sample_size_for_proportion(0.95, 0.1, alternative="greater"), ValueError, "^min_effect:"),
        (lambda: sample_size_for_tv(1), ValueError, "^probs_or_k:"),
        (lambda: sample_size_for_tv([1.0, 0.0]), ValueError, "^probs_or_k:"),
        (lambda: sample_size_for_tv(4, power=1.0), ValueError, "^power:"),
        (lambda: power_chisquare(0, 4, 0.1, 0.05), ValueError, "^n:"),
        (lambda: derive_seed(-1, "x"), ValueError, "^base_seed:"),
        (lambda: derive_seed(0, ""), ValueError, "^case_id:"),
        (lambda: derive_seed(0, 5), TypeError, "^case_id:"),
    ],
)
def test_bad_inputs_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_failed_frequency_test_names_its_bins_with_the_largest_residuals():
    # A fresh-user trial: a statistical failure did not say which outcome each bin is.
    law = [0.1, 0.15, 0.25, 0.3, 0.199, 0.0005, 0.0005]
    counts = [100, 300, 100, 300, 200, 0, 0]  # n = 1000: the last two (expected 0.5) are pooled
    labels = [f"length {k}" for k in range(1, 8)]
    result = goodness_of_fit(counts, law, name="S6/x/law", labels=labels, ledger=SCRATCH)
    assert not result.passed
    # the pooled rest (expected 1 < 5) joins the kept bin of smallest expectation
    assert result.bin_labels == ("length 1 + pooled rest (2 bins)", *labels[1:5])
    # residuals: length 2 +12.2, length 3 -9.49, then length 1 + rest -0.0995
    assert "largest Pearson residuals (O - E)/sqrt(E): length 2 +12.2 (O 300, E 150.0); length 3 -9.49 " \
           "(O 100, E 250.0); " in result.message()
    default = goodness_of_fit(counts[:3], [0.2, 0.3, 0.5], name="S3/x/law", ledger=SCRATCH)
    assert "bin 2 -" in default.message() and default.bin_labels == ("bin 0", "bin 1", "bin 2")
    assert "residuals" not in goodness_of_fit([50, 50], [0.5, 0.5], name="S3/y/law", ledger=SCRATCH).message()
    with pytest.raises(ValueError, match="labels: expected 3 labels"):
        goodness_of_fit(counts[:3], [0.2, 0.3, 0.5], name="S3/x/law", labels=["a"], ledger=SCRATCH)
