"""The main job end to end: exit codes, matrix, reports, adapter loading, ledger, INCONCLUSIVE."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from conformance import cli
from conformance import contract as c
from conformance.adapters import reference
from conformance.loading import AdapterLoadError, load_adapter
from conformance.runner import PYTEST_ENV, pytest_command

ROOT = Path(__file__).resolve().parents[1]

# Selections that keep these end-to-end runs to seconds. The S6 law cases draw 110,000 to
# 250,000 lengths one call at a time on the reference (20-50 s each on 2 cores), and the
# section took 70-86 s per run here; what these tests check is the CLI's plumbing, which a
# few cases of the section show as well.
#: S6 cases with no statistical draw on a passing adapter (the 7 degenerate values: 200 draws each).
CHEAP_S6 = "test_S6_match_expected_degenerate"
#: The S6 verify-step cases: the three statistical ones fail on mutant:simulated-rounded-once
#: (a constant length, so its steps draw nothing: cheap there) and the other five pass.
S6_EXECUTOR = "test_S6_executor"


def _run(tmp_path, *args, workers="0", pythonpath=None):
    cmd = [sys.executable, "-m", "conformance.cli", "run", "--workers", workers, "--report", str(tmp_path), *args]
    env = None if pythonpath is None else {
        **os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(pythonpath), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def test_run_reference_section_passes_and_writes_reports(tmp_path):
    code, out = _run(tmp_path, "-k", CHEAP_S6)
    assert code == cli.EXIT_PASS, out
    assert "S6" in out and "overall: PASS" in out
    payload = json.loads((tmp_path / "results.json").read_text())
    assert payload["impl"] == "reference" and payload["tests"]
    assert all(t["section"] == "S6" for t in payload["tests"])
    assert (tmp_path / "report.md").read_text().startswith("# DSpark conformance")
    assert (tmp_path / "junit.xml").exists()


def test_the_command_leaves_torch_to_its_pytest_session(tmp_path):
    """The command's own process imports no torch, its reports included: only the pytest
    session it starts needs it (torch's import took 3.9 s of a one-case run's 12 s on an H100
    host, session 31, and the command paid it again for report.html's number checks)."""
    cmd = [sys.executable, "-X", "importtime", "-m", "conformance.cli", "run", "--workers", "0", "--report",
           str(tmp_path), "--case", "S1/vocab/one-token"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == cli.EXIT_PASS, proc.stdout + proc.stderr
    imported = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "conformance.report.html" in imported and "torch" not in imported, sorted(imported)


def test_the_hosts_pytest_plugins_stay_out_unless_named(tmp_path):
    """An environment's auto-loaded pytest plugin (here one that records its loading and
    fails every case) does not join the suite's pytest: the runner names its plugins
    (``conformance.runner.PYTEST_ENV``); one named after ``--`` with ``-p`` does join."""
    host = tmp_path / "site"
    (host / "host_plugin-1.0.dist-info").mkdir(parents=True)
    (host / "host_plugin-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: host-plugin\nVersion: 1.0\n")
    (host / "host_plugin-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\nhost_plugin = host_plugin\n")
    marker = tmp_path / "loaded"
    (host / "host_plugin.py").write_text(
        f"import pathlib\ndef pytest_configure(config):\n    pathlib.Path({str(marker)!r}).touch()\n"
        "def pytest_runtest_call(item):\n    raise AssertionError('the host plugin ran')\n")
    code, out = _run(tmp_path / "alone", "-k", "test_S6_executor_gamma_one", pythonpath=host)
    assert code == cli.EXIT_PASS and not marker.exists(), out
    code, out = _run(tmp_path / "named", "-k", "test_S6_executor_gamma_one", "--", "-p", "host_plugin", pythonpath=host)
    assert code == cli.EXIT_FAIL and marker.exists(), out


def test_run_mutant_fails_with_replay_command(tmp_path):
    """A failing run's console: progress by SPEC section (no dots), the matrix, a line per
    failure with its replay command; the tracebacks in junit.xml, not on the console."""
    code, out = _run(tmp_path, "--impl", "mutant:simulated-rounded-once", "-k", S6_EXECUTOR)
    assert code == cli.EXIT_FAIL, out
    assert "FAILED" in out and "replay: dspark-conformance run --impl mutant:simulated-rounded-once" in out
    assert "--budget" not in out  # the default budget is left out
    outcomes = [t["outcome"] for t in json.loads((tmp_path / "results.json").read_text())["tests"]]
    ends = re.findall(r"(?m)^S6 simulated acceptance: (\d+)/(\d+) done(?: \((\d+) failed\))?;", out)
    # the phases (parallel, then the latency-bound cases) each end the section once
    assert sum(int(done) for done, _, _ in ends) == len(outcomes), out
    assert sum(int(failed or 0) for _, _, failed in ends) == outcomes.count("failed") > 0, out
    assert not re.search(r"(?m)^[.sFx]+ *(\[ *\d+%\])?$", out), out  # pytest's dots
    assert "Traceback" not in out and "= FAILURES =" not in out and "def test_" not in out, out
    assert f"tracebacks: {tmp_path}/junit.xml" in out
    assert "def test_S6_" in (tmp_path / "junit.xml").read_text()


def test_replay_command_carries_a_budget_other_than_one(tmp_path):
    # Sample sizes follow --budget, so a replay at the default budget draws other samples.
    # The same failing run checks --tracebacks (pytest's tracebacks on the console too).
    code, out = _run(tmp_path, "--impl", "mutant:simulated-rounded-once", "-k", S6_EXECUTOR, "--budget", "0.5",
                     "--tracebacks")
    assert code == cli.EXIT_FAIL, out
    replay = next(line for line in out.splitlines() if "replay: dspark-conformance run" in line)
    assert " --budget 0.5 --case " in replay, replay
    assert "= FAILURES =" in out and "def test_S6_" in out and "tracebacks: " not in out, out


def test_missing_capability_is_a_named_skip(tmp_path):
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:only_simulated", "-k", f"test_S5_ or {CHEAP_S6}")
    assert code == cli.EXIT_PASS, out
    payload = json.loads((tmp_path / "results.json").read_text())
    skips = [t for t in payload["tests"] if t["section"] == "S5"]
    assert skips and all(t["outcome"] == "skipped" for t in skips)
    named = ("capability ChainVerifier not offered", "capability GreedyVerifier not offered",
             "capability TruncatedChainVerifier not offered")
    # Every S5 case needs a capability the toy lacks (verifiers, and since issue 16 also the
    # step samplers, Markov block and tensor-parallel round of the invariance cases).
    assert all(t["reason"].startswith("capability ") and " not offered by toy:only-simulated" in t["reason"]
               or t["reason"].startswith("needs CUDA") for t in skips), {t["reason"] for t in skips}
    assert any(t["reason"].startswith(named) for t in skips)


def test_a_run_where_every_case_skipped_is_inconclusive_not_a_pass(tmp_path):
    # Trial of session 20: an adapter offering no capability skipped all 332 cases, and the run
    # exited 0, which CI/gate.sh printed as "gate: PASS". Nothing was checked.
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:only_simulated", "-k", "test_S5_")
    assert code == cli.EXIT_INCONCLUSIVE, out
    payload = json.loads((tmp_path / "results.json").read_text())
    assert {t["outcome"] for t in payload["tests"]} == {"skipped"}
    assert (payload["overall"], payload["exit_code"]) == ("SKIP", cli.EXIT_INCONCLUSIVE)
    # The coverage line classes every skip the plugin and the suite gave here: none is "other".
    total = len(payload["tests"])
    assert re.search(rf"coverage: 0 of {total} cases ran; {total} skipped \(\d+ not offered by the adapter, "
                     r"\d+ need CUDA or the GPU tier, 0 unsupported feature, 0 other\)", out), out
    # S5's row reads SKIP; the few-that-ran warning is for sections where some cases ran.
    assert re.search(r"(?m)^S5 +chain verification +SKIP ", out) and "WARNING: most cases skipped" not in out, out


def test_capability_declared_cuda_only_is_a_skip_with_its_reason_on_cpu(tmp_path):
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:cuda_only_confidence", "-k",
                     f"{CHEAP_S6} or test_S6_simulated_bonus or test_S7_")
    assert code == cli.EXIT_PASS, out
    payload = json.loads((tmp_path / "results.json").read_text())
    assert payload["cannot_run_here"] == {"Confidence": "runs on cuda only, not cpu (toy kernel)"}
    assert "Confidence (runs on cuda only, not cpu (toy kernel))" in (tmp_path / "report.md").read_text()
    tests = payload["tests"]
    s7 = [t for t in tests if t["section"] == "S7"]
    assert s7 and {t["outcome"] for t in s7} == {"skipped"}
    assert {t["reason"] for t in s7} == {
        "capability Confidence of toy:cuda-only-confidence runs on cuda only, not cpu (toy kernel)"
    }
    s6 = [t for t in tests if t["section"] == "S6"]
    assert {t["outcome"] for t in s6 if not t["reason"].startswith("capability SimulatedBonus not offered")} == {"passed"}


def test_capability_that_needs_a_cuda_build_skips_only_without_one(tmp_path):
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:cuda_build_confidence", "-k", "test_S7_")
    # Without a CUDA build every selected case skips: nothing checked, so INCONCLUSIVE.
    assert code == (cli.EXIT_PASS if torch.backends.cuda.is_built() else cli.EXIT_INCONCLUSIVE), out
    tests = json.loads((tmp_path / "results.json").read_text())["tests"]
    if torch.backends.cuda.is_built():
        assert tests and {t["outcome"] for t in tests} == {"passed"}
    else:
        assert tests and {t["outcome"] for t in tests} == {"skipped"}
        assert all(t["reason"].startswith("capability Confidence of toy:cuda-build-confidence needs a CUDA "
                                          "build of torch") and t["reason"].endswith("(toy capture query)")
                   for t in tests), {t["reason"] for t in tests}


def test_met_requirement_never_turns_a_failure_into_a_skip(tmp_path):
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:failing_with_met_requirement", "-k", S6_EXECUTOR)
    assert code == cli.EXIT_FAIL, out
    outcomes = {t["outcome"] for t in json.loads((tmp_path / "results.json").read_text())["tests"]}
    assert "failed" in outcomes and "skipped" not in outcomes


def test_requirement_is_validated_and_names_what_is_unmet():
    offered = {c.Confidence: reference.Confidence()}
    with pytest.raises(ValueError, match=r"Requirement\.devices: expected a non-empty subset"):
        c.Requirement(devices=("tpu",))
    with pytest.raises(ValueError, match="requirements: 'FoldedDraft' is not a capability this adapter offers"):
        c.Adapter("toy", c.Conventions(), offered, requirements={c.FoldedDraft: c.Requirement()})
    with pytest.raises(TypeError, match=r"requirements\[Confidence\]: expected a Requirement, got tuple"):
        c.Adapter("toy", c.Conventions(), offered, requirements={c.Confidence: ("cuda",)})
    adapter = c.Adapter("toy", c.Conventions(devices=("cpu",)), offered,
                        requirements={c.Confidence: c.Requirement(devices=("cpu",))})
    assert adapter.unmet(c.Confidence, "cpu") is None
    assert adapter.unmet(c.Confidence, "cuda") == "runs on cpu only, not cuda"
    assert c.Requirement(devices=("cuda",), reason="r").unmet("cpu") == "runs on cuda only, not cpu (r)"
    assert (c.Requirement(cuda_build=True).unmet("cpu") is None) == torch.backends.cuda.is_built()


def test_inconclusive_has_its_own_exit_code(tmp_path):
    # Its executor raises Inconclusive; the degenerate values pass: passes and INCONCLUSIVE
    # cases together make the run INCONCLUSIVE.
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:inconclusive", "-k", f"{S6_EXECUTOR} or {CHEAP_S6}")
    assert code == cli.EXIT_INCONCLUSIVE, out
    assert "INCONCLUSIVE" in out


def test_a_path_this_machine_cannot_run_is_a_skip_saying_why(tmp_path):
    """contract.CannotRunHere (the engine's code for one input needs a CUDA device): the
    case is a skip that says "cannot run here" and why, counted with the CUDA skips; never
    INCONCLUSIVE (DESIGN: a case the machine cannot run is a skip with the reason)."""
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:no_cuda_device",
                     "-k", "test_S6_executor_gamma_one or test_S6_lengths_stay_in_range")
    assert code == cli.EXIT_PASS, out
    tests = json.loads((tmp_path / "results.json").read_text())["tests"]
    skipped = [t for t in tests if t["outcome"] == "skipped"]
    assert len(skipped) == 1 and all(t["outcome"] == "passed" for t in tests if t not in skipped), tests
    assert skipped[0]["case"].startswith("S6/executor"), skipped[0]
    assert skipped[0]["reason"] == ("cannot run here: the executor calls torch.cuda.current_device(); "
                                    "no CUDA device here"), skipped[0]
    assert "need CUDA or the GPU tier" in out


