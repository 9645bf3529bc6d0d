"""The statistics engine: every distributional assertion of the suite goes through here.

Each rule states its null hypothesis, statistic, alpha, the smallest effect it must detect
and the power it has there, and returns a :class:`StatResult` (estimate, confidence bound,
p-value, verdict) instead of comparing against a raw threshold (DESIGN.md "Statistics
policy"). Defaults come from ``conformance/budget.py``; a result is recorded in the
:class:`~conformance.budget.StatLedger` it is given (the plugin's ``stat_check`` records
every checked result in its run's ledger).

Rules (scipy.stats underneath):

* :func:`goodness_of_fit` -- counts of sampled tokens against expected probabilities
  (Pearson chi-square or G-test, sparse bins pooled, zero-probability hits fail exactly);
  sample size from :func:`sample_size_for_tv`.
* :func:`binomial` -- an event count against a probability (exact binomial test); sample
  size from :func:`sample_size_for_proportion`.
* :func:`two_sample_mean` -- two independent samples with the same mean (Welch's t-test);
  power from :func:`power_two_sample_mean`.
* :func:`one_sample_mean` -- a sample whose mean is a known value (Student's one-sample
  t-test); power from :func:`power_one_sample_mean`.

Conventions: a rule passes iff ``p_value > alpha``. ``effect_ci_upper`` is an upper
confidence bound on the true effect that holds with probability >= ``1 - alpha``.

To add a rule: validate in one ``_check_*`` helper, compute with scipy.stats, build the
record with :func:`_finish`, and give it a false-positive and a power test in
``tests/test_stats.py``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np
import scipy.stats
import torch

from .checks import check_choice, check_float, check_int

from . import bins, budget
from .budget import DEFAULT_MIN_TV, PER_ASSERTION_ALPHA, TARGET_POWER, StatLedger

__all__ = [
    "StatResult",
    "goodness_of_fit",
    "power_chisquare",
    "sample_size_for_tv",
    "binomial",
    "power_proportion",
    "proportion_alternatives",
    "sample_size_for_proportion",
    "two_sample_mean",
    "power_two_sample_mean",
    "one_sample_mean",
    "power_one_sample_mean",
]

PROB_SUM_TOLERANCE = 1e-6
CHI_SQUARE_STATISTICS = {"pearson": "chi-square (Pearson)", "log-likelihood": "G (log-likelihood ratio)"}
ALTERNATIVES = ("two-sided", "greater", "less")


@dataclasses.dataclass(frozen=True)
class StatResult:
    """The record of one statistical assertion.

    Fields: ``name`` (assertion id ``<section>/<family>/<detail>``), ``null`` (the null
    hypothesis, in words), ``statistic_name`` / ``statistic``, ``p_value``, ``alpha``, ``n``
    (observations), ``effect_name`` / ``effect`` (point estimate of the effect size),
    ``effect_ci_upper`` (upper confidence bound on the true effect, valid with probability
    >= 1 - alpha), ``min_effect`` (smallest effect the assertion must detect),
    ``power_at_min_effect`` (probability of detecting it at this ``n``; NaN when the test
    is vacuous) and ``passed`` (``p_value > alpha``). ``observed`` / ``expected``: the
    pooled bin counts a frequency test compared (None for other tests), kept for plots;
    ``bin_labels``: the outcome of each (``conformance.bins``), named by a failure's message.
    ``design``: the rule and the parameters that, with ``n``, ``alpha``, ``min_effect`` and
    ``expected``, re-run the same assertion on simulated data (``conformance.power.replay``).
    """

    name: str
    null: str
    statistic_name: str
    statistic: float
    p_value: float
    alpha: float
    n: int
    effect_name: str
    effect: float
    effect_ci_upper: float
    min_effect: float
    power_at_min_effect: float
    passed: bool
    observed: tuple[float, ...] | None = None
    expected: tuple[float, ...] | None = None
    design: dict[str, Any] | None = None
    bin_labels: tuple[str, ...] | None = None

    def message(self) -> str:
        """One line naming the case, the verdict, p-value, effect and its bound; a failed
        frequency test also names its bins furthest from expectation (``conformance.bins``)."""
        verdict = "passed" if self.passed else "FAILED"
        relation = ">" if self.passed else "<="
        worst = (f"; {bins.largest_residuals(self.observed, self.expected, self.bin_labels)}"
                 if not self.passed and self.observed and self.expected else "")
        return (
            f"{self.name}: {verdict}: H0: {self.null}; {self.statistic_name} = {self.statistic:.4g}, "
            f"p = {self.p_value:.3g} {relation} alpha = {self.alpha:.3g}, n = {self.n}; "
            f"{self.effect_name} = {self.effect:.4g} (upper bound {self.effect_ci_upper:.4g} "
            f"at confidence 1 - alpha); min effect {self.min_effect:.4g} detected with power "
            f"{self.power_at_min_effect:.4f}{worst}"
        )

    def assert_ok(self) -> StatResult:
        """Return ``self`` if passed.

        Raises:
            AssertionError: with :meth:`message`.
        """
        if not self.passed:
            raise AssertionError(self.message())
        return self

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain Python values (JSON-serialisable)."""
        return dataclasses.asdict(self)


