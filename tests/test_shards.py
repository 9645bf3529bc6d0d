"""Shards (issue 43): ``run --shard I/N`` runs each selected case in exactly one shard, in
both phases of the runner alike; ``merge-reports`` makes one report of a complete set of
shards, with the verdict of one unsharded run, and refuses sets that are not one run's.

The runs are kept to seconds: S6's executor cases on ``mutant:simulated-rounded-once``
(three fail at once: its constant length draws nothing) and its degenerate match-expected
values (200 draws each), 15 cases.
"""

import copy
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance import cli
from conformance.runner import PYTEST_ENV, merge_phases, pytest_command
from conformance.shards import parse_shard, selection_digest, shard_cases

ROOT = Path(__file__).resolve().parents[1]
#: A selection of 15 cheap cases with latency_bound ones among them (the executor's law and redraw cases);
#: the S6 executor cases added later (value one, empty batch) stay out, so the shards' contents stay as designed.
SELECTION = ("(test_S6_executor or test_S6_match_expected_degenerate) and not value_one_is_constant "
             "and not empty_batch")
MUTANT = "mutant:simulated-rounded-once"


# ----------------------------------------------------------------------------- the partition
@pytest.mark.parametrize("count", [1, 2, 3, 7, 15, 20])
def test_shards_deal_every_case_once_and_evenly(count):
    ids = [f"S{i % 4}/family-{i % 3}/case-{i}" for i in range(15)]
    shards = [shard_cases(reversed(ids), index, count) for index in range(1, count + 1)]
    assert set().union(*shards) == set(ids)
    assert sum(len(shard) for shard in shards) == len(ids)  # no case in two
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    dealt = sorted(ids)  # the documented rule: the j-th sorted id (from 0) to shard j mod N + 1
    assert all(shards[j % count] >= {case_id} for j, case_id in enumerate(dealt)), shards
    assert shards == [shard_cases(sorted(ids), index, count) for index in range(1, count + 1)]  # any order
    assert selection_digest(ids) == selection_digest(reversed(ids)) != selection_digest(ids[1:])


@pytest.mark.parametrize("value", ["3/24", "1/1", "24/24"])
def test_a_shard_is_i_of_n(value):
    index, count = parse_shard(value)
    assert f"{index}/{count}" == value


