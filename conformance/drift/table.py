"""The drift check's table: one :class:`EngineResult` per engine, printed as text and
written as ``engines.json`` and ``engines.md``, and the check's exit code."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EngineResult", "exit_code", "format_table", "write_tables", "JSON_FILE", "MARKDOWN_FILE"]

JSON_FILE, MARKDOWN_FILE = "engines.json", "engines.md"
#: Outcomes of results.json records that the adapter's ledger does not explain: an expected
#: failure is ``xfailed``; a strict one that passed is ``failed`` (pytest's XPASS(strict)).
UNEXPLAINED_OUTCOMES = ("failed", "xpassed", "error")
#: The exit code that decides when engines differ, first to last: the CLI's precedence
#: (``conformance.cli.exit_code``: a failure outranks an infrastructure error).
_PRECEDENCE = (1, 3, 2, 0)


@dataclasses.dataclass
class EngineResult:
    """What the drift check found for one engine.

    Attributes:
        engine: the engine's name.
        release: the version, or ``path DIR`` for a development tree.
        origin: ``newest on index``, ``pinned`` or ``path`` (``conformance.drift.index``).
        loads: whether the adapter loaded the release (None: not reached).
        load_error: the load error's first line ("" when it loaded or was not reached).
        capabilities: the capabilities the adapter offered (results.json ``capabilities``;
            None where the gate wrote none).
        unavailable: capabilities the release should offer that did not load -> why
            (results.json ``unavailable``: a module they need did not import).
        cannot_run_here: offered capabilities that cannot run on this machine -> why
            (results.json ``cannot_run_here``: their cases skip).
        verdict: results.json ``overall`` (PASS, FAIL, INCONCLUSIVE, SKIP, INTERRUPTED, or
            ERROR for a run without a verdict); ERROR where the gate did not run.
        unexplained: case keys of the failures the ledger does not explain.
        report: the engine's report directory (gate and install logs, the run's reports; "" where
            no release was found).
        exit_code: this engine's exit code (0 pass, 1 fail or no load, 2 inconclusive, 3 infrastructure).
        error: why there is no verdict (the index, the install or the gate), one line.
    """

    engine: str
    release: str
    origin: str
    report: str
    exit_code: int
    verdict: str = "ERROR"
    loads: bool | None = None
    load_error: str = ""
    capabilities: list[str] | None = None
    unavailable: dict[str, str] = dataclasses.field(default_factory=dict)
    cannot_run_here: dict[str, str] = dataclasses.field(default_factory=dict)
    unexplained: list[str] = dataclasses.field(default_factory=list)
    error: str = ""

    @classmethod
    def from_results(cls, payload: dict, **fields) -> "EngineResult":
        """The result of an engine whose gate wrote ``payload`` (results.json)."""
        return cls(verdict=payload.get("overall", "ERROR"), loads=True,
                   capabilities=list(payload["capabilities"]) if "capabilities" in payload else None,
                   unavailable=dict(payload.get("unavailable", {})),
                   cannot_run_here=dict(payload.get("cannot_run_here", {})),
                   unexplained=[t["case"] for t in payload.get("tests", ())
                                if t["outcome"] in UNEXPLAINED_OUTCOMES],
                   error=payload.get("error", "").splitlines()[0] if payload.get("error") else "",
                   **fields)


def exit_code(results: Sequence[EngineResult]) -> int:
    """The check's exit code: 0 when every engine loads and passes (and at least one was
    checked), else the first of 1, 3, 2 that an engine has."""
    codes = {r.exit_code for r in results}
    if not results:
        return 3
    return next(code for code in _PRECEDENCE if code in codes)


#: The load error's width in the text table's cell.
LOAD_ERROR_WIDTH = 60
HEADER = ("engine", "release", "loads", "capabilities", "verdict", "unexplained failures", "report")


def _cells(r: EngineResult, width: int | None = None) -> list[str]:
    """The row of ``r``; a load error cut to ``width`` characters (the notes give it whole)."""
    error = r.load_error if width is None or len(r.load_error) <= width else r.load_error[:width - 3] + "..."
    loads = "-" if r.loads is None else "yes" if r.loads else f"no: {error}"
    caps = "-" if r.capabilities is None else str(len(r.capabilities)) + (
        f" (did not load: {', '.join(sorted(r.unavailable))})" if r.unavailable else "") + (
        f" (cannot run here: {', '.join(sorted(r.cannot_run_here))})" if r.cannot_run_here else "")
    return [r.engine, f"{r.release} ({r.origin})", loads, caps, r.verdict,
            "-" if r.capabilities is None else str(len(r.unexplained)), r.report or "-"]


def _notes(results: Sequence[EngineResult]) -> list[str]:
    """One line per error and per unexplained failure, under the table."""
    lines = [f"{r.engine}: {r.error}" for r in results if r.error]
    lines += [f"{r.engine}: does not load: {r.load_error}" for r in results if r.loads is False]
    lines += [f"{r.engine}: {name} did not load: {why}" for r in results for name, why in r.unavailable.items()]
    lines += [f"{r.engine}: unexplained failure: {case}" for r in results for case in r.unexplained]
    return lines


def format_table(results: Sequence[EngineResult]) -> str:
    """The text table ``dspark-conformance engines`` prints, with the errors and unexplained
    failures under it."""
    rows = [list(HEADER)] + [_cells(r, LOAD_ERROR_WIDTH) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + [f"  {note}" for note in _notes(results)])


def _markdown(results: Sequence[EngineResult]) -> str:
    escape = lambda cell: cell.replace("|", "\\|")  # noqa: E731
    lines = ["# DSpark conformance: engine drift check", "",
             "| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(escape(cell) for cell in _cells(r)) + " |" for r in results]
    notes = _notes(results)
    return "\n".join(lines + ([""] + [f"- {escape(note)}" for note in notes] if notes else [])) + "\n"


def write_tables(results: Sequence[EngineResult], report_dir: Path) -> None:
    """Write ``engines.json`` (the results, and the exit code) and ``engines.md`` into
    ``report_dir`` (made if missing).

    Raises:
        OSError: the directory cannot be made or written.
    """
    report_dir.mkdir(parents=True, exist_ok=True)
    record = {"exit_code": exit_code(results), "engines": [dataclasses.asdict(r) for r in results]}
    (report_dir / JSON_FILE).write_text(json.dumps(record, indent=1))
    (report_dir / MARKDOWN_FILE).write_text(_markdown(results))
