"""The mutant kill matrix (issue: test power): every mutant fails a test of its own section.

Each case runs the conformance tests of the mutant's SPEC section in a subprocess with
``--dspark-impl mutant:<id>`` and the default seeds, as ``dspark-conformance mutants`` does,
but stops at the first failure: one kill is the claim (the report lists every killer). The
killers the committed matrices recorded (results/mutants) run first, alone: the verdict is the
same (the whole section runs when none of them kills), at the cost of one case where the
section would run every case ahead of its first killer (33 s -> 9 s for loop-draft-argmax,
2 idle cores). The runs go through one preloaded interpreter (tests/preloaded_pytest.py, tests/conftest.py):
torch and scipy.stats are imported once, not once per mutant (8.9 s -> 3.8 s a mutant, the mean of 11 sampled
one by one, 2 loaded cores).
"""

import json
from pathlib import Path

import pytest
import torch

from conformance import seeds
from conformance.power.kill_matrix import format_matrix, kill_one, split_failures, write_reports
from conformance.plugin import _SUITE_DIR, _failure
from fixtures.mutants import load_all

MUTANTS = load_all()
#: The committed kill matrices (``dspark-conformance mutants --report DIR``), one JSON per run.
RECORDED_MATRICES = sorted((Path(__file__).resolve().parents[1] / "results" / "mutants").glob("*.json"))


def _recorded_killers() -> dict[str, list[str]]:
    """Mutant id -> the case ids of its recorded killers (legacy keys resolved); a mutant
    recorded in two files takes the record of the file sorted last."""
    rows = [r for path in RECORDED_MATRICES for r in json.loads(path.read_text())]
    return {r["id"]: [seeds.resolve_case(k["test"])[0] for k in r["killers"]] for r in rows}


RECORDED_KILLERS = _recorded_killers()


def test_catalogue_size_and_sections():
    assert len(MUTANTS) >= 25, f"expected at least 25 mutants, found {len(MUTANTS)}"
    for m in MUTANTS.values():
        assert m.section in {f"S{i}" for i in range(1, 10)}, f"{m.id}: section {m.section!r}"
        assert m.fault, f"{m.id}: no fault description"


@pytest.mark.slow
@pytest.mark.parametrize("mutant_id", sorted(MUTANTS))
@pytest.mark.usefixtures("preloaded_runs")
def test_mutant_is_killed_by_its_section(mutant_id):
    # Stopped at the first failure: one kill decides it (`dspark-conformance mutants` lists all).
    if MUTANTS[mutant_id].device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"{mutant_id}: only a CUDA case sees this fault (dspark-conformance mutants --device cuda)")
    record = kill_one(mutant_id, first_failure=True, device=MUTANTS[mutant_id].device,
                      try_first=RECORDED_KILLERS.get(mutant_id))
    assert not record.error, record.error
    assert record.killed, (
        f"mutant {mutant_id} ({record.fault}) survived the {record.section} tests: {record.counts}; "
        f"suite bugs: {record.suite_bugs}"
    )


def test_a_cuda_mutant_on_cpu_is_not_run_and_said_so(tmp_path):
    cuda_only = [i for i, m in MUTANTS.items() if m.device == "cuda"]
    assert cuda_only, "no CUDA mutant registered"
    record = kill_one(cuda_only[0], device="cpu")
    assert (record.killed, record.killers, record.not_run) == (False, [], record.not_run) and "cuda" in record.not_run
    write_reports([record], tmp_path)
    assert "not run on this device" in (tmp_path / "mutants.md").read_text()
    assert f"not run on this device: {cuda_only[0]}" in format_matrix([record])


def _failure_raised_in(filename: str, source: str) -> dict:
    try:
        exec(compile(source, filename, "exec"), {})
    except Exception as exc:  # noqa: BLE001 - any exception is the input here
        return _failure(pytest.ExceptionInfo.from_exception(exc))
    raise AssertionError("source did not raise")


