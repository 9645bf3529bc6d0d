"""The conformance matrix: per-test records (from the plugin's JSON) summarised by SPEC section.

``summarize(payload)`` counts outcomes per section; ``format_matrix`` renders the text
table the main job prints (``conformance.report.markdown`` and ``.html`` render the same
rows). The ``bit-identical`` column is SPEC S0's stricter level, shown apart: of the tests
that made bounded comparisons (``numeric_check``), how many were bit-identical; missing
it never changes a verdict. Beside every verdict, a coverage line (:func:`coverage_lines`)
says how many cases ran and why the others skipped.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pytest import ExitCode

from conformance.bins import largest_residuals
from conformance.sections import SECTION_TITLES, SECTIONS

#: Power at the declared effect below which the matrix warns that a pass says little: such
#: an assertion misses an effect of the declared size more often than it finds it.
LOW_POWER = 0.5
OUTCOMES = ("passed", "failed", "inconclusive", "skipped", "xfailed", "xpassed", "error")
#: The verdicts of a section (the first four) and of a whole run (:func:`overall`: all five).
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE", "SKIP", "INTERRUPTED")
#: The matrix's time column and what it sums: under xdist the cases run side by side, so the
#: sum exceeds the wall time.
TIME_COLUMN = "case time s"
TIME_NOTE = f"{TIME_COLUMN}: the sum of case durations across workers (the wall time is above)"


#: The outcomes that decide against a run, each given a line and a replay command.
DECIDING = ("failed", "xpassed", "error", "inconclusive")
#: The longest reason a console failure line shows (the line stays near 200 characters
#: beside its case id and replay command; report.md shows the reason whole).
CONSOLE_REASON_LIMIT = 100
#: The longest reason a report line shows (a statistical failure's message fits whole).
REASON_LIMIT = 400
ELLIPSIS = "..."


def clip(text: str, limit: int = REASON_LIMIT) -> str:
    """``text`` on one line (whitespace runs made one space), whole if at most ``limit``
    characters, else cut at the last space that leaves room for :data:`ELLIPSIS` and ended
    with it: a cut never splits a word, so never a number (a first word longer than
    ``limit`` is kept whole)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - len(ELLIPSIS))
    kept = text[:cut] if cut > 0 else text.split(" ", 1)[0]
    return kept if kept == text else f"{kept} {ELLIPSIS}"


