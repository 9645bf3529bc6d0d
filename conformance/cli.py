"""``dspark-conformance``: the main job.

``dspark-conformance run [--impl NAME] [--device cpu|cuda] [--report DIR]`` runs the
conformance suite (pytest underneath, xdist-parallel) on one implementation, prints the
conformance matrix by SPEC section and writes ``results.json``, ``report.md`` and
``junit.xml`` under ``--report``. ``run --shard I/N`` runs one shard of the selected cases
(``conformance.shards``) and ``merge-reports OUT SRC...`` merges the shards' reports into one,
its verdict recomputed from the merged records.

Exit codes (the gate contract, also used by ``CI/gate.sh``):

====  ==========================================================================
0     PASS: every applicable test passed (skips name missing capabilities), at least one ran
1     FAIL: a test failed or errored (its worker process dying included), or a strict expected failure passed
2     INCONCLUSIVE: nothing failed, but a path under test never ran, an offered capability did not load, or no case ran
3     infrastructure error: bad usage, adapter failed to load, nothing or a suite module not collected, interrupted
====  ==========================================================================
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.machinery
import json
import os
import re
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from pytest import ExitCode

from dspark_conformance_plugin import shadowing_package

from . import budget, shards
from .cuda_context import lost_cases, out_of_memory_cases
from .interrupts import interruptible
from .report import markdown, matrix as report
from .report.junit import merge_junit
from .runner import merge_phases, pytest_command, rerun_lost_cases, rerun_out_of_memory, run_suite

EXIT_PASS, EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_INFRA = 0, 1, 2, 3


# The type functions' messages leave out the option: argparse prefixes "argument --NAME: ".
def _workers(value: str) -> str:
    if value != "auto" and not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected 'auto' or a non-negative integer, got {value!r}")
    return value


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value!r}")
    return int(value)


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) == 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return int(value)


def _seed(value: str) -> int:
    if not value.isdigit() or int(value) >= 2**64:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2^64), got {value!r}")
    return int(value)


def _shard(value: str) -> tuple[int, int]:
    try:
        return shards.parse_shard(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _non_empty(value: str) -> str:
    if not value.strip():  # an unset CI variable must not silently mean the default
        raise argparse.ArgumentTypeError("expected a non-empty value")
    return value


def _engine_pin(value: str) -> tuple[str, str]:
    from packaging.version import InvalidVersion, Version

    engine, sep, release = value.partition("==")
    if not (sep and engine.strip() and release.strip()):
        raise argparse.ArgumentTypeError(f"expected ENGINE==VERSION, got {value!r}")
    try:
        Version(release)
    except InvalidVersion:
        raise argparse.ArgumentTypeError(f"expected a PEP 440 version after '==', got {value!r}") from None
    return engine.strip(), release.strip()


def _engine_path(value: str) -> tuple[str, Path]:
    engine, sep, path = value.partition("=")
    if not (sep and engine.strip() and path.strip()):
        raise argparse.ArgumentTypeError(f"expected ENGINE=DIR, got {value!r}")
    if not Path(path).is_dir():
        raise argparse.ArgumentTypeError(f"{path}: not a directory")
    return engine.strip(), Path(path).resolve()


def _budget(value: str) -> float:
    try:
        return budget.checked_sample_scale(float(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor in (0, {budget.MAX_SAMPLE_SCALE:g}], got {value!r}") from None


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on exit code 3 (EXIT_INFRA), not argparse's 2, which is
    this CLI's INCONCLUSIVE."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_INFRA, f"{self.prog}: error: {message}\n")


_DESCRIPTION = """\
Conformance suite for DSpark speculative decoding. 'run' runs it on one
implementation (the bundled reference by default), prints the conformance
matrix by SPEC section and writes the reports; 'mutants', 'calibrate',
'null-replay' and 'merge-runs' measure the suite itself; 'engines' checks each
engine's newest release against its adapter (the drift check); 'merge-reports'
merges the reports of 'run --shard I/N' shards into one.
'dspark-conformance COMMAND --help' lists a command's options."""


def _exit_codes_epilog() -> str:
    """The exit codes as plain text, from the rows of the module docstring's table (one
    source for the docs and --help)."""
    rows = [line.split(None, 1) for line in (__doc__ or "").splitlines() if line[:1].isdigit()]  # -OO: none
    return "exit codes (the gate contract, also used by CI/gate.sh):\n" + "\n".join(
        f"  {code}  {text}" for code, text in rows)


#: The distribution name in pyproject.toml, whose installed version ``--version`` prints.
DISTRIBUTION = "dspark-conformance"