def test_unsupported_feature_is_a_skip_naming_it(tmp_path):
    """An adapter's NotImplementedError from a capability method (contract: an unsupported
    feature) ends the test as a skip naming the capability, the method and the reason."""
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:no_multinomial", "-k", "test_S6_lengths_stay_in_range")
    assert code == cli.EXIT_PASS, out
    tests = {t["case"]: t for t in json.loads((tmp_path / "results.json").read_text())["tests"]}
    skipped = [t for t in tests.values() if t["outcome"] == "skipped"]
    assert [t["outcome"] for t in tests.values()].count("passed") == 1 and len(skipped) == 1, tests
    assert skipped[0]["reason"] == ("SimulatedAcceptance.sample_acc_len: not supported by the IUT "
                                    "(no multinomial method here)"), skipped[0]


# The lost-context runs start a fresh process (a whole collection, ~7 s) for each case its
# predecessors left not run: each selects the few cases its check needs, in the order they run.
#: A case of test_S6_match_expected_law, the test the toy ledgers expect to fail.
LEDGER_LAW_CASE = "S6/match-expected/4.7-max6"
#: The cases of test_S6_lengths_stay_in_range, which no toy ledger lists.
RANGE_CASES = ("S6/range/match-expected", "S6/range/multinomial")


def _cases(*case_ids: str) -> list[str]:
    return [arg for case_id in case_ids for arg in ("--case", case_id)]


