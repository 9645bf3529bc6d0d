"""Mutation testing of ``dspark_ref`` with mutmut 3.3.1: run one shard, merge shards, CI sample.

Issue 17 (items 1-2). Each core module's mutants run against the conformance tests of its
SPEC section on the reference adapter (``SECTION_TESTS``): mutmut runs the section's EXACT
tests (``-m "not statistical"``, fork per mutant, only the tests that called the mutated
function, ``-x``); every mutant that survives them, or that no exact test reached, then runs
the section's statistical tests at a reduced ``--dspark-budget`` (alpha unchanged, so a
failure there is a detection at the suite's own alpha; only the power is lower).

Why mutmut and not cosmic-ray: mutmut forks an already-imported test process per mutant
(no torch import, no pytest start-up per mutant: ~2-3 s saved on each of thousands of
mutants), runs only the tests that reached the mutated function, names every mutant
stably (``dspark_ref.<module>.x_<function>__mutmut_<n>``) so shards are slices of a sorted
name list, and needs four small wheels; cosmic-ray rewrites the file on disk per mutant,
starts a fresh test process for each, and pulls a dozen dependencies (sqlalchemy,
gitpython, aiohttp, ...).

Layout of one module's run (``WORK/<module>/``): a copy of ``dspark_ref``, ``conformance``,
``fixtures``, ``conftest.py`` and ``pyproject.toml``, plus a ``setup.cfg`` that points
mutmut at that module only (so modules run in parallel processes, one work copy each).
mutmut skips decorated functions and classes; :func:`undecorate` rewrites ``@d`` into
``name = d(name)`` after the definition (identical semantics) in the WORK copy so that
``@torch.no_grad()`` entry points, ``@dataclass`` validators and ``@property`` getters are
mutated too. ``@triton.jit`` kernels stay decorated (Triton compiles the source; a
trampoline is not a kernel) and are not mutated: the report says so.

Commands (from the repository root)::

    python CI/mutation/driver.py run --modules simulated,scheduler --shard 0/1 --jobs 2 --out R
    python CI/mutation/driver.py merge R            # -> results/mutation/summary.json, results.md
    python CI/mutation/driver.py sample --count 30 --seed 17 --jobs 2   # CI: fails on an untriaged survivor

Result file per module and shard: ``R/<module>.shard<i>of<n>.json`` with every mutant's
status (``killed`` exact, ``killed-statistical``, ``survived``, ``timeout``, ``segfault``,
``suspicious``), mutmut's diff of every mutant (of survivors only before session 27), every
mutant name of the functions it touched (``functions``) and the run's start time
(``started``, seconds since the epoch; the sample reads runs in that order).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import functools
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = "mutmut"
TOOL_VERSION = "3.3.1"

#: module -> the conformance test files of its SPEC section (dspark_ref/__init__.py's table).
SECTION_TESTS = {
    # S1's tests reach the Markov block and the folded sampler (markov.py, folded.py); the
    # base-logits matmul of proposal.py is reached through the S9 loop (tiny_models).
    "proposal": ("S1", ("conformance/suite/test_proposal.py", "conformance/suite/test_speculative.py")),
    # markov.py also builds the heads of S1's layouts, S4's folded sessions and S9's rounds, whose
    # files catch 50 of its S2-only survivors (docs/mutation/README.md, session 8); S9's loop is
    # the only caller that hands a head a weight generator (the reference's tiny draft).
    "markov": ("S2", ("conformance/suite/test_markov.py", "conformance/suite/test_proposal.py",
                      "conformance/suite/test_folded.py", "conformance/suite/test_round.py",
                      "conformance/suite/test_speculative.py")),
    # S3's and S5's degenerate inputs and invariances, and S9's round, have their own files.
    "sampling": ("S3", ("conformance/suite/test_sampling.py", "conformance/suite/test_degenerate.py")),
    "tiled_sampling": ("S3", ("conformance/suite/test_sampling.py", "conformance/suite/test_degenerate.py")),
    "folded": ("S4", ("conformance/suite/test_folded.py",)),
    # verify.py's accepted counts also drive S9's loop (tau = accepted + 1), which test_speculative.py checks.
    "verify": ("S5", ("conformance/suite/test_verify_rule.py", "conformance/suite/test_verify_lossless.py",
                      "conformance/suite/test_degenerate.py", "conformance/suite/test_invariance.py",
                      "conformance/suite/test_tensor_parallel.py", "conformance/suite/test_speculative.py")),
    "simulated": ("S6", ("conformance/suite/test_simulated.py",)),
    "confidence": ("S7", ("conformance/suite/test_confidence.py",)),
    "scheduler": ("S8", ("conformance/suite/test_scheduler.py",)),
    "speculative": ("S9", ("conformance/suite/test_speculative.py", "conformance/suite/test_round.py")),
}
#: Section files whose implementation calls run in child processes (S5's tensor-parallel
#: cases: ``conformance.suite.support.tp_ranks`` runs each gloo rank in a Python process of its own).
#: mutmut cannot trace them: its stats run records which tests reach a function through a
#: trampoline that reads ``mutmut.config``, which a new process never loads
#: (``record_trampoline_hit`` raises, the stats run fails and no mutant is checked; H200
#: session 9). They stay out of mutmut's exact pass; the driver runs them, exact, on every
#: mutant that pass leaves alive (the trampoline of a named mutant needs no config).
SPAWNING_TESTS = ("conformance/suite/test_tensor_parallel.py",)
COPIED = ("dspark_ref", "conformance", "fixtures", "conftest.py", "pyproject.toml")
#: mutmut's exit-code convention (mutmut/__main__.py: status_by_exit_code), reduced.
STATUS_BY_EXIT = {1: "killed", 3: "killed", 0: "survived", 5: "no-tests", 33: "no-tests", 34: "skipped",
                  35: "suspicious", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout",
                  -9: "timeout", -11: "segfault", 2: "check-interrupted", None: "not-checked"}
STAT_TIMEOUT_S = 300
GRACE_S = 40


def _env(budget: float | None = None) -> dict:
    env = dict(os.environ)
    marker = '-m "not statistical"' if budget is None else f'-m statistical --dspark-budget {budget}'
    env["PYTEST_ADDOPTS"] = f'{marker} -p no:randomly -p no:cacheprovider'
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"  # fork-safe torch (no OpenMP pool in the parent) and one core per child
    env["PYTHONHASHSEED"] = "0"
    return env


def undecorate(source: str) -> str:
    """Rewrite decorated defs (top level and one class deep) as ``name = d(name)`` after them.

    ``@d1 @d2 def f`` is ``f = d1(d2(f))`` (Python reference, 8.7), so the rewrite keeps
    behaviour while making the function visible to mutmut. Definitions decorated with
    anything Triton are left alone. Returns the new source text.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits = []  # (first decorator line, def line, end line, indent, name, decorator sources)

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.decorator_list:
                decs = [ast.get_source_segment(source, d) for d in node.decorator_list]
                if not any("triton" in d for d in decs):
                    edits.append((node.decorator_list[0].lineno, node.lineno, node.end_lineno,
                                  " " * node.col_offset, node.name, decs))
            if isinstance(node, ast.ClassDef):
                visit(node.body)

    visit(tree.body)
    for first, def_line, end, indent, name, decs in sorted(edits, reverse=True):
        wrapped = name
        for dec in reversed(decs):
            wrapped = f"{dec}({wrapped})"
        lines.insert(end, f"{indent}{name} = {wrapped}\n")
        del lines[first - 1:def_line - 1]
    return "".join(lines)


