"""Signals during ``dspark-conformance run``: a deadline ends the run with its reports.

Within :func:`interruptible` (the CLI's ``run``), SIGINT (Ctrl-C) and SIGTERM (a CI job's
limit, ``timeout``) do not kill the runner: the first one sends one SIGINT to the process
group of the pytest it is waiting for (its xdist workers stop their running cases), which
ends its session with exit status 2 and a JSON of every case that finished
(``conformance.runner.run_suite`` consults :func:`active`), or, between two pytest runs,
keeps the next from starting. The report then reads INTERRUPTED
(``conformance.report.matrix.overall``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

__all__ = ["Interrupts", "active", "interruptible"]


class Interrupts:
    """The signals of one ``dspark-conformance run``: the first SIGINT or SIGTERM sets
    ``requested`` and sends one SIGINT to the process group of the pytest being waited for
    (a session of its own: :func:`conformance.runner.run_suite`; pytest then ends its
    session: its JSON holds every case that finished, exit status 2), or, between two
    pytest runs, keeps the next from starting; later signals are ignored while pytest ends.
    ``cut``: a pytest was interrupted or not started, so the run is incomplete."""

    def __init__(self) -> None:
        self.requested = False
        self.cut = False
        self._child: subprocess.Popen | None = None

    def watch(self, child: subprocess.Popen | None) -> None:
        """The pytest now waited for (None: none); interrupted at once if a signal came."""
        self._child = child
        if child is not None and self.requested:
            self._interrupt()

    def handle(self, signum: int, frame: object) -> None:
        """The signal handler: the first signal interrupts; later ones are ignored."""
        if self.requested:
            return
        self.requested = True
        print(f"dspark-conformance: {signal.Signals(signum).name}: interrupting the run; the reports will hold "
              "the cases that finished", file=sys.stderr)
        self._interrupt()

    def _interrupt(self) -> None:
        child, self._child = self._child, None  # one SIGINT per pytest
        if child is not None and child.poll() is None:
            # To the whole group: xdist's busy workers would otherwise be waited for, 10 s,
            # then killed; interrupted, each stops its running case at once.
            os.killpg(child.pid, signal.SIGINT)
            self.cut = True


_ACTIVE: Interrupts | None = None


@contextlib.contextmanager
def interruptible() -> Iterator[Interrupts]:
    """For the duration, SIGINT and SIGTERM go to an :class:`Interrupts` (main thread only;
    elsewhere the yielded one never fires) that every ``run_suite`` call consults. The
    handlers are in place before any pytest starts, so each starts with SIGINT at its default
    (exec resets a handled signal), even when this process began with SIGINT ignored (a
    shell's background job)."""
    global _ACTIVE
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {sig: signal.signal(sig, interrupts.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    _ACTIVE = interrupts
    try:
        yield interrupts
    finally:
        _ACTIVE = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def active() -> Interrupts | None:
    """The :class:`Interrupts` of the :func:`interruptible` block now running, or None."""
    return _ACTIVE