def _scaled(n: int) -> int:
    """``n`` times the run's ``--dspark-budget`` factor (``budget.SAMPLE_SCALE``), at least 1."""
    return max(1, math.ceil(n * budget.SAMPLE_SCALE))


def _finish(ledger: StatLedger | None, **fields: Any) -> StatResult:
    """Build the record (plain Python types, ``passed = p > alpha``) and log it."""
    floats = ("statistic", "p_value", "alpha", "effect", "effect_ci_upper", "min_effect", "power_at_min_effect")
    for key in floats:
        fields[key] = float(fields[key])
    fields["n"] = int(fields["n"])
    for key in ("observed", "expected"):
        if fields.get(key) is not None:
            fields[key] = tuple(float(v) for v in fields[key])
    result = StatResult(passed=fields["p_value"] > fields["alpha"], **fields)
    if ledger is not None:
        ledger.record(result.name, result)
    return result


# --------------------------------------------------------------------------- validation


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name: expected an assertion id string, got {type(name).__name__}")
    if not name:
        raise ValueError("name: expected a non-empty assertion id '<section>/<family>/<detail>', got ''")


def _check_open_unit(name: str, value: object, *, closed_right: bool = False) -> float:
    """A number in (0, 1), or (0, 1] with ``closed_right``."""
    value = check_float(name, value, minimum=0.0, maximum=1.0)
    if value == 0.0 or (value == 1.0 and not closed_right):
        interval = "(0, 1]" if closed_right else "(0, 1)"
        raise ValueError(f"{name}: expected a number in {interval}, got {value}")
    return value


