"""The pytest runs behind every subcommand: the command line, and one run with its results.

``dspark-conformance run`` runs one in the foreground; the power tools (kill matrix,
calibration) run many quietly (:func:`run_quietly`). No module here imports the CLI.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from .cuda_context import lost_cases

#: The folder of the suite's test modules (a checkout's or an installed wheel's).
SUITE_DIR = Path(__file__).resolve().parent / "suite"


def pytest_command(
    *, impl: str, device: str, json_path: Path, junit_path: Path | None = None, seed: int | None = None,
    workers: str = "auto", keyword: str | None = None, extra: list[str] | None = None,
    cases: list[str] | None = None, phase: str = "all",
) -> list[str]:
    """The pytest command line behind every subcommand: one adapter, the whole suite or only
    the given case keys (``conformance.seeds``; as results.json names them); ``phase`` is
    the plugin's ``--dspark-phase``."""
    cmd = [
        sys.executable, "-m", "pytest", str(SUITE_DIR), "-q", "-rN", "-p", "no:cacheprovider",
        f"--dspark-impl={impl}", f"--dspark-device={device}", f"--dspark-report-json={json_path}",
        "--dspark-strict-ledger",
    ]
    if junit_path is not None:
        cmd.append(f"--junitxml={junit_path}")
    if seed is not None:
        cmd.append(f"--dspark-seed={seed}")
    if workers != "0":
        cmd += ["-n", workers]
    if keyword:
        cmd += ["-k", keyword]
    cmd += [f"--dspark-case={key}" for key in cases or ()]
    if phase != "all":
        cmd.append(f"--dspark-phase={phase}")
    return cmd + list(extra or [])


def run_suite(cmd: list[str], json_path: Path, *, quiet: bool = False) -> tuple[int, dict | None]:
    """Run one pytest command; return its exit code and the plugin's JSON (None if absent).

    From the main thread, SIGINT (Ctrl-C) and SIGTERM (a CI job's or ``timeout``'s deadline)
    interrupt pytest instead of this process: pytest ends its session with exit status 2,
    its JSON holds every case that finished, and the caller still writes its reports (the
    run reads INTERRUPTED, :func:`conformance.report.matrix.overall`).
    """
    json_path.unlink(missing_ok=True)
    output = subprocess.DEVNULL if quiet else None
    forward = threading.current_thread() is threading.main_thread()
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=output, stderr=output,
                            start_new_session=forward)
    with _interrupts_forwarded(proc) if forward else contextlib.nullcontext():
        returncode = proc.wait()
    if not json_path.exists():
        return returncode, None
    return returncode, json.loads(json_path.read_text())


@contextlib.contextmanager
def _interrupts_forwarded(proc: subprocess.Popen) -> Iterator[None]:
    """While ``proc`` runs (in a session of its own, so a terminal's Ctrl-C reaches only this
    process), the first SIGINT or SIGTERM here becomes one SIGINT to ``proc``; later ones are
    ignored while it finishes its session."""
    sent = False

    def forward(signum: int, frame: object) -> None:
        nonlocal sent
        if not sent and proc.poll() is None:
            print(f"dspark-conformance: {signal.Signals(signum).name}: interrupting pytest; the reports will "
                  "hold the cases that finished", file=sys.stderr)
            proc.send_signal(signal.SIGINT)
            sent = True

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_INTERRUPTED, _NO_TESTS = 2, 5  # pytest.ExitCode: INTERRUPTED; NO_TESTS_COLLECTED (a phase that selects nothing)


def merge_phases(first: tuple[int, dict | None], second: tuple[int, dict | None]) -> tuple[int, dict | None]:
    """One ``(exit code, results.json)`` from two phases of one run (``--dspark-phase``
    parallel, then serial): the records of both, in that order; the exit code 1 if either
    failed, else the first non-zero one (a phase that collected nothing counts as 0); the
    wall time summed; interrupted if either was."""
    codes = [code for code, _ in (first, second) if code not in (0, _NO_TESTS)]
    code = 1 if 1 in codes else (codes[0] if codes else 0)
    payloads = [payload for _, payload in (first, second) if payload is not None]
    if not payloads:
        return code, None
    merged = {**payloads[0], "tests": [t for p in payloads for t in p["tests"]],
              "wall_s": round(sum(p["wall_s"] for p in payloads), 2)}
    merged["exit_status"] = _INTERRUPTED if any(p.get("exit_status") == _INTERRUPTED for p in payloads) else code
    return code, merged


def rerun_lost_cases(payload: dict, command_for: Callable[[list[str], Path, Path], list[str]],
                     report_dir: Path) -> dict:
    """Run again, in fresh processes, the cases that did not run because an earlier case of
    their process lost the CUDA context (``conformance.cuda_context``), until every case ran
    or a round makes no progress; their new records replace the not-run ones.

    ``command_for(case keys, json path, junit path)`` is the pytest command of one round;
    round ``i`` writes ``junit-rerun-i.xml`` in ``report_dir``. Returns ``payload`` with
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
