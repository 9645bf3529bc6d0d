"""Which release of each engine the drift check takes: the newest on the package index
(pip's own resolution, read from its installation report), one pinned with ``--release``,
or a development tree given with ``--path``.

pip answers for this interpreter and platform, with the index settings it is configured
with (``pip.conf``, ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``...): the newest release that pip
would install here, pre-releases left out as pip leaves them out.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .registry import Engine

__all__ = ["NEWEST", "PATH", "PINNED", "IndexLookupError", "Release", "checked_version", "choose_release",
           "newest_release", "pip_error", "release_in_report"]

#: Where a release came from (the table's words).
NEWEST, PINNED, PATH = "newest on index", "pinned", "path"


class IndexLookupError(RuntimeError):
    """The package index did not name a release (unreachable, no such project, pip failed)."""


@dataclasses.dataclass(frozen=True)
class Release:
    """The release of one engine the check takes.

    Attributes:
        engine: the engine.
        origin: :data:`NEWEST`, :data:`PINNED` or :data:`PATH`.
        version: the release (PEP 440, normalized), or None for a development tree.
        path: the development tree (a directory holding the engine's top-level package), or None.
    """

    engine: Engine
    origin: str
    version: str | None = None
    path: Path | None = None

    @property
    def label(self) -> str:
        """``0.34.0``, or ``path DIR`` for a development tree."""
        return f"path {self.path}" if self.path is not None else str(self.version)


def checked_version(text: str, what: str) -> str:
    """``text`` normalized as a PEP 440 version (``"0.5.23-rc1"`` -> ``"0.5.23rc1"``).

    Raises:
        ValueError: not a PEP 440 version (the message names ``what``).
    """
    try:
        return str(Version(text))
    except InvalidVersion:
        raise ValueError(f"{what}: expected a PEP 440 version, got {text!r}") from None


def release_in_report(report: Mapping, distribution: str) -> str:
    """The version of ``distribution`` in a pip installation report (``pip install
    --report``, format version 1: ``install[].metadata.name/version``), normalized.

    Raises:
        IndexLookupError: the report does not name ``distribution``, or names an invalid version.
    """
    wanted = canonicalize_name(distribution)
    for item in report.get("install", ()):
        metadata = item.get("metadata", {})
        if canonicalize_name(metadata.get("name", "")) == wanted:
            try:
                return checked_version(metadata.get("version", ""), f"pip's report for {distribution}")
            except ValueError as exc:
                raise IndexLookupError(str(exc)) from None
    raise IndexLookupError(f"pip's report names no release of {distribution}")


def pip_error(output: str) -> str:
    """The line of pip's output that says why it failed: its first ``ERROR:`` line, else the
    last non-empty line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("ERROR:")), lines[-1] if lines else "no output")


def newest_release(distribution: str) -> str:
    """The newest release of ``distribution`` that pip would install here, asked of pip's
    resolver without installing anything (``pip install --dry-run --report -``).

    Raises:
        IndexLookupError: pip failed (the index unreachable, no such project: the message gives
            pip's error line) or its report names no release.
    """
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet",
           "--disable-pip-version-check", "--report", "-", distribution]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise IndexLookupError(f"{distribution}: pip found no release ({pip_error(proc.stderr + proc.stdout)})")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise IndexLookupError(f"{distribution}: pip's report is not JSON ({exc})") from None
    return release_in_report(report, distribution)


def choose_release(engine: Engine, *, pins: Mapping[str, str], paths: Mapping[str, Path],
                   newest=newest_release) -> Release:
    """The release of ``engine`` to check: its development tree if ``paths`` names one, else
    its pinned version if ``pins`` names one, else ``newest(distribution)``.

    Args:
        pins: engine name -> version (``--release ENGINE==X``).
        paths: engine name -> development tree (``--path ENGINE=DIR``).
        newest: the index lookup (``distribution -> version``); tests pass their own.

    Raises:
        ValueError: both a pin and a path name the engine.
        IndexLookupError: the index lookup failed.
    """
    if engine.name in pins and engine.name in paths:
        raise ValueError(f"{engine.name}: both --release and --path given; expected one")
    if engine.name in paths:
        return Release(engine, PATH, path=paths[engine.name])
    if engine.name in pins:
        return Release(engine, PINNED, version=checked_version(pins[engine.name], f"--release {engine.name}"))
    return Release(engine, NEWEST, version=newest(engine.distribution))
