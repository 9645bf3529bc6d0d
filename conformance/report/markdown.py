"""``report.md``: the matrix, every non-passing test with its reason and replay line, the
passing tests that are within their SPEC S0 bound but not bit-identical, and every
statistical assertion (p-value, effect with its bound)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from conformance.report.matrix import (
    DECIDING, TIME_NOTE, cannot_run_here_line, collection_error_lines, coverage_lines, engine_notices, not_run_line,
    overall, power_line, run_rows, shard_text, short_reason, table, worst_bins,
)

#: The order of report.md's "Not passed" list: what fails a run, then INCONCLUSIVE, then the rest.
_NOT_PASSED_ORDER = {outcome: i for i, outcome in enumerate(("failed", "error", "xpassed", "inconclusive",
                                                            "xfailed", "skipped"))}


def _stat_lines(payload: dict[str, Any]) -> list[str]:
    lines = [
        "| test | null hypothesis | statistic | p-value | alpha | n | effect | bound | min effect | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for record in payload["tests"]:
        for s in record.get("stats", []):
            lines.append(
                f"| `{record['case'].split('::')[-1]}` | {s.get('null', '')} | {s.get('statistic_name', '')} "
                f"{s.get('statistic', 0):.4g} | {s.get('p_value', 0):.3g} | {s.get('alpha', 0):.2g} | "
                f"{s.get('n', '')} | {s.get('effect_name', '')} {s.get('effect', 0):.4g} | "
                f"{s.get('effect_ci_upper', 0):.4g} | {s.get('min_effect', 0):.3g} | "
                f"{'pass' if s.get('passed') else 'FAIL'} |"
            )
    return lines


def _numeric_lines(payload: dict[str, Any]) -> list[str]:
    lines = []
    for record in payload["tests"]:
        if record["outcome"] == "passed" and record.get("bit_identical") is False:
            worst = max(record["numerics"], key=lambda n: float(n["worst_ratio"]))
            lines.append(f"- `{record['case']}`: max |diff| {worst['max_abs_diff']:.3g}, "
                         f"{float(worst['worst_ratio']):.3g} x its bound ({worst['name']})")
    return lines or ["None: every passing bounded comparison was bit-identical."]


def write_markdown(payload: dict[str, Any], path: Path) -> None:
    """Write the matrix, the non-passing tests with reasons and replays, and the statistics."""
    rows = run_rows(payload)
    cells = table(rows)
    missing = not_run_line(rows, payload)
    part = shard_text(payload)
    out = [
        f"# DSpark conformance: `{payload['impl']}` on {payload['device']}",
        "",
        f"{payload.get('description', '')}",
        "",
        f"Base seed {payload['base_seed']}; wall time {payload['wall_s']} s; "
        f"{f'{part}; ' if part else ''}capabilities: {', '.join(payload['capabilities']) or 'none'}; "
        f"overall **{overall(rows, payload)}**.",
        *(line for coverage in coverage_lines(rows, payload["tests"]) for line in ("", f"{coverage}.")),
        *(["", f"{power}."] if (power := power_line(payload)) else []),
        *(["", f"{offered[0].upper()}{offered[1:]}."] if (offered := cannot_run_here_line(payload)) else []),
        *(["", f"{missing}."] if missing else []),
        *(line for error in collection_error_lines(payload) for line in ("", f"**{html.escape(error, quote=False)}**")),
        *(line for notice in engine_notices(payload) for line in ("", f"**{html.escape(notice, quote=False)}**")),
        "",
        "| " + " | ".join(cells[0]) + " |",
        "|" + " --- |" * len(cells[0]),
        *("| " + " | ".join(r) + " |" for r in cells[1:]),
        "",
        f"{TIME_NOTE}.",
        "",
        "## Not passed",
        "",
    ]
    # What decides the verdict first: a reader sent here by a FAIL finds it above the skips.
    for record in sorted(payload["tests"], key=lambda record: _NOT_PASSED_ORDER.get(record["outcome"], 0)):
        if record["outcome"] != "passed":
            # Reasons quote the implementation's text ("<one token < 3>"): as entities, a
            # renderer shows it instead of swallowing it as HTML.
            shown = short_reason(record)
            out.append(f"- **{record['outcome']}** `{record['case']}`: {html.escape(shown, quote=False)}")
            out.extend(f"  - {html.escape(bins, quote=False)}" for bins in worst_bins(record, shown))
            if record["outcome"] in DECIDING:
                out.append(f"  - replay: `{record['replay']}`")
    out += ["", "## Within the bound, not bit-identical (SPEC S0: a stricter level, not a failure)", "",
            *_numeric_lines(payload)]
    out += ["", "## Statistical assertions", "", *_stat_lines(payload), ""]
    path.write_text("\n".join(out))