def test_a_lost_cuda_context_is_no_expected_failure_and_its_process_cases_run_again(tmp_path):
    """conformance.cuda_context: the case that loses the CUDA context fails even where the
    ledger expects it to fail; the later cases of its process did not run, and the main job
    runs them again in fresh processes until each has its own outcome."""
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:loses_the_cuda_context",
                     *_cases(LEDGER_LAW_CASE, *RANGE_CASES))
    assert code == cli.EXIT_FAIL, out
    tests = json.loads((tmp_path / "results.json").read_text())["tests"]
    assert len(tests) == 3 and any("test_S6_lengths_stay_in_range" in t["nodeid"] for t in tests), tests
    # Every case ran in the end (each toy call loses the context, so each fails with that error).
    assert all(t["outcome"] == "failed" and "illegal memory access" in t["reason"]
               and "not run" not in t["reason"] for t in tests), [(t["outcome"], t["reason"][-200:]) for t in tests]
    rounds = len(tests) - 1  # one more case gets its own outcome in each fresh process
    assert f"running them again in a fresh process (round {rounds})" in out, out
    # One junit.xml: each case once, with its fresh process's record (not the lost 'not run').
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    cases = [(c.get("classname"), c.get("name")) for c in junit.iter("testcase")]
    assert len(cases) == len(set(cases)) == len(tests), cases
    assert all("illegal memory access" in c.find("failure").get("message", "") + (c.find("failure").text or "")
               for c in junit.iter("testcase")), ET.tostring(junit)[:2000]
    assert not list(tmp_path.glob("junit-*.xml"))


def test_a_lost_cuda_context_declared_by_the_ledger_is_the_expected_failure(tmp_path):
    """ExpectedFailure.loses_cuda_context: the declared cases are expected failures; a case
    the ledger does not list still fails, and every case gets its own outcome."""
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:loses_the_cuda_context_as_declared",
                     *_cases(LEDGER_LAW_CASE, RANGE_CASES[0]))
    assert code == cli.EXIT_FAIL, out
    tests = json.loads((tmp_path / "results.json").read_text())["tests"]
    outcomes = {t["nodeid"].split("::")[1].split("[")[0]: set() for t in tests}
    for t in tests:
        outcomes[t["nodeid"].split("::")[1].split("[")[0]].add(t["outcome"])
    assert outcomes == {"test_S6_match_expected_law": {"xfailed"}, "test_S6_lengths_stay_in_range": {"failed"}}, tests
    assert not any("not run" in (t["reason"] or "") for t in tests), tests


def test_a_run_whose_lost_cases_all_ran_again_exits_by_its_records(tmp_path):
    """The first pytest run exits 1 for its not-run records; once fresh processes have given
    every case its own outcome (here: the declared expected failure), the records decide:
    PASS, exit 0 (SGLang 0.5.23 on the H200, session 8: report PASS, exit 1)."""
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:loses_the_cuda_context_as_declared",
                     *_cases(LEDGER_LAW_CASE, "S6/match-expected/2.25-max3"))
    payload = json.loads((tmp_path / "results.json").read_text())
    tests = payload["tests"]
    assert len(tests) > 1 and {t["outcome"] for t in tests} == {"xfailed"}, tests
    assert "running them again in a fresh process (round 1)" in out, out
    assert code == cli.EXIT_PASS, out
    # results.json says what the run ended with (session 9: PASS gates recorded exit_status 1)
    assert payload["exit_status"] == 0, payload["exit_status"]
    assert (payload["overall"], payload["exit_code"]) == ("PASS", cli.EXIT_PASS)


def test_unmatched_ledger_entry_is_an_infrastructure_error(tmp_path):
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:unmatched_ledger", "-k", CHEAP_S6)
    assert code == cli.EXIT_INFRA, out
    assert "test_S6_does_not_exist" in out


def test_unavailable_is_validated():
    offered = {c.Confidence: reference.Confidence()}
    with pytest.raises(ValueError, match="unavailable: Confidence is offered too"):
        c.Adapter("toy", c.Conventions(), offered, unavailable={c.Confidence: "x did not import"})
    with pytest.raises(ValueError, match=r"unavailable\[FoldedDraft\]: expected the reason"):
        c.Adapter("toy", c.Conventions(), offered, unavailable={c.FoldedDraft: " "})
    with pytest.raises(ValueError, match="unavailable: <class 'int'> is not a capability of the contract"):
        c.Adapter("toy", c.Conventions(), offered, unavailable={int: "x"})


def test_a_capability_that_should_load_and_did_not_is_inconclusive_and_named(tmp_path):
    """Issue 40: an engine release that should offer a capability but could not import a module
    for it is never a silent "not offered" skip."""
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:unavailable_confidence", "-k", "test_S7_")
    assert code == cli.EXIT_INCONCLUSIVE, out
    notice = "UNAVAILABLE: capability Confidence should be offered by toy:unavailable-confidence but did not load"
    assert notice in out and "pip install --target DIR regex" in out
    payload = json.loads((tmp_path / "results.json").read_text())
    assert set(payload["unavailable"]) == {"Confidence"}
    assert payload["tests"] and all(t["outcome"] == "inconclusive" for t in payload["tests"])
    assert notice in (tmp_path / "report.md").read_text()


def test_a_fixed_finding_carried_forward_is_a_strict_xpass_naming_it(tmp_path):
    """Issue 40: a ledger entry carried forward to a release newer than the newest measured says so,
    and a release that fixed the finding fails the gate with an XPASS that names it."""
    code, out = _run(tmp_path, "--impl", "tests.toy_adapters:carried_forward_ledger", "-k", "test_S6_lengths")
    assert code == cli.EXIT_FAIL, out
    assert "[XPASS(strict)] [S6] T1: a toy finding" in out
    assert "carried forward from 1.0, not confirmed on 1.1" in out
    assert "ledger: entries carried forward from 1.0, not confirmed on toy:engine==1.1" in out
    payload = json.loads((tmp_path / "results.json").read_text())
    assert payload["carried_forward"] == ["1.0"]


def test_unknown_impl_is_a_clear_error():
    with pytest.raises(AdapterLoadError, match="unknown implementation"):
        load_adapter("no-such-engine")
    with pytest.raises(AdapterLoadError, match="cannot import"):
        load_adapter("no_such_module:make")
    with pytest.raises(AdapterLoadError, match="unknown id 'no-such-mutant'; known: .*simulated-rounded-once"):
        load_adapter("mutant:no-such-mutant")
    with pytest.raises(AdapterLoadError, match=r"^implementation 'reference==1': 'reference' has no version to check"):
        load_adapter("reference==1")


