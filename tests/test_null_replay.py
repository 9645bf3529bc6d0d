"""Null replay (issue 17 item 4): each assertion's level under its null, the whole-run bound,
the ``null-replay`` and ``merge-runs`` commands.

Levels are checked where they are known: exact levels against a brute-force sum over every
outcome, Monte Carlo levels of valid rules at alpha 0.01 (where a few thousand replicates
resolve them), and a rule whose reference distribution is wrong (Pearson chi-square on
unpooled bins of expected count 0.5) is flagged.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from conformance import cli, stats
from conformance.power import calibration
from conformance.power import null_replay as nulls

ROOT = Path(__file__).resolve().parents[1]
LEVEL = 0.01


def _gof_record(probs, n, alpha=LEVEL, min_expected=5.0, lambda_="pearson"):
    counts = np.round(np.asarray(probs) * n).astype(int)
    counts[0] += n - counts.sum()
    return stats.goodness_of_fit(counts, probs, name=f"t/gof-{len(probs)}", alpha=alpha, min_tv=0.05,
                                 min_expected=min_expected, lambda_=lambda_).to_dict()


def _binomial_record(n, p0, alternative, alpha=0.05):
    return stats.binomial(round(n * p0), n, p0, name=f"t/binom-{alternative}", alpha=alpha, min_effect=0.1,
                          alternative=alternative).to_dict()


def _welch_record(alpha=LEVEL):
    rng = np.random.default_rng(0)
    return stats.two_sample_mean(rng.normal(0, 1.0, 30), rng.normal(0, 3.0, 50), name="t/welch", alpha=alpha,
                                 min_effect=0.5).to_dict()


def _student_record(alpha=LEVEL):
    rng = np.random.default_rng(0)
    return stats.one_sample_mean(rng.normal(0, 2.0, 40), 0.0, name="t/student", alpha=alpha,
                                 min_effect=0.5).to_dict()


def _wrong_null_record():
    """Pearson chi-square with pooling off on bins of expected count 0.5: the chi-square
    reference distribution is far off there (one count of 4 in a sparse bin already gives
    X^2 = 24.5 > 13.8, the 1e-3 critical value at 2 df; P(Poisson(0.5) >= 4) = 1.8e-3)."""
    return _gof_record([0.998, 0.001, 0.001], 500, alpha=1e-3, min_expected=0.0)


# --------------------------------------------------------------------------- per assertion


@pytest.mark.parametrize("record", [
    _gof_record([0.4, 0.3, 0.2, 0.1], 400), _gof_record([0.4, 0.3, 0.2, 0.1], 400, lambda_="log-likelihood"),
    _welch_record(), _student_record(),
], ids=["pearson", "g-test", "welch", "student"])
def test_valid_rule_fails_at_its_alpha_under_the_null(record):
    level = nulls.null_level(record, replicates=40_000, seed=3)
    assert level.method == "monte-carlo" and level.replicates == 40_000
    # two-sided binomial test of the observed rate against alpha, at 1e-3
    assert sps.binomtest(level.rejected, level.replicates, LEVEL).pvalue > 1e-3, level
    assert level.level_upper95 == pytest.approx(sps.beta.ppf(0.95, level.rejected + 1, 40_000 - level.rejected))


def test_vectorised_rule_gives_the_rule_s_own_verdicts():
    record = _gof_record([0.5, 0.25, 0.125, 0.125], 64, alpha=0.2)
    probs = nulls._null_probs(record)
    counts = np.random.default_rng(1).multinomial(64, probs, size=300)
    fails = nulls._gof_failures(counts, probs, 64, 0.2, "pearson")
    rule = [not stats.goodness_of_fit(c, probs, name="t/x", alpha=0.2, min_tv=0.05).passed for c in counts]
    assert fails.tolist() == rule and 0 < sum(rule) < 300


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_exact_binomial_level_is_the_probability_of_every_failing_count(alternative):
    record = _binomial_record(60, 0.3, alternative)
    brute = math.fsum(sps.binom.pmf(k, 60, 0.3) for k in range(61) if nulls._binomial_fails(record, k))
    level = nulls.null_level(record, replicates=1)
    assert level.method == "exact" and level.replicates == 0 and level.excess_p is None
    assert level.level == pytest.approx(brute, rel=1e-12) and 0 < level.level <= 0.05


def test_exact_two_bin_level_sums_the_rule_over_every_count():
    record = _gof_record([0.7, 0.3], 80, alpha=0.05)
    brute = math.fsum(sps.binom.pmf(c, 80, 0.7) for c in range(81)
                      if not stats.goodness_of_fit([c, 80 - c], [0.7, 0.3], name="t/x", alpha=0.05,
                                                   min_tv=0.05).passed)
    level = nulls.null_level(record, replicates=1)
    assert level.method == "exact" and level.level == pytest.approx(brute, rel=1e-12)


def test_vacuous_designs_cannot_fail():
    one_bin = _gof_record([0.99, 0.01], 100)  # the sparse bin merges into the other: 1 bin
    constant = stats.two_sample_mean([1.0, 1.0], [1.0, 1.0], name="t/const", min_effect=0.1).to_dict()
    constant_one = stats.one_sample_mean([1.0, 1.0], 1.0, name="t/const1", min_effect=0.1).to_dict()
    for record in (one_bin, constant, constant_one):
        level = nulls.null_level(record, replicates=10)
        assert (level.method, level.level, level.level_upper95) == ("vacuous", 0.0, 0.0)


def test_rule_with_a_wrong_null_is_flagged_and_breaks_the_whole_run_bound():
    wrong = nulls.null_level(_wrong_null_record(), replicates=20_000, seed=1)
    assert wrong.level > 3e-3 and wrong.excess_p < 1e-12  # more than three times its alpha 1e-3
    valid = nulls.null_level(_gof_record([0.4, 0.3, 0.2, 0.1], 400, alpha=1e-3), replicates=20_000, seed=1)
    summary = nulls.summarize([valid, wrong], budget_alpha=2e-3)  # the two alphas sum to the budget
    assert summary["flagged"] == ["t/gof-3"] and not summary["bounded"]
    assert summary["run_upper95"] > wrong.level + valid.level


def test_replay_is_seeded_and_the_same_at_any_jobs():
    records = [_gof_record([0.4, 0.3, 0.2, 0.1], 400), _welch_record()]
    replicates = 2 * nulls.CHUNK + 7
    serial = nulls.null_levels(records, replicates=replicates, seed=5, jobs=1)
    assert serial == nulls.null_levels(records, replicates=replicates, seed=5, jobs=2)
    assert serial != nulls.null_levels(records, replicates=replicates, seed=6, jobs=1)
    assert [size for size, _ in nulls.chunk_seeds("x", replicates, 5)] == [nulls.CHUNK, nulls.CHUNK, 7]


def test_bad_records_and_arguments_are_named():
    record = _gof_record([0.4, 0.3, 0.2, 0.1], 400)
    with pytest.raises(ValueError, match="replicates"):
        nulls.null_level(record, replicates=0)
    with pytest.raises(ValueError, match="jobs"):
        nulls.null_levels([record], replicates=5, jobs=0)
    with pytest.raises(ValueError, match="design"):
        nulls.null_level({**record, "design": None}, replicates=5)
    with pytest.raises(ValueError, match="min_expected"):
        nulls.null_level({**record, "expected": [395.0, 4.0, 1.0]}, replicates=5)
    with pytest.raises(ValueError, match="fails at the mode"):
        nulls.null_level(_binomial_record(10, 0.5, "greater", alpha=0.9), replicates=5)


# --------------------------------------------------------------------------- whole run


def test_pooled_bound_rests_on_hoeffding_poisson_binomial_tail():
    """Hoeffding (1956, Thm 4): P(S <= b) <= P(Bin(N, mean p) <= b) for b <= N mean - 1; checked
    on a heterogeneous sum (three assertions of 400 trials each), and the Clopper-Pearson bound
    of each count lies above b + 1 trials' worth, where the inequality holds."""
    ps, trials = [0.001, 0.01, 0.05], 400
    pmf = np.array([1.0])
    for p in ps:
        pmf = np.convolve(pmf, sps.binom.pmf(np.arange(trials + 1), trials, p))
    cdf, total, mean = np.cumsum(pmf), len(ps) * trials, float(np.mean(ps))
    for b in range(int(total * mean - 1) + 1):
        assert cdf[b] <= sps.binom.cdf(b, total, mean) + 1e-12
    for k in range(40):
        assert total * nulls.pooled_upper(k, total) >= k + 1
    assert nulls.pooled_upper(0, 1_000_000) == pytest.approx(1 - 0.05 ** 1e-6, rel=1e-6)  # 3.0e-6
    with pytest.raises(ValueError, match="rejected, trials"):
        nulls.pooled_upper(3, 2)


