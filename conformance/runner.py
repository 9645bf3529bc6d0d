"""The pytest runs behind every subcommand: the command line, and one run with its results.

``dspark-conformance run`` runs one in the foreground; the power tools (kill matrix,
calibration) run many quietly (:func:`run_quietly`). No module here imports the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pytest import ExitCode

from . import interrupts
from .cuda_context import lost_cases, out_of_memory_cases

#: The folder of the suite's test modules (a checkout's or an installed wheel's).
SUITE_DIR = Path(__file__).resolve().parent / "suite"
#: The folder that holds the ``conformance`` package (a checkout's root, or site-packages):
#: the suite's pytest rootdir, where conftest discovery stops.
PACKAGE_PARENT = SUITE_DIR.parent.parent


#: The environment of every pytest the runner starts. The host's pytest plugins stay out, as
#: its configuration does ("-c"): the command names the two it needs (this suite's and
#: xdist); others join only by "-p NAME" after "--". Each would cost every pytest process
#: its import (hypothesis's plugin imports hypothesis at the terminal summary: 1-2 s per
#: process, the controller and each worker, measured on 2 cores) and could reorder, time
#: out or rerun cases behind the gate's back.
PYTEST_ENV = {"PYTHONUNBUFFERED": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
#: Built-in plugins the suite does not use whose teardown costs every process: the
#: unraisable-exception hook's five garbage collections over torch's heap (0.4 s idle, in
#: each process, after the last case and after an interrupt alike).
_PLUGINS_OFF = ("-p", "no:cacheprovider", "-p", "no:unraisableexception")


#: What the run prints as it goes (``pytest_command``'s ``console``): pytest's dots and
#: tracebacks, or progress by SPEC section (``conformance.progress``) with or without them.
CONSOLES = {"pytest": [], "progress": ["--dspark-progress"],
            "progress+tracebacks": ["--dspark-progress", "--dspark-tracebacks"]}


def pytest_command(
    *, impl: str, device: str, json_path: Path, junit_path: Path | None = None, seed: int | None = None,
    workers: str = "auto", keyword: str | None = None, extra: list[str] | None = None,
    cases: list[str] | None = None, phase: str = "all", console: str = "pytest", shard: tuple[int, int] | None = None,
    latency: str = "with-others",
) -> list[str]:
    """The pytest command line behind every subcommand: one adapter, the whole suite or only
    the given case ids (``conformance.seeds``; as results.json names them); ``phase`` is
    the plugin's ``--dspark-phase``, ``latency`` its ``--dspark-latency-bound``; ``console``
    one of :data:`CONSOLES`; ``shard`` ``(I, N)`` its ``--dspark-shard``
    (``conformance.shards``). Run it with :data:`PYTEST_ENV` (:func:`run_suite` does)."""
    cmd = [
        # The host's configuration stays out: without "-c", pytest adopts the first pytest.ini /
        # pyproject.toml above SUITE_DIR and the conftest.py files on the way, which for a
        # virtual environment kept inside a project are that project's (its addopts, its
        # fixtures, even a case_seed of its own).
        sys.executable, "-m", "pytest", str(SUITE_DIR), "-c", os.devnull, f"--rootdir={PACKAGE_PARENT}",
        f"--confcutdir={PACKAGE_PARENT}", "-q", "-rN",
        f"--dspark-impl={impl}", f"--dspark-device={device}", f"--dspark-report-json={json_path}",
        "--dspark-strict-ledger", "-p", "dspark_conformance_plugin", *_PLUGINS_OFF,
    ]
    if junit_path is not None:
        cmd.append(f"--junitxml={junit_path}")
    if seed is not None:
        cmd.append(f"--dspark-seed={seed}")
    if workers != "0":
        cmd += ["-p", "xdist.plugin", "-n", workers]
    if keyword:
        cmd += ["-k", keyword]
    cmd += [f"--dspark-case={key}" for key in cases or ()]
    if shard is not None:
        cmd.append(f"--dspark-shard={shard[0]}/{shard[1]}")
    if phase != "all":
        cmd.append(f"--dspark-phase={phase}")
    if latency != "with-others":
        cmd.append(f"--dspark-latency-bound={latency}")
    cmd += CONSOLES[console]
    return cmd + list(extra or [])


def run_suite(cmd: list[str], json_path: Path, *, quiet: bool = False,
              errors: list[str] | None = None) -> tuple[int, dict | None]:
    """Run one pytest command; return its exit code and the plugin's JSON (None if absent).

    Inside :func:`conformance.interrupts.interruptible`, pytest runs in a session of its own
    and the run's first SIGINT / SIGTERM interrupts it; once one has come, no further pytest
    starts (exit code 2, no JSON). ``errors`` (not with ``quiet``): pytest's stderr still
    goes to this process's, and its ``ERROR:`` lines (a usage error's cause) are appended.
    """
    json_path.unlink(missing_ok=True)
    output = subprocess.DEVNULL if quiet else None
    active = interrupts.active()
    if active is not None and active.requested:
        active.cut = True
        return ExitCode.INTERRUPTED, None
    tee_stderr = errors is not None and not quiet
    proc = subprocess.Popen(cmd, env={**os.environ, **PYTEST_ENV}, stdout=output,
                            stderr=subprocess.PIPE if tee_stderr else output, text=tee_stderr,
                            start_new_session=active is not None)
    tee = None
    if proc.stderr is not None:
        tee = threading.Thread(target=_tee_errors, args=(proc.stderr, errors), daemon=True)
        tee.start()
    if active is not None:
        active.watch(proc)
    try:
        returncode = proc.wait()
    finally:
        if active is not None:
            active.watch(None)
        if tee is not None:
            tee.join()
    if not json_path.exists():
        return returncode, None
    return returncode, json.loads(json_path.read_text())


def _tee_errors(stream, errors: list[str]) -> None:
    """Copy ``stream`` (pytest's stderr) to this process's stderr, line by line, keeping the
    lines that begin with ``ERROR:`` in ``errors``."""
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        if line.startswith("ERROR:"):
            errors.append(line.strip())


def merge_phases(*phases: tuple[int, dict | None]) -> tuple[int, dict | None]:
    """One ``(exit code, results.json)`` from the phases of one run (``--dspark-phase``
    parallel, then serial): the records of all, in that order; the exit code 1 if any
    failed, else the first non-zero one (a phase that collected nothing counts as 0); the
    wall time summed; interrupted if any was."""
    codes = [code for code, _ in phases if code not in (ExitCode.OK, ExitCode.NO_TESTS_COLLECTED)]
    code = 1 if 1 in codes else (codes[0] if codes else 0)
    payloads = [payload for _, payload in phases if payload is not None]
    if not payloads:
        return code, None
    merged = {**payloads[0], "tests": [t for p in payloads for t in p["tests"]],
              "wall_s": round(sum(p["wall_s"] for p in payloads), 2),
              "selected_by_section": _selected(payloads),
              "collection_errors": list({e["module"]: e for p in payloads
                                         for e in p.get("collection_errors") or ()}.values())}
    merged.pop("held_for_other_phase", None)  # a phase's count: the merged run has both
    if "shard_selection" in merged:  # unknown in a phase whose workers were all interrupted
        merged["shard_selection"] = next((p["shard_selection"] for p in payloads if p.get("shard_selection")), None)
    interrupted = any(p.get("exit_status") == ExitCode.INTERRUPTED for p in payloads)
    merged["exit_status"] = int(ExitCode.INTERRUPTED) if interrupted else code
    return code, merged


def _selected(payloads: list[dict]) -> dict[str, int] | None:
    """The cases per section the phases selected (``selected_by_section``), with those the
    first left to a phase that never ran (interrupted before it started) where known; None
    if a phase's selection is not known."""
    counts = [p.get("selected_by_section") for p in payloads]
    if any(c is None for c in counts):
        return None
    if len(payloads) == 1:  # a held count is unknown where the interrupt stopped the workers: none counted
        counts.append(payloads[0].get("held_for_other_phase") or {})
    return dict(sum((Counter(c) for c in counts), Counter()))


def rerun_lost_cases(payload: dict, command_for: Callable[[list[str], Path, Path], list[str]],
                     report_dir: Path) -> dict:
    """Run again, in fresh processes, the cases that did not run because an earlier case of
    their process lost the CUDA context (``conformance.cuda_context``), until every case ran
    or a round makes no progress; their new records replace the not-run ones.

    ``command_for(case ids, json path, junit path)`` is the pytest command of one round;
    round ``i`` writes ``junit-rerun-i.xml`` in ``report_dir`` (the CLI merges it into
    ``junit.xml``, ``conformance.report.junit``). Returns ``payload`` with
    the merged ``tests`` (the case that lost the context keeps its own failure).
    """
    for round_ in range(1, len(payload["tests"]) + 1):
        lost = lost_cases(payload["tests"])
        if not lost:
            break
        print(f"dspark-conformance: {len(lost)} cases did not run (a case lost the CUDA context of their "
              f"process); running them again in a fresh process (round {round_})", file=sys.stderr)
        json_path = report_dir / f"results-rerun-{round_}.json"
        _, rerun = run_suite(command_for(lost, json_path, report_dir / f"junit-rerun-{round_}.xml"), json_path)
        json_path.unlink(missing_ok=True)
        fresh = {r["case"]: r for r in (rerun or {}).get("tests", ()) if r["case"] in set(lost)}
        payload = {**payload, "tests": [fresh.get(r["case"], r) for r in payload["tests"]]}
        if len(lost_cases(payload["tests"])) >= len(lost):
            break
    return payload


def rerun_out_of_memory(payload: dict, command_for: Callable[[list[str], Path, Path], list[str]],
                        report_dir: Path) -> dict:
    """Run again, alone in one process, the cases of a multi-worker run that failed with CUDA
    out of memory: every xdist worker is a process with its own CUDA context and cached
    memory on the same card, so a case can fail for want of what the others hold (three S4
    production shapes did at 14 workers on an 80 GB H100). The lone run's record replaces
    the failed one and says so (``first_attempt``); a case that runs out of memory alone
    keeps its failure.

    ``command_for(case ids, json path, junit path)`` is the pytest command of the lone run
    (no workers); it writes ``junit-rerun-N.xml`` in ``report_dir``, N after the lost-case
    rounds. Returns ``payload`` with the merged ``tests``.
    """
    failed = out_of_memory_cases(payload["tests"])
    if not failed:
        return payload
    print(f"dspark-conformance: {len(failed)} cases ran out of CUDA memory beside the other workers; "
          "running them again alone", file=sys.stderr)
    round_ = 1 + len(list(report_dir.glob("junit-rerun-*.xml")))
    json_path = report_dir / f"results-rerun-{round_}.json"
    _, rerun = run_suite(command_for(failed, json_path, report_dir / f"junit-rerun-{round_}.xml"), json_path)
    json_path.unlink(missing_ok=True)
    note = "failed with CUDA out of memory beside the other workers; this record is its run alone"
    fresh = {r["case"]: {**r, "first_attempt": note} for r in (rerun or {}).get("tests", ()) if r["case"] in set(failed)}
    return {**payload, "tests": [fresh.get(r["case"], r) for r in payload["tests"]]}


def run_quietly(*, impl: str, device: str, seed: int | None = None, keyword: str | None = None,
                extra: list[str] | None = None, cases: list[str] | None = None
                ) -> tuple[int, dict | None, list[str]]:
    """One serial, silent pytest run (as the kill matrix and calibration make them), its JSON
    in a temporary directory: ``(exit code, results.json or None, command)``."""
    with tempfile.TemporaryDirectory(prefix="dspark-run-") as tmp:
        json_path = Path(tmp) / "results.json"
        cmd = pytest_command(impl=impl, device=device, json_path=json_path, seed=seed, workers="0",
                             keyword=keyword, extra=extra, cases=cases)
        returncode, payload = run_suite(cmd, json_path, quiet=True)
    return returncode, payload, cmd