@pytest.mark.parametrize("value", ["0/3", "4/3", "x", "3", "1/0", "-1/3", "1/3/4", "/3", " 1/3"])
def test_a_bad_shard_is_a_usage_error_naming_it(value, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", f"--shard={value}"])
    err = capsys.readouterr().err.splitlines()[-1]
    assert stop.value.code == cli.EXIT_INFRA, err
    assert err == (f"dspark-conformance run: error: argument --shard: expected I/N, shard I of N with "
                   f"1 <= I <= N (e.g. 3/24), got {value!r}"), err


# Collects (runs nothing) the suite's pytest commands one after another in one interpreter
# (torch and the suite import once: 7 collections in 5 s, where 7 processes took 50 s on 2
# loaded cores); prints each one's exit code and collected case ids as JSON.
_COLLECT = """
import json, sys
import pytest
from conformance.plugin import is_suite_item, item_case_id

class Collected:
    ids = None

    def pytest_collection_finish(self, session):
        self.ids = [item_case_id(item) for item in session.items if is_suite_item(item)]

out = []
for args in json.loads(sys.argv[1]):
    collected = Collected()
    out.append([int(pytest.main(args, plugins=[collected])), collected.ids])
print(json.dumps(out))
"""


def _collect(forms: list[dict]) -> tuple[list[tuple[int, list[str] | None]], str]:
    """``(exit code, collected case ids)`` of the suite's pytest for each ``pytest_command``
    keyword set in ``forms`` (the selection :data:`SELECTION`, nothing run), and their stderr."""
    argvs = [pytest_command(impl="reference", device="cpu", json_path=Path(os.devnull), workers="0",
                            keyword=SELECTION, extra=["--collect-only"], **form)[3:] for form in forms]
    done = subprocess.run([sys.executable, "-c", _COLLECT, json.dumps(argvs)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **PYTEST_ENV}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [tuple(result) for result in json.loads(done.stdout.strip().splitlines()[-1])], done.stderr


def test_the_shards_of_both_phases_partition_the_selection():
    """The parallel and serial phases of shards 1-3 together collect each case of the
    unsharded selection once, each shard its round-robin part in both phases together;
    the latency_bound cases (the serial phase's) spread over the shards too. pytest itself
    refuses a shard out of range."""
    count = 3
    keys = [(index, phase) for index in range(1, count + 1) for phase in ("parallel", "serial")]
    results, stderr = _collect([{}, *({"shard": (index, count), "phase": phase} for index, phase in keys),
                                {"shard": (4, 3)}])
    (code, whole), *phases, (bad_code, _) = results
    assert code == 0 and len(whole) == len(set(whole)) == 15, whole
    assert all(code in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED) for code, _ in phases), phases
    shards = {key: set(ids) for key, (_, ids) in zip(keys, phases)}
    assert sum(map(len, shards.values())) == len(whole) and set().union(*shards.values()) == set(whole), shards
    for index in range(1, count + 1):
        assert shards[index, "parallel"] | shards[index, "serial"] == shard_cases(whole, index, count)
    assert sum(bool(shards[index, "serial"]) for index in range(1, count + 1)) > 1, shards
    assert bad_code == pytest.ExitCode.USAGE_ERROR, stderr
    assert "--dspark-shard: expected I/N, shard I of N with 1 <= I <= N (e.g. 3/24), got '4/3'" in stderr, stderr


def test_the_phases_of_a_shard_keep_its_selection():
    """The runner's phases merged (``merge_phases``): a shard's selection is kept where one
    phase knows it (a phase whose workers were all interrupted sent none)."""
    digest = selection_digest(["S6/a", "S6/b"])
    phase = {"tests": [], "wall_s": 1.0, "selected_by_section": {"S6": 1}, "exit_status": 0, "shard": [1, 2]}
    _, merged = merge_phases((0, {**phase, "shard_selection": None}), (0, {**phase, "shard_selection": digest}))
    assert (merged["shard"], merged["shard_selection"]) == ([1, 2], digest)


# ----------------------------------------------------------------------------- runs and their merge
def _run_command(report: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "conformance.cli", "run", "--impl", MUTANT, "--report", str(report),
            "-k", SELECTION, *args]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One unsharded run (``whole``) and shards 1-3 of it (``shard-I``; shard 2 with two
    workers, whose selection only they know: the xdist controller collects nothing), started
    side by side."""
    root = tmp_path_factory.mktemp("shards")
    commands = {"whole": _run_command(root / "whole", "--workers", "0")}
    for index in (1, 2, 3):
        workers = ["--workers", "2" if index == 2 else "0"]
        commands[f"shard-{index}"] = _run_command(root / f"shard-{index}", "--shard", f"{index}/3", *workers)
    procs = {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
             for name, cmd in commands.items()}
    for name, proc in procs.items():
        out = proc.communicate(timeout=600)[0]
        (root / f"{name}.log").write_text(out)
    return root


def _results(report: Path) -> dict:
    return json.loads((report / "results.json").read_text())


def test_each_shard_records_its_part_of_the_selection(runs):
    whole = _results(runs / "whole")
    digest = selection_digest(t["case"] for t in whole["tests"])
    for index in (1, 2, 3):
        payload = _results(runs / f"shard-{index}")
        assert payload["shard"] == [index, 3] and payload["shard_selection"] == digest, payload.get("shard_selection")
        assert {t["case"] for t in payload["tests"]} == shard_cases((t["case"] for t in whole["tests"]), index, 3)
        assert f"; shard {index}/3 of 15 selected cases" in (runs / f"shard-{index}.log").read_text()
    # shard 3 holds none of the failures: its own verdict passes, the merged one must not
    assert (_results(runs / "shard-3")["overall"], _results(runs / "whole")["overall"]) == ("PASS", "FAIL")


def test_the_merged_shards_are_the_unsharded_run(runs, tmp_path, capsys):
    out = tmp_path / "merged"
    code = cli.main(["merge-reports", str(out), *(str(runs / f"shard-{i}") for i in (3, 1, 2))])
    whole, merged = _results(runs / "whole"), _results(out)
    assert (code, merged["overall"], merged["exit_code"]) == (whole["exit_code"], whole["overall"], whole["exit_code"])
    assert sorted(t["case"] for t in merged["tests"]) == sorted(t["case"] for t in whole["tests"])
    assert {(t["case"], t["outcome"]) for t in merged["tests"]} == {(t["case"], t["outcome"]) for t in whole["tests"]}
    assert merged["selected_by_section"] == whole["selected_by_section"]
    assert "shard" not in merged and merged["shards"]["count"] == 3
    assert merged["shards"]["reports"] == [str(runs / f"shard-{i}") for i in (1, 2, 3)]
    printed = capsys.readouterr().out
    assert "merged from 3 shards" in printed and "overall: FAIL" in printed
    assert "merged from 3 shards" in (out / "report.md").read_text() and (out / "report.html").exists()
    junit = [(c.get("classname"), c.get("name")) for c in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    assert len(junit) == len(set(junit)) == len(whole["tests"])
    assert all((runs / f"shard-{i}" / "junit.xml").exists() for i in (1, 2, 3))  # the sources stay


def _shards_copy(runs: Path, tmp_path: Path) -> list[Path]:
    copies = []
    for index in (1, 2, 3):
        shutil.copytree(runs / f"shard-{index}", tmp_path / f"shard-{index}")
        copies.append(tmp_path / f"shard-{index}")
    return copies


def _edit(report: Path, change) -> None:
    payload = _results(report)
    change(payload)
    (report / "results.json").write_text(json.dumps(payload))


def _passing(payload: dict) -> None:
    """A shard's results.json as if its failed cases had passed, its verdict PASS."""
    for record in payload["tests"]:
        if record["outcome"] == "failed":
            record.update(outcome="passed", reason="", failure=None)
    payload.update(overall="PASS", exit_code=cli.EXIT_PASS, exit_status=0)


def test_the_merged_verdict_is_that_of_all_the_records(runs, tmp_path, capsys):
    """Neither a shard's verdict nor its exit code decides: shard 1 made to pass, the merge
    still fails by shard 2's failure; shard 2 made to pass too, it passes."""
    shards = _shards_copy(runs, tmp_path)
    _edit(shards[0], _passing)
    assert cli.main(["merge-reports", str(tmp_path / "out"), *map(str, shards)]) == cli.EXIT_FAIL
    assert _results(tmp_path / "out")["overall"] == "FAIL"
    assert [t["case"] for t in _results(tmp_path / "out")["tests"] if t["outcome"] == "failed"] == [
        t["case"] for t in _results(shards[1])["tests"] if t["outcome"] == "failed"]
    _edit(shards[1], _passing)
    assert cli.main(["merge-reports", str(tmp_path / "out"), *map(str, shards)]) == cli.EXIT_PASS
    assert _results(tmp_path / "out")["overall"] == "PASS"
    assert "overall: PASS" in capsys.readouterr().out.split("overall: FAIL")[-1]


def test_an_interrupted_shard_makes_the_merge_interrupted(runs, tmp_path, capsys):
    """A shard stopped by a signal (a job's timeout) keeps its finished cases' records and
    counts the others as not run: the merge reports them and reads INTERRUPTED (exit 3)."""
    shards = _shards_copy(runs, tmp_path)
    for shard in shards:
        _edit(shard, _passing)

    def interrupted(payload: dict) -> None:
        payload["tests"].pop()
        payload.update(exit_status=int(pytest.ExitCode.INTERRUPTED), overall="INTERRUPTED", exit_code=cli.EXIT_INFRA)

    _edit(shards[2], interrupted)
    assert cli.main(["merge-reports", str(tmp_path / "out"), *map(str, shards)]) == cli.EXIT_INFRA
    merged = _results(tmp_path / "out")
    assert merged["overall"] == "INTERRUPTED" and len(merged["tests"]) == 14
    assert "1 of the 15 selected cases did not run" in capsys.readouterr().out


def _refused(argv: list[str], capsys) -> str:
    code = cli.main(["merge-reports", *argv])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INFRA, err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("key, value", [("impl", "toy"), ("device", "cuda"), ("base_seed", 7), ("budget", 0.5),
                                        ("replay_env", {"DSPARK_X_LEDGER": "off"})])
def test_merge_refuses_shards_of_different_runs(runs, tmp_path, capsys, key, value):
    shards = _shards_copy(runs, tmp_path)
    _edit(shards[2], lambda payload: payload.__setitem__(key, value))
    err = _refused([str(tmp_path / "out"), *map(str, shards)], capsys)
    assert err.startswith(f"dspark-conformance merge-reports: sources: the shards differ in {key}: "), err
    assert f"{value!r} in {shards[2]}" in err, err
    assert not (tmp_path / "out" / "results.json").exists()


def test_merge_refuses_a_case_in_two_shards(runs, tmp_path, capsys):
    shards = _shards_copy(runs, tmp_path)
    first = _results(shards[0])["tests"][0]
    _edit(shards[1], lambda payload: payload["tests"].append(copy.deepcopy(first)))
    err = _refused([str(tmp_path / "out"), *map(str, shards)], capsys)
    assert f"sources: case {first['case']!r} is in both {shards[0]} and {shards[1]}" in err, err


def test_merge_refuses_an_incomplete_or_repeated_set(runs, tmp_path, capsys):
    shards = [str(runs / f"shard-{i}") for i in (1, 2, 3)]
    out = str(tmp_path / "out")
    assert _refused([out, shards[0], shards[2]], capsys).endswith(
        "sources: shard 2 of 3 missing (each of 1..3 is needed once)")
    assert _refused([out, shards[1]], capsys).endswith("sources: shards 1, 3 of 3 missing (each of 1..3 is needed once)")
    assert _refused([out, *shards, shards[1]], capsys).endswith(f"sources: {shards[1]} and {shards[1]} are both shard 2/3")


def test_merge_refuses_shards_of_other_counts_or_selections(runs, tmp_path, capsys):
    shards = _shards_copy(runs, tmp_path)
    out = str(tmp_path / "out")
    _edit(shards[2], lambda payload: payload.__setitem__("shard", [3, 4]))
    assert "sources: the shards are of different counts: " in _refused([out, *map(str, shards)], capsys)
    _edit(shards[2], lambda payload: payload.update(shard=[3, 3], shard_selection={"cases": 14, "sha256": "0" * 16}))
    err = _refused([out, *map(str, shards)], capsys)
    assert "sources: the shards were dealt from different selections of cases" in err and "from 14" in err, err


def test_merge_refuses_reports_that_are_no_shards_or_have_no_verdict(runs, tmp_path, capsys):
    shards = _shards_copy(runs, tmp_path)
    out = str(tmp_path / "out")
    err = _refused([out, str(runs / "whole"), *map(str, shards)], capsys)
    assert err.endswith(f"sources: {runs / 'whole'} is no shard's report: its results.json has no 'shard' "
                        "(run each shard with --shard I/N)"), err
    _edit(shards[0], lambda payload: payload.update(tests=[], overall="ERROR", error="pytest exited 4 without results"))
    err = _refused([out, *map(str, shards)], capsys)
    assert f"sources: {shards[0]} (shard 1/3) ended without a verdict (pytest exited 4 without results)" in err, err
    with pytest.raises(SystemExit) as stop:
        cli.main(["merge-reports", str(shards[1]), *map(str, shards)])
    assert stop.value.code == cli.EXIT_INFRA and "is also a source" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(["merge-reports", out, str(tmp_path)])
    assert stop.value.code == cli.EXIT_INFRA and "expected a shard's report directory" in capsys.readouterr().err


# ----------------------------------------------------------------------------- cases run again
def test_cases_run_again_are_not_sharded_again(tmp_path):
    """A case that did not run (its process lost the CUDA context) runs again by its case id
    alone; sharding that one-case selection would deal it to shard 1 and drop it from shard 2."""
    cases = ["S6/match-expected/integer-1", "S6/match-expected/integer-3", "S6/range/match-expected",
             "S6/range/multinomial"]
    command = [sys.executable, "-m", "conformance.cli", "run", "--workers", "0", "--report", str(tmp_path),
               "--impl", "tests.toy_adapters:loses_the_cuda_context", "--shard", "2/2",
               *(arg for case in cases for arg in ("--case", case))]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    tests = _results(tmp_path)["tests"]
    assert {t["case"] for t in tests} == {cases[1], cases[3]}, done.stdout + done.stderr
    assert "running them again in a fresh process (round 1)" in done.stderr, done.stderr
    assert all("illegal memory access" in t["reason"] and "not run" not in t["reason"] for t in tests), tests


def test_a_shard_dealt_no_case_says_there_are_more_shards_than_cases(tmp_path):
    command = [sys.executable, "-m", "conformance.cli", "run", "--workers", "0", "--report", str(tmp_path),
               "--shard", "2/2", "--case", "S6/match-expected/integer-1"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == cli.EXIT_INFRA, done.stdout + done.stderr
    message = "--shard 2/2: the shard holds none of the 1 selected cases: run at most 1 shards"
    assert message in done.stderr and _results(tmp_path)["error"] == message, done.stderr
    assert _results(tmp_path)["shard"] == [2, 2]
