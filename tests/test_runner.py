"""``conformance.runner``: what the CLI does between pytest runs, checked without starting one
(``run_suite`` replaced by a stub that records the command it gets)."""

from __future__ import annotations

from conformance import runner
from conformance.cuda_context import OUT_OF_MEMORY


def _record(case: str, outcome: str, failure: str | None = None) -> dict:
    return {"case": case, "outcome": outcome, "reason": "", "failure": failure and {"type": failure}}


def _stub_run_suite(monkeypatch, fresh: list[dict]) -> list[list[str]]:
    commands: list[list[str]] = []

    def run_suite(cmd, json_path, **_):
        commands.append(cmd)
        return (1 if any(r["outcome"] == "failed" for r in fresh) else 0), {"tests": fresh}

    monkeypatch.setattr(runner, "run_suite", run_suite)
    return commands


def _command(cases, json_path, junit):
    return ["pytest", *cases, junit.name]


def test_cases_that_ran_out_of_cuda_memory_beside_other_workers_run_again_alone(tmp_path, monkeypatch):
    """Three S4 production shapes failed with CUDA OOM at 14 workers on an H100 (session 25):
    the card's memory was the other workers'. Only those cases run again, alone; the lone
    run's records replace theirs and say so; other failures stay as they were."""
    tests = [_record("S4/big", "failed", OUT_OF_MEMORY), _record("S5/wrong", "failed", "AssertionError"),
             _record("S3/fine", "passed"), _record("S4/big-too", "failed", OUT_OF_MEMORY)]
    commands = _stub_run_suite(monkeypatch, [_record("S4/big", "passed"), _record("S4/big-too", "passed")])
    merged = runner.rerun_out_of_memory({"tests": tests}, _command, tmp_path)
    assert commands == [["pytest", "S4/big", "S4/big-too", "junit-rerun-1.xml"]]
    assert [(r["case"], r["outcome"]) for r in merged["tests"]] == [
        ("S4/big", "passed"), ("S5/wrong", "failed"), ("S3/fine", "passed"), ("S4/big-too", "passed")]
    assert all("alone" in r["first_attempt"] for r in merged["tests"] if r["case"].startswith("S4/"))
    assert not any("first_attempt" in r for r in merged["tests"] if not r["case"].startswith("S4/"))


def test_a_case_out_of_memory_alone_keeps_its_failure_and_no_run_starts_without_one(tmp_path, monkeypatch):
    commands = _stub_run_suite(monkeypatch, [_record("S4/big", "failed", OUT_OF_MEMORY)])
    merged = runner.rerun_out_of_memory({"tests": [_record("S4/big", "failed", OUT_OF_MEMORY)]}, _command, tmp_path)
    assert [r["outcome"] for r in merged["tests"]] == ["failed"] and len(commands) == 1
    (tmp_path / "junit-rerun-1.xml").touch()  # a lost-case round came first: the next number
    payload = {"tests": [_record("S4/big", "failed", OUT_OF_MEMORY)]}
    runner.rerun_out_of_memory(payload, _command, tmp_path)
    assert commands[-1][-1] == "junit-rerun-2.xml"
    assert runner.rerun_out_of_memory({"tests": [_record("S5/wrong", "failed", "AssertionError")]},
                                      _command, tmp_path)["tests"][0]["outcome"] == "failed"
    assert len(commands) == 2
