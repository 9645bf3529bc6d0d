"""The mutant kill matrix (issue: test power): every mutant fails a test of its own section.

Each case runs the conformance tests of the mutant's SPEC section in a subprocess with
``--dspark-impl mutant:<id>`` and the default seeds, as ``dspark-conformance mutants`` does,
but stops at the first failure: one kill is the claim (the report lists every killer).
"""

import pytest
import torch

from conformance.power.kill_matrix import format_matrix, kill_one, split_failures, write_reports
from conformance.plugin import _SUITE_DIR, _failure
from fixtures.mutants import load_all

MUTANTS = load_all()


def test_catalogue_size_and_sections():
    assert len(MUTANTS) >= 25, f"expected at least 25 mutants, found {len(MUTANTS)}"
    for m in MUTANTS.values():
        assert m.section in {f"S{i}" for i in range(1, 10)}, f"{m.id}: section {m.section!r}"
        assert m.fault, f"{m.id}: no fault description"


@pytest.mark.slow
@pytest.mark.parametrize("mutant_id", sorted(MUTANTS))
def test_mutant_is_killed_by_its_section(mutant_id):
    # Stopped at the first failure: one kill decides it (`dspark-conformance mutants` lists all).
    if MUTANTS[mutant_id].device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"{mutant_id}: only a CUDA case sees this fault (dspark-conformance mutants --device cuda)")
    record = kill_one(mutant_id, first_failure=True, device=MUTANTS[mutant_id].device)
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
    assert _failure_raised_in(in_suite, "undefined_name") == {"type": "NameError", "suite_bug": True}
    assert _failure_raised_in(in_suite, "import no_such_module_here")["suite_bug"]
    # an assertion, or a suite-side error an implementation's output can cause, is a kill
    assert _failure_raised_in(in_suite, "assert 1 == 2") == {"type": "AssertionError", "suite_bug": False}
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
