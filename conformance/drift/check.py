"""The drift check over engines: choose each release, check it (``conformance.drift.gate``)
or, in a dry run, print what would be installed and run; then the table."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from . import gate
from .index import NEWEST, IndexLookupError, Release, choose_release, newest_release
from .registry import Engine
from .table import EngineResult

__all__ = ["check_engines", "dry_run"]


def _folder(release: Release) -> str:
    """The folder name of a release's scratch and report directories."""
    return f"{release.engine.name}-{release.version or 'path'}"


def _releases(engines: Sequence[Engine], pins: Mapping[str, str], paths: Mapping[str, Path],
              newest: Callable[[str], str], report_dir: Path) -> list[Release | EngineResult]:
    """Each engine's release, or the result of an engine whose index lookup failed (exit 3)."""
    chosen: list[Release | EngineResult] = []
    for engine in engines:
        try:
            chosen.append(choose_release(engine, pins=pins, paths=paths, newest=newest))
        except IndexLookupError as exc:
            chosen.append(EngineResult(engine.name, "?", NEWEST, report="", exit_code=gate.EXIT_INFRA,
                                       error=str(exc)))
    return chosen


def check_engines(engines: Sequence[Engine], *, pins: Mapping[str, str], paths: Mapping[str, Path],
                  report_dir: Path, workers: str, keep: bool = False,
                  pytest_args: tuple[str, ...] = gate.GATE_PYTEST_ARGS, newest: Callable[[str], str] = newest_release,
                  log: Callable[[str], None] = print) -> list[EngineResult]:
    """Check each engine's release (``choose_release``) in turn: install it into a fresh
    scratch directory, load its adapter, run its CPU gate with reports under
    ``report_dir/ENGINE-VERSION``. The scratch directories are removed unless ``keep``.

    Args:
        pins / paths: ``--release`` and ``--path`` (engine name -> version / directory).
        workers: the gate's ``--workers``.
        newest: the index lookup (``distribution -> version``).
        log: where progress lines go.

    Raises:
        ValueError: a pin and a path name the same engine, or a pin is not a PEP 440 version.
    """
    scratch = Path(tempfile.mkdtemp(prefix="dspark-engines-"))
    results = []
    try:
        for chosen in _releases(engines, pins, paths, newest, report_dir):
            if isinstance(chosen, EngineResult):
                results.append(chosen)
                continue
            log(f"{chosen.engine.name} {chosen.label} ({chosen.origin}): install, load, gate "
                f"(log: {report_dir / _folder(chosen) / gate.GATE_LOG})")
            results.append(gate.check_engine(chosen, target=scratch / _folder(chosen),
                                             report_dir=report_dir / _folder(chosen), workers=workers,
                                             pytest_args=pytest_args))
    finally:
        if keep:
            log(f"scratch directories kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return results


def dry_run(engines: Sequence[Engine], *, pins: Mapping[str, str], paths: Mapping[str, Path],
            report_dir: Path, workers: str, pytest_args: tuple[str, ...] = gate.GATE_PYTEST_ARGS,
            newest: Callable[[str], str] = newest_release) -> tuple[list[str], list[EngineResult]]:
    """What :func:`check_engines` would install and run, as lines (the index is asked, nothing
    is installed), and the results of engines whose index lookup failed.

    Raises:
        ValueError: as :func:`check_engines`.
    """
    lines, failed = [], []
    scratch = Path(tempfile.gettempdir()) / "dspark-engines-XXXX"
    for chosen in _releases(engines, pins, paths, newest, report_dir):
        if isinstance(chosen, EngineResult):
            failed.append(chosen)
            lines.append(f"{chosen.engine}: {chosen.error}")
            continue
        target = scratch / _folder(chosen)
        try:
            extras = chosen.engine.install_extras()
        except Exception as exc:  # noqa: BLE001 - as check_engine: the adapter package's failure, said
            lines.append(f"{chosen.engine.name}: {chosen.engine.extras_from}: {type(exc).__name__}: {exc}")
            continue
        paths_ = [chosen.path] if chosen.path is not None else []
        python_path = "PYTHONPATH=" + os.pathsep.join(str(p) for p in paths_ + [target])
        impl = chosen.engine.impl_for(chosen.version)
        install = gate.install_command(chosen, extras, target)
        lines += [f"{chosen.engine.name} {chosen.label} ({chosen.origin})",
                  f"  install: {shlex.join(install) if install else 'nothing to install'}",
                  f"  load:    {python_path} {shlex.join(gate.probe_command(impl))}",
                  f"  gate:    {python_path} TRITON_INTERPRET=1 "
                  f"{shlex.join(gate.gate_command(impl, report_dir / _folder(chosen), workers, pytest_args))}"]
    return lines, failed
