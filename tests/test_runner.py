"""``conformance.runner``: what the CLI does between pytest runs, checked without starting one
(``run_suite`` replaced by a stub that records the command it gets)."""

from __future__ import annotations

import pytest
import torch

from conformance import runner
from conformance.cuda_context import OUT_OF_MEMORY, is_out_of_memory, out_of_memory_cases
from conformance.plugin import _failure


def _record(case: str, outcome: str, failure: str | None = None) -> dict:
    return {"case": case, "outcome": outcome, "reason": "",
            "failure": failure and {"type": failure, "out_of_memory": failure == OUT_OF_MEMORY}}


def _failure_of(error: BaseException) -> dict:
    """The plugin's failure record of ``error`` as a case raises it."""
    try:
        raise error
    except BaseException as raised:  # noqa: BLE001 - whatever the case raised is the input
        return _failure(pytest.ExceptionInfo.from_exception(raised))


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


@pytest.mark.parametrize("error", [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    # the CUDA runtime's cudaErrorMemoryAllocation, as SGLang 0.5.23's S4/gpu-replay/sequence-float32
    # raised it at 16 workers on an H100 (session 31)
    torch.AcceleratorError("CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in ..."),
    RuntimeError("CUDA error: out of memory"),  # the same before torch 2.9
])
def test_a_failure_the_device_ran_out_of_memory_for_is_out_of_memory_and_runs_again_alone(error):
    failure = _failure_of(error)
    assert failure["out_of_memory"] and is_out_of_memory(error)
    record = {"case": "S4/big", "outcome": "failed", "reason": "", "failure": failure}
    assert out_of_memory_cases([record, _record("S5/wrong", "failed", "AssertionError")]) == ["S4/big"]


@pytest.mark.parametrize("error", [
    torch.AcceleratorError("CUDA error: an illegal memory access was encountered"),
    RuntimeError("Triton Error [CUDA]: out of resource: shared memory"),  # a kernel's limit, not the card's memory
    AssertionError("tokens differ at 3 of 64 rows"),
])
def test_other_failures_are_not_out_of_memory(error):
    assert not _failure_of(error)["out_of_memory"]
    assert not is_out_of_memory(error)


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
