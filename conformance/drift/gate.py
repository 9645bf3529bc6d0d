"""One engine through the drift check: install the release into a scratch directory, load
its adapter, run the CPU gate, each in a process of its own with the engine's directories on
``PYTHONPATH`` (the CI steps of ``.ci/run``, as functions).

* :func:`install` -- ``pip install --no-deps --target DIR DIST==X EXTRAS`` (a development
  tree installs only the adapter's extras);
* :func:`load_error` -- ``python -m conformance.drift.probe IMPL``;
* :func:`run_gate` -- ``python -m conformance.cli run --impl IMPL --workers N --report DIR
  -- -m "not statistical"`` with ``TRITON_INTERPRET=1``;
* :func:`check_engine` -- the three, into one :class:`~conformance.drift.table.EngineResult`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .index import Release, pip_error
from .table import EngineResult

__all__ = ["GATE_PYTEST_ARGS", "InstallError", "check_engine", "gate_command", "install", "install_command",
           "load_error", "run_gate"]

#: The CPU gate's selection, as ``.ci/run`` runs each engine: the statistical cases are left
#: to the GPU tier (on 2 CPU cores they take hours through interpreted Triton kernels).
GATE_PYTEST_ARGS: tuple[str, ...] = ("-m", "not statistical")
#: Exit codes of one engine (``conformance.cli``'s): a release its adapter cannot load fails
#: the check (the engine drifted from the adapter); no release found or installed is infrastructure.
EXIT_FAIL, EXIT_INFRA = 1, 3
GATE_LOG, INSTALL_LOG = "gate.log", "install.log"


class InstallError(RuntimeError):
    """pip could not install the release or the adapter's extras (message: pip's error line)."""


def install_command(release: Release, extras: tuple[str, ...], target: Path) -> list[str] | None:
    """The pip command that installs ``release`` (unless it is a development tree) and
    ``extras`` into ``target``, without dependencies; None when there is nothing to install."""
    requirements = ([] if release.version is None else [f"{release.engine.distribution}=={release.version}"])
    requirements += extras
    if not requirements:
        return None
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), "--quiet",
            "--disable-pip-version-check", *requirements]


def install(release: Release, extras: tuple[str, ...], target: Path, log: Path) -> list[Path]:
    """Install ``release`` and ``extras`` into ``target``; pip's output goes to ``log``.

    Returns:
        The directories the engine imports from, for ``PYTHONPATH``, first first: the
        development tree (if any), then ``target``.

    Raises:
        InstallError: pip failed (the message gives its error line).
    """
    cmd = install_command(release, extras, target)
    if cmd is not None:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log.write_text(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            raise InstallError(f"pip install failed: {pip_error(proc.stderr + proc.stdout)}")
    return ([release.path] if release.path is not None else []) + [target]


def engine_env(paths: list[Path]) -> dict[str, str]:
    """This process's environment with ``paths`` first on ``PYTHONPATH`` and Triton's
    interpreter on (the gate runs on CPU)."""
    python_path = [str(p) for p in paths] + list(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(python_path), "TRITON_INTERPRET": "1"}


def probe_command(impl: str) -> list[str]:
    return [sys.executable, "-m", "conformance.drift.probe", impl]


def load_error(impl: str, paths: list[Path]) -> str | None:
    """Why the adapter ``impl`` does not load with ``paths`` on ``PYTHONPATH``, in one line
    (the load error's first line), or None when it loads."""
    proc = subprocess.run(probe_command(impl), env=engine_env(paths), capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines[0].strip() if lines else f"the adapter's loader exited {proc.returncode} with no message"


def gate_command(impl: str, report_dir: Path, workers: str, pytest_args: tuple[str, ...] = GATE_PYTEST_ARGS
                 ) -> list[str]:
    """The CPU gate of one adapter (``dspark-conformance run``)."""
    return [sys.executable, "-m", "conformance.cli", "run", "--impl", impl, "--workers", workers,
            "--report", str(report_dir), "--", *pytest_args]


def run_gate(impl: str, paths: list[Path], report_dir: Path, workers: str,
             pytest_args: tuple[str, ...] = GATE_PYTEST_ARGS) -> tuple[int, dict | None]:
    """Run the CPU gate of ``impl`` with ``paths`` on ``PYTHONPATH``; its output goes to
    ``report_dir/gate.log``. Returns its exit code and its results.json (None if it wrote none)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    results = report_dir / "results.json"
    results.unlink(missing_ok=True)
    with open(report_dir / GATE_LOG, "w") as log:
        returncode = subprocess.run(gate_command(impl, report_dir, workers, pytest_args), env=engine_env(paths),
                                    stdout=log, stderr=subprocess.STDOUT).returncode
    try:
        return returncode, json.loads(results.read_text())
    except (OSError, json.JSONDecodeError):
        return returncode, None


def check_engine(release: Release, *, target: Path, report_dir: Path, workers: str,
                 pytest_args: tuple[str, ...] = GATE_PYTEST_ARGS) -> EngineResult:
    """Install ``release`` into ``target``, load its adapter and run its CPU gate, its
    reports and logs in ``report_dir``. Failures become the result's verdict and exit code,
    never exceptions: an adapter that does not load is exit 1, an install that fails exit 3."""
    engine = release.engine
    report_dir.mkdir(parents=True, exist_ok=True)
    fields = dict(engine=engine.name, release=release.label, origin=release.origin, report=str(report_dir))
    try:
        extras = engine.install_extras()
    except Exception as exc:  # noqa: BLE001 - an adapter package that does not import is its load failure
        return EngineResult(**fields, exit_code=EXIT_FAIL, loads=False,
                            load_error=f"{engine.extras_from}: {type(exc).__name__}: {exc}".splitlines()[0])
    try:
        paths = install(release, extras, target, report_dir / INSTALL_LOG)
    except InstallError as exc:
        return EngineResult(**fields, exit_code=EXIT_INFRA, error=str(exc))
    impl = engine.impl_for(release.version)
    why = load_error(impl, paths)
    if why is not None:
        return EngineResult(**fields, exit_code=EXIT_FAIL, loads=False, load_error=why)
    returncode, payload = run_gate(impl, paths, report_dir, workers, pytest_args)
    if payload is None:
        return EngineResult(**fields, exit_code=EXIT_INFRA, loads=True,
                            error=f"the gate exited {returncode} without results.json (see {report_dir / GATE_LOG})")
    return EngineResult.from_results(payload, **fields, exit_code=payload.get("exit_code", returncode))