def _version() -> str:
    """The installed distribution's version, or a note that it is not installed (a
    checkout run with ``python -m conformance.cli`` and no ``pip install``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


_MUTANT_FIXTURES = ("the mutant fixtures, which are not part of the wheel: the module fixtures.mutants of a "
                    "checkout (its fixtures/mutants), importable where the checkout is installed "
                    "(pip install -e CHECKOUT)")


def _mutants_missing(command: str, needed_by: str = "") -> bool:
    """Whether the mutant fixtures cannot be imported (:func:`loading.mutants_module`),
    said in one line on stderr naming ``command`` and what needs them."""
    from .loading import AdapterLoadError, mutants_module

    try:
        mutants_module()
    except AdapterLoadError as exc:
        print(f"dspark-conformance {command}: {needed_by}{exc}", file=sys.stderr)
        return True
    return False


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dspark-conformance", description=_DESCRIPTION, epilog=_exit_codes_epilog(),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                        help=f"print the installed {DISTRIBUTION} version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the conformance suite and print the matrix")
    run.add_argument("--impl", type=_non_empty, default="reference",
                     help="implementation under test (default: reference)")
    run.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    run.add_argument("--report", type=lambda value: Path(_non_empty(value)), default=None,
                     help="directory for results.json, report.md, report.html, junit.xml (default: a fresh "
                     "temporary directory, dspark-report-*, whose path the last line of the run prints)")
    run.add_argument("--seed", type=_seed, default=None, help="base seed in [0, 2^64) (default: the suite's)")
    run.add_argument("--workers", type=_workers, default=None,
                     help="xdist workers: 'auto' or N (0 = no xdist; default: auto, or 0 with --case)")
    run.add_argument("--budget", type=_budget, default=None,
                     help="factor on statistical sample sizes (<1 faster, less power; alpha unchanged)")
    run.add_argument("-k", dest="keyword", default=None, help="pytest -k expression to select tests")
    run.add_argument("--case", dest="cases", action="append", default=None, metavar="CASE_ID",
                     help="run only the case with this case id, e.g. S5/parity/random-V8-l4-T1 (repeatable; as a "
                     "failure's replay line names it; a legacy key conformance/test_x.py::test_y[id] is deprecated)")
    run.add_argument("--latency-bound", choices=("alone", "apart", "with-others"), default=None,
                     help="with workers, the latency_bound cases (thousands of serial calls, each read back from "
                     "the device): 'alone' runs them once every other case has finished and every other worker has "
                     "stopped, one after another on one worker, where no other process's kernels delay each "
                     "read-back; 'apart' runs them after the others in a second session, each in a process of its "
                     f"own (at most {LATENCY_WORKERS} at once); 'with-others' runs them first among the others "
                     "(default: alone with --device cuda, with-others on cpu, where they would leave cores idle)")
    run.add_argument("--tracebacks", action="store_true",
                     help="print each failing case's pytest traceback, and a statistical failure's worst bins, on "
                     "the console too (junit.xml and report.md always hold them)")
    run.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                     help="run only shard I of N (1 <= I <= N) of the selected cases (after -k, --case, pytest -m): "
                     "their case ids sorted and dealt round-robin, the same in every shard, so N shards run each "
                     "case once; merge their reports with merge-reports")
    run.add_argument("pytest_args", nargs="*", help="extra arguments passed to pytest after '--'")
    mut = sub.add_parser("mutants", help="kill matrix: each mutant against the tests of its section",
                         description="The kill matrix: each mutant (the reference with one known fault) against "
                         f"the tests of its SPEC section. Needs {_MUTANT_FIXTURES}.")
    mut.add_argument("ids", nargs="*", help="mutant ids (default: all)")
    mut.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    mut.add_argument("--report", type=Path, default=Path("reports/mutants"))
    mut.add_argument("--jobs", type=_positive, default=None, help="mutants run in parallel (default: CPU count)")
    cal = sub.add_parser("calibrate",
                         help="exact tests over many seeds, false failures of the statistical tests on the "
                         "reference, power at the declared effect and on mutants",
                         description="Exact tests over many seeds, false failures of the statistical tests on "
                         "the reference, power at the declared effect and on mutants. The power on mutants "
                         f"(--power-seeds > 0, the default) needs {_MUTANT_FIXTURES}; --power-seeds 0 "
                         "calibrates without them.")
    cal.add_argument("--seeds", type=_count, default=200,
                     help="reference runs of the statistical tests (base seeds FIRST..FIRST+SEEDS-1)")
    cal.add_argument("--exact-seeds", type=_count, default=0,
                     help="reference runs of the exact (non-statistical) tests (base seeds FIRST..FIRST+N-1); "
                     "any failure is a suite defect")
    cal.add_argument("--first-seed", type=_count, default=1, help="first reference base seed (to split a calibration)")
    cal.add_argument("--power-seeds", type=_count, default=20,
                     help="runs of each mutant's statistical killers; > 0 needs the mutant fixtures of a "
                     "checkout (0: no mutant runs)")
    cal.add_argument("--replicates", type=_count, default=2000,
                     help="simulated data sets per assertion for the power at the declared effect (0: skip)")
    cal.add_argument("--replay-results", type=Path, default=None,
                     help="results.json whose assertions to replay: those whose design the device's latest "
                          "replay does not hold, their new rows superseding the old (default: a fresh default-seed "
                          "run, once per device)")
    cal.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    cal.add_argument("--report", type=Path, default=Path("reports/calibration"),
                     help="directory; runs append to its runs.jsonl and the report aggregates the whole file")
    cal.add_argument("--jobs", type=_positive, default=None, help="pytest runs in parallel (default: CPU count)")
    null = sub.add_parser("null-replay",
                          help="false-failure rate of every statistical assertion, its design replayed on data "
                          "from its null; the union bound on the whole run")
    null.add_argument("--results", type=Path, action="append", default=None, metavar="FILE",
                      help="results.json whose assertions' designs to replay (repeatable: the first record of each "
                      "assertion is kept; default: a fresh default-seed reference run of the statistical tests)")
    null.add_argument("--replicates", type=_positive, default=1_000_000,
                      help="Monte Carlo data sets per assertion (exact designs need none)")
    null.add_argument("--seed", type=_count, default=1, help="base seed of the replicates")
    null.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="device of the fresh run")
    null.add_argument("--report", type=Path, default=Path("reports/calibration"),
                      help="directory for null-replay.json and null-replay.md")
    null.add_argument("--jobs", type=_positive, default=None, help="processes (default: CPU count)")
    eng = sub.add_parser(
        "engines", help="drift check: each engine's newest release installed, loaded and gated on CPU",
        description="The drift check: for each engine (default: all), its newest release on the package index "
        "(pip's resolution; or --release ENGINE==X, or --path ENGINE=DIR for a development tree) is installed "
        "into a scratch directory with its adapter's extras, its adapter loaded and its CPU gate run ('run "
        "--impl ENGINE==X -- -m \"not statistical\"' with TRITON_INTERPRET=1), each in a process of its own; "
        "one table of all, also written as engines.json and engines.md under --report. A release whose adapter "
        "does not load fails (exit 1); no release found or installed is infrastructure (exit 3).")
    eng.add_argument("--engine", dest="engines", action="append", default=None, metavar="NAME", type=_non_empty,
                     help="check this engine (repeatable; default: every engine of conformance.drift.ENGINES)")
    eng.add_argument("--release", dest="pins", action="append", default=[], metavar="ENGINE==X", type=_engine_pin,
                     help="check release X of ENGINE, not the newest on the index (repeatable)")
    eng.add_argument("--path", dest="paths", action="append", default=[], metavar="ENGINE=DIR", type=_engine_path,
                     help="check ENGINE's development tree DIR (a directory holding its top-level package, "
                     "put first on PYTHONPATH; repeatable)")
    eng.add_argument("--report", type=lambda value: Path(_non_empty(value)), default=Path("reports/engines"),
                     help="directory for engines.json, engines.md and ENGINE-VERSION/ (each gate's reports and "
                     "logs; default: reports/engines)")
    eng.add_argument("--workers", type=_workers, default="1", help="each gate's --workers (default: 1, as CI)")
    eng.add_argument("--keep", action="store_true", help="keep the scratch directories (their path is printed)")
    eng.add_argument("--dry-run", action="store_true",
                     help="print the release chosen and the commands that would install, load and gate it")
    merge = sub.add_parser("merge-runs", help="merge the runs.jsonl of calibration shards into one report directory "
                           "(then: calibrate --seeds 0 --power-seeds 0 --replicates 0 --report DIR aggregates it)")
    merge.add_argument("out", type=Path, help="report directory whose runs.jsonl receives the records")
    merge.add_argument("sources", type=Path, nargs="+",
                       help="report directories, runs.jsonl files or runs.jsonl.gz archives")
    reports = sub.add_parser(
        "merge-reports", help="merge the report directories of 'run --shard I/N' shards into one report",
        description="Merge the report directories of the shards of one run ('run --shard I/N', each of 1..N "
        "once) into one report directory OUT: results.json, report.md, report.html and junit.xml, the verdict and "
        "exit code recomputed from the merged records as 'run' computes them. Shards of different "
        "implementations, devices, base seeds, budgets, adapter settings, shard counts or selections, a case in "
        "two shards, a shard missing or without a verdict are refused (exit 3).")
    reports.add_argument("out", type=lambda value: Path(_non_empty(value)),
                         help="report directory for the merged reports (its earlier reports are replaced)")
    reports.add_argument("sources", type=Path, nargs="+",
                         help="the shards' report directories (each with results.json)")
    for command in sub.choices.values():
        command.set_defaults(command_parser=command)
    return parser


def exit_code(returncode: int, payload: dict | None) -> int:
    """Map a pytest exit code and its records onto the gate's exit codes."""
    if payload is None or not payload["tests"]:
        return EXIT_INFRA
    verdict = report.overall(report.run_rows(payload), payload)
    if verdict == "ERROR":  # a suite module did not collect: an infrastructure error, not a finding
        return EXIT_INFRA
    if verdict == "FAIL" or returncode == 1:
        return EXIT_FAIL
    if returncode != 0 or verdict == "INTERRUPTED":
        return EXIT_INFRA
    return EXIT_INCONCLUSIVE if verdict in ("INCONCLUSIVE", "SKIP") else EXIT_PASS  # SKIP: nothing was checked