def test_summary_adds_exact_levels_to_the_pooled_monte_carlo_bound():
    exact = nulls.null_level(_binomial_record(60, 0.3, "two-sided"), replicates=1)
    mc = nulls.null_levels([_gof_record([0.4, 0.3, 0.2, 0.1], 400), _welch_record()], replicates=5000, seed=2)
    summary = nulls.summarize([exact, *mc], budget_alpha=1.0)
    k = sum(lv.rejected for lv in mc)
    assert summary["exact_sum"] == exact.level and summary["mc_trials"] == 10_000 and summary["mc_rejected"] == k
    assert summary["run_upper95"] == pytest.approx(exact.level + 2 * sps.beta.ppf(0.95, k + 1, 10_000 - k))
    assert summary["by_method"] == {"exact": 1, "monte-carlo": 2, "vacuous": 0} and summary["bounded"]
    assert summary["flagged"] == []  # the exact level is below its alpha 0.05
    with pytest.raises(ValueError, match="one replicate count"):
        nulls.summarize([*mc, nulls.null_level(_welch_record(), replicates=10)])
    with pytest.raises(ValueError, match="at least one"):
        nulls.summarize([])


def test_designs_keep_the_first_record_of_each_assertion():
    a, b = _gof_record([0.5, 0.5], 100), _welch_record()
    payloads = [{"tests": [{"stats": [a]}]}, {"tests": [{"stats": [{**a, "n": 7}, b]}]}]
    assert nulls.designs(payloads) == [a, b]