def test_an_entry_point_adapter_takes_a_version_check_too(tmp_path, monkeypatch):
    # A new user's trial: --impl my-engine==0.0.1 was refused as unknown while the same
    # message listed my-engine among the known names.
    dist = tmp_path / "toy_versioned-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-versioned\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[dspark_conformance.adapters]\ntoy-versioned = toy_versioned:make\n")
    (tmp_path / "toy_versioned.py").write_text(
        "from conformance import contract as c\n"
        "def make():\n    return c.Adapter('toy-versioned==1.2', c.Conventions(), {})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_adapter("toy-versioned==1.2").name == "toy-versioned==1.2"
    assert load_adapter("toy-versioned").name == "toy-versioned==1.2"
    with pytest.raises(AdapterLoadError, match=r"^implementation 'toy-versioned==1.3': installed version is "
                                                r"'toy-versioned==1.2'$"):
        load_adapter("toy-versioned==1.3")


def test_mutants_outside_a_checkout_are_a_clear_error(monkeypatch):
    from conformance import loading

    monkeypatch.setattr(loading, "MUTANTS_MODULE", "no_such_checkout.mutants")
    with pytest.raises(AdapterLoadError, match="ship with a checkout of dspark-conformance, not with the wheel"):
        load_adapter("mutant:simulated-rounded-once")


class _Started(Exception):
    """Raised by a stand-in for the work of a subcommand: it got that far."""


def _started(*args, **kwargs):
    raise _Started


def test_mutant_commands_outside_a_checkout_say_so_in_one_line(monkeypatch, capsys, tmp_path):
    """Installed from the wheel (no fixtures/mutants), ``mutants`` and ``calibrate`` with its
    default --power-seeds end before any run with one line naming the missing fixtures and
    exit 3; ``calibrate --power-seeds 0`` needs no mutant and goes on."""
    from conformance import loading
    from conformance.power import calibration, kill_matrix

    monkeypatch.setattr(loading, "MUTANTS_MODULE", "no_such_checkout.mutants")
    monkeypatch.setattr(kill_matrix, "kill_matrix", _started)
    monkeypatch.setattr(calibration, "calibrate", _started)
    for argv, needed_by in ((["mutants"], ""),
                            (["calibrate", "--report", str(tmp_path / "cal")], "--power-seeds 20 runs the mutants")):
        assert cli.main(argv) == cli.EXIT_INFRA
        captured = capsys.readouterr()
        [line] = captured.err.splitlines()
        assert line.startswith(f"dspark-conformance {argv[0]}: {needed_by}"), line
        assert ("the mutant fixtures (no_such_checkout.mutants) are not importable; the mutants ship with a "
                "checkout of dspark-conformance, not with the wheel") in line and captured.out == "", captured
    assert not (tmp_path / "cal").exists()
    with pytest.raises(_Started):
        cli.main(["calibrate", "--power-seeds", "0", "--report", str(tmp_path / "cal")])


def test_an_unknown_mutant_id_is_a_usage_error_before_any_run(monkeypatch, capsys):
    from conformance.power import kill_matrix

    monkeypatch.setattr(kill_matrix, "kill_one", _started)
    with pytest.raises(SystemExit) as stop:
        cli.main(["mutants", "simulated-rounded-once", "no-such-mutant"])
    err = capsys.readouterr().err.splitlines()[-1]
    assert stop.value.code == cli.EXIT_INFRA, err
    assert err.startswith("dspark-conformance mutants: error: ids: unknown mutant id 'no-such-mutant'; known: "), err
    assert "simulated-rounded-once" in err


@pytest.mark.parametrize("command", ["mutants", "calibrate"])
def test_help_of_mutant_commands_says_they_need_the_fixtures(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "needs the mutant fixtures, which are not part of the wheel: the module fixtures.mutants" in text.lower()
    if command == "calibrate":
        assert "(--power-seeds > 0, the default) needs the mutant fixtures" in text, text
        assert "> 0 needs the mutant fixtures of a checkout (0: no mutant runs)" in text, text


def test_budget_trades_power_for_runtime_and_the_report_says_so(tmp_path):
    code, out = _run(tmp_path, "-k", "test_S6_match_expected_law", "--budget", "0.1")
    assert code == cli.EXIT_PASS, out
    line = next(l for l in out.splitlines() if l.startswith("statistical power"))
    assert "budget x0.1" in line and float(line.split("min ")[1].split()[0]) < 0.999
    assert json.loads((tmp_path / "results.json").read_text())["budget"] == 0.1


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "x", "1000.5", "1e15"])
def test_budget_must_be_a_factor_in_its_range_before_pytest_starts(value, capsys, monkeypatch):
    # Above the range the draws outgrow memory (a fresh-user trial: 1e15 overflowed int64
    # inside a case, which then read as a FAIL of the implementation).
    monkeypatch.setattr(cli, "run", lambda args: pytest.fail(f"ran with --budget {value}"))
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "--budget", value])
    assert stop.value.code == cli.EXIT_INFRA
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"dspark-conformance run: error: argument --budget: expected a factor in (0, 1000], got '{value}'")


def test_pytest_budget_option_is_checked_too(tmp_path):
    # The plugin's own option, for a plain pytest run: the same check, naming its option.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dspark-budget=0",
                           "--collect-only", "conformance/suite/test_simulated.py"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--dspark-budget: expected a factor in (0, 1000], got 0.0" in proc.stdout + proc.stderr


@pytest.mark.parametrize("option", ["--impl", "--report"])
def test_an_empty_impl_or_report_is_a_usage_error(option, capsys, monkeypatch):
    # An unset CI variable (--impl "$IMPL") must not gate the reference instead of the engine.
    monkeypatch.setattr(cli, "run", lambda args: pytest.fail(f"ran with {option} {''!r}"))
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", option, ""])
    assert stop.value.code == cli.EXIT_INFRA
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"argument {option}: expected a non-empty value")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
@pytest.mark.parametrize("argv", [["calibrate", "--seeds", "1"], ["null-replay"], ["mutants"]], ids=lambda a: a[0])
def test_every_command_checks_cuda_before_it_starts(argv, capsys, monkeypatch):
    for command in ("calibrate", "null_replay"):
        monkeypatch.setattr(cli, command, lambda *args: pytest.fail("started without CUDA"))
    monkeypatch.setattr("conformance.power.kill_matrix.kill_matrix", lambda *a, **k: pytest.fail("started without CUDA"))
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--device", "cuda"])
    assert stop.value.code == cli.EXIT_INFRA
    assert capsys.readouterr().err.splitlines()[-1].endswith("argument --device: cuda: CUDA is not available on this machine")


def test_a_run_without_verdict_replaces_the_previous_reports(tmp_path):
    # A passing run, then one that cannot load its adapter, into the same directory: no stale
    # PASS may survive; results.json says ERROR with the exit code and the message.
    (tmp_path / "report.md").write_text("overall **PASS**")
    (tmp_path / "report.html").write_text("PASS")
    (tmp_path / "junit-parallel.xml").write_text("<testsuites/>")
    (tmp_path / "junit-rerun-2.xml").write_text("<testsuites/>")
    (tmp_path / "junit-mine.xml").write_text("<testsuites/>")  # the user's own file stays (a new user's trial)
    code, out = _run(tmp_path, "--impl", "no_such_module_anywhere:make", "-k", "test_S6_")
    assert code == cli.EXIT_INFRA, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit-mine.xml", "results.json"], out
    payload = json.loads((tmp_path / "results.json").read_text())
    assert payload["overall"] == "ERROR" and payload["exit_code"] == cli.EXIT_INFRA and payload["tests"] == []
    assert payload["exit_status"] == pytest.ExitCode.USAGE_ERROR  # pytest's own, as the README says
    # The cause pytest printed is in the file too (a trial found only "pytest exited 4").
    assert "without results (ERROR: implementation 'no_such_module_anywhere:make'" in payload["error"], payload["error"]
    assert "ERROR: implementation " in out  # and still on the terminal


def test_a_selection_that_matches_nothing_records_the_error(tmp_path):
    code, out = _run(tmp_path, "--case", "S5/no-such/case")
    assert code == cli.EXIT_INFRA, out
    payload = json.loads((tmp_path / "results.json").read_text())
    assert payload["overall"] == "ERROR" and payload["exit_code"] == cli.EXIT_INFRA
    assert not list(tmp_path.glob("junit-*.xml"))


def test_a_report_directory_whose_reports_cannot_be_replaced_is_an_infrastructure_error(tmp_path, monkeypatch, capsys):
    # A read-only directory (a fresh-user trial: a traceback and exit 1, read as FAIL).
    def read_only(self, missing_ok=False):
        raise OSError(30, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "unlink", read_only)
    assert cli.main(["run", "--report", str(tmp_path), "-k", "test_S6_"]) == cli.EXIT_INFRA
    assert "cannot replace its reports" in capsys.readouterr().err