_JUNIT_OPTIONS = ("--junitxml", "--junit-xml")


def _take_junit_option(pytest_args: list[str]) -> tuple[Path | None, list[str]]:
    """Split pytest's ``--junitxml PATH`` / ``--junitxml=PATH`` (or ``--junit-xml``) off
    the extra pytest arguments: the run's merged junit.xml is copied there, since handed to
    pytest it would name the file of every session, each overwriting the last. Returns
    ``(the last such path or None, the other arguments)``."""
    path, rest, args = None, [], iter(pytest_args)
    for arg in args:
        name, eq, value = arg.partition("=")
        if name in _JUNIT_OPTIONS:
            value = value if eq else next(args, None)
            if not value:
                raise ValueError(f"{name}: expected a path")
            path = Path(value)
        else:
            rest.append(arg)
    return path, rest


def _write_junit(report_dir: Path, sessions: list[Path], copy_to: Path | None, *, remove: bool = True) -> bool:
    """Merge the sessions' JUnit files into ``report_dir/junit.xml`` (``report.junit``),
    remove them (unless not ``remove``: a shard's), copy the result to ``copy_to``; False
    (files left as they are) if a session wrote none or one cannot be read."""
    target = report_dir / "junit.xml"
    try:
        merge_junit(sessions, target)
        if copy_to is not None:
            copy_to.parent.mkdir(parents=True, exist_ok=True)
            copy_to.write_bytes(target.read_bytes())
    except (ValueError, ET.ParseError, OSError) as exc:
        print(f"dspark-conformance: junit.xml not written ({exc})", file=sys.stderr)
        return False
    for session in sessions if remove else ():
        session.unlink(missing_ok=True)
    return True


