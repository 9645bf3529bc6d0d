"""The mutation driver's pure parts (CI/mutation/, issue 17): the decorator rewrite keeps
behaviour, and the merge counts baseline survivors, gaps closed on re-check and the score
(a function changed since an earlier run starting over)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "CI" / "mutation"))
import driver  # noqa: E402
import merge  # noqa: E402

SOURCE = '''
import functools
from dataclasses import dataclass


def twice(f):
    @functools.wraps(f)
    def inner(*a):
        return 2 * f(*a)
    return inner


@dataclass(frozen=True)
class Box:
    x: int

    def __post_init__(self):
        if self.x < 0:
            raise ValueError("x")

    @property
    def double(self):
        return 2 * self.x


@twice
@twice
def four(x):
    return x
'''


def test_undecorate_keeps_behaviour_and_removes_every_decorator():
    rewritten = driver.undecorate(SOURCE)
    assert "@" not in rewritten.replace("@functools.wraps", "")
    assert "four = twice(twice(four))" in rewritten and "Box = dataclass(frozen=True)(Box)" in rewritten
    spaces = [{}, {}]
    exec(compile(SOURCE, "orig", "exec"), spaces[0])
    exec(compile(rewritten, "rewritten", "exec"), spaces[1])
    for space in spaces:
        assert space["four"](3) == 12 and space["Box"](3).double == 6
        with pytest.raises(ValueError):
            space["Box"](-1)
        with pytest.raises(AttributeError):  # frozen
            space["Box"](1).x = 2


def test_undecorate_leaves_triton_kernels_alone():
    source = "import triton\n\n\n@triton.jit\ndef kernel(x):\n    pass\n"
    assert driver.undecorate(source) == source


def _result(status):
    return {"module": "m", "section": "S6", "tests": "t", "tool": "mutmut", "tool_version": "3.3.1",
            "statistical_budget": 0.25, "source_sha256": "0", "status": status, "diffs": {}}


def test_summarise_counts_gaps_closed_and_equivalents():
    base = _result({"a": "killed", "b": "killed-statistical", "c": "survived", "d": "survived", "e": "no-tests",
                    "f": "survived"})
    recheck = _result({"c": "killed", "d": "survived", "f": "survived"})
    triage = {"c": {"verdict": "gap", "why": "w", "test": "t"}, "d": {"verdict": "equivalent", "why": "w"},
              "e": {"verdict": "equivalent", "why": "w"}}
    summary, rows = merge.summarise([base, recheck], triage)
    s = summary["m"]
    assert (s["mutants"], s["killed"], s["killed_statistical"], s["survived_equivalent"], s["survived_gap"],
            s["gap_closed"], s["untriaged"], s["no_tests"]) == (6, 2, 1, 2, 1, 1, 1, 1)
    assert s["non_equivalent"] == 4 and s["score"] == 0.75 and s["score_baseline"] == 0.5
    assert [r[0] for r in rows["m"]] == ["c", "d", "e", "f"]


def _diff(line: str) -> str:
    return f"--- p\n+++ p\n@@ -1 +1 @@\n-    x = 1\n+    {line}"


def test_a_function_changed_since_an_earlier_run_starts_over():
    """mutmut numbers a function's mutants afresh, so after a source change ``f__mutmut_1``
    names another mutant: a run whose diff of it differs from the earlier one drops the
    earlier records of every mutant of ``f`` (they become that run's), and of ``f`` only."""
    old = _result({"m.x_f__mutmut_1": "survived", "m.x_f__mutmut_2": "killed", "m.x_f__mutmut_3": "killed",
                   "m.x_g__mutmut_1": "killed"})
    old["diffs"] = {"m.x_f__mutmut_1": _diff("x = 2")}
    new = _result({"m.x_f__mutmut_1": "survived", "m.x_f__mutmut_2": "survived"})
    new["diffs"] = {"m.x_f__mutmut_1": _diff("x = None"), "m.x_f__mutmut_2": _diff("x = 2")}
    first, last, diffs = merge.records([old, new])
    assert first == {"m.x_f__mutmut_1": ("m", "survived"), "m.x_f__mutmut_2": ("m", "survived"),
                     "m.x_g__mutmut_1": ("m", "killed")}
    assert diffs == new["diffs"] and last["m.x_f__mutmut_2"] == "survived"
    same = _result({"m.x_f__mutmut_1": "killed"})
    same["diffs"] = {}
    recheck = _result({"m.x_f__mutmut_2": "killed"})
    recheck["diffs"] = {}
    first, last, _ = merge.records([old, same, recheck])  # no differing diff: nothing starts over
    assert first["m.x_f__mutmut_1"] == ("m", "survived") and first["m.x_f__mutmut_3"] == ("m", "killed")
    assert last["m.x_f__mutmut_1"] == "killed" and first["m.x_f__mutmut_2"] == ("m", "killed")
    summary, _ = merge.summarise([old, new], {})
    assert summary["m"]["mutants"] == 3 and summary["m"]["untriaged"] == 2


def test_a_run_records_every_mutants_diff_and_the_sample_reads_runs_in_the_order_they_ran(tmp_path, monkeypatch):
    """A run keeps the diff of every mutant it checked, killed ones too, and its start time:
    after a source change whose new mutants are all killed (session 27's
    ``MarkovHead.__init__``), the run must still start the function over, and the sample
    must read it after the older runs whatever their folder names (raw/session9 sorts after
    raw/session27), or the function stays "changed since the triage" for ever; and a
    function whose mutant names differ from the recorded ones is changed."""
    names = ["dspark_ref.scheduler.x_f__mutmut_1", "dspark_ref.scheduler.x_f__mutmut_2"]
    table = {names[0]: _diff("x = None"), names[1]: _diff("x = 3")}
    monkeypatch.setattr(driver, "mutants", lambda module, root=None: table)
    meta = tmp_path / "work" / "scheduler" / "mutants" / "dspark_ref" / "scheduler.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text('{"exit_code_by_key": {"%s": 1, "%s": 1}}' % tuple(names))
    out = tmp_path / "raw" / "session27"
    new = driver.run_module("scheduler", (0, 1), 1, out, tmp_path / "work", 0.25, deadline=0.0, names=names,
                            reuse=True)
    assert new["status"] == dict.fromkeys(names, "killed") and new["diffs"] == table and new["started"] > 0
    assert new["functions"] == {"dspark_ref.scheduler.x_f": names}
    old = {**_result({names[0]: "survived", names[1]: "killed"}), "module": "scheduler"}
    old["diffs"] = {names[0]: _diff("x = 2")}  # before the change, f__mutmut_1 was another mutant
    (tmp_path / "raw" / "session9").mkdir()
    (tmp_path / "raw" / "session9" / "scheduler.shard0of1.json").write_text(json.dumps(old))
    assert driver._unchanged_since_triage("scheduler", table, tmp_path) == names
    first, _, _ = merge.records([old, new])
    assert first == {n: ("scheduler", "killed") for n in names}
    # a function whose mutants are now other names than recorded changed, even where every
    # recorded mutant was killed (no diff to compare: runs before session 27 kept none)
    g = [f"dspark_ref.scheduler.x_g__mutmut_{i}" for i in (1, 2, 3)]
    old["status"].update(dict.fromkeys(g, "killed"))
    (tmp_path / "raw" / "session9" / "scheduler.shard0of1.json").write_text(json.dumps(old))
    assert driver._unchanged_since_triage("scheduler", {**table, g[0]: "", g[1]: ""}, tmp_path) == names
    assert driver._unchanged_since_triage("scheduler", {**table, **dict.fromkeys(g, "")}, tmp_path) == names + g
    # a run of g's two mutants now starts g over: g__mutmut_3 is gone (and h, unchanged, stays)
    again = {**_result(dict.fromkeys(g[:2], "killed")), "module": "scheduler",
             "functions": {"dspark_ref.scheduler.x_g": g[:2]}}
    h = {**_result({"dspark_ref.scheduler.x_h__mutmut_1": "survived"}), "module": "scheduler"}
    first, last, _ = merge.records([old, h, again, {**again, "status": {g[0]: "survived"}}])  # then a re-check
    assert sorted(first) == sorted([*names, *g[:2], "dspark_ref.scheduler.x_h__mutmut_1"])
    assert first[g[0]] == ("scheduler", "killed") and last[g[0]] == "survived"


def test_every_suite_file_runs_with_the_modules_of_its_sections():
    """A conformance file with S<n> cases must be in ``SECTION_TESTS`` for every module of
    section S<n> (a file added without it leaves that module's mutants unreached: the S3/S5
    degenerate, S5 invariance / tensor-parallel and S9 round files once were)."""
    suite = Path(__file__).resolve().parents[1] / "conformance" / "suite"
    missing = []
    for path in sorted(suite.glob("test_*.py")):
        rel = f"conformance/suite/{path.name}"
        for section in sorted(set(re.findall(r"^def test_(S\d+)_", path.read_text(), re.M))):
            for module, (sec, files) in driver.SECTION_TESTS.items():
                if sec == section and rel not in files:
                    missing.append(f"{module} ({section}): {rel}")
    assert not missing, missing


def test_files_that_start_rank_processes_run_outside_mutmut(tmp_path):
    """Every suite file that starts rank processes (``support.tp_ranks``) is in
    ``SPAWNING_TESTS``, which mutmut's own test list leaves out (its stats run cannot trace a
    new process; session 9's H200 run of verify checked no mutant) and the driver runs on
    the survivors."""
    suite = Path(__file__).resolve().parents[1] / "conformance" / "suite"
    spawning = sorted(f"conformance/suite/{p.name}" for p in suite.glob("test_*.py")
                      if "support.tp_ranks" in p.read_text())
    assert spawning and spawning == sorted(driver.SPAWNING_TESTS)
    config = (driver.prepare("verify", tmp_path) / "setup.cfg").read_text()
    listed = config.split("tests_dir =")[1].split()
    assert {"conformance/suite/test_verify_rule.py", "conformance/suite/test_verify_lossless.py"} <= set(listed)
    assert not set(listed) & set(driver.SPAWNING_TESTS), listed
