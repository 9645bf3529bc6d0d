"""Time to verdict: a baseline and a change of this project timed side by side (issue 45).

``python -m bench verdict [--baseline REV|DIR] [--change REV|DIR] [--repeats N] [--workers W]
[--device cpu|cuda] [--tests] [--startup-case CASE_ID | --no-startup] [--json PATH] [-- RUN OPTIONS]``

Each side is a git revision of this checkout's repository (default ``--baseline main
--change HEAD``), checked out as a detached ``git worktree`` in a temporary directory that
is removed afterwards, or a directory that holds a checkout (``--change .`` times this
checkout's uncommitted work). Every command runs in its side's directory with that
directory first on ``PYTHONPATH``, so the side's own packages are imported (checked before
timing), never an installed copy. The measures, each the wall seconds of one subprocess
(:mod:`bench.wall`):

* ``main job``: ``python -m conformance.cli run --device D --workers W --report DIR`` plus
  the RUN OPTIONS after ``--`` (``-k EXPR``, ``--impl NAME``, ``--budget F``, ...); its
  results.json also gives pytest's own ``wall_s`` (the row ``main job, pytest``);
* ``start-up``: the same with ``--case CASE_ID`` (one cheap exact case, no workers): the
  fixed cost paid before and after any case runs;
* ``test command`` (``--tests``, long): the README's ``python -m pytest -n W --dist
  worksteal``, the project's own tests.

The sides alternate (baseline then change, then change then baseline, ...) ``--repeats``
times, and each row gives the median of each side and the ratio change / baseline (below 1:
the change is faster), so that drift of a shared machine falls on both sides alike. A
speed-up that drops cases is not a speed-up: for each measure that writes results.json the
case ids run, the number of cases skipped, the number of statistical assertions, the
minimum power at the declared effects and the verdict must be the same on both sides and in
every repeat; for the test command, its exit status. The exit status is 1 when one of these
differs or a run wrote no results.json, else 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from conformance.report.matrix import statistical_powers

from .common import write_json
from .wall import time_command

__all__ = [
    "STARTUP_CASE",
    "Side",
    "Measure",
    "Run",
    "Check",
    "checkouts",
    "side_env",
    "byte_compile",
    "check_imports",
    "measures",
    "outcome",
    "run_sides",
    "ratio_rows",
    "checks",
    "format_report",
    "failed",
    "compare",
]

SIDES = ("baseline", "change")
#: The start-up measure's case: exact, no statistics, a one-token vocabulary (milliseconds of
#: work), so its wall time is the run's fixed cost.
STARTUP_CASE = "S1/vocab/one-token"
#: Minimum powers closer than this are the same (JSON round trips and summation order move
#: the last digits, never the design).
POWER_TOLERANCE_DIGITS = 6
_SHOWN_CASES = 5  # case ids named when two sides' sets differ


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of the comparison: ``label`` (``"baseline"`` / ``"change"``), ``spec`` (as
    given: a revision or a directory), ``path`` (the checkout its commands run in) and
    ``commit`` (its short hash, ``"+ uncommitted changes"`` where a directory has them)."""

    label: str
    spec: str
    path: Path
    commit: str


@dataclasses.dataclass(frozen=True)
class Measure:
    """A timed command: ``name`` (the row), ``argv(report_dir)`` (the command line) and
    ``reports`` (it writes results.json into ``report_dir``)."""

    name: str
    argv: Callable[[Path], list[str]]
    reports: bool


@dataclasses.dataclass(frozen=True)
class Run:
    """One timed command: ``measure`` and ``side`` names, ``repeat`` (0-based), wall
    ``seconds``, ``returncode``, ``last_line`` of its output, ``reports`` (the measure
    writes results.json) and ``outcome`` (:func:`outcome` of that results.json; None where
    none was written or the measure writes none)."""

    measure: str
    side: str
    repeat: int
    seconds: float
    returncode: int
    last_line: str
    reports: bool
    outcome: dict[str, Any] | None


@dataclasses.dataclass(frozen=True)
class Check:
    """A quantity that must be the same on both sides: ``name``, the ``baseline`` and
    ``change`` values as shown, ``equal``, and ``detail`` (what differs, where it does)."""

    name: str
    baseline: str
    change: str
    equal: bool
    detail: str = ""


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ValueError(proc.stderr.strip() or f"git {' '.join(args)} exited {proc.returncode}")
    return proc.stdout.strip()


def _is_checkout(spec: str) -> bool:
    return (Path(spec) / "conformance").is_dir()


def _describe_checkout(path: Path) -> str:
    try:
        commit = _git(path, "rev-parse", "--short", "HEAD")
        dirty = _git(path, "status", "--porcelain", "--untracked-files=no")
    except (ValueError, OSError):
        return "not a git checkout"
    return commit + (" + uncommitted changes" if dirty else "")