#: What a run writes into its report directory (the plots are inside report.html).
_REPORT_FILES = ("results.json", "results-serial.json", "report.md", "report.html", "junit.xml")
#: The JUnit files of a run's pytest sessions (merged into junit.xml): only these are removed,
#: never another file of that directory.
_SESSION_JUNIT = re.compile(r"junit-(parallel|serial|rerun-[0-9]+)\.xml")


def _session_junit_files(report_dir: Path) -> list[Path]:
    return [path for path in report_dir.glob("junit-*.xml") if _SESSION_JUNIT.fullmatch(path.name)]


def _infra_error(report_dir: Path, payload: dict | None, message: str, *, cause: str | None = None,
                 command: list[str] | None = None, exit_status: int | None = None,
                 shard: tuple[int, int] | None = None) -> int:
    """End a run that produced no verdict: print ``message``, write results.json with
    ``overall`` ERROR, ``exit_code`` 3 and ``error`` (pytest's payload kept where there is
    one), remove the sessions' partial JUnit files; returns EXIT_INFRA. ``command``: the
    pytest command that ended without results, and ``cause``: the error it printed (on the
    terminal already, so printed once), both kept in results.json (``error``, ``command``),
    with pytest's ``exit_status`` where pytest ran and wrote no payload (None: no pytest ran), and
    ``shard`` (``run --shard``) where pytest wrote none."""
    where = " (pytest's output above; the pytest command is in results.json)" if command else ""
    print(f"dspark-conformance: {message}{where}", file=sys.stderr)
    record = dict(payload or {"tests": []}, overall="ERROR", exit_code=EXIT_INFRA,
                  error=f"{message} ({cause})" if cause else message,
                  **({"command": " ".join(command)} if command else {}),
                  **({"exit_status": int(exit_status)} if exit_status is not None and not payload else {}),
                  **({"shard": list(shard)} if shard and not payload else {}))
    try:
        (report_dir / "results.json").write_text(json.dumps(record, indent=1))
        for partial in _session_junit_files(report_dir):
            partial.unlink()
    except OSError as exc:
        print(f"dspark-conformance: --report {report_dir}: results.json not written ({exc})", file=sys.stderr)
    return EXIT_INFRA


def _fresh_report_dir(report: Path | None) -> Path | None:
    """The run's report directory (``--report``, else a new temporary one), made, with no
    earlier run's reports in it; None (said on stderr) if it cannot be made or cleared."""
    report_dir = report or Path(tempfile.mkdtemp(prefix="dspark-report-"))
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"dspark-conformance: --report {report_dir}: cannot make the directory ({exc})", file=sys.stderr)
        return None
    try:  # a previous run's reports must not outlive this run's failure
        for stale in _REPORT_FILES + tuple(path.name for path in _session_junit_files(report_dir)):
            (report_dir / stale).unlink(missing_ok=True)
    except OSError as exc:
        print(f"dspark-conformance: --report {report_dir}: cannot replace its reports ({exc})", file=sys.stderr)
        return None
    return report_dir


#: The most latency-bound cases run at once with ``--latency-bound apart``.
LATENCY_WORKERS = 4