def test_a_directory_with_its_own_conformance_package_is_refused_before_pytest_starts(tmp_path):
    # The pytest the CLI starts puts the working directory first on sys.path: there a project's
    # own `conformance` would be imported in place of the suite's.
    (tmp_path / "conformance").mkdir()
    (tmp_path / "conformance" / "__init__.py").write_text("")
    # As the console script runs: its own sys.path does not start with the working directory.
    script = "import sys; sys.path.pop(0); from conformance.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", script, "run", "-k", "test_S6_"], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == cli.EXIT_INFRA, proc.stdout + proc.stderr
    assert f"{(tmp_path / 'conformance').resolve()} would be imported as 'conformance'" in proc.stderr


def test_a_directory_with_another_copy_of_the_suite_is_refused_before_pytest_starts(tmp_path):
    # A fresh-user trial: the installed console script run inside a checkout started pytest on
    # the installed suite while the checkout's `conformance` came first on its sys.path: a raw
    # ImportPathMismatchError, exit 3.
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "conformance", checkout / "conformance", ignore=shutil.ignore_patterns("__pycache__"))
    script = "import sys; sys.path.pop(0); from conformance.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", script, "run", "--workers", "0", "--report", str(tmp_path / "r"),
                           "-k", "test_S6_executor_gamma_one"], cwd=checkout, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == cli.EXIT_INFRA, out
    assert (f"dspark-conformance: {(checkout / 'conformance').resolve()} is another copy of the suite (a checkout?)"
            in proc.stderr), out
    assert "ImportPathMismatchError" not in out and not (tmp_path / "r").exists(), out


@pytest.mark.parametrize("command", [["run", "-k", "test_S6_"], ["calibrate", "--seeds", "1"], ["null-replay"]])
def test_a_broken_torch_is_an_infrastructure_error_not_a_failure(tmp_path, command):
    # A gate reads exit 1 as "the engine does not conform": an environment whose torch cannot
    # load its native libraries must not say that (it gave a traceback and exit 1 before).
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text('raise ImportError("libcudart.so.13: cannot open shared object file")')
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", *command], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    assert proc.returncode == cli.EXIT_INFRA, proc.stdout + proc.stderr
    assert "torch does not import" in proc.stderr and "libcudart.so.13" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_broken_torch_leaves_no_earlier_pass_in_the_report_directory(tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    (report / "results.json").write_text(json.dumps({"overall": "PASS", "exit_code": 0, "tests": []}))
    (report / "report.md").write_text("overall **PASS**")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text('raise ImportError("libcudart.so.13: cannot open shared object file")')
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--report", str(report)], cwd=ROOT,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    assert proc.returncode == cli.EXIT_INFRA, proc.stdout + proc.stderr
    record = json.loads((report / "results.json").read_text())
    assert (record["overall"], record["exit_code"]) == ("ERROR", cli.EXIT_INFRA) and "torch does not import" in record["error"]
    assert not (report / "report.md").exists()


@pytest.mark.parametrize("argv, workers", [
    (["--case", "k"], "0"), ([], "auto"), (["--case", "k", "--workers", "2"], "2"), (["--workers", "0"], "0"),
])
def test_replaying_cases_runs_one_process_unless_workers_are_given(argv, workers, monkeypatch):
    # A failure's replay line names one case: a pool of workers started for it costs more
    # than the case (about 27 s before, for a two-phase run of one case).
    monkeypatch.setattr(cli, "run", lambda args: args.workers)
    assert cli.main(["run", *argv]) == workers


def test_S6_law_cases_draw_through_a_batch_when_offered(tmp_path):
    """A correct vectorised SimulatedAcceptanceBatch passes the S6 law cases; a batch that
    shares one draw across the call (the single path intact) fails them, so the law cases
    did draw through the batch."""
    law = "test_S6_match_expected_law or test_S6_multinomial_law"
    code, out = _run(tmp_path / "correct", "--impl", "tests.toy_adapters:batched_simulated", "-k", law)
    assert code == cli.EXIT_PASS, out
    passed = [t for t in json.loads((tmp_path / "correct" / "results.json").read_text())["tests"]
              if t["outcome"] == "passed"]
    assert len(passed) == 6, passed
    code, out = _run(tmp_path / "shared", "--impl", "mutant:simulated-batch-shared-draw", "-k", law)
    assert code == cli.EXIT_FAIL, out
    failed = [t for t in json.loads((tmp_path / "shared" / "results.json").read_text())["tests"]
              if t["outcome"] == "failed"]
    assert len(failed) == 6, failed


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_deadline_signal_ends_the_run_with_reports_marked_interrupted(tmp_path, workers):
    """SIGTERM to ``dspark-conformance run`` (a CI deadline, ``timeout``) interrupts pytest,
    which ends its session: the reports hold the cases that finished, the verdict reads
    INTERRUPTED (never PASS), the exit code is EXIT_INFRA and no later phase starts. The run
    is started as a shell's background job is, with SIGINT ignored (pytest must still get
    its interrupt)."""
    cmd = [sys.executable, "-m", "conformance.cli", "run", "--workers", workers, "--report", str(tmp_path),
           "-k", "test_S8_ or test_S6_", "--", "-m", "not latency_bound"]  # those run first: 36 s before a line
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_ignore_sigint)
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: proc.stdout.read(1), "")), daemon=True)
    reader.start()
    deadline = time.time() + 240
    while not re.search(r"(?m)^S[68] [a-z ]+: \d+/", "".join(chunks)) and time.time() < deadline:  # a case finished
        time.sleep(0.5)
    assert proc.poll() is None, "".join(chunks)  # S6 and S8 take minutes on the reference
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=300)
    reader.join(timeout=60)
    out = "".join(chunks)
    assert proc.returncode == cli.EXIT_INFRA, out
    assert "overall: INTERRUPTED" in out and "interrupting the run" in out, out
    assert re.search(r"(?m)^\d+ of the \d+ selected cases did not run", out), out
    payload = json.loads((tmp_path / "results.json").read_text())
    assert sum(payload["selected_by_section"].values()) > len(payload["tests"]), payload["selected_by_section"]
    assert payload["exit_status"] == 2 and payload["tests"], payload.get("exit_status")
    # pytest's 2 (interrupted) is not the gate's 2 (inconclusive): the file says which it was.
    assert (payload["overall"], payload["exit_code"]) == ("INTERRUPTED", cli.EXIT_INFRA)
    assert "overall **INTERRUPTED**" in (tmp_path / "report.md").read_text()
    junit = tmp_path / "junit.xml"  # the serial phase never started: no second testsuite
    assert not junit.exists() or len(ET.parse(junit).getroot().findall("testsuite")) == 1


CI_GRACE_S = 7.5  # GitHub Actions: a cancelled job's SIGINT, then SIGTERM 7.5 s later, then SIGKILL