@contextlib.contextmanager
def checkouts(specs: dict[str, str], repo: Path, scratch: Path) -> Iterator[list[Side]]:
    """The :class:`Side` of each ``label: spec`` of ``specs``: a directory holding a
    ``conformance`` package is used as it is; anything else is a revision of the git
    repository at ``repo``, checked out detached under ``scratch`` (a ``git worktree``,
    removed, with git's record of it, on leaving the block).

    Raises:
        ValueError: a spec is neither a checkout directory nor a revision of ``repo``
            (the message names the side and the spec).
    """
    made: list[Path] = []
    try:
        sides = []
        for label, spec in specs.items():
            if _is_checkout(spec):
                path = Path(spec).resolve()
                sides.append(Side(label, spec, path, _describe_checkout(path)))
                continue
            try:
                commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}")
            except ValueError:
                raise ValueError(f"--{label}: {spec!r} is neither a checkout directory (one holding "
                                 f"conformance/) nor a git revision of {repo}") from None
            path = scratch / label
            _git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
            made.append(path)
            sides.append(Side(label, spec, path, commit[:9]))
        yield sides
    finally:
        for path in made:
            _git(repo, "worktree", "remove", "--force", str(path))


def side_env(side: Side) -> dict[str, str]:
    """This process's environment with ``side.path`` first on ``PYTHONPATH``: pytest's xdist
    workers, which do not start in the side's directory, import its packages too."""
    before = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(side.path) + (os.pathsep + before if before else "")}


_IMPORTED = ("conformance", "dspark_ref", "dspark_conformance_plugin")


