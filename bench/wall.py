"""Wall time of one command in a subprocess: what ``tiers`` and ``verdict`` time.

The clock is ``time.perf_counter`` around ``subprocess.run`` (seconds), so it counts what a
user waits for: interpreter start-up, imports, pytest's collection and its workers.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Timed:
    """One finished command: ``command`` (shell-quoted), wall ``seconds``, ``returncode``
    and ``last_line`` (its last non-empty line on stdout, pytest's summary; on stderr where
    stdout has none)."""

    command: str
    seconds: float
    returncode: int
    last_line: str


def time_command(command: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> Timed:
    """Run ``command`` in ``cwd`` (with ``env``, default this process's environment),
    output captured; return its :class:`Timed`. A command that cannot start raises
    ``OSError`` (``FileNotFoundError`` for a missing executable)."""
    start = time.perf_counter()
    proc = subprocess.run(list(command), cwd=cwd, env=None if env is None else dict(env),
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    # A plugin's warnings go to stderr after pytest's summary (pytest-benchmark's did).
    lines = [line for line in proc.stdout.splitlines() if line.strip()] or [
        line for line in proc.stderr.splitlines() if line.strip()]
    return Timed(shlex.join(command), seconds, proc.returncode, lines[-1] if lines else "")