def test_a_deadline_signal_stops_the_cases_the_workers_are_running(tmp_path):
    """The interrupt reaches the xdist workers too: a worker's running case stops at once.
    Before, only pytest's controller got it, which then waited for its busy workers (xdist's
    ``EXIT_TIMEOUT``, 10 s, before it kills them): the run ended 9.2 s after SIGTERM here and
    13 s on the whole suite. Then the host's pytest plugins (hypothesis's imports hypothesis
    at every process's terminal summary) and pytest's unraisable-exception hook (five garbage
    collections at exit) cost each process 1-3 s: 7.8 s on an idle 2-core machine, 13.5 s in
    CI. Now 2.5 s idle, 3.7 s beside two busy processes. The bound is a CI's grace: on a cancel, GitHub
    Actions sends SIGINT, then SIGTERM 7.5 s later, then SIGKILL. Here each case would hold
    its worker ``STALL_S`` seconds."""
    from tests.stalling_case import STALL_S

    stall = tmp_path / "stalled"
    cmd = [sys.executable, "-m", "conformance.cli", "run", "--workers", "2", "--report", str(tmp_path / "report"),
           "-k", "test_S6_", "--", "-p", "tests.stalling_case"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "DSPARK_STALL_FILE": str(stall)})
    deadline = time.time() + 240
    while not stall.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert stall.exists(), proc.communicate(timeout=60)[0]
    signalled = time.time()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=STALL_S - 60)
    waited = time.time() - signalled
    assert waited < CI_GRACE_S, (waited, out)  # the run did not wait on its workers
    assert proc.returncode == cli.EXIT_INFRA and "overall: INTERRUPTED" in out, out


def test_an_interrupt_in_the_session_teardown_keeps_the_records(tmp_path):
    # A SIGINT after the last case, while xdist tears its workers down (trial of session 20:
    # SIGTERM 9.7-10.3 s into `run -k test_S6_ --workers 2`), ended pytest before the plugin
    # wrote its JSON: results.json said ERROR with no record of the 25 cases that had passed.
    json_path = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.interrupted_teardown",
                           "conformance/suite", "-k", "test_S1_", f"--dspark-report-json={json_path}"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    records = json.loads(json_path.read_text())["tests"]
    assert records and all(r["outcome"] == "passed" for r in records), records


def test_an_interrupt_before_the_first_record_still_reports_interrupted(tmp_path, monkeypatch, capsys):
    # The signal can land while the plugin records the first finished case (CI, session 13):
    # pytest still writes its JSON, with no record; the run reads INTERRUPTED, exit EXIT_INFRA.
    from conformance import interrupts

    def interrupted_suite(cmd, json_path, **_):
        active = interrupts.active()
        active.requested = active.cut = True
        payload = {"impl": "reference", "description": "", "conventions": {}, "capabilities": [], "device": "cpu",
                   "base_seed": 0, "budget": 1.0, "wall_s": 1.0, "exit_status": 2, "tests": []}
        json_path.write_text(json.dumps(payload))
        return 2, payload

    monkeypatch.setattr(cli, "run_suite", interrupted_suite)
    assert cli.main(["run", "--workers", "0", "--report", str(tmp_path)]) == cli.EXIT_INFRA
    out = capsys.readouterr().out
    assert "overall: INTERRUPTED" in out
    assert json.loads((tmp_path / "results.json").read_text())["tests"] == []


def test_latency_bound_cases_run_alone_after_the_others_in_one_session(tmp_path):
    """With workers and ``--latency-bound alone`` (the default with ``--device cuda``), the run
    is one pytest session whose xdist scheduling (``conformance.handout``) keeps the
    latency_bound cases back until every other case and worker has finished, then runs them
    on one worker: their records come last, and results.json and junit.xml hold one session;
    pytest's own --junitxml gets a copy of that junit.xml. The workers' own logs
    (``tests.timeline_plugin``) show each latency-bound case starting after every other case
    has ended and after the other worker has stopped, all three on one worker. At --budget 0.1
    the three latency-bound cases take a tenth of their steps."""
    log = tmp_path / "log"
    code, out = _run(tmp_path / "report", "-k", S6_EXECUTOR, "--budget", "0.1", "--latency-bound", "alone", "--",
                     f"--junitxml={tmp_path / 'ci.xml'}", "-p", "tests.timeline_plugin", f"--timeline={log}",
                     workers="2")
    assert code == cli.EXIT_PASS, out
    cases = [t["nodeid"] for t in json.loads((tmp_path / "report" / "results.json").read_text())["tests"]]
    serial = [i for i, case in enumerate(cases) if "redraws_every_step" in case or "executor_multinomial_law" in case]
    assert len(serial) == 3 and serial == list(range(len(cases) - 3, len(cases))), cases
    junit = ET.parse(tmp_path / "report" / "junit.xml").getroot()
    suites = junit.findall("testsuite")
    assert [int(s.get("tests")) for s in suites] == [len(cases)], ET.tostring(junit)[:2000]
    assert (tmp_path / "ci.xml").read_bytes() == (tmp_path / "report" / "junit.xml").read_bytes()
    assert not list((tmp_path / "report").glob("junit-*.xml"))
    assert "junit.xml also at" in out
    events = [line.split(" ", 3) for line in log.read_text().splitlines()]  # time worker event nodeid
    bound = ("redraws_every_step", "executor_multinomial_law")
    starts = [(float(t), w) for t, w, e, n in events if e == "start" and any(b in n for b in bound)]
    others_end = max(float(t) for t, w, e, n in events if e == "end" and not any(b in n for b in bound))
    worker = {w for _, w in starts}
    assert len(starts) == 3 and len(worker) == 1, events
    stopped = [float(t) for t, w, e, n in events if e == "stop" and w not in worker]
    assert stopped and min(t for t, _ in starts) >= max(others_end, *stopped), events


def test_latency_bound_cases_run_apart_each_in_a_process_of_its_own(tmp_path):
    """``--latency-bound apart``: after the parallel phase, the latency-bound cases run at once,
    a worker each (at most the run's workers and LATENCY_WORKERS), still after the others."""
    code, out = _run(tmp_path / "report", "-k", S6_EXECUTOR, "--budget", "0.1", "--latency-bound", "apart",
                     workers="2")
    assert code == cli.EXIT_PASS, out
    assert "the 3 latency-bound cases, after the others, 2 processes apart:" in out, out
    cases = [t["nodeid"] for t in json.loads((tmp_path / "report" / "results.json").read_text())["tests"]]
    serial = [i for i, case in enumerate(cases) if "redraws_every_step" in case or "executor_multinomial_law" in case]
    assert len(serial) == 3 and serial == list(range(len(cases) - 3, len(cases))), cases


@pytest.mark.parametrize("held, workers, expected", [
    ({"S6": 3, "S8": 1}, "auto", "4"), ({"S6": 3, "S8": 1}, "16", "4"), ({"S6": 3, "S8": 1}, "3", "3"),
    ({"S6": 2}, "16", "2"), ({"S8": 1}, "16", "0"), (None, "16", "0"), ({"S6": 3}, "1", "0"),
])
def test_the_apart_phase_has_a_worker_a_case_at_most_four(held, workers, expected):
    assert cli._latency_workers(held, workers) == expected