@functools.lru_cache(maxsize=None)
def mutants(module: str, root: Path = REPO) -> dict[str, str]:
    """mutmut's mutants of ``dspark_ref/<module>.py`` (after :func:`undecorate`): name -> diff."""
    import difflib

    import libcst
    from mutmut.__main__ import read_mutant_function, read_original_function
    from mutmut.file_mutation import mutate_file_contents

    path = f"dspark_ref/{module}.py"
    code, names = mutate_file_contents(path, undecorate((root / path).read_text()))
    tree = libcst.parse_module(code)  # once: mutmut's own show() re-parses per mutant
    table = {}
    for n in sorted(names):
        name = f"dspark_ref.{module}.{n}"
        before, after = (libcst.Module([f(tree, name)]).code.strip().split("\n")
                         for f in (read_original_function, read_mutant_function))
        table[name] = "\n".join(difflib.unified_diff(before, after, path, path, lineterm=""))
    return table


def mutant_names(module: str, root: Path = REPO) -> list[str]:
    """All mutmut mutant names of the module, sorted (the shard order)."""
    return sorted(mutants(module, root))


def prepare(module: str, work: Path) -> Path:
    """Fresh work copy for one module; returns its directory."""
    wdir = work / module
    if wdir.exists():
        shutil.rmtree(wdir)
    wdir.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        src = REPO / name
        (shutil.copytree(src, wdir / name, ignore=ignore) if src.is_dir() else shutil.copy(src, wdir / name))
    target = wdir / "dspark_ref" / f"{module}.py"
    target.write_text(undecorate(target.read_text()))
    others = sorted(p.name for p in (wdir / "dspark_ref").glob("*.py") if p.name != f"{module}.py")
    tests = [t for t in SECTION_TESTS[module][1] if t not in SPAWNING_TESTS]
    (wdir / "setup.cfg").write_text(
        "[mutmut]\npaths_to_mutate = dspark_ref/\n"
        + "do_not_mutate =\n" + "".join(f"    dspark_ref/{o}\n" for o in others)
        + "also_copy =\n    conformance/\n    fixtures/\n    conftest.py\n"
        + "tests_dir =\n" + "".join(f"    {t}\n" for t in tests)
    )
    return wdir