def short_reason(record: dict[str, Any], limit: int = REASON_LIMIT) -> str:
    """One line for a record's reason: pytest's first ``E`` line, else the last line,
    :func:`clip`-ped to ``limit`` characters."""
    lines = [line for line in record.get("reason", "").strip().splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return clip((errors or lines[-1:] or [""])[0], limit)


def is_suite_bug(record: dict[str, Any]) -> bool:
    """Whether a results.json test record failed in the suite's own code (a programming error
    there, ``plugin._failure``): neither a kill of a mutant nor a false failure."""
    return record["outcome"] == "failed" and bool((record.get("failure") or {}).get("suite_bug"))


@dataclasses.dataclass
class SectionRow:
    """Outcome counts, wall time, the smallest p-value and the bit-identity count (tests
    bit-identical of those with bounded comparisons, SPEC S0) of one SPEC section."""

    section: str
    counts: Counter
    seconds: float
    min_p: float | None
    bit_identical: int = 0
    compared: int = 0
    not_run: int = 0  # selected cases with no record: an interrupted run never reached them

    @property
    def bit_identity(self) -> str:
        """``"k/n"``: k of the section's n tests with bounded comparisons were bit-identical."""
        return f"{self.bit_identical}/{self.compared}" if self.compared else "-"

    @property
    def verdict(self) -> str:
        if self.counts["failed"] or self.counts["xpassed"] or self.counts["error"]:
            return "FAIL"
        if self.not_run:
            return "INTERRUPTED"
        if self.counts["inconclusive"]:
            return "INCONCLUSIVE"
        if self.counts["passed"] or self.counts["xfailed"]:
            return "PASS"
        return "SKIP"


def summarize(tests: Iterable[dict[str, Any]], selected: Mapping[str, int] | None = None) -> list[SectionRow]:
    """Group per-test records by section, S0..S10 first, then anything else. ``selected``
    (results.json ``selected_by_section``): the cases per section the run selected; a
    section with fewer records has ``not_run`` set (verdict INTERRUPTED unless it failed)."""
    rows: dict[str, SectionRow] = {}
    for record in tests:
        row = rows.setdefault(record["section"], SectionRow(record["section"], Counter(), 0.0, None))
        row.counts[record["outcome"]] += 1
        row.seconds += record["duration_s"]
        if record.get("bit_identical") is not None:
            row.compared += 1
            row.bit_identical += bool(record["bit_identical"])
        for stat in record.get("stats", []):
            p = stat.get("p_value")
            if p is not None and (row.min_p is None or p < row.min_p):
                row.min_p = p
    for section, count in (selected or {}).items():
        row = rows.setdefault(section, SectionRow(section, Counter(), 0.0, None))
        row.not_run = max(0, count - sum(row.counts.values()))
    order = [s for s in SECTIONS if s in rows] + sorted(s for s in rows if s not in SECTIONS)
    return [rows[s] for s in order]


def run_rows(payload: dict[str, Any]) -> list[SectionRow]:
    """:func:`summarize` of a results.json payload: its records against its selection."""
    return summarize(payload["tests"], payload.get("selected_by_section"))


def not_run_line(rows: list[SectionRow], payload: dict[str, Any]) -> str | None:
    """One line counting the selected cases that have no record and saying why (``payload``:
    the run's results.json), or None if every one has."""
    missing = sum(row.not_run for row in rows)
    if not missing:
        return None
    total = missing + sum(sum(row.counts.values()) for row in rows)
    why = ("the run was interrupted before them" if interrupted(payload) else
           "the run stopped before them: -x or --maxfail, or xdist stopped restarting crashed workers")
    return f"{missing} of the {total} selected cases did not run ({why})"


#: What a skip's reason says kept the case from running, first match wins (the reasons the
#: plugin's ``require`` and the suite's ``pytest.skip`` calls give); anything else is "other".
SKIP_CLASSES = {
    "not offered by the adapter": re.compile(r"^capability \w+ not offered by "),
    "unsupported feature": re.compile(r"not supported by (the|this) IUT"),
    "need CUDA or the GPU tier": re.compile(r"gpu tier|\bcuda\b", re.IGNORECASE),
}
OTHER_SKIP = "other"
#: The order the coverage line counts the classes in.
SKIP_CLASS_ORDER = ("not offered by the adapter", "need CUDA or the GPU tier", "unsupported feature", OTHER_SKIP)
#: A section where more than this share of the cases skipped gets a warning beside the verdict.
MOSTLY_SKIPPED = 0.5


def skip_class(reason: str) -> str:
    """The :data:`SKIP_CLASSES` key (or :data:`OTHER_SKIP`) of a skipped case's reason."""
    return next((name for name, pattern in SKIP_CLASSES.items() if pattern.search(reason)), OTHER_SKIP)


def coverage_lines(rows: list[SectionRow], tests: list[dict[str, Any]]) -> list[str]:
    """What a verdict covers, said beside every rendering of it: the cases that ran (every
    record not skipped) of those recorded, the skips by :func:`skip_class`, and a warning
    naming each section where most (more than :data:`MOSTLY_SKIPPED`), but not all, of the
    cases skipped (a section where all skipped reads SKIP).
    It changes no verdict."""
    skipped = Counter(skip_class(t.get("reason", "")) for t in tests if t["outcome"] == "skipped")
    total = sum(skipped.values())
    classes = ", ".join(f"{skipped[name]} {name}" for name in SKIP_CLASS_ORDER)
    lines = [f"coverage: {len(tests) - total} of {len(tests)} cases ran; {total} skipped ({classes})"]
    # A section where every case skipped reads SKIP; the warning is for a verdict on a few cases.
    mostly = [f"{row.section} ({row.counts['skipped']} of {sum(row.counts.values())})" for row in rows
              if MOSTLY_SKIPPED * sum(row.counts.values()) < row.counts["skipped"] < sum(row.counts.values())]
    if mostly:
        lines.append(f"WARNING: most cases skipped in {', '.join(mostly)}: the verdict there rests on the few "
                     "that ran")
    again = [t["case"] for t in tests if t.get("first_attempt")]  # conformance.runner.rerun_out_of_memory
    if again:
        lines.append(f"ran again alone: {len(again)} cases failed with CUDA out of memory beside the other workers, "
                     f"and their lone runs decide ({', '.join(again[:_NAMED_AGAIN])}"
                     f"{', ...' if len(again) > _NAMED_AGAIN else ''})")
    return lines


_NAMED_AGAIN = 5  # case ids named on the "ran again alone" line


def worst_bins(record: dict[str, Any], shown: str = "") -> list[str]:
    """For each failed frequency test of a record (a stat with ``observed`` / ``expected``
    bins), its name and its bins furthest from expectation (``conformance.bins``), unless
    ``shown`` (the reason as a report shows it) already holds them."""
    lines = []
    for stat in record.get("stats", ()):
        if not stat.get("passed", True) and stat.get("observed") and stat.get("expected"):
            worst = largest_residuals(stat["observed"], stat["expected"], stat.get("bin_labels"))
            if worst not in shown:
                lines.append(f"{stat['name']}: {worst}")
    return lines


def engine_notices(payload: dict[str, Any]) -> list[str]:
    """Lines that say what the run could not vouch for, printed beside every verdict: each
    capability the engine release should offer but that did not load (``unavailable``), and
    the ledger entries carried forward unconfirmed from an older release (``carried_forward``)."""
    lines = [f"UNAVAILABLE: capability {name} should be offered by {payload['impl']} but did not load: {why}"
             for name, why in payload.get("unavailable", {}).items()]
    for release in payload.get("carried_forward", ()):
        lines.append(f"ledger: entries carried forward from {release}, not confirmed on {payload['impl']} "
                     f"(a fixed finding shows as a strict XPASS naming it)")
    return lines


def shard_text(payload: dict[str, Any]) -> str | None:
    """What part of a sharded run a report holds (``conformance.shards``): ``shard 3/24 of
    117 selected cases``, or ``merged from 24 shards``; None for a run that was not sharded."""
    if payload.get("shard"):
        index, count = payload["shard"]
        dealt = (payload.get("shard_selection") or {}).get("cases")
        return f"shard {index}/{count}" + (f" of {dealt} selected cases" if dealt is not None else "")
    if payload.get("shards"):
        return f"merged from {payload['shards']['count']} shards (wall: the longest shard's)"
    return None


def interrupted(payload: dict[str, Any]) -> bool:
    """Whether pytest reported the run as interrupted (exit status 2: a signal or a deadline
    stopped it before every case ran)."""
    return payload.get("exit_status") == ExitCode.INTERRUPTED


def overall(rows: list[SectionRow], payload: dict[str, Any]) -> str:
    """PASS, FAIL, INCONCLUSIVE or SKIP for a whole run (the worst section wins); a run in
    which a suite module could not be collected (``payload["collection_errors"]``) and that
    no failure already decides is ERROR, never PASS: that module's cases never ran, whatever
    the selection; a run that pytest reports as interrupted (``payload["exit_status"]`` 2: a
    signal or a deadline stopped it) and that no failure already decides is INTERRUPTED,
    never PASS: its cases did not all run."""
    verdicts = {row.verdict for row in rows}
    if "FAIL" not in verdicts and payload.get("collection_errors"):
        return "ERROR"
    if "FAIL" not in verdicts and (interrupted(payload) or "INTERRUPTED" in verdicts):
        return "INTERRUPTED"
    for verdict in ("FAIL", "INCONCLUSIVE", "PASS"):
        if verdict in verdicts:
            return verdict
    return "SKIP"


def table(rows: list[SectionRow]) -> list[list[str]]:
    """Header and one row per section: the cells of every rendering of the matrix."""
    header = ["section", "topic", "verdict", *OUTCOMES[:6], "min p", "bit-identical", TIME_COLUMN]
    body = [header]
    for row in rows:
        body.append([
            row.section, SECTION_TITLES.get(row.section, ""), row.verdict,
            *(str(row.counts[o]) for o in OUTCOMES[:6]),
            "-" if row.min_p is None else f"{row.min_p:.2g}", row.bit_identity, f"{row.seconds:.1f}",
        ])
    return body


def statistical_powers(tests: Iterable[dict[str, Any]]) -> list[float]:
    """The power at the declared minimum effect of each statistical assertion recorded in
    ``tests`` (results.json records), in record order; vacuous assertions (NaN power) left out."""
    return [s["power_at_min_effect"] for t in tests for s in t.get("stats", [])
            if s.get("power_at_min_effect") == s.get("power_at_min_effect")]  # NaN != NaN


def power_line(payload: dict[str, Any]) -> str | None:
    """The run's budget and the smallest power its statistical assertions reached at their
    declared minimum effects, with a warning where some fell below :data:`LOW_POWER`; None
    for a run without statistical assertions. Every rendering (console, report.md,
    report.html) states it."""
    powers = statistical_powers(payload["tests"])
    if not powers:
        return None
    low = sum(power < LOW_POWER for power in powers)
    return (f"statistical power at the declared minimum effects (budget x{payload.get('budget', 1.0):g}): "
            f"min {min(powers):.4f} over {len(powers)} assertions"
            + (f"; WARNING: {low} below {LOW_POWER:g}, where a pass says little (raise --budget)" if low else ""))


def cannot_run_here_line(payload: dict[str, Any]) -> str | None:
    """The capabilities the implementation offers that cannot run on this machine, each with
    its reason (results.json ``cannot_run_here``; their cases skip); None where there are none."""
    offered = payload.get("cannot_run_here") or {}
    if not offered:
        return None
    return "offered but unable to run here (their cases skip): " + "; ".join(
        f"{capability} ({why})" for capability, why in offered.items())


def collection_error_lines(payload: dict[str, Any]) -> list[str]:
    """One line per suite module that could not be collected (none where all were)."""
    return [f"COLLECTION ERROR: {e['module']}: {e['error']} (none of its cases ran)"
            for e in payload.get("collection_errors") or ()]


def failed_statistics(record: dict[str, Any]) -> str | None:
    """A record's first failed statistical assertion in a few words (its name after the case
    id, statistic, p-value against alpha, effect), and how many more failed; None where none
    failed."""
    failed = [stat for stat in record.get("stats", ()) if not stat.get("passed", True)]
    if not failed:
        return None
    stat = failed[0]
    more = f" (and {len(failed) - 1} more failed assertions)" if len(failed) > 1 else ""
    name = stat["name"].removeprefix(f"{record['case']}/")
    return (f"{name}: {stat['statistic_name']} = {stat['statistic']:.4g}, p = {stat['p_value']:.3g} "
            f"<= alpha = {stat['alpha']:.3g}; {stat['effect_name']} = {stat['effect']:.4g}{more}")


def failure_line(record: dict[str, Any]) -> str:
    """The console's one line for a record that decides against a run (:data:`DECIDING`):
    ``FAILED <case id>: <reason>  replay: <command>``, the outcome in capitals. The reason
    is :func:`failed_statistics` where a failed case's assertion failed, else :func:`short_reason` less
    a leading ``AssertionError:`` (a failed check's; an engine's exception keeps its name)
    and a leading case id (the line starts with it), :func:`clip`-ped (a strict XPASS's whole) to :data:`CONSOLE_REASON_LIMIT` between words. report.md holds each
    reason whole, with a statistical failure's bins; junit.xml the traceback."""
    said = short_reason(record, limit=len(record.get("reason", ""))).removeprefix("AssertionError: ")
    # A strict XPASS's reason is the ledger entry it names, with "carried forward from X, not
    # confirmed on Y" where it applies (issue 40): shown whole.
    limit = len(said) if record["outcome"] == "xpassed" or said.startswith("[XPASS(strict)]") else CONSOLE_REASON_LIMIT
    reason = (failed_statistics(record) if record["outcome"] == "failed" else None) or clip(
        said.removeprefix(f"{record['case']}: "), limit)
    return f"{record['outcome'].upper()} {record['case']}: {reason}  replay: {record['replay']}"


def format_matrix(payload: dict[str, Any], *, details: bool = False) -> str:
    """The text printed by ``dspark-conformance run``: the matrix, the lines beside the
    verdict, then one :func:`failure_line` per failure; with ``details`` (``--tracebacks``)
    each statistical failure's worst bins under its line too."""
    rows = run_rows(payload)
    cells = table(rows)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    settings = "".join(f" {name}={value}" for name, value in payload.get("replay_env", {}).items())
    part = shard_text(payload)
    lines = [
        f"DSpark conformance: impl={payload['impl']} device={payload['device']} "
        f"seed={payload['base_seed']} wall={payload['wall_s']}s{settings}{f'; {part}' if part else ''}",
    ]
    for i, r in enumerate(cells):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths)))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append(TIME_NOTE)
    power = power_line(payload)
    if power:
        lines.append(power)
    missing = not_run_line(rows, payload)
    if missing:
        lines.append(missing)
    lines.extend(engine_notices(payload))
    lines.extend(coverage_lines(rows, payload["tests"]))
    lines.extend(filter(None, [cannot_run_here_line(payload)]))
    lines.extend(collection_error_lines(payload))
    lines.append(f"overall: {overall(rows, payload)}")
    for record in payload["tests"]:
        if record["outcome"] in DECIDING:
            lines.append(failure_line(record))
            if details:
                lines.extend(f"    {bins}" for bins in worst_bins(record, lines[-1]))
    return "\n".join(lines)
