"""``null-replay.json`` and ``null-replay.md`` from :func:`conformance.power.null_replay.summarize`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .null_replay import CONFIDENCE

JSON_FILE, MARKDOWN_FILE = "null-replay.json", "null-replay.md"


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _whole_run(summary: dict[str, Any]) -> list[str]:
    by = summary["by_method"]
    mc_count = by["monte-carlo"]
    verdict = "within" if summary["bounded"] else "NOT shown within"
    zero_upper = 1 - (1 - CONFIDENCE) ** (1 / summary["replicates"]) if summary["replicates"] else 0.0
    return [
        "## Whole run",
        "",
        f"{summary['assertions']} assertions: {by['exact']} with an exact level (binomial, two-bin goodness of fit), "
        f"{mc_count} by Monte Carlo ({summary['replicates']} replicates each), {by['vacuous']} vacuous (cannot fail). "
        f"Their alphas sum to {summary['alpha_sum']:.4g}.",
        "",
        "| quantity | value |",
        "| --- | --- |",
        f"| exact levels summed | {summary['exact_sum']:.4g} |",
        f"| Monte Carlo failures / trials | {summary['mc_rejected']} / {summary['mc_trials']} |",
        f"| {CONFIDENCE:.0%} upper bound on their mean level (pooled, Hoeffding 1956) | "
        f"{summary['mc_mean_upper95']:.4g} |",
        f"| upper bound on the sum of all levels = on the whole-run false-failure rate | "
        f"{summary['run_upper95']:.4g} |",
        f"| family-wise budget | {summary['budget']:g} |",
        "",
        f"The whole-run false-failure rate of these assertions, on data from their null models, is {verdict} the "
        f"budget at {CONFIDENCE:.0%} confidence (union bound over the assertions).",
        "",
        f"What {summary['replicates']} replicates can bound: with no failure an assertion's {CONFIDENCE:.0%} upper "
        f"bound is {zero_upper:.3g}; a rule exactly at its alpha fails about alpha x {summary['replicates']} times, "
        "so a Monte Carlo bound lands near, not at, its alpha (the table's 'upper / alpha'). The whole-run bound "
        "pools every Monte Carlo failure and trial, which resolves the mean level far more finely.",
    ]


def _per_assertion(summary: dict[str, Any]) -> list[str]:
    flagged = summary["flagged"]
    lines = [
        "## Per assertion",
        "",
        "'level': the exact probability of failing under the null, or the Monte Carlo fraction; 'upper': the "
        f"exact level, or the one-sided {CONFIDENCE:.0%} Clopper-Pearson upper bound; 'excess p': one-sided "
        "binomial p-value of the failures against alpha. Flagged (level shown above alpha: exact level above it, or "
        f"excess p <= {summary['flag_threshold']:.3g}): " + (", ".join(f"`{n}`" for n in flagged) if flagged
                                                           else "none") + ".",
        "",
        "| assertion | rule | n | bins | alpha | method | failures / replicates | level | upper | upper / alpha | "
        "excess p |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for lv in summary["levels"]:
        count = "-" if lv["method"] != "monte-carlo" else f"{lv['rejected']} / {lv['replicates']}"
        mark = " **flagged**" if lv["name"] in flagged else ""
        lines.append(f"| `{lv['name']}`{mark} | {lv['rule']} | {lv['n']} | {_cell(lv['bins'], 'd')} | "
                     f"{lv['alpha']:g} | {lv['method']} | {count} | {lv['level']:.3g} | {lv['level_upper95']:.3g} | "
                     f"{lv['level_upper95'] / lv['alpha']:.3f} | {_cell(lv['excess_p'], '.3g')} |")
    return lines


def write_reports(summary: dict[str, Any], report_dir: Path, *, commands: list[str], sources: list[str],
                  wall_s: float, jobs: int) -> None:
    """Write ``null-replay.json`` (``summary`` plus how it was made) and ``null-replay.md``
    into ``report_dir`` (created if missing)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    made = {"commands": commands, "sources": sources, "wall_s": round(wall_s, 1), "jobs": jobs}
    (report_dir / JSON_FILE).write_text(json.dumps({**summary, **made}, indent=1) + "\n")
    lines = ["# False-failure rate of every statistical assertion, replayed under its null", "", "Produced by:", ""]
    lines += [f"    {c}" for c in commands]
    lines += ["", f"Designs from: {', '.join(f'`{s}`' for s in sources)}. Wall time {wall_s:.0f} s on {jobs} "
              "processes.", "",
              "Each assertion's recorded design (rule, n, alpha, pooled null bins) is run on data drawn from its "
              "null hypothesis (conformance/power/null_replay.py). What is bounded is the probability that the "
              "rule, as implemented, fails on data that follow its null model exactly; the premise that a correct "
              "implementation's data follow that model is what the seeded runs in calibration.md check.", ""]
    lines += _whole_run(summary) + [""] + _per_assertion(summary)
    (report_dir / MARKDOWN_FILE).write_text("\n".join(lines) + "\n")