def _latency_workers(held: dict[str, int] | None, workers: str) -> str:
    """xdist workers of the latency-bound phase of ``--latency-bound apart``: one a case, at
    most :data:`LATENCY_WORKERS` and the run's ``workers``, none for one case (``held``: the
    cases per section the parallel phase left to it; None when it did not say)."""
    cases = sum((held or {}).values())
    limit = LATENCY_WORKERS if workers == "auto" else min(LATENCY_WORKERS, int(workers))
    return "0" if cases < 2 or limit < 2 else str(min(cases, limit))


def run(args: argparse.Namespace) -> int:
    try:
        junit_copy, pytest_args = _take_junit_option(args.pytest_args)
    except ValueError as exc:
        print(f"dspark-conformance: {exc}", file=sys.stderr)
        return EXIT_INFRA
    report_dir = _fresh_report_dir(args.report)
    if report_dir is None:
        return EXIT_INFRA
    json_path = report_dir / "results.json"
    extra = ([f"--dspark-budget={args.budget}"] if args.budget is not None else []) + pytest_args
    sessions = [report_dir / "junit-parallel.xml", report_dir / "junit-serial.xml"]

    latency = args.latency_bound or ("alone" if args.device == "cuda" else "with-others")

    def command(cases: list[str] | None, json_file: Path, junit: Path, *, phase: str = "all",
                workers: str = args.workers, shard: tuple[int, int] | None = args.shard) -> list[str]:
        return pytest_command(
            impl=args.impl, device=args.device, json_path=json_file, junit_path=junit, seed=args.seed,
            workers=workers, keyword=args.keyword, cases=cases, extra=extra, phase=phase,
            console="progress+tracebacks" if args.tracebacks else "progress", shard=shard,
            latency="alone" if latency == "alone" else "with-others",
        )

    # A case run again names its case, which the shard's partition of that one case would drop.
    again = functools.partial(command, shard=None)
    infra_error = functools.partial(_infra_error, shard=args.shard)

    errors: list[str] = []  # pytest's ERROR: lines (a usage error's cause), for results.json
    with interruptible() as interrupts:
        if args.workers == "0" or latency != "apart":  # one session ('alone': conformance.handout)
            cmd = command(args.cases, json_path, sessions[0])
            returncode, payload = run_suite(cmd, json_path, errors=errors)
        else:  # the latency-bound cases after the others, each in a process of its own
            cmd = command(args.cases, json_path, sessions[0], phase="parallel")
            serial_json = report_dir / "results-serial.json"
            phases = [run_suite(cmd, json_path, errors=errors)]
            held = (phases[0][1] or {}).get("held_for_other_phase")
            if phases[0][0] != ExitCode.USAGE_ERROR and held != {}:  # a usage error is the same in both phases
                workers = _latency_workers(held, args.workers)
                phases.append(run_suite(command(args.cases, serial_json, sessions[1], phase="serial",
                                                workers=workers), serial_json, errors=errors))
            serial_json.unlink(missing_ok=True)
            returncode, payload = merge_phases(*phases)
        if payload is not None and interrupts.cut:
            payload["exit_status"] = int(ExitCode.INTERRUPTED)
        if payload is not None and not payload["tests"] and returncode in (ExitCode.OK, ExitCode.NO_TESTS_COLLECTED):
            dealt = (payload.get("shard_selection") or {}).get("cases")
            if args.shard and dealt:
                return infra_error(report_dir, payload, f"--shard {args.shard[0]}/{args.shard[1]}: the shard holds "
                                   f"none of the {dealt} selected cases: run at most {dealt} shards")
            return infra_error(report_dir, payload,
                               "no case of the suite matches the selection (-k, --case, pytest -m)")
        # An interrupted run reports even with no record: the signal can land before the first
        # finished case is recorded (in the plugin's report hook), and the verdict is INTERRUPTED.
        if payload is None and (broken := environment_error()) is not None:  # its cause, said in one line
            return infra_error(report_dir, None, f"{broken}: the suite cannot run here", command=cmd,
                               exit_status=returncode)
        if payload is None or (not payload["tests"] and not interrupts.cut):
            return infra_error(report_dir, payload, f"pytest exited {returncode} without results",
                               cause=errors[-1] if errors else None, command=cmd, exit_status=returncode)
        reran = False
        if (not report.interrupted(payload) and args.device == "cuda" and args.workers != "0"
                and out_of_memory_cases(payload["tests"])):
            payload, reran = rerun_out_of_memory(payload, functools.partial(again, workers="0"), report_dir), True
        if not report.interrupted(payload) and lost_cases(payload["tests"]):
            payload, reran = rerun_lost_cases(payload, again, report_dir), True
        if reran and returncode == ExitCode.TESTS_FAILED:
            # pytest's exit 1 came from records that the fresh runs replaced: the records decide
            # now (a case that failed keeps the run's FAIL through them).
            returncode = ExitCode.OK
            payload["exit_status"] = int(ExitCode.OK)
    reruns = sorted(report_dir.glob("junit-rerun-*.xml"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    return _write_reports(payload, returncode, report_dir, tracebacks=args.tracebacks,
                          junit=lambda: _write_junit(report_dir, sessions + reruns, junit_copy), junit_copy=junit_copy)


def _write_reports(payload: dict, returncode: int, report_dir: Path, *, tracebacks: bool,
                   junit: Callable[[], bool], junit_copy: Path | None = None) -> int:
    """End a run (or a merge of shards) with a verdict: compute it and the exit code from
    ``payload``'s records and pytest's ``returncode``, write results.json, print the
    matrix, write report.md and report.html, then ``junit()`` (which writes junit.xml and
    says whether it did); returns the exit code."""
    # What a CI reading the file needs: the verdict and this command's exit code ("exit_status"
    # stays pytest's: 2 is its INTERRUPTED where the gate's 2 is INCONCLUSIVE).
    payload["overall"] = report.overall(report.run_rows(payload), payload)
    payload["exit_code"] = exit_code(returncode, payload)
    (report_dir / "results.json").write_text(json.dumps(payload, indent=1))
    print(report.format_matrix(payload, details=tracebacks))
    if not tracebacks and any(t["outcome"] in report.DECIDING for t in payload["tests"]):
        print(f"tracebacks: {report_dir}/junit.xml; each reason whole, with its bins: {report_dir}/report.md "
              "(or add --tracebacks to a replay line to print them here)")
    markdown.write_markdown(payload, report_dir / "report.md")
    from .report import html as html_report  # imports torch: not needed before a run ends

    html_report.write_html(payload, report_dir)
    written = ", junit.xml" if junit() else ""
    print(f"report: {report_dir}/report.md, report.html, results.json{written}"
          + (f" (junit.xml also at {junit_copy})" if written and junit_copy else ""))
    return payload["exit_code"]


def merge_reports(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``merge-reports OUT SRC...``: the shards' results.json merged (``conformance.shards``),
    the reports written and the verdict computed as ``run`` does; their junit.xml merged
    where every shard has one."""
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"out: expected a directory, got the file {args.out}")
    for source in args.sources:
        if not (source / "results.json").is_file():
            parser.error(f"sources: expected a shard's report directory (with results.json), got {source}")
        if source.resolve() == args.out.resolve():
            parser.error(f"out: {args.out} is also a source; merge into another directory")
    loaded = []
    for source in args.sources:
        try:
            loaded.append((str(source), json.loads((source / "results.json").read_text())))
        except (OSError, json.JSONDecodeError) as exc:
            print(f"dspark-conformance merge-reports: sources: {source}/results.json cannot be read ({exc})",
                  file=sys.stderr)
            return EXIT_INFRA
    try:
        returncode, payload = shards.merge_shards(loaded)
    except shards.ShardMergeError as exc:
        print(f"dspark-conformance merge-reports: {exc}", file=sys.stderr)
        return EXIT_INFRA
    report_dir = _fresh_report_dir(args.out)
    if report_dir is None:
        return EXIT_INFRA
    by_index = {shard["shard"][0]: Path(source) for source, shard in loaded}
    junits = [by_index[index] / "junit.xml" for index in sorted(by_index)]  # the records' order

    def junit() -> bool:
        lacking = [str(path.parent) for path in junits if not path.is_file()]
        if lacking:
            print(f"dspark-conformance: junit.xml not written (no junit.xml in {', '.join(lacking)})", file=sys.stderr)
            return False
        return _write_junit(report_dir, junits, None, remove=False)

    return _write_reports(payload, returncode, report_dir, tracebacks=False, junit=junit)


def _replay_results(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict | None:
    """The results.json named by ``--replay-results``, checked."""
    if args.replay_results is None:
        return None
    if not args.replicates:
        parser.error("--replay-results: has no effect with --replicates 0")
    return _results_payload(args.replay_results, "--replay-results", parser)


def calibrate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .power import calibration, calibration_numbers, calibration_report

    least = calibration_numbers.min_replicates()
    if 0 < args.replicates < least:
        target = calibration_numbers.TARGET_REPLAYED_POWER
        parser.error(f"--replicates: expected 0 or at least {least} (fewer cannot bound the power at {target} "
                     f"even if every replicate rejects), got {args.replicates}")
    if args.report.exists() and not args.report.is_dir():
        parser.error(f"--report: expected a directory, got the file {args.report}")
    replay_payload = _replay_results(args, parser)
    if args.power_seeds and _mutants_missing(
            "calibrate", f"--power-seeds {args.power_seeds} runs the mutants (--power-seeds 0 runs none): "):
        return EXIT_INFRA
    log = calibration.calibrate(
        args.report, seeds=list(range(args.first_seed, args.first_seed + args.seeds)),
        power_seeds=list(range(1, args.power_seeds + 1)), replicates=args.replicates,
        exact_seeds=range(args.first_seed, args.first_seed + args.exact_seeds),
        device=args.device, jobs=args.jobs, replay_payload=replay_payload,
    )
    cal = calibration_numbers.aggregate(log.records())
    previous = args.report / "calibration.json"
    commands = json.loads(previous.read_text()).get("commands", []) if previous.exists() else []
    if log.added:
        commands.append(" ".join(["dspark-conformance", *sys.argv[1:]]))
    calibration_report.write_reports(cal, args.report, commands)
    print(calibration_numbers.summary(cal))
    print(f"report: {args.report}/calibration.md, calibration.json")
    if log.crashed:
        print(f"dspark-conformance: {len(log.crashed)} runs produced no test record and were not logged "
              f"(rerun the command to retry them): {', '.join(log.crashed[:5])}", file=sys.stderr)
        return EXIT_INFRA
    if not calibration_numbers.measured_anything(cal):
        print(f"dspark-conformance: nothing measured: {args.report}/runs.jsonl holds no run", file=sys.stderr)
        return EXIT_INFRA
    defects = calibration_numbers.calibration_defects(cal)
    for defect in defects:
        print(f"dspark-conformance: calibration defect: {defect}", file=sys.stderr)
    return EXIT_FAIL if defects else EXIT_PASS


def _results_payload(path: Path, option: str, parser: argparse.ArgumentParser) -> dict:
    """The results.json at ``path`` named by ``option``, checked."""
    try:
        payload = json.loads(path.read_text())
    except OSError as exc:
        parser.error(f"{option}: cannot read {path}: {exc.strerror}")
    except json.JSONDecodeError as exc:
        parser.error(f"{option}: {path} is not JSON ({exc})")
    if not (isinstance(payload, dict) and "device" in payload and isinstance(payload.get("tests"), list)
            and payload["tests"]):
        parser.error(f"{option}: expected a results.json of dspark-conformance run (keys 'device' and "
                     f"a non-empty 'tests'), got {path}")
    return payload


def null_replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .power import calibration
    from .power import null_replay as nulls
    from .power import null_replay_report

    if args.report.exists() and not args.report.is_dir():
        parser.error(f"--report: expected a directory, got the file {args.report}")
    if args.results:
        payloads = [_results_payload(path, "--results", parser) for path in args.results]
        sources = [str(path) for path in args.results]
    else:
        payload = calibration.reference_statistical_run(args.device)
        if payload is None:
            print(f"dspark-conformance: the default-seed reference run on {args.device} produced no test record",
                  file=sys.stderr)
            return EXIT_INFRA
        payloads, sources = [payload], [f"a default-seed reference run of the statistical tests on {args.device}"]
    designs = nulls.designs(payloads)
    if not designs:
        print("dspark-conformance: the results hold no statistical assertion", file=sys.stderr)
        return EXIT_INFRA
    jobs = args.jobs or os.cpu_count() or 1
    start = time.monotonic()
    summary = nulls.summarize(nulls.null_levels(designs, replicates=args.replicates, seed=args.seed, jobs=jobs))
    null_replay_report.write_reports(summary, args.report, commands=[" ".join(["dspark-conformance", *sys.argv[1:]])],
                                     sources=sources, wall_s=time.monotonic() - start, jobs=jobs)
    flagged = summary["flagged"]
    print(f"{summary['assertions']} assertions, {summary['replicates']} replicates each where not exact: whole-run "
          f"false-failure rate <= {summary['run_upper95']:.4g} at 95% (budget {summary['budget']:g}: "
          f"{'bounded' if summary['bounded'] else 'NOT bounded'}); level above alpha: "
          f"{', '.join(flagged) if flagged else 'none'}")
    print(f"report: {args.report}/{null_replay_report.MARKDOWN_FILE}, {null_replay_report.JSON_FILE}")
    return EXIT_PASS if summary["bounded"] else EXIT_FAIL


def engines(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import drift

    def by_engine(option: str, pairs: list[tuple[str, object]]) -> dict:
        for name, _ in pairs:
            if name not in names:
                parser.error(f"{option}: {name!r} is not a checked engine; expected one of {', '.join(names)}")
        return dict(pairs)

    try:
        selected = [drift.engine_named(name, drift.ENGINES) for name in dict.fromkeys(args.engines or ())]
    except ValueError as exc:
        parser.error(f"--engine: {exc}")
    selected = selected or list(drift.ENGINES)
    names = [engine.name for engine in selected]
    pins, paths = by_engine("--release", args.pins), by_engine("--path", args.paths)
    both = sorted(set(pins) & set(paths))
    if both:
        parser.error(f"--release and --path both name {both[0]!r}; expected one")
    if args.report.exists() and not args.report.is_dir():
        parser.error(f"--report: expected a directory, got the file {args.report}")
    options = dict(pins=pins, paths=paths, report_dir=args.report, workers=args.workers)
    if args.dry_run:
        lines, failed = drift.dry_run(selected, **options)
        print("\n".join(lines))
        return drift.exit_code(failed) if failed else EXIT_PASS
    results = drift.check_engines(selected, **options, keep=args.keep)
    print(drift.format_table(results))
    try:
        drift.write_tables(results, args.report)
    except OSError as exc:
        print(f"dspark-conformance: --report {args.report}: the table was not written ({exc})", file=sys.stderr)
        return EXIT_INFRA
    print(f"report: {args.report}/{drift.table.MARKDOWN_FILE}, {drift.table.JSON_FILE}")
    return drift.exit_code(results)


def merge_runs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .power import calibration

    if args.out.exists() and not args.out.is_dir():
        parser.error(f"out: expected a directory, got the file {args.out}")
    try:
        counts = calibration.merge_logs(args.out, args.sources)
    except (OSError, ValueError) as exc:  # a missing or unreadable source, a bad line, OUT not writable
        print(f"dspark-conformance: merge-runs: {exc}", file=sys.stderr)
        return EXIT_INFRA
    print(f"{args.out / calibration.RUNS_FILE}: {counts['added']} records added, {counts['duplicates']} already "
          f"held ({counts['conflicts']} of them with other results; the first kept)")
    return EXIT_PASS


#: What every pytest the CLI starts imports, native code included: a broken install of one
#: is an infrastructure error (exit 3), which a pytest that cannot import it would not report.
#: ``run`` checks them only when its pytest ended without results (an import in this process
#: costs 3-5 s that the run's own pytest pays again); the other commands before they start.
RUNTIME_MODULES = ("torch", "numpy", "scipy.stats")


def environment_error() -> str | None:
    """Why the suite cannot run in this interpreter, in one line: the first of
    :data:`RUNTIME_MODULES` that does not import, and the error it raised; None if all import."""
    for name in RUNTIME_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken native library raises ImportError, OSError, RuntimeError...
            return f"{name} does not import in {sys.executable} ({type(exc).__name__}: {exc})"
    return None


#: The directory of the running ``conformance`` package, whose suite every pytest here runs.
_PACKAGE = Path(__file__).resolve().parent


def _other_copy(search_path: list[str]) -> Path | None:
    """The directory of the ``conformance`` package that Python finds first in
    ``search_path`` (the start of a child pytest's ``sys.path``) where it is a package other
    than the running one, found without importing it; None where it is this one or none."""
    spec = importlib.machinery.PathFinder.find_spec("conformance", search_path)
    if spec is None or spec.origin is None or Path(spec.origin).name != "__init__.py":
        return None  # none, a namespace portion, or a module (shadowing_package names that)
    package = Path(spec.origin).resolve().parent
    return None if package == _PACKAGE else package


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parser = args.command_parser  # a usage error after parsing shows the command's usage
    if args.command not in ("merge-runs", "merge-reports"):  # the others start pytest, cwd first on its sys.path
        search = [os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        shadow = shadowing_package(search)
        if shadow is not None:
            print(f"dspark-conformance: {shadow} would be imported as 'conformance' in place of the suite's package "
                  "by the pytest this command starts: run it from another directory", file=sys.stderr)
            return EXIT_INFRA
        copy = _other_copy(search)
        if copy is not None:  # its test modules would clash with this one's (pytest's ImportPathMismatchError)
            print(f"dspark-conformance: {copy} is another copy of the suite (a checkout?), which the pytest this "
                  f"command starts would import in place of the one running, {_PACKAGE}: run it from another "
                  "directory, or run that copy (python -m conformance.cli from its checkout)", file=sys.stderr)
            return EXIT_INFRA
        # run: pytest imports these itself, so they are checked only where it ends without results
        broken = environment_error() if args.command != "run" else None
        if broken is not None:
            print(f"dspark-conformance: {broken}: the suite cannot run here", file=sys.stderr)
            return EXIT_INFRA
    if getattr(args, "device", None) == "cuda":
        import torch

        if not torch.cuda.is_available():  # before any pytest run starts (the plugin would say the same, later)
            parser.error("argument --device: cuda: CUDA is not available on this machine")
    if args.command == "run":
        if args.workers is None:  # replaying a case: one process, not a pool started for it
            args.workers = "0" if args.cases else "auto"
        return run(args)
    if args.command == "mutants":
        from .loading import mutants_module
        from .power import kill_matrix as mutation

        if _mutants_missing("mutants"):
            return EXIT_INFRA
        known = mutants_module().load_all()
        unknown = [i for i in args.ids if i not in known]
        if unknown:
            parser.error(f"ids: unknown mutant id {unknown[0]!r}; known: {', '.join(sorted(known))}")
        records = mutation.kill_matrix(args.ids, device=args.device, jobs=args.jobs)
        mutation.write_reports(records, args.report)
        print(mutation.format_matrix(records))
        print(f"report: {args.report}/mutants.md, mutants.json")
        return EXIT_PASS if all(r.killed for r in records if not r.not_run) else EXIT_FAIL
    if args.command == "calibrate":
        return calibrate(args, parser)
    if args.command == "null-replay":
        return null_replay(args, parser)
    if args.command == "engines":
        return engines(args, parser)
    if args.command == "merge-runs":
        return merge_runs(args, parser)
    if args.command == "merge-reports":
        return merge_reports(args, parser)
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