def _as_vector(name: str, value: object) -> np.ndarray:
    """A non-empty 1-D real array from a sequence, numpy array or tensor (any device)."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"{name}: expected a real-valued tensor, got dtype {value.dtype}")
        value = value.detach().to("cpu", torch.float64 if value.is_floating_point() else torch.int64).numpy()
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D sequence, got shape {arr.shape}")
    _check_finite_vector(name, arr)
    return arr


def _first_index(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_finite_vector(name: str, arr: np.ndarray) -> None:
    bad = ~np.isfinite(arr)
    if bad.any():
        i = _first_index(bad)
        raise ValueError(f"{name}: expected finite values, got {arr[i]} at index {i}")


def _check_counts(name: str, value: object) -> np.ndarray:
    arr = _as_vector(name, value)
    bad = (arr < 0) | (arr != np.round(arr))
    if bad.any():
        i = _first_index(bad)
        raise ValueError(f"{name}: expected non-negative integer counts, got {arr[i]} at index {i}")
    if arr.sum() == 0:
        raise ValueError(f"{name}: expected at least one observation, got all-zero counts")
    return arr.astype(np.int64)


def _check_probs(name: str, value: object, size: int, size_name: str) -> np.ndarray:
    arr = _as_vector(name, value).astype(np.float64)
    if arr.size != size:
        raise ValueError(f"{name}: expected {size} probabilities (one per bin of {size_name}), got {arr.size}")
    if (arr < 0).any():
        i = _first_index(arr < 0)
        raise ValueError(f"{name}: expected non-negative probabilities, got {arr[i]} at index {i}")
    total = math.fsum(arr)
    if abs(total - 1.0) > PROB_SUM_TOLERANCE:
        raise ValueError(
            f"{name}: expected probabilities summing to 1 within {PROB_SUM_TOLERANCE:g}, got sum {total!r}; "
            f"normalise them (in float64)"
        )
    return arr / total


def _check_goodness_of_fit(counts, probs, name, alpha, min_tv, min_expected, lambda_):
    _check_name(name)
    _check_open_unit("alpha", alpha)
    _check_open_unit("min_tv", min_tv, closed_right=True)
    check_float("min_expected", min_expected, minimum=0.0)
    check_choice("lambda_", lambda_, CHI_SQUARE_STATISTICS)
    counts = _check_counts("counts", counts)
    return counts, _check_probs("probs", probs, counts.size, "counts")


def _check_labels(labels: object, size: int) -> list[str]:
    """``labels``: None (``conformance.bins.default_labels``) or ``size`` strings."""
    if labels is None:
        return bins.default_labels(size)
    if isinstance(labels, str) or not all(isinstance(label, str) for label in labels):
        raise TypeError(f"labels: expected a sequence of strings, one per bin of counts, got {labels!r:.80}")
    if len(labels) != size:
        raise ValueError(f"labels: expected {size} labels (one per bin of counts), got {len(labels)}")
    return list(labels)


# --------------------------------------------------------------------------- chi-square


def _pool_columns(table: np.ndarray, weight: np.ndarray, min_weight: float,
                  labels: list[str]) -> tuple[np.ndarray, list[str]]:
    """Pool the columns of ``table [rows, k]`` whose ``weight`` (expected count) is sparse;
    return the pooled table and a label per pooled column (from ``labels [k]``).

    Columns with weight < ``min_weight`` are summed into one 'rest' column; if the rest is
    still below ``min_weight`` it is merged into the kept column of smallest weight. Pooling
    depends only on the weights, so under H0 it cannot bias the test.
    """
    sparse = weight < min_weight
    if not sparse.any():
        return table, labels
    kept = table[:, ~sparse].copy()
    kept_labels = [label for label, s in zip(labels, sparse) if not s]
    rest = table[:, sparse].sum(axis=1)
    rest_label = f"pooled rest ({int(sparse.sum())} bins)"
    if weight[sparse].sum() < min_weight and kept.shape[1] > 0:
        smallest = int(np.argmin(weight[~sparse]))
        kept[:, smallest] += rest
        kept_labels[smallest] += f" + {rest_label}"
        return kept, kept_labels
    return np.concatenate([kept, rest[:, None]], axis=1), [*kept_labels, rest_label]


def _l1_radius(k: int, n: float, delta: float) -> float:
    """eps with P(||p_hat - p||_1 >= eps) <= delta for n draws over k bins.

    Weissman et al. (2003): P(||p_hat - p||_1 >= eps) <= (2^k - 2) exp(-n eps^2 / 2).
    """
    if k < 2:
        return 0.0
    log_partitions = k * math.log(2.0) + math.log1p(-(2.0 ** (1 - k)))  # log(2^k - 2), no overflow
    return math.sqrt(2.0 * (log_partitions - math.log(delta)) / n)


def power_chisquare(n: float, k: int, min_tv: float, alpha: float) -> float:
    """Power of the level-``alpha`` chi-square test on ``k`` bins against any alternative
    at total-variation distance >= ``min_tv``, from ``n`` observations.

    Under an alternative ``p0 + d`` the statistic is approximately noncentral chi-square
    with ``df = k - 1`` and noncentrality ``n * sum(d^2 / p0)`` (Pitman alternatives; the
    same for the G-test). Cauchy-Schwarz gives ``sum(d^2 / p0) >= (sum |d|)^2 = (2 TV)^2``,
    attained when ``|d|`` is proportional to ``p0``, so the least favourable alternative
    has noncentrality ``4 * n * min_tv^2``. ``n`` may be fractional (an effective size).

    Raises:
        TypeError / ValueError: ``n`` not > 0, ``k`` < 2, ``min_tv`` not in (0, 1],
            ``alpha`` not in (0, 1).

    Example:
        >>> power_chisquare(146_499, 2, 0.01, 5e-6) >= 0.999 > power_chisquare(146_498, 2, 0.01, 5e-6)
        True
    """
    _check_power_chisquare(n, k, min_tv, alpha)
    df = k - 1
    return float(scipy.stats.ncx2.sf(scipy.stats.chi2.isf(alpha, df), df, 4.0 * n * min_tv**2))


def _check_power_chisquare(n, k, min_tv, alpha) -> None:
    if check_float("n", n, minimum=0.0) == 0.0:
        raise ValueError("n: expected a positive number of observations, got 0")
    check_int("k", k, minimum=2)
    _check_open_unit("min_tv", min_tv, closed_right=True)
    _check_open_unit("alpha", alpha)


def _least_n(power_at: Callable[[int], float], target: float) -> int:
    """Smallest integer n >= 1 with ``power_at(n) >= target`` (``power_at`` increasing)."""
    hi = 1
    while power_at(hi) < target:
        hi *= 2
        if hi > 2**62:
            raise ValueError("power: not reachable with any sample size (numerical failure)")
    lo = hi // 2  # power_at(lo) < target, or lo == 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power_at(mid) >= target else (mid, hi)
    return hi


def sample_size_for_tv(
    probs_or_k: int | Sequence[float] | np.ndarray | torch.Tensor,
    *,
    min_tv: float = DEFAULT_MIN_TV,
    alpha: float = PER_ASSERTION_ALPHA,
    power: float = TARGET_POWER,
) -> int:
    """Smallest ``n`` giving the chi-square test power >= ``power`` against every
    alternative at total-variation distance >= ``min_tv`` (see :func:`power_chisquare`).

    ``probs_or_k``: the number of bins ``k``, or the expected probabilities ``[k]`` (then
    only bins with nonzero probability count: zero-probability hits fail exactly). Power
    refers to TV measured on the bins tested; bins pooled by :func:`goodness_of_fit` are
    compared only through their total.

    Raises:
        TypeError / ValueError: fewer than 2 (nonzero-probability) bins, bad probabilities,
            ``min_tv`` not in (0, 1], ``alpha`` or ``power`` not in (0, 1).

    Example:
        >>> sample_size_for_tv(4, min_tv=0.1, alpha=0.05, power=0.999)
        795
    """
    k = _check_sample_size_for_tv(probs_or_k, min_tv, alpha, power)
    return _scaled(_least_n(lambda n: power_chisquare(n, k, min_tv, alpha), power))


def _check_sample_size_for_tv(probs_or_k, min_tv, alpha, power) -> int:
    _check_open_unit("min_tv", min_tv, closed_right=True)
    _check_open_unit("alpha", alpha)
    _check_open_unit("power", power)
    if isinstance(probs_or_k, int) and not isinstance(probs_or_k, bool):
        return check_int("probs_or_k", probs_or_k, minimum=2)
    probs = _as_vector("probs_or_k", probs_or_k)
    probs = _check_probs("probs_or_k", probs, probs.size, "probs_or_k")
    k = int((probs > 0).sum())
    if k < 2:
        raise ValueError(f"probs_or_k: expected at least 2 bins with nonzero probability, got {k}")
    return k


def goodness_of_fit(
    counts: Sequence[int] | np.ndarray | torch.Tensor,
    probs: Sequence[float] | np.ndarray | torch.Tensor,
    *,
    name: str,
    alpha: float = PER_ASSERTION_ALPHA,
    min_tv: float = DEFAULT_MIN_TV,
    min_expected: float = 5.0,
    lambda_: str = "pearson",
    labels: Sequence[str] | None = None,
    ledger: StatLedger | None = None,
) -> StatResult:
    """Test that ``counts [k]`` are multinomial draws from ``probs [k]``.

    * A nonzero count in a bin of probability exactly 0 fails at once (``p_value = 0``,
      ``statistic = inf``): no sample size excuses an impossible token.
    * The other bins are pooled (Cochran's rule): bins with expected count
      ``n * p < min_expected`` are summed into one 'rest' bin; if that bin is still below
      ``min_expected`` it is merged into the smallest remaining bin. Pooling depends only
      on ``probs`` and ``n``, so the test keeps its level.
    * Statistic: Pearson chi-square, or the G-test with ``lambda_="log-likelihood"``
      (``scipy.stats.power_divergence``), ``df = bins - 1``. With fewer than 2 bins left
      the chi-square part is vacuous (p = 1, power NaN).
    * Effect: TV distance between the observed frequencies and ``probs`` on the pooled
      bins (plus one bin for all zero-probability bins); its upper bound adds half the
      L1 deviation radius of Weissman et al. (2003) at ``delta = alpha``.
    * ``power_at_min_effect``: :func:`power_chisquare` at the pooled bin count.

    Args:
        counts: non-negative integer counts ``[k]`` (list, numpy or any-device tensor).
        probs: expected probabilities ``[k]``, summing to 1 within 1e-6 (renormalised).
        name: assertion id; alpha, min_tv: see ``conformance/budget.py``.
        labels: the outcome each bin counts ``[k]`` (``"length 3"``), named by a failure's
            message (``conformance.bins``); default ``"bin i"``, the index into ``counts``.
        ledger: where the result is recorded (default: not recorded; the plugin's
            ``stat_check`` records every checked result in the run's ledger).

    Raises:
        TypeError: non-numeric input. ValueError: negative or non-integer counts, no
            observations, probabilities negative or not summing to 1, length mismatch,
            alpha / min_tv out of range, unknown ``lambda_``; each names the argument.

    Example:
        >>> from conformance.budget import StatLedger
        >>> r = goodness_of_fit([50, 50], [0.5, 0.5], name="demo/coin/fair", ledger=StatLedger())
        >>> r.passed, r.p_value, r.effect
        (True, 1.0, 0.0)
    """
    counts, probs = _check_goodness_of_fit(counts, probs, name, alpha, min_tv, min_expected, lambda_)
    labels = _check_labels(labels, counts.size)
    n = int(counts.sum())
    impossible = probs == 0
    expected = n * probs[~impossible]
    (observed, expected), bin_labels = _pool_columns(
        np.stack([counts[~impossible], expected]), expected, min_expected,
        [label for label, gone in zip(labels, impossible) if not gone])
    bins = observed.size
    hits = int(counts[impossible].sum())
    if hits:
        statistic, p_value = math.inf, 0.0
    elif bins < 2:
        statistic, p_value = 0.0, 1.0
    else:
        statistic, p_value = scipy.stats.power_divergence(observed, expected, lambda_=lambda_)
    tv = 0.5 * (np.abs(observed - expected).sum() + hits) / n
    tv_bins = bins + int(impossible.any())
    return _finish(
        ledger,
        name=name,
        null=f"counts ~ Multinomial(n, probs); {bins} bins tested ({counts.size} given, "
        f"pooled to expected >= {min_expected:g}), {int(impossible.sum())} impossible bins",
        statistic_name=CHI_SQUARE_STATISTICS[lambda_],
        statistic=statistic,
        p_value=p_value,
        alpha=alpha,
        n=n,
        effect_name="TV(observed, probs)",
        effect=tv,
        effect_ci_upper=min(1.0, tv + 0.5 * _l1_radius(tv_bins, n, alpha)),
        min_effect=min_tv,
        power_at_min_effect=power_chisquare(n, bins, min_tv, alpha) if bins >= 2 else math.nan,
        observed=observed,
        expected=expected,
        design={"rule": "goodness_of_fit", "lambda_": lambda_, "min_expected": float(min_expected)},
        bin_labels=tuple(bin_labels),
    )


# --------------------------------------------------------------------------- binomial


def proportion_alternatives(p0: float, min_effect: float, alternative: str) -> list[float]:
    """The alternatives ``p0 +- min_effect`` (within [0, 1]) a binomial test of ``alternative``
    ("two-sided", "greater", "less") must detect; unchecked input (see :func:`binomial`)."""
    sides = {"two-sided": (-1, 1), "greater": (1,), "less": (-1,)}[alternative]
    return [p0 + s * min_effect for s in sides if 0.0 <= p0 + s * min_effect <= 1.0]


def _check_proportion_design(p0, min_effect, alpha, alternative) -> list[float]:
    check_float("p0", p0, minimum=0.0, maximum=1.0)
    _check_open_unit("min_effect", min_effect)
    _check_open_unit("alpha", alpha)
    check_choice("alternative", alternative, ALTERNATIVES)
    sides = proportion_alternatives(p0, min_effect, alternative)
    if not sides:
        raise ValueError(
            f"min_effect: expected p0 {'+-' if alternative == 'two-sided' else 'shifted by'} "
            f"min_effect to stay within [0, 1] for alternative={alternative!r}, got p0={p0}, min_effect={min_effect}"
        )
    return sides


def _z_alpha(alpha: float, alternative: str) -> float:
    return float(scipy.stats.norm.isf(alpha / 2 if alternative == "two-sided" else alpha))


def power_proportion(n: int, p0: float, min_effect: float, alpha: float, *, alternative: str = "two-sided") -> float:
    """Power of the level-``alpha`` binomial test of ``p = p0`` from ``n`` trials when the
    true probability is ``p0 +- min_effect`` (the worse side for two-sided).

    Normal approximation: rejection when ``|p_hat - p0| > z_a sqrt(p0 (1 - p0) / n)``, so
    power ``= Phi((sqrt(n) * min_effect - z_a * s0) / s1)`` with ``s = sqrt(p (1 - p))``
    (far tail ignored). Accurate when ``n p (1 - p)`` is large (say >= 10); the exact test
    is discrete and slightly conservative.

    Raises:
        TypeError / ValueError: ``n`` < 1, ``p0`` not in [0, 1], ``min_effect`` / ``alpha``
            not in (0, 1), no alternative within [0, 1], unknown ``alternative``.

    Example:
        >>> power_proportion(582, 0.3, 0.1, 0.05) >= 0.999 > power_proportion(581, 0.3, 0.1, 0.05)
        True
    """
    check_int("n", n, minimum=1)
    sides = _check_proportion_design(p0, min_effect, alpha, alternative)
    return min(_normal_power(n, p0, p1, _z_alpha(alpha, alternative)) for p1 in sides)


def _normal_power(n: int, p0: float, p1: float, z_a: float) -> float:
    gap = math.sqrt(n) * abs(p1 - p0) - z_a * math.sqrt(p0 * (1 - p0))
    s1 = math.sqrt(p1 * (1 - p1))
    if s1 == 0.0:  # p_hat == p1 surely
        return 1.0 if gap > 0 else 0.0
    return float(scipy.stats.norm.cdf(gap / s1))


def sample_size_for_proportion(
    p0: float,
    min_effect: float,
    alpha: float = PER_ASSERTION_ALPHA,
    power: float = TARGET_POWER,
    *,
    alternative: str = "two-sided",
) -> int:
    """Smallest ``n`` with :func:`power_proportion` >= ``power``:
    ``n = ((z_a s0 + z_power s1) / min_effect)^2`` on the worse side (normal approximation).

    Raises:
        TypeError / ValueError: as :func:`power_proportion`; ``power`` not in (0, 1).

    Example:
        >>> sample_size_for_proportion(0.3, 0.1, 0.05, 0.999)
        582
    """
    sides = _check_proportion_design(p0, min_effect, alpha, alternative)
    _check_open_unit("power", power)
    z_a, z_b = _z_alpha(alpha, alternative), float(scipy.stats.norm.isf(1 - power))
    s0 = math.sqrt(p0 * (1 - p0))
    n = max(math.ceil(((z_a * s0 + z_b * math.sqrt(p1 * (1 - p1))) / min_effect) ** 2) for p1 in sides)
    while power_proportion(n, p0, min_effect, alpha, alternative=alternative) < power:  # rounding
        n += 1
    return _scaled(n)


def binomial(
    k: int,
    n: int,
    p0: float,
    *,
    name: str,
    alpha: float = PER_ASSERTION_ALPHA,
    min_effect: float,
    alternative: str = "two-sided",
    ledger: StatLedger | None = None,
) -> StatResult:
    """Exact binomial test that ``k`` successes in ``n`` trials have probability ``p0``.

    ``scipy.stats.binomtest`` with ``alternative`` ("two-sided", "greater": H1 p > p0,
    "less": H1 p < p0). Effect: ``abs(p - p0)`` (two-sided), ``p - p0`` ("greater") or
    ``p0 - p`` ("less"); its upper bound comes from the two-sided Clopper-Pearson interval
    at level ``1 - alpha`` (``proportion_ci(method="exact")``). Power: :func:`power_proportion`.

    Raises:
        TypeError / ValueError: ``n`` < 1, ``k`` not in [0, n], and as
            :func:`power_proportion`; each names the argument.

    Example:
        >>> from conformance.budget import StatLedger
        >>> r = binomial(50, 100, 0.5, name="demo/coin/heads", min_effect=0.1, ledger=StatLedger())
        >>> r.passed, r.p_value
        (True, 1.0)
    """
    _check_binomial(k, n, p0, name, alpha, min_effect, alternative)
    test = scipy.stats.binomtest(k, n, p0, alternative=alternative)
    ci = scipy.stats.binomtest(k, n, p0).proportion_ci(confidence_level=1 - alpha, method="exact")
    p_hat = k / n
    effect, upper, effect_name = {
        "two-sided": (abs(p_hat - p0), max(ci.high - p0, p0 - ci.low), "abs(p - p0)"),
        "greater": (p_hat - p0, ci.high - p0, "p - p0"),
        "less": (p0 - p_hat, p0 - ci.low, "p0 - p"),
    }[alternative]
    return _finish(
        ledger,
        name=name,
        null=f"p = {p0:.6g} ({alternative} alternative)",
        statistic_name="successes",
        statistic=k,
        p_value=test.pvalue,
        alpha=alpha,
        n=n,
        effect_name=effect_name,
        effect=effect,
        effect_ci_upper=upper,
        min_effect=min_effect,
        power_at_min_effect=power_proportion(n, p0, min_effect, alpha, alternative=alternative),
        design={"rule": "binomial", "p0": float(p0), "alternative": alternative},
    )


def _check_binomial(k, n, p0, name, alpha, min_effect, alternative) -> None:
    _check_name(name)
    check_int("n", n, minimum=1)
    check_int("k", k, minimum=0, maximum=n)
    _check_proportion_design(p0, min_effect, alpha, alternative)


# --------------------------------------------------------------------------- two-sample mean
def power_two_sample_mean(sd_x: float, n_x: int, sd_y: float, n_y: int, min_effect: float, alpha: float) -> float:
    """Power of the two-sided level-``alpha`` Welch test at a mean difference of
    ``min_effect``, by the normal approximation with standard error
    ``sqrt(sd_x^2 / n_x + sd_y^2 / n_y)`` (both tails counted).

    Raises:
        TypeError / ValueError: sizes < 2, negative SDs, ``min_effect`` <= 0, ``alpha``
            not in (0, 1).

    Example:
        >>> round(power_two_sample_mean(1.0, 400, 1.0, 400, 0.25, 0.05), 3)
        0.942
    """
    check_int("n_x", n_x, minimum=2)
    check_int("n_y", n_y, minimum=2)
    check_float("sd_x", sd_x, minimum=0.0)
    check_float("sd_y", sd_y, minimum=0.0)
    check_float("min_effect", min_effect, minimum=0.0)
    if min_effect <= 0:
        raise ValueError(f"min_effect: expected a mean difference > 0, got {min_effect}")
    _check_open_unit("alpha", alpha)
    return _two_sided_normal_power(math.sqrt(sd_x**2 / n_x + sd_y**2 / n_y), min_effect, alpha)


def _two_sided_normal_power(se: float, min_effect: float, alpha: float) -> float:
    """Rejection probability of a two-sided level-``alpha`` z-test of an estimate with
    standard error ``se`` whose mean is ``min_effect`` away from the null (1 when ``se`` is 0)."""
    if se == 0.0:
        return 1.0
    z = float(scipy.stats.norm.isf(alpha / 2))
    shift = min_effect / se
    return float(scipy.stats.norm.sf(z - shift) + scipy.stats.norm.cdf(-z - shift))


def two_sample_mean(
    x: Sequence[float] | np.ndarray | torch.Tensor,
    y: Sequence[float] | np.ndarray | torch.Tensor,
    *,
    name: str,
    alpha: float = PER_ASSERTION_ALPHA,
    min_effect: float,
    ledger: StatLedger | None = None,
) -> StatResult:
    """Welch's t-test that independent samples ``x`` and ``y`` have the same mean.

    ``scipy.stats.ttest_ind(x, y, equal_var=False)``, two-sided. Effect: ``|mean(x) -
    mean(y)|``; its upper bound comes from the test's ``1 - alpha`` confidence interval of
    the difference. Power: :func:`power_two_sample_mean` at the sample SDs. Use it on
    independent units (e.g. one value per generated sequence), each sample of size >= 2.

    Raises:
        TypeError / ValueError: non-numeric, non-finite or 1-D samples of fewer than 2
            values, and as :func:`power_two_sample_mean`; each names the argument.

    Example:
        >>> r = two_sample_mean([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], name="demo/mean/same", min_effect=1.0)
        >>> r.passed, r.effect
        (True, 0.0)
    """
    _check_name(name)
    xs, ys = _as_vector("x", x), _as_vector("y", y)
    for arg, values in (("x", xs), ("y", ys)):
        _check_finite_vector(arg, values)
        if values.size < 2:
            raise ValueError(f"{arg}: expected at least 2 values, got {values.size}")
    sd_x, sd_y = float(xs.std(ddof=1)), float(ys.std(ddof=1))
    power = power_two_sample_mean(sd_x, xs.size, sd_y, ys.size, min_effect, alpha)
    diff = float(xs.mean() - ys.mean())
    if sd_x == 0.0 and sd_y == 0.0:  # constant samples: equal means or surely different
        statistic, p_value, low, high = (0.0, 1.0, diff, diff) if diff == 0 else (math.inf, 0.0, diff, diff)
    else:
        test = scipy.stats.ttest_ind(xs, ys, equal_var=False)
        ci = test.confidence_interval(confidence_level=1 - alpha)
        statistic, p_value, low, high = float(test.statistic), float(test.pvalue), float(ci.low), float(ci.high)
    return _finish(
        ledger,
        name=name,
        null="mean(x) = mean(y) (Welch, two-sided)",
        statistic_name="Welch t",
        statistic=statistic,
        p_value=p_value,
        alpha=alpha,
        n=xs.size + ys.size,
        effect_name="|mean(x) - mean(y)|",
        effect=abs(diff),
        effect_ci_upper=max(abs(low), abs(high)),
        min_effect=min_effect,
        power_at_min_effect=power,
        design={"rule": "two_sample_mean", "n_x": int(xs.size), "n_y": int(ys.size), "sd_x": sd_x, "sd_y": sd_y},
    )


def power_one_sample_mean(sd: float, n: int, min_effect: float, alpha: float) -> float:
    """Power of the two-sided level-``alpha`` one-sample t-test at a mean shifted by
    ``min_effect``, by the normal approximation with standard error ``sd / sqrt(n)`` (both
    tails counted).

    Raises:
        TypeError / ValueError: ``n`` < 2, a negative ``sd``, ``min_effect`` <= 0, ``alpha``
            not in (0, 1).

    Example:
        >>> round(power_one_sample_mean(1.0, 200, 0.25, 0.05), 3)
        0.942
    """
    check_int("n", n, minimum=2)
    check_float("sd", sd, minimum=0.0)
    check_float("min_effect", min_effect, minimum=0.0)
    if min_effect <= 0:
        raise ValueError(f"min_effect: expected a mean shift > 0, got {min_effect}")
    _check_open_unit("alpha", alpha)
    return _two_sided_normal_power(sd / math.sqrt(n), min_effect, alpha)


def one_sample_mean(
    x: Sequence[float] | np.ndarray | torch.Tensor,
    mean: float,
    *,
    name: str,
    alpha: float = PER_ASSERTION_ALPHA,
    min_effect: float,
    ledger: StatLedger | None = None,
) -> StatResult:
    """Student's t-test that the independent values ``x`` have mean ``mean``.

    ``scipy.stats.ttest_1samp(x, mean)``, two-sided. Effect: ``|mean(x) - mean|``; its upper
    bound comes from the test's ``1 - alpha`` confidence interval of the mean. Power:
    :func:`power_one_sample_mean` at the sample SD. Use it on independent units (e.g. one
    value per generated sequence), at least 2 of them.

    Raises:
        TypeError / ValueError: non-numeric, non-finite or 1-D samples of fewer than 2
            values, a non-finite ``mean``, and as :func:`power_one_sample_mean`; each names
            the argument.

    Example:
        >>> r = one_sample_mean([1.0, 2.0, 3.0], 2.0, name="demo/mean/known", min_effect=1.0)
        >>> r.passed, r.effect
        (True, 0.0)
    """
    _check_name(name)
    xs = _as_vector("x", x)
    _check_finite_vector("x", xs)
    if xs.size < 2:
        raise ValueError(f"x: expected at least 2 values, got {xs.size}")
    check_float("mean", mean)
    sd = float(xs.std(ddof=1))
    power = power_one_sample_mean(sd, xs.size, min_effect, alpha)
    diff = float(xs.mean() - mean)
    if sd == 0.0:  # a constant sample: equal means or surely different
        statistic, p_value, low, high = (0.0, 1.0, diff, diff) if diff == 0 else (math.inf, 0.0, diff, diff)
    else:
        test = scipy.stats.ttest_1samp(xs, mean)
        ci = test.confidence_interval(confidence_level=1 - alpha)
        statistic, p_value = float(test.statistic), float(test.pvalue)
        low, high = float(ci.low) - mean, float(ci.high) - mean
    return _finish(
        ledger,
        name=name,
        null=f"mean(x) = {mean:g} (Student, two-sided)",
        statistic_name="t",
        statistic=statistic,
        p_value=p_value,
        alpha=alpha,
        n=xs.size,
        effect_name="|mean(x) - mean|",
        effect=abs(diff),
        effect_ci_upper=max(abs(low), abs(high)),
        min_effect=min_effect,
        power_at_min_effect=power,
        design={"rule": "one_sample_mean", "n": int(xs.size), "sd": sd, "mean": float(mean)},
    )