def test_programming_errors_in_the_suite_are_suite_bugs_not_kills():
    in_suite = str(_SUITE_DIR / "test_made_up.py")
    assert _failure_raised_in(in_suite, "undefined_name") == {
        "type": "NameError", "suite_bug": True, "out_of_memory": False}
    assert _failure_raised_in(in_suite, "import no_such_module_here")["suite_bug"]
    # an assertion, or a suite-side error an implementation's output can cause, is a kill
    assert _failure_raised_in(in_suite, "assert 1 == 2") == {
        "type": "AssertionError", "suite_bug": False, "out_of_memory": False}
    assert not _failure_raised_in(in_suite, "[0][3]")["suite_bug"]
    # a NameError inside the implementation (the mutant crashed) is a kill too
    assert not _failure_raised_in(str(_SUITE_DIR.parent / "fixtures" / "x.py"), "undefined_name")["suite_bug"]


def test_kill_records_leave_suite_bugs_out():
    def record(name, section, outcome, failure):
        return {"case": f"c/t.py::{name}", "section": section, "outcome": outcome, "reason": "E   boom",
                "stats": [], "failure": failure}
    tests = [record("test_S3_bug", "S3", "failed", {"type": "NameError", "suite_bug": True}),
             record("test_S3_real", "S3", "failed", {"type": "AssertionError", "suite_bug": False}),
             record("test_S3_old_json", "S3", "failed", None),
             record("test_S3_passed", "S3", "passed", None),
             record("test_S5_other_section", "S5", "failed", {"type": "AssertionError", "suite_bug": False})]
    killers, suite_bugs = split_failures(tests, "S3")
    assert [k["test"] for k in killers] == ["c/t.py::test_S3_real", "c/t.py::test_S3_old_json"]
    assert [b["test"] for b in suite_bugs] == ["c/t.py::test_S3_bug"] and suite_bugs[0]["evidence"] == "boom"


def _fake_runs(monkeypatch, outcomes: list[str]) -> list[dict]:
    """Replace the quiet pytest run: the n-th run reports one case of the mutant's section
    with ``outcomes[n]``; returns the calls' keyword arguments."""
    from conformance import runner

    calls = []

    def run_quietly(**kwargs):
        calls.append(kwargs)
        section = kwargs["keyword"].removeprefix("test_").rstrip("_")
        record = {"case": f"{section}/x", "section": section, "outcome": outcomes[len(calls) - 1],
                  "reason": "E   assert", "stats": [], "failure": {"type": "AssertionError", "suite_bug": False}}
        return 1, {"tests": [record]}, ["pytest"]

    monkeypatch.setattr(runner, "run_quietly", run_quietly)
    return calls


def test_recorded_killers_run_alone_first_and_decide_when_they_kill(monkeypatch):
    mutant_id = next(i for i, m in MUTANTS.items() if m.device == "cpu")
    calls = _fake_runs(monkeypatch, ["failed"])
    record = kill_one(mutant_id, first_failure=True, try_first=["S3/a", "S3/b"])
    assert record.killed and [c["cases"] for c in calls] == [["S3/a", "S3/b"]]
    assert calls[0]["extra"] == ["--maxfail=1"]


def test_the_whole_section_runs_when_no_recorded_killer_kills(monkeypatch):
    mutant_id = next(i for i, m in MUTANTS.items() if m.device == "cpu")
    calls = _fake_runs(monkeypatch, ["passed", "failed"])
    record = kill_one(mutant_id, first_failure=True, try_first=["S3/a"])
    assert record.killed and [c["cases"] for c in calls] == [["S3/a"], None]
    calls = _fake_runs(monkeypatch, ["passed", "passed"])
    assert not kill_one(mutant_id, first_failure=True, try_first=["S3/a"]).killed and len(calls) == 2


def test_recorded_killers_need_first_failure():
    with pytest.raises(ValueError, match="try_first"):
        kill_one(next(iter(MUTANTS)), try_first=["S3/a"])


def test_every_recorded_killer_is_a_collected_case_of_its_mutants_section():
    # A stale record only costs time (the whole section then runs), but it should not rot unseen:
    # regenerate it with `dspark-conformance mutants --report results/mutants` (and --device cuda).
    from conformance.seed_table import collect

    collected = {case_id for case_id, _ in collect()}
    stale = [(i, c) for i, cases in RECORDED_KILLERS.items() for c in cases
             if c not in collected or not c.startswith(MUTANTS[i].section + "/")]
    assert not stale, f"recorded killers that are no longer collected cases of their section: {stale[:5]}"
    assert set(RECORDED_KILLERS) <= set(MUTANTS), sorted(set(RECORDED_KILLERS) - set(MUTANTS))