# --------------------------------------------------------------------------- the commands


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], capture_output=True, text=True, cwd=ROOT)


def _results(path, *records):
    path.write_text(json.dumps({"device": "cpu", "tests": [{"stats": list(records)}]}))
    return path


def test_null_replay_command_writes_both_reports_and_exits_on_the_bound(tmp_path):
    good = _results(tmp_path / "good.json", _gof_record([0.4, 0.3, 0.2, 0.1], 2000, alpha=5e-6),
                    _binomial_record(500, 0.3, "two-sided", alpha=5e-6))
    proc = _cli("null-replay", "--results", str(good), "--replicates", "2000", "--jobs", "1",
                "--report", str(tmp_path / "r"))
    # 2000 replicates bound the Monte Carlo level only near 1.5e-3, above the budget 1e-3
    assert proc.returncode == 1 and "NOT bounded" in proc.stdout, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "r" / "null-replay.json").read_text())
    assert summary["assertions"] == 2 and summary["replicates"] == 2000 and summary["jobs"] == 1
    assert summary["commands"][0].startswith("dspark-conformance null-replay --results")
    proc = _cli("null-replay", "--results", str(good), "--replicates", "20000", "--jobs", "1",
                "--report", str(tmp_path / "r"))
    assert proc.returncode == 0 and "bounded); level above alpha: none" in proc.stdout, proc.stdout + proc.stderr
    md = (tmp_path / "r" / "null-replay.md").read_text()
    assert "## Whole run" in md and "`t/binom-two-sided` | binomial | 500 | - |" in md


def test_null_replay_command_flags_a_wrong_null_in_its_report(tmp_path):
    bad = _results(tmp_path / "bad.json", _wrong_null_record())
    proc = _cli("null-replay", "--results", str(bad), "--replicates", "20000", "--jobs", "1",
                "--report", str(tmp_path))
    assert proc.returncode == 1 and "level above alpha: t/gof-3" in proc.stdout, proc.stdout + proc.stderr
    assert "`t/gof-3` **flagged**" in (tmp_path / "null-replay.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--results", "/no/such.json"], "--results: cannot read"),
    (["--replicates", "0"], "--replicates: expected a positive integer"),
    (["--jobs", "0"], "--jobs: expected a positive integer"),
])
def test_null_replay_bad_arguments_are_named(tmp_path, args, message):
    proc = _cli("null-replay", "--report", str(tmp_path), *args)
    assert proc.returncode == cli.EXIT_INFRA and message in proc.stderr, proc.stderr