def _mutmut(wdir: Path, args: list[str], log, timeout: float | None) -> int:
    """Run the mutmut CLI in ``wdir``; past ``timeout`` seconds its process group is killed
    (mutmut saves every result as it comes, so the finished mutants keep their status)."""
    # not "python -m mutmut": the trampolines import mutmut.__main__, which must be the loaded module
    cmd = [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.exit(cli())", *args]
    proc = subprocess.Popen(cmd, cwd=wdir, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return -9


def run_module(module: str, shard: tuple[int, int], jobs: int, out: Path, work: Path, budget: float,
               deadline: float = float("inf"), names: list[str] | None = None,
               exact_deadline: float = float("inf"), reuse: bool = False,
               skip_equivalent: bool = False, recheck_timeout: float = STAT_TIMEOUT_S) -> dict:
    """mutmut (exact tests) on this shard of the module's mutants until ``exact_deadline``
    (``time.time()``; mutants not reached stay not-checked), then the statistical tests on
    the survivors until ``deadline``; later ones are recorded not-run. ``reuse``: keep the
    exact results of an earlier run in ``work`` (re-check statistically only);
    ``skip_equivalent``: no statistical re-check of a survivor the triage judged equivalent."""
    started = time.time()
    wdir = work / module if reuse else prepare(module, work)
    if names is None:
        names = mutant_names(module)[shard[0]::shard[1]]
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{module}.shard{shard[0]}of{shard[1]}"
    with open(out / f"{tag}.log", "a" if reuse else "w") as log:
        if reuse:
            rc = 0
        else:
            timeout = None if exact_deadline == float("inf") else max(1.0, exact_deadline - time.time())
            rc = _mutmut(wdir, ["run", "--max-children", str(jobs), *names], log, timeout) if names else 0
    meta_path = wdir / "mutants" / "dspark_ref" / f"{module}.py.meta"
    codes = json.loads(meta_path.read_text())["exit_code_by_key"] if meta_path.exists() else {}
    if "Unable to force test failures" in (out / f"{tag}.log").read_text(errors="replace"):
        codes = dict.fromkeys(names, 33)  # no test of the section calls a function of the module
    status = {n: STATUS_BY_EXIT.get(codes.get(n), f"exit-{codes.get(n)}") for n in names}
    table = mutants(module)
    # mutmut's wall-clock timeout (3.3.1 __main__.timeout_checker) compares every child with
    # 15 x (1 s + the test time of whichever mutant of the file it iterates over), the
    # smallest estimate in effect, so a busy host turns slow kills and survivors into
    # "timeout": re-run those once with the exact tests and a plain STAT_TIMEOUT_S limit.
    redo = [n for n, s in status.items() if s == "timeout"]

    def left() -> float:  # a re-check started before the deadline ends at most GRACE_S after it
        return min(recheck_timeout, max(5.0, deadline + GRACE_S - time.time()))

    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        for n, s in zip(redo, pool.map(
                lambda n: _pytest(wdir / "mutants", module, n, None, left()) if time.time() < deadline else "timeout",
                redo)):
            status[n] = s
    spawning = [t for t in SECTION_TESTS[module][1] if t in SPAWNING_TESTS]
    alive = [n for n, s in status.items() if s in ("survived", "no-tests")] if spawning else []
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        for n, s in zip(alive, pool.map(
                lambda n: _pytest(wdir / "mutants", module, n, None, left(), spawning)
                if time.time() < deadline else "not-run", alive)):
            if s == "killed":
                status[n] = s
    # statistical re-checks: survivors of the exact tests first, mutants no exact test reached
    # after them, argument checks and messages last in each (a deadline may cut them)
    if skip_equivalent:
        from merge import equivalent_keys  # CI/mutation/merge.py

        known = equivalent_keys()
    second = sorted((n for n, s in status.items() if s in ("survived", "no-tests")
                     and not (skip_equivalent and triage_key(n, table[n]) in known)),
                    key=lambda n: (status[n] == "no-tests",
                                   any(w in "".join(change(table[n])) for w in ("check", "raise", "Error("))))
    statistical = {n: "skipped-equivalent" for n, s in status.items() if s in ("survived", "no-tests")}
    statistical.update(dict.fromkeys(second, "not-run"))

    def one(n):
        if time.time() > deadline:
            return n, "not-run"
        outcome = _pytest(wdir / "mutants", module, n, budget, left())
        print(f"{module}: statistical {outcome}: {n}", flush=True)
        return n, outcome

    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        for n, s in pool.map(one, second):
            statistical[n] = s
            if s.startswith("killed"):  # a statistical-run timeout is wall time on a busy host, not a kill
                status[n] = s
    # every mutant's diff, killed ones too: a later merge or sample sees that a function changed
    # since this run even where all its mutants were killed (merge.records starts it over)
    diffs = {n: table[n] for n in status}
    # and every mutant name of each function it touched: a function whose names differ from
    # the recorded ones changed (merge.records starts it over), even where no diff shows it
    touched = {_function_of(n) for n in status}
    functions = {f: sorted(n for n in table if _function_of(n) == f) for f in sorted(touched)}
    source = (REPO / "dspark_ref" / f"{module}.py").read_bytes()
    result = {
        "module": module, "section": SECTION_TESTS[module][0], "tests": " ".join(SECTION_TESTS[module][1]),
        "tool": TOOL, "tool_version": TOOL_VERSION, "shard": list(shard), "mutmut_rc": rc,
        "statistical_budget": budget, "source_sha256": hashlib.sha256(source).hexdigest(),
        "started": round(started, 1), "seconds": round(time.time() - started, 1), "status": status,
        "statistical": statistical, "diffs": diffs, "functions": functions,
    }
    (out / f"{tag}.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    return result


def _cmd_run(a) -> int:
    start = time.time()
    modules = list(SECTION_TESTS) if a.modules == "all" else a.modules.split(",")
    index, count = (int(x) for x in a.shard.split("/"))
    work = Path(a.work or (Path(os.environ.get("TMPDIR", "/tmp")) / f"dspark-mutation-{index}"))
    chosen = Path(a.names).read_text().split() if a.names else None

    def names_of(m):
        every = mutant_names(m)
        return [n for n in every if n in chosen] if chosen is not None else every[index::count]

    sizes = {m: len(names_of(m)) for m in modules}
    total = sum(sizes.values()) or 1
    # children per module in proportion to its mutants; modules run concurrently
    share = {m: max(1, round(a.jobs * sizes[m] / total)) for m in modules}
    print(json.dumps({"mutants": sizes, "children": share}), flush=True)
    with concurrent.futures.ThreadPoolExecutor(len(modules)) as pool:
        futures = {m: pool.submit(run_module, m, (index, count), share[m], Path(a.out), work, a.budget,
                                  start + a.statistical_until, names_of(m), start + a.exact_until,
                                  a.reuse, a.skip_equivalent, a.recheck_timeout)
                   for m in modules if sizes[m]}
        for m, f in futures.items():
            r = f.result()
            counts = {}
            for s in r["status"].values():
                counts[s] = counts.get(s, 0) + 1
            print(m, r["seconds"], "s", json.dumps(counts, sort_keys=True), flush=True)
    return 0


def change(diff: str) -> list[str]:
    """The changed lines of a mutant's diff (its identity for the triage, whatever its number)."""
    return [line for line in diff.splitlines()[3:] if line[:1] in "+-"]


def triage_key(name: str, diff: str) -> tuple:
    """(function, changed lines): matches a triage entry across renumbering of mutants."""
    return name.rpartition("__mutmut_")[0], tuple(change(diff))


def _pytest(cwd: Path, module: str, name: str, budget: float | None, timeout: float = STAT_TIMEOUT_S,
            tests: list[str] | None = None) -> str:
    """One mutant against the section's exact tests (``budget`` None) or statistical ones;
    ``tests``: only these files."""
    env = _env(budget)
    env["MUTANT_UNDER_TEST"] = name
    if tests is None:
        tests = [*SECTION_TESTS[module][1]]
    try:
        rc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", *tests], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return "timeout" if budget is None else "statistical-timeout"
    killed = "killed" if budget is None else "killed-statistical"
    return {0: "survived", 1: killed, 5: "survived"}.get(rc, f"error-{rc}")


def _unchanged_since_triage(module: str, current: dict[str, str], results: Path) -> list[str]:
    """The mutants of ``module`` the recorded runs (``results / "raw"``) saw, in functions whose
    recorded mutants still have the same names and changes: a mutant of a function added, or
    changed, since the triage has no verdict to hold the sample to."""
    from merge import records  # CI/mutation/merge.py: a function a later run saw changed starts over

    runs = [json.loads(path.read_text()) for path in sorted((results / "raw").glob(f"*/{module}.*.json"))]
    # in the order they ran (a run's start time; files older than that field first, by path:
    # raw/session9 sorts after raw/session27)
    runs.sort(key=lambda r: r.get("started", 0.0))
    recorded_status, _, recorded_diffs = records(runs)
    changed = {_function_of(n) for n, diff in recorded_diffs.items()
               if n in current and triage_key(n, current[n]) != triage_key(n, diff)}
    # a function whose mutants are other names than recorded (more or fewer) changed too,
    # even where no recorded diff shows it (before session 27 runs kept survivors' diffs only)
    recorded, now = {}, {}
    for names, table in ((recorded_status, recorded), (current, now)):
        for n in names:
            table.setdefault(_function_of(n), set()).add(n)
    changed |= {f for f in recorded.keys() & now.keys() if recorded[f] != now[f]}
    return sorted(n for n in current if n in recorded_status and _function_of(n) not in changed)


def _function_of(name: str) -> str:
    """``dspark_ref.m.x_f__mutmut_3`` -> ``dspark_ref.m.x_f``."""
    return name.rsplit("__mutmut_", 1)[0]


def _cmd_sample(a) -> int:
    """CI: a seeded sample of mutants of the triaged modules; each must be killed (exact, or
    statistical at the recorded budget) or match a mutant the triage judged equivalent."""
    from mutmut.file_mutation import mutate_file_contents

    from merge import RESULTS, equivalent_keys  # CI/mutation/merge.py

    summary = json.loads((RESULTS / "summary.json").read_text())
    equivalent = equivalent_keys()
    modules = [m for m, s in summary.items() if s["untriaged"] == 0]
    names = []
    for module in modules:
        current = mutants(module)
        keep = _unchanged_since_triage(module, current, RESULTS)
        names += keep
        if len(keep) < len(current):
            print(f"mutation sample: {module}: {len(current) - len(keep)} of {len(current)} mutants are in functions "
                  "added or changed since the triage (not sampled: re-triage them, docs/mutation/README.md)")
    picked = sorted(random.Random(a.seed).sample(names, min(a.count, len(names))))
    print(f"mutation sample: seed {a.seed}, {len(picked)} of {len(names)} mutants of {modules}", flush=True)
    work = Path(a.work or (Path(os.environ.get("TMPDIR", "/tmp")) / "dspark-mutation-sample"))
    jobs = []
    for module in modules:
        mine = [n for n in picked if n.startswith(f"dspark_ref.{module}.")]
        if mine:
            wdir = prepare(module, work)
            target = wdir / "dspark_ref" / f"{module}.py"
            target.write_text(mutate_file_contents(f"dspark_ref/{module}.py", target.read_text())[0])
            clean = _pytest(wdir, module, "", None)  # no mutant active: must pass, or every "kill" is void
            if clean != "survived":
                print(f"mutation sample: the unmutated work copy of {module} fails its tests ({clean})")
                return 1
            jobs += [(wdir, module, n, summary[module]["statistical_budget"]) for n in mine]

    def one(job):
        wdir, module, n, budget = job
        if triage_key(n, mutants(module)[n]) in equivalent:  # passes whatever its tests say: not run
            print(f"ok  {'not run':19s} equivalent {n}", flush=True)
            return n, True
        outcome = _pytest(wdir, module, n, None)
        if outcome == "survived":
            outcome = _pytest(wdir, module, n, budget)
        ok = outcome.startswith("killed") or outcome == "timeout"
        print(f"{'ok ' if ok else 'BAD'} {outcome:19s} {'':10s} {n}", flush=True)
        return n, ok

    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        bad = [n for n, ok in pool.map(one, jobs) if not ok]
    if bad:
        print(f"mutation sample: {len(bad)} of {len(picked)} mutants survive and are not triaged equivalent "
              f"(a new gap, or a changed function to re-triage: docs/mutation/README.md): {bad}")
        return 1
    print(f"mutation sample: {len(picked)} mutants, every one killed or a triaged equivalent")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one shard of the mutants of some modules")
    r.add_argument("--modules", default="all", help="comma-separated module names, or all")
    r.add_argument("--shard", default="0/1", help="INDEX/COUNT: every COUNT-th mutant from INDEX")
    r.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    r.add_argument("--budget", type=float, default=0.25, help="--dspark-budget of the statistical pass")
    r.add_argument("--exact-until", type=float, default=float("inf"), metavar="S",
                   help="stop mutmut S seconds after the start (mutants not reached: not-checked)")
    r.add_argument("--statistical-until", type=float, default=float("inf"), metavar="S",
                   help="start no statistical re-check later than S seconds after the start")
    r.add_argument("--recheck-timeout", type=float, default=STAT_TIMEOUT_S, metavar="S",
                   help="wall-clock limit of one re-check run (timeouts, statistical)")
    r.add_argument("--reuse", action="store_true", help="keep the exact results already in --work")
    r.add_argument("--skip-equivalent", action="store_true",
                   help="no statistical re-check of survivors docs/mutation/triage.json judges equivalent")
    r.add_argument("--names", default=None, help="a file of mutant names (one a line) instead of the shard")
    r.add_argument("--out", default="reports/mutation")
    r.add_argument("--work", default=None)
    s = sub.add_parser("sample", help="CI: a seeded sample must be killed or triaged equivalent")
    s.add_argument("--count", type=int, default=30)
    s.add_argument("--seed", type=int, default=17)
    s.add_argument("--jobs", type=int, default=2)
    s.add_argument("--out", default="reports/mutation-sample")
    s.add_argument("--work", default=None)
    m = sub.add_parser("merge", help="results files -> results/mutation/summary.json and results.md")
    m.add_argument("results", nargs="+")
    a = p.parse_args(argv)
    if a.cmd == "merge":
        from merge import merge
        return merge([Path(x) for x in a.results])
    return {"run": _cmd_run, "sample": _cmd_sample}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
