"""Calibration (issue 4): least favourable alternatives, power replay, aggregation, the CLI.

The pytest runs behind ``calibrate`` are the suite's own; here the aggregation is fed
hand-built ``runs.jsonl`` records with known answers, and the replay is checked against
designs whose power is known (enough n, and a quarter of it).
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance import cli, stats
from conformance.power import calibration, calibration_report
from conformance.power import calibration_numbers as numbers
from conformance.budget import StatLedger
from conformance.power.replay import least_favourable_alternative, replay_power

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 1e-3


# --------------------------------------------------------------------------- least favourable alternative


@pytest.mark.parametrize("probs", [[0.25] * 4, [0.4, 0.3, 0.2, 0.1], [0.7, 0.2, 0.1], [0.5, 0.5], [0.995, 0.005]])
def test_alternative_sits_at_the_declared_tv_and_moves_mass_in_proportion(probs):
    probs = np.array(probs)
    alternative, ratio = least_favourable_alternative(probs, 0.05)
    assert alternative.sum() == pytest.approx(1.0, abs=1e-12)
    assert 0.5 * np.abs(alternative - probs).sum() == pytest.approx(0.05, abs=1e-12)
    relative = alternative / probs - 1  # two values only: + on one half, - on the other
    assert len(np.unique(np.round(relative, 12))) == 2
    noncentrality = ((alternative - probs) ** 2 / probs).sum()
    assert noncentrality == pytest.approx(ratio * 4 * 0.05**2, rel=1e-9)


def test_even_split_attains_the_cauchy_schwarz_bound_and_uneven_one_exceeds_it():
    assert least_favourable_alternative(np.array([0.25] * 4), 0.01)[1] == pytest.approx(1.0)
    assert least_favourable_alternative(np.array([0.7, 0.2, 0.1]), 0.01)[1] == pytest.approx(1 / (4 * 0.7 * 0.3))


@pytest.mark.parametrize("probs, min_tv, match", [
    ([1.0], 0.01, "probs"), ([0.5, 0.6], 0.01, "probs"), ([0.5, 0.5, 0.0], 0.01, "probs"),
    ([0.5, 0.5], 0.0, "min_tv"), ([0.5, 0.5], 0.6, "min_tv"),
])
def test_alternative_rejects_bad_input(probs, min_tv, match):
    with pytest.raises(ValueError, match=match):
        least_favourable_alternative(np.array(probs), min_tv)


# --------------------------------------------------------------------------- replay


def _gof_record(n):
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    counts = np.round(probs * n).astype(int)
    return stats.goodness_of_fit(counts, probs, name="t/gof", alpha=ALPHA, min_tv=0.05, ledger=StatLedger()).to_dict()


def _binomial_record(n, alternative="two-sided"):
    return stats.binomial(n // 3, n, 1 / 3, name="t/binom", alpha=ALPHA, min_effect=0.05,
                          alternative=alternative, ledger=StatLedger()).to_dict()


def test_replay_measures_the_designed_power():
    n = stats.sample_size_for_tv(4, min_tv=0.05, alpha=ALPHA, power=0.999)
    full = replay_power(_gof_record(n), replicates=600, seed=3)
    quarter = replay_power(_gof_record(n // 4), replicates=600, seed=3)
    assert full.analytic_power >= 0.999 and full.rejected >= 594 and full.power_lower95 > 0.98
    assert 0.3 < quarter.rejected / 600 < 0.9  # underpowered designs show as such
    assert quarter.power_lower95 < numbers.TARGET_REPLAYED_POWER


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_replay_binomial_detects_its_sides(alternative):
    n = stats.sample_size_for_proportion(1 / 3, min_effect=0.05, alpha=ALPHA, power=0.999, alternative=alternative)
    full = replay_power(_binomial_record(n, alternative), replicates=300, seed=5)
    weak = replay_power(_binomial_record(n // 5, alternative), replicates=300, seed=5)
    assert full.rejected >= 295 and full.noncentrality_ratio is None
    assert weak.rejected < 285


def test_replay_binomial_two_sided_reports_the_weaker_side():
    # p0 = 0.05 +- 0.04 at n = 500: p = 0.01 is found about 99% of the time, p = 0.09 about 75%.
    record = stats.binomial(25, 500, 0.05, name="t/asym", alpha=ALPHA, min_effect=0.04, ledger=StatLedger()).to_dict()
    replayed = replay_power(record, replicates=300, seed=5)
    assert 0.6 < replayed.rejected / 300 < 0.9


def test_replay_is_seeded_and_rejects_records_it_cannot_replay():
    record = _gof_record(stats.sample_size_for_tv(4, min_tv=0.05, alpha=ALPHA, power=0.999) // 4)
    first = replay_power(record, replicates=200, seed=1)
    assert first == replay_power(record, replicates=200, seed=1)
    assert first.rejected != replay_power(record, replicates=200, seed=2).rejected  # power ~0.6: seeds differ
    with pytest.raises(ValueError, match="replicates"):
        replay_power(record, replicates=0, seed=1)
    with pytest.raises(ValueError, match="design"):
        replay_power({**record, "design": None}, replicates=5, seed=1)


# --------------------------------------------------------------------------- aggregation


def _test(outcome, *ps):
    return {"outcome": outcome, "stats": [[f"a{i}", p, 0.001, 0.01] for i, p in enumerate(ps)]}


def _reference(seed, p_a, p_b, failed=False, b_outcome="passed"):
    return {"kind": "reference", "impl": "reference", "seed": seed, "device": "cpu",
            "tests": {"c/t.py::test_S3_a": _test("failed" if failed else "passed", p_a),
                      "c/t.py::test_S5_b": _test(b_outcome, *([p_b] if b_outcome == "passed" else [])),
                      "c/t.py::test_S3_gpu": _test("skipped")}}


def _power(seed, outcome, device="cpu"):
    return {"kind": "mutant-power", "impl": "mutant:m1", "seed": seed, "device": device,
            "tests": {"c/t.py::test_S3_a": {"outcome": outcome, "stats": [["a", 1e-9, 0.05, 0.01]]}}}


def _records():
    refs = [_reference(s, (s + 0.5) / 40, 1 - (s + 0.5) / 40) for s in range(40)]
    refs[7] = _reference(7, 1e-7, 1 - 7.5 / 40, failed=True)
    refs[12] = _reference(12, 12.5 / 40, None, b_outcome="inconclusive")
    mutant_default = {"kind": "mutant-default", "impl": "mutant:m1", "seed": None, "device": "cpu",
                      "tests": {"c/t.py::test_S3_a": _test("failed", 1e-9), "c/t.py::test_S3_c": _test("passed", 0.3)}}
    exact_only = {"kind": "mutant-default", "impl": "mutant:m2", "seed": None, "device": "cpu",
                  "tests": {"c/t.py::test_S3_a": _test("passed", 0.4)}}
    power = [_power(s, "failed" if s != 3 else "passed") for s in range(1, 11)]
    power += [_power(11, "suite-error"), _power(12, "failed", device="cuda")]  # neither counts
    replay = {"kind": "replay", "impl": "reference", "seed": None, "device": "cpu", "replayed": [
        {"name": "S3/a", "rule": "goodness_of_fit", "n": 10, "alpha": 5e-6, "min_effect": 0.01,
         "analytic_power": 0.999, "replicates": 2000, "rejected": 1999, "power_lower95": 0.9972,
         "noncentrality_ratio": 1.0}]}
    return [replay, *refs, mutant_default, exact_only, *power]


def test_aggregate_counts_false_failures_levels_and_power():
    cal = numbers.aggregate(_records())
    assert (cal["runs"], cal["failed_runs"], cal["seeds"]) == (40, 1, list(range(40)))
    assert (cal["failed_seeds"], cal["inconclusive_seeds"], cal["suite_error_seeds"]) == ([7], [12], [])
    assert cal["run_rate_upper95"] == pytest.approx(0.1316, abs=1e-3)  # Clopper-Pearson 1/40
    row = cal["per_test"]["c/t.py::test_S3_a"]
    assert (row["runs"], row["false_failures"], row["min_p_value"], row["inconclusive"]) == (40, 1, 1e-7, 0)
    b = cal["per_test"]["c/t.py::test_S5_b"]
    assert (b["runs"], b["inconclusive"]) == (39, 1)
    assert b["pvalue_ks"] == pytest.approx(27 / 1560 + 1 / 80)  # mid-point grid of 40, the 28th missing
    assert cal["never_ran"] == ["c/t.py::test_S3_gpu"] and "c/t.py::test_S3_gpu" not in cal["per_test"]
    # level 0.5 -> alpha 0.0025: only the run holding p = 1e-7 fails; predicted 1 - (1 - 0.0025)^2 per
    # run with two p-values (seed 12 has one)
    level = next(r for r in cal["family_wise"] if r["level"] == 0.5)
    assert (level["failed_runs"], level["runs"]) == (1, 40)
    assert level["predicted_rate"] == pytest.approx((39 * (1 - 0.9975**2) + 0.0025) / 40)
    below = {r["threshold"]: r["count"] for r in cal["pooled_p_values"]["below"]}
    assert cal["pooled_p_values"]["count"] == 79
    assert below == {0.1: 4 + 1 + 4, 0.01: 1, 0.001: 1}  # 0.0125, 0.0375, 0.0625, 0.0875 twice, and 1e-7
    assert cal["clean_runs_for_budget"] == 3688
    killer = cal["power"]["m1"]["c/t.py::test_S3_a"]
    assert (killer["seeds"], killer["killed"], killer["median_effect_over_min"]) == (10, 9, pytest.approx(5.0))
    assert cal["power"]["m2"] == {} and "c/t.py::test_S3_c" not in cal["power"]["m1"]
    lower = pytest.approx(0.555, abs=1e-3)
    assert cal["power_any_killer"] == {"m1": {"seeds": 10, "killed": 9, "power_lower95": lower}}
    assert cal["declared_power_ok"] and numbers.acceptable(cal) and numbers.measured_anything(cal)


def test_acceptable_flags_low_replayed_power_excess_failures_skew_and_suite_errors():
    records = _records()
    records[0]["replayed"][0]["power_lower95"] = 0.95
    assert not numbers.acceptable(numbers.aggregate(records))
    failing = [_reference(s, 1e-7, 0.5, failed=True) for s in range(20)]
    assert not numbers.acceptable(numbers.aggregate(failing))
    skewed = [_reference(s, (s + 0.5) / 80, 1 - (s + 0.5) / 40) for s in range(40)]  # p_a ~ U(0, 1/2)
    cal = numbers.aggregate(skewed)
    assert cal["failed_runs"] == 0 and cal["ks_min_p_bonferroni"] < numbers.KS_DEFECT_LEVEL
    assert not numbers.acceptable(cal)
    broken = _records()
    broken[5]["tests"]["c/t.py::test_S3_a"]["outcome"] = "suite-error"
    assert not numbers.acceptable(numbers.aggregate(broken))


def test_nothing_measured_and_all_skipped_runs_aggregate_without_error():
    assert not numbers.measured_anything(numbers.aggregate([]))
    skipped = [{"kind": "reference", "impl": "reference", "seed": s, "device": "cpu",
                "tests": {"c/t.py::test_S3_gpu": _test("skipped")}} for s in range(3)]
    cal = numbers.aggregate(skipped)
    assert cal["per_test"] == {} and cal["pooled_p_values"] == {"count": 0, "below": []}


def test_interval_helpers_match_clopper_pearson():
    assert numbers.ci95(0, numbers.clean_runs_needed(1e-3))[1] <= 1e-3 < numbers.ci95(0, 3687)[1]
    least = numbers.min_replicates()
    assert numbers.ci95(least, least)[0] >= 0.99 > numbers.ci95(least - 1, least - 1)[0]


# --------------------------------------------------------------------------- the run log and resuming


def test_run_log_keeps_the_first_record_of_a_run_and_reads_the_archive(tmp_path):
    records = _records()  # records[0]: a replay
    archived = "".join(json.dumps(r) + "\n" for r in records[:20])
    (tmp_path / "runs.jsonl.gz").write_bytes(gzip.compress(archived.encode()))
    log = calibration.RunLog(tmp_path / "runs.jsonl")
    log.append(records[0])  # the same replay again: a duplicate
    for r in records[10:]:  # overlaps the archive on 10 runs, with different contents
        log.append({**r, "tests": {}})
    assert log.records() == records[:20] + [{**r, "tests": {}} for r in records[20:]]


def _mean_stat(name, rule, n, power):
    design = ({"rule": rule, "n": n, "mean": 1.0, "sd": 0.4} if rule == "one_sample_mean" else
              {"rule": rule, "n_x": n // 2, "n_y": n // 2, "sd_x": 0.4, "sd_y": 0.4})
    return {"name": name, "n": n, "alpha": 5e-6, "min_effect": 0.25, "power_at_min_effect": power, "design": design}


def test_a_replay_of_a_changed_design_supersedes_the_older_rows_and_keeps_them(tmp_path, monkeypatch):
    # The S9 expected-tau case changed from a two-sample to a one-sample mean: a replay of
    # its results.json replays that assertion alone, and its row is the one reported; the
    # older record stays in the log. (Before: the device counted as replayed, so nothing ran,
    # and a second replay record of the device was dropped on reading.)
    calls = []
    real = calibration.power_replay.replay_power
    monkeypatch.setattr(calibration.power_replay, "replay_power",
                        lambda s, **kw: calls.append(s["name"]) or real(s, **kw))
    old = {"device": "cpu", "tests": [{"case": "S9/tau", "stats": [_mean_stat("S9/tau", "two_sample_mean", 800, 1.0)]},
                                      {"case": "S9/len", "stats": [_mean_stat("S9/len", "one_sample_mean", 200, 0.99)]}]}
    calibration.calibrate(tmp_path, seeds=[], power_seeds=[], replicates=50, replay_payload=old)
    new = {**old, "tests": [{"case": "S9/tau", "stats": [_mean_stat("S9/tau", "one_sample_mean", 200, 0.999)]},
                            old["tests"][1]]}
    log = calibration.calibrate(tmp_path, seeds=[], power_seeds=[], replicates=50, replay_payload=new)
    assert calls == ["S9/tau", "S9/len", "S9/tau"] and log.added == 1
    replays = [r for r in log.records() if r["kind"] == "replay"]
    assert [[row["rule"] for row in r["replayed"]] for r in replays] == [
        ["two_sample_mean", "one_sample_mean"], ["one_sample_mean"]]
    declared = numbers.aggregate(log.records())["declared_power"]
    assert {name: (row["rule"], row["n"]) for name, row in declared.items()} == {
        "S9/tau": ("one_sample_mean", 200), "S9/len": ("one_sample_mean", 200)}
    log = calibration.calibrate(tmp_path, seeds=[], power_seeds=[], replicates=50, replay_payload=new)
    assert log.added == 0 and len(calls) == 3  # the same command again replays nothing


def test_run_log_names_an_archived_runs_cases_by_case_id(tmp_path):
    # Records logged before case ids were the identity name cases by their legacy keys
    # (conformance.seeds); a fresh run names them by case id: the aggregate sees one case.
    legacy = "conformance/test_simulated.py::test_S6_match_expected_law[S6/match-expected/4.7-max6]"
    old = {**_reference(1, 0.5, 0.5), "tests": {legacy: _test("passed", 0.5), "c/t.py::test_S3_gpu": _test("skipped")}}
    (tmp_path / "runs.jsonl.gz").write_bytes(gzip.compress((json.dumps(old) + "\n").encode()))
    log = calibration.RunLog(tmp_path / "runs.jsonl")
    log.append({**_reference(2, 0.5, 0.5), "tests": {"S6/match-expected/4.7-max6": _test("failed", 1e-9)}})
    assert [sorted(r["tests"]) for r in log.records()] == [
        ["S6/match-expected/4.7-max6", "c/t.py::test_S3_gpu"], ["S6/match-expected/4.7-max6"]]
    assert numbers.aggregate(log.records())["per_test"]["S6/match-expected/4.7-max6"]["runs"] == 2


def test_run_log_skips_a_cut_last_line_and_names_a_bad_one(tmp_path):
    path = tmp_path / "runs.jsonl"
    good = json.dumps(_reference(1, 0.5, 0.5))
    path.write_text(good + "\n" + good[:40])
    assert calibration.RunLog(path).records() == [_reference(1, 0.5, 0.5)]
    path.write_text(good[:40] + "\n" + good + "\n")
    with pytest.raises(ValueError, match=r"runs.jsonl:1: not a JSON record"):
        calibration.RunLog(path).records()


@pytest.fixture
def fake_runs(monkeypatch):
    """Replace the pytest subprocess: record the calls, answer from ``outcomes``."""
    calls, outcomes = [], {}

    def run(impl, seed, device, selection=None, cases=None):
        calls.append((impl, seed, device, tuple(cases or ())))
        outcome = outcomes.get((impl, seed), "passed")
        if outcome is None:
            return None
        stats_ = [{"name": "x", "p_value": 0.5, "n": 1, "alpha": 5e-6, "effect": 0.0, "min_effect": 0.01,
                   "power_at_min_effect": 0.999, "design": None}]
        return {"device": device, "tests": [{"case": "c/t.py::test_S3_a", "outcome": outcome, "stats": stats_}]}

    monkeypatch.setattr(calibration, "_pytest_run", run)
    return calls, outcomes


def test_reference_runs_resume_and_crashes_are_retried(tmp_path, fake_runs):
    calls, outcomes = fake_runs
    outcomes[("reference", 2)] = None  # a crash
    log = calibration.calibrate(tmp_path, seeds=[1, 2, 3], power_seeds=[], replicates=0, jobs=2)
    assert (log.added, log.crashed) == (2, ["reference seed 2"])
    assert sorted(r["seed"] for r in log.records()) == [1, 3]
    del outcomes[("reference", 2)]
    calls.clear()
    log = calibration.calibrate(tmp_path, seeds=[1, 2, 3, 4], power_seeds=[], replicates=0, jobs=2)
    assert sorted(c[1] for c in calls) == [2, 4] and log.added == 2 and not log.crashed


def test_mutant_power_reruns_only_default_seed_killers_seed_major(tmp_path, fake_runs):
    calls, outcomes = fake_runs
    outcomes[("mutant:folded-stale-staging", None)] = "failed"
    outcomes[("mutant:markov-rnn-state-not-carried", None)] = "failed"
    ids = ["folded-stale-staging", "markov-rnn-state-not-carried", "sampling-ties-highest-index"]  # last: no killer
    calibration.calibrate(tmp_path, seeds=[], power_seeds=[1, 2], replicates=0, mutants=ids, jobs=1)
    power = [c[:2] for c in calls if c[1] is not None]
    assert power == [("mutant:folded-stale-staging", 1), ("mutant:markov-rnn-state-not-carried", 1),
                     ("mutant:folded-stale-staging", 2), ("mutant:markov-rnn-state-not-carried", 2)]
    assert all(c[3] == ("c/t.py::test_S3_a",) for c in calls if c[1] is not None)  # the killers only
    calls.clear()
    calibration.calibrate(tmp_path, seeds=[], power_seeds=[1, 2, 3], replicates=0, mutants=ids, jobs=1)
    assert [c[:2] for c in calls] == [("mutant:folded-stale-staging", 3), ("mutant:markov-rnn-state-not-carried", 3)]


def test_replay_runs_once_per_device(tmp_path, fake_runs, monkeypatch):
    calls, _ = fake_runs
    replayed = []

    def replay(result, replicates, seed):
        replayed.append(replicates)
        return calibration.power_replay.ReplayedPower("x", "goodness_of_fit", 1, 5e-6, 0.01, 0.999,
                                                      replicates, replicates, 0.99, 1.0)
    monkeypatch.setattr(calibration.power_replay, "replay_power", replay)
    calibration.calibrate(tmp_path, seeds=[], power_seeds=[], replicates=400)
    log = calibration.calibrate(tmp_path, seeds=[], power_seeds=[], replicates=500)
    assert replayed == [400] and log.added == 0 and len(calls) == 1


# --------------------------------------------------------------------------- the command


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "conformance.cli", "calibrate", *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_cli_reaggregates_without_running_and_writes_both_reports(tmp_path):
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    proc = _cli("--seeds", "0", "--power-seeds", "0", "--replicates", "0", "--report", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1/40 reference runs false-failed" in proc.stdout
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert cal["runs"] == 40 and cal["commands"] == []
    md = (tmp_path / "calibration.md").read_text()
    for heading in ("Whole-run false failures", "Power at the declared effect", "Power on mutants",
                    "False failures per statistical test"):
        assert heading in md
    assert "No statistical killer (caught by exact tests): `m2`" in md
    assert "Runs with an INCONCLUSIVE test (a path under test never ran; not a failure, but `run` would exit 2): " \
           "12." in md
    assert "Skipped in every run (not counted): `test_S3_gpu`" in md


def test_cli_exits_3_when_nothing_was_measured(tmp_path):
    proc = _cli("--seeds", "0", "--power-seeds", "0", "--replicates", "0", "--report", str(tmp_path))
    assert proc.returncode == 3 and "nothing measured" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--replicates", "5"], "--replicates: expected 0 or at least 368"),
    (["--replicates", "400", "--replay-results", "/no/such/file.json"], "--replay-results: cannot read"),
    (["--replicates", "0", "--replay-results", "x.json"], "--replay-results: has no effect with --replicates 0"),
    (["--seeds", "-1"], "--seeds: expected a non-negative integer"),
    (["--jobs", "0"], "--jobs: expected a positive integer"),
])
def test_cli_bad_arguments_are_named(tmp_path, args, message):
    proc = _cli("--report", str(tmp_path), *args)
    assert proc.returncode == cli.EXIT_INFRA and message in proc.stderr, proc.stderr
    # The command's usage, not the top-level one (a fresh-user trial saw `dspark-conformance [-h] ...`).
    assert "usage: dspark-conformance calibrate" in proc.stderr, proc.stderr


def test_cli_names_each_defect_behind_exit_1(tmp_path):
    records = _records()
    records[0]["replayed"][0]["power_lower95"] = 0.95
    broken = [dict(r) for r in records]
    broken[5] = {**broken[5], "tests": {**broken[5]["tests"],
                                        "c/t.py::test_S3_a": {**broken[5]["tests"]["c/t.py::test_S3_a"],
                                                              "outcome": "suite-error"}}}
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in broken))
    proc = _cli("--seeds", "0", "--power-seeds", "0", "--replicates", "0", "--report", str(tmp_path))
    assert proc.returncode == cli.EXIT_FAIL, proc.stdout + proc.stderr
    defects = [line for line in proc.stderr.splitlines() if line.startswith("dspark-conformance: calibration defect: ")]
    assert len(defects) == 2, proc.stderr
    assert "replayed power has a lower end below 0.99" in defects[-1] and "suite errors" in defects[0], defects


def test_cli_rejects_a_replay_file_that_is_not_a_results_json(tmp_path):
    for text, message in (("{", "is not JSON"), ("[]", "expected a results.json"), ("{}", "expected a results.json")):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        proc = _cli("--seeds", "0", "--power-seeds", "0", "--replay-results", str(bad), "--report", str(tmp_path / "r"))
        assert proc.returncode == cli.EXIT_INFRA and message in proc.stderr, proc.stderr
    report_file = tmp_path / "file"
    report_file.write_text("")
    proc = _cli("--seeds", "0", "--report", str(report_file))
    assert proc.returncode == cli.EXIT_INFRA and "--report: expected a directory" in proc.stderr


def test_report_says_when_power_was_not_replayed(tmp_path):
    records = [r for r in _records() if r["kind"] != "replay"]
    calibration_report.write_reports(numbers.aggregate(records), tmp_path, ["cmd"])
    assert "Not measured in these runs (`--replicates 0`)" in (tmp_path / "calibration.md").read_text()


# --------------------------------------------------------------------------- exact tests on every seed (issue 11)


def _exact_run(seed, outcomes):
    return {"kind": "exact", "impl": "reference", "seed": seed, "device": "cpu",
            "tests": {n: {"outcome": o, "stats": []} for n, o in outcomes.items()}}


def test_exact_runs_select_the_non_statistical_tests_and_resume(tmp_path, fake_runs, monkeypatch):
    calls, outcomes = fake_runs
    selections = []
    original = calibration._pytest_run
    monkeypatch.setattr(calibration, "_pytest_run",
                        lambda impl, seed, device, selection=None, cases=None:
                        selections.append(selection) or original(impl, seed, device, selection, cases))
    calibration.calibrate(tmp_path, seeds=[], power_seeds=[], replicates=0, exact_seeds=[1, 2])
    calls.clear()
    log = calibration.calibrate(tmp_path, seeds=[5], power_seeds=[], replicates=0, exact_seeds=[1, 2, 3])
    assert selections[:2] == [["-m", "not statistical"]] * 2
    assert sorted(c[1] for c in calls) == [3, 5] and log.added == 2
    assert sorted((r["kind"], r["seed"]) for r in log.records()) == [("exact", 1), ("exact", 2), ("exact", 3),
                                                                      ("reference", 5)]


def test_any_exact_failure_on_any_seed_is_a_defect():
    clean = {"c/t.py::test_S3_a": "passed", "c/t.py::test_S3_gpu": "skipped"}
    records = [_exact_run(s, clean) for s in range(1, 50)]
    cal = numbers.aggregate(records)
    assert cal["exact"]["runs"] == 49 and cal["exact"]["test_runs"] == 49 and not cal["exact"]["defects"]
    assert cal["exact"]["never_ran"] == ["c/t.py::test_S3_gpu"] and numbers.acceptable(cal)
    for outcome in ("failed", "inconclusive", "suite-error"):
        bad = numbers.aggregate(records + [_exact_run(50, {**clean, "c/t.py::test_S3_a": outcome})])
        assert bad["exact"]["defects"]["c/t.py::test_S3_a"][outcome] == [50]
        assert bad["exact"]["defect_seeds"] == [50] and not numbers.acceptable(bad)


def test_cli_exits_1_on_an_exact_defect_and_names_test_and_seed(tmp_path):
    records = [_exact_run(s, {"c/t.py::test_S3_a": "passed"}) for s in (1, 2)]
    records.append(_exact_run(3, {"c/t.py::test_S3_a": "failed"}))
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = _cli("--seeds", "0", "--power-seeds", "0", "--replicates", "0", "--report", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "exact tests: 3 reference runs, 3 test runs, 1 tests failed on some seed (seeds 3)" in proc.stdout
    md = (tmp_path / "calibration.md").read_text()
    assert "| `test_S3_a` | 3 | 3 | none | none |" in md