def _run(kind, seed, outcome="passed", device="cpu"):
    return {"kind": kind, "impl": "reference", "seed": seed, "device": device,
            "tests": {"c/t.py::test_S3_a": {"outcome": outcome, "stats": [["S3/a", 0.5, 0.001, 0.01]]}}}


def test_merge_runs_joins_shards_once_and_calibrate_aggregates_them(tmp_path):
    shard1, shard2 = tmp_path / "s1", tmp_path / "s2"
    shard1.mkdir()
    shard2.mkdir()
    (shard1 / "runs.jsonl").write_text("".join(json.dumps(_run("reference", s)) + "\n" for s in (1, 2, 3)))
    (shard2 / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        _run("reference", 3, outcome="failed"), _run("reference", 4), _run("reference", 5))))
    merged = tmp_path / "merged"
    proc = _cli("merge-runs", str(merged), str(shard1), str(shard2 / "runs.jsonl"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 records added, 1 already held (1 of them with other results; the first kept)" in proc.stdout
    assert "0 records added, 6 already held" in _cli("merge-runs", str(merged), str(shard1), str(shard2)).stdout
    seeds = [r["seed"] for r in calibration.RunLog(merged / "runs.jsonl").records()]
    assert seeds == [1, 2, 3, 4, 5]
    proc = _cli("calibrate", "--seeds", "0", "--power-seeds", "0", "--replicates", "0", "--report", str(merged))
    assert proc.returncode == 0 and "0/5 reference runs false-failed" in proc.stdout, proc.stdout + proc.stderr


def test_merge_runs_reads_an_archive_and_names_a_missing_source(tmp_path):
    import gzip

    archive = tmp_path / "runs.jsonl.gz"
    archive.write_bytes(gzip.compress(json.dumps(_run("exact", 9)).encode() + b"\n"))
    counts = calibration.merge_logs(tmp_path / "out", [archive])
    assert counts == {"added": 1, "duplicates": 0, "conflicts": 0}
    proc = _cli("merge-runs", str(tmp_path / "out"), str(tmp_path / "missing.jsonl"))
    assert proc.returncode == 3 and "no such run log" in proc.stderr
    # A directory that holds no run log is a wrong path, not an empty shard (it read "0 records added").
    (tmp_path / "not_a_report").mkdir()
    proc = _cli("merge-runs", str(tmp_path / "out2"), str(tmp_path / "not_a_report"))
    assert proc.returncode == 3 and "a directory without runs.jsonl" in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "out2").exists()


def test_merge_runs_that_fails_leaves_no_directory_and_appends_nothing(tmp_path):
    """Every source is read before OUT is made or appended to: a missing source after a good
    one leaves no OUT behind (nor its parents); a bad line in a later source leaves an
    existing OUT's runs.jsonl as it was, the good source's records not half-merged."""
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(_run("exact", 1)) + "\n")
    out = tmp_path / "new" / "out"
    proc = _cli("merge-runs", str(out), str(good), str(tmp_path / "missing.jsonl"))
    assert proc.returncode == cli.EXIT_INFRA and "no such run log" in proc.stderr, proc.stderr
    assert not (tmp_path / "new").exists()
    held = tmp_path / "held"
    held.mkdir()
    (held / "runs.jsonl").write_text(json.dumps(_run("exact", 2)) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n" + json.dumps(_run("exact", 3)) + "\n")
    proc = _cli("merge-runs", str(held), str(good), str(bad))
    assert proc.returncode == cli.EXIT_INFRA and f"{bad}:1: not a JSON record" in proc.stderr, proc.stderr
    assert (held / "runs.jsonl").read_text() == json.dumps(_run("exact", 2)) + "\n"
