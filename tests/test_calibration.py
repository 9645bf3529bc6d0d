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

from conformance import calibration, calibration_report, stats
from conformance.budget import StatLedger
from conformance.power_replay import least_favourable_alternative, replay_power

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 1e-3


# --------------------------------------------------------------------------- least favourable alternative


@pytest.mark.parametrize("probs", [[0.25] * 4, [0.4, 0.3, 0.2, 0.1], [0.7, 0.2, 0.1], [0.5, 0.5]])
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
    ([0.5, 0.5], 0.0, "min_tv"), ([0.99, 0.01], 0.05, "min_tv"),
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
    assert quarter.power_lower95 < calibration.TARGET_REPLAYED_POWER


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_replay_binomial_takes_the_worse_side(alternative):
    n = stats.sample_size_for_proportion(1 / 3, min_effect=0.05, alpha=ALPHA, power=0.999, alternative=alternative)
    full = replay_power(_binomial_record(n, alternative), replicates=300, seed=5)
    weak = replay_power(_binomial_record(n // 5, alternative), replicates=300, seed=5)
    assert full.rejected >= 295 and full.noncentrality_ratio is None
    assert weak.rejected < 285


def test_replay_is_seeded_and_rejects_records_it_cannot_replay():
    record = _gof_record(2000)
    assert replay_power(record, replicates=50, seed=1) == replay_power(record, replicates=50, seed=1)
    with pytest.raises(ValueError, match="replicates"):
        replay_power(record, replicates=0, seed=1)
    with pytest.raises(ValueError, match="design"):
        replay_power({**record, "design": None}, replicates=5, seed=1)


# --------------------------------------------------------------------------- aggregation


def _test(outcome, *ps):
    return {"outcome": outcome, "stats": [[f"a{i}", p, 0.001, 0.01] for i, p in enumerate(ps)]}


def _reference(seed, p_a, p_b, failed=False):
    return {"kind": "reference", "impl": "reference", "seed": seed, "device": "cpu",
            "tests": {"c/t.py::test_S3_a": _test("failed" if failed else "passed", p_a),
                      "c/t.py::test_S5_b": _test("passed", p_b)}}


def _records():
    refs = [_reference(s, (s + 0.5) / 40, 1 - (s + 0.5) / 40) for s in range(40)]
    refs[7] = _reference(7, 1e-7, 1 - 7.5 / 40, failed=True)
    mutant_default = {"kind": "mutant-default", "impl": "mutant:m1", "seed": None, "device": "cpu",
                      "tests": {"c/t.py::test_S3_a": _test("failed", 1e-9), "c/t.py::test_S3_c": _test("passed", 0.3)}}
    exact_only = {"kind": "mutant-default", "impl": "mutant:m2", "seed": None, "device": "cpu",
                  "tests": {"c/t.py::test_S3_a": _test("passed", 0.4)}}
    power = [{"kind": "mutant-power", "impl": "mutant:m1", "seed": s, "device": "cpu",
              "tests": {"c/t.py::test_S3_a": {"outcome": "failed" if s != 3 else "passed",
                                              "stats": [["a", 1e-9, 0.05, 0.01]]}}} for s in range(1, 11)]
    replay = {"kind": "replay", "impl": "reference", "seed": None, "device": "cpu", "replayed": [
        {"name": "S3/a", "rule": "goodness_of_fit", "n": 10, "alpha": 5e-6, "min_effect": 0.01,
         "analytic_power": 0.999, "replicates": 2000, "rejected": 1999, "power_lower95": 0.9972,
         "noncentrality_ratio": 1.0}]}
    return [replay, *refs, mutant_default, exact_only, *power]


def test_aggregate_counts_false_failures_levels_and_power():
    cal = calibration.aggregate(_records())
    assert (cal["runs"], cal["failed_runs"], cal["seeds"]) == (40, 1, [0, 39])
    assert cal["run_rate_upper95"] == pytest.approx(0.1316, abs=1e-3)  # Clopper-Pearson 1/40
    row = cal["per_test"]["c/t.py::test_S3_a"]
    assert (row["runs"], row["false_failures"], row["min_p_value"]) == (40, 1, 1e-7)
    assert cal["per_test"]["c/t.py::test_S5_b"]["pvalue_ks"] == pytest.approx(0.5 / 40)  # a grid of mid-points
    # level 0.5 -> alpha 0.0025: only the run holding p = 1e-7 fails; predicted 1 - (1 - 0.0025)^2 per run
    level = next(r for r in cal["family_wise"] if r["level"] == 0.5)
    assert (level["failed_runs"], level["runs"]) == (1, 40)
    assert level["predicted_rate"] == pytest.approx(1 - (1 - 0.0025) ** 2)
    below = {r["threshold"]: r["count"] for r in cal["pooled_p_values"]["below"]}
    assert below == {0.1: 4 + 1 + 4, 0.01: 1, 0.001: 1}  # 0.0125, 0.0375, 0.0625, 0.0875 twice, and 1e-7
    assert cal["power"]["m1"]["c/t.py::test_S3_a"]["killed"] == 9
    assert cal["power"]["m1"]["c/t.py::test_S3_a"]["median_effect_over_min"] == pytest.approx(5.0)
    assert cal["power"]["m2"] == {} and "c/t.py::test_S3_c" not in cal["power"]["m1"]
    assert cal["power_any_killer"]["m1"] == {"seeds": 10, "killed": 9,
                                             "power_lower95": pytest.approx(0.555, abs=1e-3)}
    assert cal["declared_power_ok"]
    assert calibration.acceptable(cal)


def test_acceptable_flags_low_replayed_power_and_excess_failures():
    records = _records()
    records[0]["replayed"][0]["power_lower95"] = 0.95
    assert not calibration.acceptable(calibration.aggregate(records))
    failing = [_reference(s, 1e-7, 0.5, failed=True) for s in range(20)]
    assert not calibration.acceptable(calibration.aggregate(failing))
    skewed = [_reference(s, (s + 0.5) / 80, 1 - (s + 0.5) / 40) for s in range(40)]  # p_a ~ U(0, 1/2)
    cal = calibration.aggregate(skewed)
    assert cal["failed_runs"] == 0 and cal["ks_min_p_bonferroni"] < calibration.KS_DEFECT_LEVEL
    assert not calibration.acceptable(cal)


def test_run_log_keeps_the_first_record_and_reads_the_archive(tmp_path):
    records = _records()
    archived = "".join(json.dumps(r) + "\n" for r in records[:20])
    (tmp_path / "runs.jsonl.gz").write_bytes(gzip.compress(archived.encode()))
    log = calibration.RunLog(tmp_path / "runs.jsonl")
    for r in records[10:]:  # overlaps the archive: 10 duplicates
        log.append(r)
    assert log.records() == records


def test_cli_reaggregates_without_running_and_writes_both_reports(tmp_path):
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "calibrate", "--seeds", "0", "--power-seeds", "0",
         "--replicates", "0", "--report", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1/40 reference runs false-failed" in proc.stdout
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert cal["runs"] == 40 and cal["commands"] == []
    md = (tmp_path / "calibration.md").read_text()
    for heading in ("Whole-run false failures", "Power at the declared effect", "Power on mutants",
                    "False failures per statistical test"):
        assert heading in md
    assert "No statistical killer (caught by exact tests): `m2`" in md


def test_report_says_when_power_was_not_replayed(tmp_path):
    records = [r for r in _records() if r["kind"] != "replay"]
    calibration_report.write_reports(calibration.aggregate(records), tmp_path, ["cmd"])
    assert "Not measured in these runs (`--replicates 0`)" in (tmp_path / "calibration.md").read_text()