def test_cases_are_handed_out_longest_first(tmp_path):
    """xdist hands out items in collection order: the suite's cases come latency-bound first,
    then by their measured seconds (conformance/case_costs.json), longest first."""
    from conformance.case_order import case_costs

    command = pytest_command(impl="reference", device="cpu", json_path=tmp_path / "r.json", workers="0",
                             keyword="test_S3_ or test_S8_", extra=["--collect-only"])
    listed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **PYTEST_ENV})
    order = [line.rsplit("[", 1)[1].rstrip("]") for line in listed.stdout.splitlines() if "::" in line]
    assert order[0] == "S8/appendix-a/sampled" and len(order) > 80, listed.stdout
    costs = [case_costs().get(case, 0.0) for case in order[1:]]
    assert costs == sorted(costs, reverse=True) and costs[0] > 10 * costs[len(costs) // 2], order


def test_cases_a_ledger_expects_to_lose_the_cuda_context_are_handed_out_last(tmp_path):
    """Every later case of a process that lost its CUDA context must run again in a fresh one
    (SGLang 0.5.23's S5/greedy/hand-cases on an H100, session 28: 122 cases): the declared
    cases come after every other, whatever their measured seconds."""
    command = pytest_command(impl="tests.toy_adapters:loses_the_cuda_context_as_declared", device="cpu",
                             json_path=tmp_path / "r.json", workers="0", keyword="test_S6_match_expected_law or "
                             "test_S6_lengths_stay_in_range", extra=["--collect-only"])
    listed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **PYTEST_ENV})
    order = [line for line in listed.stdout.splitlines() if "::" in line]
    declared = [i for i, line in enumerate(order) if "test_S6_match_expected_law" in line]
    assert len(order) > len(declared) >= 3 and declared == list(range(len(order) - len(declared), len(order))), order


def test_on_cpu_latency_bound_cases_run_first_among_the_others(tmp_path):
    """On CPU no other process's kernels delay a read-back, and a second session after the
    others left a core idle for the S8 Appendix A law (53 s of one core): one session, the
    latency_bound cases first in the order that xdist hands out."""
    code, out = _run(tmp_path / "report", "-k", S6_EXECUTOR, "--budget", "0.1", workers="2")
    assert code == cli.EXIT_PASS, out
    assert "alone in one process" not in out and len(ET.parse(tmp_path / "report" / "junit.xml").getroot()
                                                       .findall("testsuite")) == 1, out
    command = pytest_command(impl="reference", device="cpu", json_path=tmp_path / "r.json", workers="0",
                             keyword="test_S6_ or test_S8_", extra=["--collect-only"])
    listed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **PYTEST_ENV})
    order = [line for line in listed.stdout.splitlines() if "::" in line]
    bound = [i for i, line in enumerate(order)
             if any(name in line for name in ("redraws_every_step", "executor_multinomial_law", "appendix_a_sampled"))]
    assert bound == [0, 1, 2, 3] and len(order) > 40, listed.stdout


def test_a_case_named_by_its_pytest_node_id_gets_the_case_id_suggested(tmp_path):
    # The node id pytest prints has the suite's folder and the test's name; the case id (seeds) has neither.
    nodeid = "conformance/suite/test_proposal.py::test_S1_one_token_vocabulary[S1/vocab/one-token]"
    code, out = _run(tmp_path, "--case", nodeid)
    assert code == cli.EXIT_INFRA, out
    assert "did you mean 'S1/vocab/one-token'" in out, out


def test_no_serial_session_starts_when_the_selection_has_no_latency_bound_case(tmp_path):
    """The S6 module holds latency_bound cases, which ``-k`` leaves out here: the parallel
    session counts what it left to the serial phase after ``-k`` has deselected (none), and
    no second pytest starts for nothing (4.4 s of a 17 s run before, its junit.xml an empty
    second testsuite)."""
    code, out = _run(tmp_path, "-k", "test_S6_ and not executor and not law", "--latency-bound", "alone",
                     workers="2")
    assert code == cli.EXIT_PASS, out
    suites = ET.parse(tmp_path / "junit.xml").getroot().findall("testsuite")
    records = json.loads((tmp_path / "results.json").read_text())["tests"]
    assert [int(s.get("tests")) for s in suites] == [len(records)], out
    assert not any("executor" in r["case"] for r in records)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_selection_that_matches_nothing_says_so(tmp_path, workers):
    code, out = _run(tmp_path, "-k", "no_such_case_anywhere", workers=workers)
    assert code == cli.EXIT_INFRA, out
    assert "no case of the suite matches the selection" in out, out


