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
from pathlib import Path

#: The folder of the suite's test modules (a checkout's or an installed wheel's).
SUITE_DIR = Path(__file__).resolve().parent / "suite"


def pytest_command(
    *, impl: str, device: str, json_path: Path, junit_path: Path | None = None, seed: int | None = None,
    workers: str = "auto", keyword: str | None = None, extra: list[str] | None = None,
    cases: list[str] | None = None,
) -> list[str]:
    """The pytest command line behind every subcommand: one adapter, the whole suite or only
    the given case keys (``conformance.seeds``; as results.json names them)."""
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
    return cmd + list(extra or [])


def run_suite(cmd: list[str], json_path: Path, *, quiet: bool = False) -> tuple[int, dict | None]:
    """Run one pytest command; return its exit code and the plugin's JSON (None if absent)."""
    json_path.unlink(missing_ok=True)
    output = subprocess.DEVNULL if quiet else None
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=output, stderr=output)
    if not json_path.exists():
        return proc.returncode, None
    return proc.returncode, json.loads(json_path.read_text())


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