def check_imports(side: Side) -> None:
    """Check that a command run for ``side`` imports the side's own packages.

    Raises:
        RuntimeError: one of them resolves outside ``side.path`` (names it and where), or
            the import fails (with Python's message).
    """
    code = "import importlib\nfor name in %r: print(importlib.import_module(name).__file__)" % (_IMPORTED,)
    proc = subprocess.run([sys.executable, "-c", code], cwd=side.path, env=side_env(side),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{side.label} ({side.spec}): importing {', '.join(_IMPORTED)} failed: "
                           f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    for name, where in zip(_IMPORTED, proc.stdout.splitlines()):
        if not Path(where).resolve().is_relative_to(side.path.resolve()):
            raise RuntimeError(f"{side.label} ({side.spec}): {name} imports from {where}, not from {side.path}")


def byte_compile(side: Side) -> None:
    """Byte-compile the side's Python files, so that neither side's first timed run pays
    for compiling them (a fresh worktree has no ``__pycache__``; a working checkout has).

    Raises:
        RuntimeError: ``compileall`` failed (a file does not compile); names the side.
    """
    proc = subprocess.run([sys.executable, "-m", "compileall", "-q", str(side.path)], capture_output=True, text=True)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise RuntimeError(f"{side.label} ({side.spec}): compileall failed: {output[-400:]}")


def measures(*, device: str, workers: str, run_options: Sequence[str], startup_case: str | None = STARTUP_CASE,
             tests: bool = False) -> list[Measure]:
    """The measures in the order they run (module note): the main job with ``run_options``,
    the start-up run of ``startup_case`` (None: left out) and, with ``tests``, the README's
    test command."""
    cli = [sys.executable, "-m", "conformance.cli", "run", "--device", device]
    chosen = [Measure("main job", lambda report: [*cli, "--workers", workers, "--report", str(report),
                                                  *run_options], reports=True)]
    if startup_case is not None:
        chosen.append(Measure(f"start-up (--case {startup_case})",
                              lambda report: [*cli, "--case", startup_case, "--report", str(report)], reports=True))
    if tests:
        chosen.append(Measure("test command", lambda report: [sys.executable, "-m", "pytest", "-n", workers,
                                                              "--dist", "worksteal"], reports=False))
    return chosen


def outcome(payload: dict[str, Any]) -> dict[str, Any]:
    """What a run's results.json says: ``verdict`` (``overall``), ``exit_code``,
    ``cases_run`` (sorted case ids of records not skipped), ``cases_skipped`` (count),
    ``assertions`` (statistical assertions recorded), ``min_power`` (lowest power at the
    declared minimum effect, None without any) and ``wall_s`` (pytest's own seconds).

    Raises:
        ValueError: ``payload`` has no ``tests`` list (not a results.json of ``run``).
    """
    tests = payload.get("tests")
    if not isinstance(tests, list):
        raise ValueError("payload: expected a results.json of 'dspark-conformance run' (a 'tests' list)")
    powers = statistical_powers(tests)
    return {
        "verdict": payload.get("overall"),
        "exit_code": payload.get("exit_code"),
        "cases_run": sorted(t["case"] for t in tests if t["outcome"] != "skipped"),
        "cases_skipped": sum(t["outcome"] == "skipped" for t in tests),
        "assertions": sum(len(t.get("stats", [])) for t in tests),
        "min_power": min(powers) if powers else None,
        "wall_s": payload.get("wall_s"),
    }


def _read_outcome(report: Path) -> dict[str, Any] | None:
    try:
        return outcome(json.loads((report / "results.json").read_text()))
    except (OSError, ValueError):
        return None


def run_sides(sides: Sequence[Side], chosen: Sequence[Measure], repeats: int, reports: Path,
              say: Callable[[str], None] = print) -> list[Run]:
    """Time every measure on every side ``repeats`` times, the sides alternating (module
    note); ``say`` gets one progress line per run. Each run's report directory is
    ``reports/SIDE-N`` (N counts the runs from 0)."""
    runs: list[Run] = []
    total = repeats * len(chosen) * len(sides)
    for repeat in range(repeats):
        for measure in chosen:
            for side in (sides if repeat % 2 == 0 else list(reversed(sides))):
                report = reports / f"{side.label}-{len(runs)}"
                timed = time_command(measure.argv(report), side.path, side_env(side))
                found = _read_outcome(report) if measure.reports else None
                runs.append(Run(measure.name, side.label, repeat, timed.seconds, timed.returncode,
                                timed.last_line, measure.reports, found))
                verdict = found["verdict"] if found else ("no results.json" if measure.reports else timed.last_line)
                say(f"[{len(runs)}/{total}] {side.label:<8} {measure.name}: {timed.seconds:.1f} s, "
                    f"exit {timed.returncode}, {verdict}")
    return runs


def _median(values: Iterable[float | None]) -> float | None:
    values = list(values)
    return None if not values or any(v is None for v in values) else statistics.median(values)


def ratio_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per measure, in run order, and for each that wrote results.json one more for
    pytest's own ``wall_s``: ``measure``, ``baseline_s`` and ``change_s`` (medians over the
    repeats; None where a run gave no value), ``ratio`` (change / baseline) and ``repeats``."""
    names = list(dict.fromkeys(r.measure for r in runs))
    rows = []
    for name in names:
        mine = [r for r in runs if r.measure == name]
        series: list[tuple[str, Callable[[Run], float | None]]] = [(name, lambda r: r.seconds)]
        if any(r.reports for r in mine):
            series.append((f"{name}, pytest", lambda r: r.outcome["wall_s"] if r.outcome else None))
        for label, value in series:
            base = _median(value(r) for r in mine if r.side == "baseline")
            change = _median(value(r) for r in mine if r.side == "change")
            rows.append({"measure": label, "baseline_s": base, "change_s": change,
                         "ratio": change / base if base and change is not None else None,
                         "repeats": len(mine) // len(SIDES)})
    return rows


def _power_shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.{POWER_TOLERANCE_DIGITS}f}"


# (check name, outcome key, the value compared, the value shown)
_OUTCOME_CHECKS: tuple[tuple[str, str, Callable[[Any], Any], Callable[[Any], str]], ...] = (
    ("case ids run", "cases_run", tuple, lambda v: f"{len(v)} case" + ("" if len(v) == 1 else "s")),
    ("cases skipped", "cases_skipped", lambda v: v, str),
    ("statistical assertions", "assertions", lambda v: v, str),
    ("minimum power", "min_power", lambda v: None if v is None else round(v, POWER_TOLERANCE_DIGITS), _power_shown),
    ("verdict", "verdict", lambda v: v, str),
)


def _case_difference(base: set[str], change: set[str]) -> str:
    parts = []
    for label, only in (("only in baseline", base - change), ("only in change", change - base)):
        if only:
            shown = sorted(only)[:_SHOWN_CASES]
            more = f" (+{len(only) - len(shown)} more)" if len(only) > len(shown) else ""
            parts.append(f"{label}: {', '.join(shown)}{more}")
    return "; ".join(parts)


def _side_value(runs: list[Run], compare: Callable[[Any], Any], key: str,
                show: Callable[[Any], str]) -> tuple[set[Any], str]:
    values = {compare(r.outcome[key]) for r in runs}
    shown = sorted({show(r.outcome[key]) for r in runs})
    return values, shown[0] if len(shown) == 1 else "varies: " + ", ".join(shown)


def checks(runs: Sequence[Run]) -> list[Check]:
    """The quantities that must be the same on both sides and in every repeat (module
    note), per measure: from results.json where the measure writes it (a run without one
    fails the check ``results.json written``), else the exit status."""
    result = []
    for name in dict.fromkeys(r.measure for r in runs):
        mine = {side: [r for r in runs if r.measure == name and r.side == side] for side in SIDES}
        if not any(r.reports for side_runs in mine.values() for r in side_runs):
            codes = {side: sorted({r.returncode for r in side_runs}) for side, side_runs in mine.items()}
            shown = {side: ", ".join(map(str, c)) for side, c in codes.items()}
            result.append(Check(f"{name}: exit status", shown["baseline"], shown["change"],
                                len(codes["baseline"]) == 1 and codes["baseline"] == codes["change"]))
            continue
        missing = {side: sum(r.outcome is None for r in side_runs) for side, side_runs in mine.items()}
        if any(missing.values()):
            result.append(Check(f"{name}: results.json written", *(
                f"missing in {missing[side]} of {len(mine[side])} runs" if missing[side] else "yes" for side in SIDES),
                equal=False, detail="exit status " + ", ".join(
                    f"{r.side} {r.returncode}: {r.last_line}" for side_runs in mine.values() for r in side_runs
                    if r.outcome is None)))
            continue
        for check_name, key, compare, show in _OUTCOME_CHECKS:
            (base_values, base_shown), (change_values, change_shown) = (
                _side_value(mine[side], compare, key, show) for side in SIDES)
            equal = len(base_values) == 1 and base_values == change_values
            detail = ""
            if key == "cases_run" and not equal:
                detail = _case_difference(*({c for r in mine[side] for c in r.outcome[key]} for side in SIDES))
            result.append(Check(f"{name}: {check_name}", base_shown, change_shown, equal, detail))
    return result


def failed(found: Sequence[Check]) -> bool:
    """Whether any check differs."""
    return not all(c.equal for c in found)


def _table(header: Sequence[str], body: Sequence[Sequence[str]], right_from: int) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i >= right_from else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(row) for row in body)]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_report(sides: Sequence[Side], rows: Sequence[dict[str, Any]], found: Sequence[Check],
                  title: str) -> str:
    """The printed report: ``title``, the two sides, the ratio table and the checks."""
    lines = [title]
    lines += [f"{s.label}: {s.spec} ({s.commit})" for s in sides]
    lines.append("")
    lines += _table(("measure", "baseline s", "change s", "change / baseline"),
                    [(r["measure"], _seconds(r["baseline_s"]), _seconds(r["change_s"]),
                      "-" if r["ratio"] is None else f"{r['ratio']:.3f}") for r in rows], right_from=1)
    lines.append("")
    lines += _table(("must be the same", "baseline", "change", ""),
                    [(c.name, c.baseline, c.change, "same" if c.equal else "DIFFERENT") for c in found],
                    right_from=3)
    lines += [f"  {c.name}: {c.detail}" for c in found if c.detail]
    lines.append("")
    lines.append("FAIL: the sides differ in what they ran (a speed-up that drops cases is not a speed-up)"
                 if failed(found) else "the sides ran the same cases, assertions and power")
    return "\n".join(lines)


def compare(*, baseline: str, change: str, repo: Path, device: str, workers: str, run_options: Sequence[str],
            startup_case: str | None, tests: bool, repeats: int, json_path: str | None,
            environment: dict[str, Any], reports: str | None = None) -> int:
    """The ``verdict`` benchmark (module note): check out both sides, check their imports,
    time the measures, print the report and, with ``json_path``, write it with
    ``environment``. The runs' report directories (results.json: each case's duration) go
    under ``reports`` (None: a temporary directory, removed). Returns the exit status (1: the sides differ, or a run wrote no
    results.json; 0 otherwise).

    Raises:
        ValueError: a side is neither a checkout nor a revision of ``repo``.
        RuntimeError: a side's commands would import packages from outside its checkout.
    """
    chosen = measures(device=device, workers=workers, run_options=run_options, startup_case=startup_case,
                      tests=tests)
    with tempfile.TemporaryDirectory(prefix="dspark-verdict-") as scratch, \
            checkouts({"baseline": baseline, "change": change}, repo, Path(scratch)) as sides:
        for side in sides:
            byte_compile(side)
            check_imports(side)
            print(f"{side.label}: {side.spec} ({side.commit}) at {side.path}", flush=True)
        runs = run_sides(sides, chosen, repeats, Path(reports) if reports else Path(scratch) / "reports",
                         say=lambda line: print(line, flush=True))
    rows, found = ratio_rows(runs), checks(runs)
    options = " ".join(run_options)
    title = (f"time to verdict on {environment.get('device_name', device)}: --device {device} --workers {workers}"
             + (f", run options {options!r}" if options else "")
             + f"; median of {repeats} per side, sides alternating")
    print("\n" + format_report(sides, rows, found, title))
    if json_path:
        write_json(json_path, {"environment": environment, "repeats": repeats, "run_options": list(run_options),
                               "sides": [{"label": s.label, "spec": s.spec, "commit": s.commit} for s in sides],
                               "rows": rows, "checks": found, "runs": runs})
        print(f"\nwrote {json_path}")
    return int(failed(found))