@pytest.mark.parametrize("args, message", [
    (["--seed", "-5"], "argument --seed: expected an integer in [0, 2^64), got '-5'"),
    (["--workers", "abc"], "argument --workers"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
], ids=["seed", "workers", "device"])
def test_usage_errors_exit_3_naming_the_argument(tmp_path, args, message):
    """Exit 3 (infrastructure), never argparse's 2, which is this CLI's INCONCLUSIVE."""
    code, out = _run(tmp_path, *args)
    assert code == cli.EXIT_INFRA and message in out, (code, out)


@pytest.mark.parametrize("argv", [
    ["run", "--workers", "0x"], ["run", "--seed", "2x"], ["calibrate", "--seeds", "x"],
    ["calibrate", "--jobs", "0"], ["null-replay", "--replicates", "0"], ["null-replay", "--seed", "-1"],
    ["mutants", "--jobs", "-1"],
], ids=lambda argv: " ".join(argv))
def test_usage_errors_name_the_option_once(argv, capsys):
    """argparse prefixes a type function's message with ``argument --NAME:``; the message
    itself must not name the option again (a fresh-user trial saw ``--workers: --workers:``)."""
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err.splitlines()[-1]
    assert stop.value.code == cli.EXIT_INFRA, err
    assert err.startswith(f"dspark-conformance {argv[0]}: error: argument {argv[1]}: expected "), err
    assert err.count(argv[1]) == 1 and err.endswith(f"got {argv[2]!r}"), err


def test_help_is_plain_text_listing_the_exit_codes(capsys):
    """The top-level --help reads as text (the module docstring's RST table stays in the
    docs) and lists every exit code with its meaning."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    assert "====" not in out and "``" not in out, out
    codes = out.split("exit codes")[1].splitlines()[1:]
    assert [line.split()[0] for line in codes] == ["0", "1", "2", "3"], out
    assert codes[0].strip().startswith("0  PASS: every applicable test passed"), out
    assert codes[3].strip().startswith("3  infrastructure error: bad usage"), out


def test_version_prints_the_installed_distributions(capsys, monkeypatch):
    import importlib.metadata

    project = re.search(r'(?ms)^\[project\]$.*?^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert project and cli.DISTRIBUTION == project.group(1)
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"dspark-conformance {importlib.metadata.version('dspark-conformance')}\n"

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == "dspark-conformance unknown (not installed)\n"


def test_run_help_says_where_the_report_goes_by_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: a fresh temporary directory, dspark-report-*, whose path the last line of the run prints)" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_cuda_without_cuda_is_one_usage_error_before_any_case(tmp_path):
    code, out = _run(tmp_path, "--device", "cuda", "-k", "test_S6_", workers="2")
    assert code == cli.EXIT_INFRA, out
    assert out.count("argument --device: cuda: CUDA is not available on this machine") == 1, out
    assert "pytest exited" not in out and not (tmp_path / "results.json").exists(), out  # pytest never started


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_pytest_without_cuda_is_one_usage_error_too():
    # The plugin's own check, for a plain pytest run of the suite.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dspark-device=cuda",
                           "-k", "test_S6_", "conformance/suite/test_simulated.py"],
                          capture_output=True, text=True, cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert out.count("--dspark-device cuda: CUDA is not available on this machine") == 1, out


def _broken_adapters(site: Path) -> Path:
    """A folder for PYTHONPATH with broken adapters: a module that raises on import, a
    factory that raises, and a distribution whose entry points (group
    ``dspark_conformance.adapters``) name them and what does not exist."""
    site.mkdir()
    (site / "broken_at_import.py").write_text("raise RuntimeError('broken at import')\n")
    (site / "failing_factory.py").write_text("def make():\n    raise RuntimeError('factory failed')\n")
    dist = site / "toy_broken_adapters-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-broken-adapters\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[dspark_conformance.adapters]\nunresolved = no_such_module_anywhere:make\n"
        "missing-attr = failing_factory:no_such_attr\nfailing = failing_factory:make\n"
        "broken = broken_at_import:make\n")
    return site


_EP = "of dspark_conformance.adapters does not load"


@pytest.mark.parametrize("impl, message, workers", [
    ("json:loads", "implementation 'json:loads': loads() raised TypeError", "0"),
    ("broken_at_import:make",
     "implementation 'broken_at_import:make': importing 'broken_at_import' raised RuntimeError: broken at import", "0"),
    ("broken_at_import:make", "importing 'broken_at_import' raised RuntimeError: broken at import", "2"),
    ("unresolved", f"implementation 'unresolved': the entry point unresolved = no_such_module_anywhere:make {_EP}: "
     "ModuleNotFoundError: No module named 'no_such_module_anywhere'", "0"),
    ("missing-attr", f"the entry point missing-attr = failing_factory:no_such_attr {_EP}: AttributeError", "0"),
    ("broken", f"the entry point broken = broken_at_import:make {_EP}: RuntimeError: broken at import", "0"),
    ("failing", "implementation 'failing': make() raised RuntimeError: factory failed", "0"),
], ids=["factory", "module-raises", "module-raises-xdist", "entry-point-unresolved", "entry-point-attr",
        "entry-point-module-raises", "entry-point-factory"])
def test_an_adapter_that_fails_to_load_is_one_usage_error_naming_it(tmp_path, impl, message, workers):
    """A broken adapter (its module raises on import, an entry point names what does not
    exist, its factory raises) ends pytest's session with one usage error naming it, and
    the run exits 3: no INTERNALERROR flood (a fresh-user trial saw ~34 lines), no traceback."""
    code, out = _run(tmp_path / "report", "--impl", impl, "-k", "test_S6_", workers=workers,
                     pythonpath=_broken_adapters(tmp_path / "site"))
    assert code == cli.EXIT_INFRA, out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    # pytest's one usage error, printed once (a fresh-user trial saw it twice, the second time
    # with a 600-character pytest command); the command and the cause are in results.json.
    [line] = [line for line in out.splitlines() if message in line]
    assert line.startswith("ERROR: implementation "), out
    assert " -m pytest " not in out, out
    payload = json.loads((tmp_path / "report" / "results.json").read_text())
    assert message in payload["error"] and " -m pytest " in payload["command"], payload


def test_a_project_around_the_installed_suite_leaves_it_alone(tmp_path):
    """The suite installed in a virtual environment inside someone's project: that project's
    pytest configuration (addopts deselecting everything) and root conftest.py (a case_seed
    of its own, an autouse print) must not reach the suite; the case's p-value is the
    checkout's."""
    project = tmp_path / "project"
    site = project / ".venv" / "site"
    for name in ("conformance", "dspark_ref"):
        shutil.copytree(ROOT / name, site / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "conftest.py", site / "conftest.py")  # registers the plugin where no entry point does
    shutil.copy(ROOT / "dspark_conformance_plugin.py", site / "dspark_conformance_plugin.py")  # as the wheel installs it
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-m fast"\n')
    (project / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture(autouse=True)\ndef foreign():\n    print('FOREIGN CONFTEST')\n\n"
        "@pytest.fixture\ndef case_seed():\n    return 0\n")
    key = "S3/law/flat-T0.3"

    def p_value(cwd, report, pythonpath):
        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
        proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--workers", "0", "--report",
                               str(report), "--case", key, "--", "-s"], capture_output=True, text=True, cwd=cwd,
                              env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "FOREIGN" not in proc.stdout + proc.stderr
        [record] = json.loads((report / "results.json").read_text())["tests"]
        return record["stats"][0]["p_value"]

    assert p_value(project, tmp_path / "installed", site) == p_value(ROOT, tmp_path / "checkout", ROOT)


def test_a_case_whose_worker_dies_is_a_named_failure(tmp_path):
    """A worker that dies running a case (here ``os._exit`` in one S1 case: an
    implementation's segfault or abort ends its process the same way) leaves xdist's report
    of the crash as the case's only one: the verdict is FAIL with that case named, its
    reason and replay line, and the case counts as run, not as interrupted."""
    (tmp_path / "dying_worker.py").write_text(
        "import os\n\ndef pytest_runtest_call(item):\n"
        "    if item.nodeid.endswith('[S1/vocab/one-token]') and os.environ.get('PYTEST_XDIST_WORKER'):\n"
        "        os._exit(7)\n")
    code, out = _run(tmp_path / "report", "-k", "test_S1_", "--", "-p", "dying_worker", workers="2",
                     pythonpath=tmp_path)
    assert code == cli.EXIT_FAIL, out
    assert "FAILED S1/vocab/one-token: worker 'gw" in out and "overall: FAIL" in out, out
    records = json.loads((tmp_path / "report" / "results.json").read_text())["tests"]
    crashed = [r for r in records if r["case"] == "S1/vocab/one-token"]
    assert [r["outcome"] for r in crashed] == ["failed"], crashed
    assert "crashed while running" in crashed[0]["reason"]
    assert len(records) == len({r["case"] for r in records}) == 15


def test_dist_each_is_a_usage_error(tmp_path):
    """``--dist each`` (after ``--``) would run every case on every worker and count each
    as many times: the run stops before any case, naming the option."""
    code, out = _run(tmp_path / "report", "-k", CHEAP_S6, "--", "--dist", "each", workers="2")
    assert code == cli.EXIT_INFRA, out
    assert "--dist each: runs every case on every xdist worker" in out, out


@pytest.mark.parametrize("dist", ["worksteal", "loadfile"])
def test_cases_run_alone_need_xdists_load_scheduling(tmp_path, dist):
    """With another ``--dist`` (after ``--``) the latency-bound cases would run beside the others
    while the run says they ran alone: the run stops before any case, naming the option."""
    code, out = _run(tmp_path / "report", "-k", CHEAP_S6, "--latency-bound", "alone", "--", "--dist", dist,
                     workers="2")
    assert code == cli.EXIT_INFRA, out
    assert f"--dist {dist}: the latency-bound cases run alone (--dspark-latency-bound alone" in out, out
    code, out = _run(tmp_path / "with-others", "-k", CHEAP_S6, "--latency-bound", "with-others", "--", "--dist", dist,
                     workers="2")
    assert code == cli.EXIT_PASS, out


def test_an_unknown_case_id_with_workers_is_the_same_usage_error_as_without(tmp_path):
    """An xdist worker's usage error (here an unknown ``--case``) reaches the run as pytest's
    ``ERROR:`` line and exit status 4, as without workers, not as xdist's internal error."""
    for workers in ("0", "2"):
        code, out = _run(tmp_path / workers, "--case", "S7/sts/basic", workers=workers)
        assert code == cli.EXIT_INFRA, out
        assert "ERROR: --dspark-case: no collected case has the case id 'S7/sts/basic'; did you mean" in out, out
        assert "INTERNALERROR" not in out and "pytest exited 4" in out, out
    # another plugin's usage error in a worker too: pytest's own -k expression (a new user's trial)
    code, out = _run(tmp_path / "k", "-k", "and or", workers="2")
    assert code == cli.EXIT_INFRA, out
    assert "ERROR: Wrong expression passed to '-k': and or" in out and "INTERNALERROR" not in out, out
