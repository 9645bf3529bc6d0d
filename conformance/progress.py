"""The console of ``dspark-conformance run``: progress by SPEC section in place of pytest's
dots, and the suite cases' tracebacks left to the reports.

Registered by the plugin in the process that prints (pytest alone, or xdist's controller,
whose ``pytest_runtest_logreport`` sees every worker's reports) when ``--dspark-progress``
is given. A line is printed when a section's last selected case finishes, and otherwise
for the section of a finishing case at most every :data:`PROGRESS_EVERY_S` seconds::

    S3 step sampling: 75/75 done (2 failed, 4 skipped); run 155/345 cases, 1 min 2 s elapsed, about 1 min 16 s left

The estimate, once a tenth of the cases are done, assumes the cases left take the mean time
of those done. Unless
``--dspark-tracebacks``, pytest's failures and errors sections are left out where every
report in them is a suite case's (junit and ``--dspark-report-json`` carry those
tracebacks); a collection error or a teardown error still prints in full.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from .sections import SECTION_TITLES
from .session import case_outcome, final_case_id, run_session

#: The least time between two progress lines of unfinished sections (a finished section
#: always prints its line).
PROGRESS_EVERY_S = 10.0
#: The share of the run's cases done before a line estimates the time left: before, the
#: start-up (workers, collection) dominates the mean (a first line said "about 52 min left"
#: of a 3-minute run).
ESTIMATE_FROM = 0.1
#: The record outcomes a progress line counts, in the words it uses.
_COUNTED = {"failed": "failed", "xpassed": "failed", "inconclusive": "inconclusive", "skipped": "skipped"}


def elapsed_text(seconds: float) -> str:
    """``seconds`` as ``42 s`` or ``3 min 5 s`` (whole seconds)."""
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


class SectionProgress:
    """One progress line per SPEC section as its cases finish (module note).

    Attributes:
        done / counted: per section, the cases finished, and those of them by the words of
            :data:`_COUNTED` (``{"S3": Counter({"failed": 2})}``).
    """

    def __init__(self, config: pytest.Config, *, tracebacks: bool) -> None:
        self.config = config
        self.tracebacks = tracebacks
        self.started = time.monotonic()
        self.last_line = float("-inf")
        self.done: Counter[str] = Counter()
        self.counted: dict[str, Counter[str]] = {}

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = time.monotonic()

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        category, _, _ = yield
        return category, "", ""  # the category keeps pytest's counts; no letter, no dot

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case_id = final_case_id(report)
        if case_id is None:
            return
        section = case_id.partition("/")[0]
        selected = run_session(self.config).selected_by_section or {}
        if not self.done and self.config.getoption("--dspark-phase") == "serial":
            workers = getattr(self.config.option, "numprocesses", None)
            where = f"{workers} processes apart" if workers else "alone in one process"
            self._write(f"the {sum(selected.values())} latency-bound cases, after the others, {where}:")
        self.done[section] += 1
        word = _COUNTED.get(case_outcome(report))
        counts = self.counted.setdefault(section, Counter())
        if word is not None:
            counts[word] += 1
        finished = self.done[section] == selected.get(section)
        now = time.monotonic()
        if finished or now - self.last_line >= PROGRESS_EVERY_S:
            self.last_line = now
            self._write(self.line(section, selected, now - self.started))

    def line(self, section: str, selected: dict[str, int], elapsed_s: float) -> str:
        """The progress line of ``section`` (module note), ``elapsed_s`` into the run;
        ``selected``: the cases per section the run selected (totals left out where unknown)."""
        total, done = selected.get(section), self.done[section]
        title = f"{section} {SECTION_TITLES.get(section, '')}".rstrip()
        state = f"{done}/{total} done" if done == total else f"{done}/{total}" if total else f"{done}"
        counts = self.counted.get(section, Counter())
        noted = ", ".join(f"{counts[word]} {word}" for word in dict.fromkeys(_COUNTED.values()) if counts[word])
        run_total, run_done = sum(selected.values()), sum(self.done.values())
        text = f"{title}: {state}{f' ({noted})' if noted else ''}; run {run_done}"
        text += f"{f'/{run_total}' if selected else ''} cases, {elapsed_text(elapsed_s)} elapsed"
        if selected and run_total > run_done and run_done >= ESTIMATE_FROM * run_total:
            text += f", about {elapsed_text(elapsed_s / run_done * (run_total - run_done))} left"
        return text

    def _write(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(text)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        """Outside pytest's own summary: its failures and errors sections see ``--tb=no``
        while every report in them is a suite case's (the reports hold their tracebacks)."""
        shown = [r for name in ("failed", "error") for r in terminalreporter.stats.get(name, ())]
        if self.tracebacks or not all(final_case_id(r) is not None for r in shown):
            return (yield)
        style, self.config.option.tbstyle = self.config.option.tbstyle, "no"
        try:
            return (yield)
        finally:
            self.config.option.tbstyle = style
