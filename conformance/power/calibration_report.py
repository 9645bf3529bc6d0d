"""``calibration.json`` and ``calibration.md`` from :func:`conformance.power.calibration_numbers.aggregate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .calibration_numbers import KS_DEFECT_LEVEL, TARGET_REPLAYED_POWER


def _short(nodeid: str) -> str:
    return nodeid.split("::")[-1]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _seed_list(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds)) if seeds else "none"


def _whole_run(cal: dict[str, Any]) -> list[str]:
    runs, seeds = cal["runs"], cal["seeds"]
    lines = [
        "## Whole-run false failures (reference, statistical tests)",
        "",
        "Intervals are two-sided 95% Clopper-Pearson: an upper end is a one-sided 97.5% upper bound.",
        "",
        f"{cal['failed_runs']} of {runs} runs failed ({len(seeds)} base seeds from {seeds[0]} to {seeds[-1]}, "
        f"{', '.join(cal['devices'])}; failed: {_seed_list(cal['failed_seeds'])}). Upper end of the whole-run "
        f"false-failure rate: {cal['run_rate_upper95']:.3g}. Runs with an INCONCLUSIVE test (a path under test "
        f"never ran; not a failure, but `run` would exit 2): {_seed_list(cal['inconclusive_seeds'])}. Runs with "
        f"a failure of the suite's own code: {_seed_list(cal['suite_error_seeds'])}.",
        "",
        f"The declared budget is {cal['budget']:g}: per-assertion alpha {cal['per_assertion_alpha']:g} = budget / "
        f"{cal['max_assertions']}, the most statistical assertions a run may declare (conformance/budget.py), so "
        "a run with fewer assertions stays further below it. An upper end that low from clean runs alone needs "
        f"{cal['clean_runs_for_budget']} of them. The tables below test the premise of the budget instead, that "
        "every assertion's p-value is valid (no smaller than U(0, 1)), at levels a few hundred runs can resolve.",
        "",
        f"Family-wise levels: a run fails at level L when any of its p-values is <= L / {cal['max_assertions']} "
        f"(the suite's rule at L = {cal['budget']:g}). 'predicted' is the rate if every p-value were U(0, 1) and "
        "independent; the last column is the one-sided binomial p-value of the observed count against it.",
        "",
        "| level L | alpha per assertion | failed runs | observed rate | 95% interval | predicted | p of an excess |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in cal["family_wise"]:
        lines.append(f"| {row['level']:g} | {row['alpha']:.3g} | {row['failed_runs']} / {row['runs']} | "
                     f"{row['rate']:.4f} | [{row['rate_low95']:.4f}, {row['rate_high95']:.4f}] | "
                     f"{row['predicted_rate']:.4f} | {row['excess_p_value']:.3g} |")
    pooled = cal["pooled_p_values"]
    lines += ["", f"All {pooled['count']} p-values of the runs pooled (tests that passed or failed; an INCONCLUSIVE "
              "test has none): the fraction at or below a threshold is the threshold itself for U(0, 1), a little "
              "less for discrete tests.", "",
              "| threshold | count | fraction | 95% interval | p of an excess (binomial, one-sided) |",
              "| --- | --- | --- | --- | --- |"]
    for row in pooled["below"]:
        lines.append(f"| {row['threshold']:g} | {row['count']} | {row['rate']:.4f} | "
                     f"[{row['low95']:.4f}, {row['high95']:.4f}] | {row['excess_p_value']:.3g} |")
    return lines


def _per_test(cal: dict[str, Any]) -> list[str]:
    lines = [
        "## False failures per statistical test (reference)",
        "",
        "KS: one-sided Kolmogorov-Smirnov test that the test's p-values are stochastically smaller than "
        "U(0, 1) (the direction of a false-failure excess); its p-value is per test. Smallest KS p-value "
        f"times the number of tests (Bonferroni): {_fmt(cal['ks_min_p_bonferroni'], '.3g')} (a defect below "
        f"{KS_DEFECT_LEVEL:g}).",
        "",
        "| test | runs | false failures | upper end | inconclusive | smallest p | KS D+ | KS p |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for nodeid, row in cal["per_test"].items():
        lines.append(f"| `{_short(nodeid)}` | {row['runs']} | {row['false_failures']} | {row['rate_upper95']:.3g} | "
                     f"{row['inconclusive']} | {_fmt(row['min_p_value'], '.3g')} | {_fmt(row['pvalue_ks'], '.3f')} | "
                     f"{_fmt(row['pvalue_ks_p'], '.3g')} |")
    if cal["never_ran"]:
        lines += ["", "Skipped in every run (not counted): "
                  + ", ".join(f"`{_short(n)}`" for n in cal["never_ran"]) + "."]
    return lines


def _exact(cal: dict[str, Any]) -> list[str]:
    exact = cal["exact"]
    seeds = exact["seeds"]
    lines = [
        "## Exact tests on every seed (reference, tests not marked statistical)",
        "",
        f"{exact['runs']} runs ({len(seeds)} base seeds from {seeds[0]} to {seeds[-1]}, {', '.join(exact['devices'])}) "
        f"of {exact['tests']} exact tests ({exact['tests_ran']} ran on this device, the rest are skipped "
        f"everywhere here): {exact['test_runs']} test runs. An exact test has no false-failure budget, so a "
        "failed, INCONCLUSIVE or suite-error outcome on any seed is a defect of the suite.",
        "",
    ]
    if not exact["defects"]:
        return lines + ["No exact test failed on any seed."]
    lines += ["| test | runs | failed on seeds | inconclusive on seeds | suite error on seeds |",
              "| --- | --- | --- | --- | --- |"]
    for nodeid, row in exact["defects"].items():
        lines.append(f"| `{_short(nodeid)}` | {row['runs']} | {_seed_list(row['failed'])} | "
                     f"{_seed_list(row['inconclusive'])} | {_seed_list(row['suite-error'])} |")
    return lines


def _declared_power(cal: dict[str, Any]) -> list[str]:
    rows = cal["declared_power"]
    if not rows:
        return ["## Power at the declared effect", "", "Not measured in these runs (`--replicates 0`)."]
    worst = min(r["power_lower95"] for r in rows.values())
    below = [n for n, r in rows.items() if r["power_lower95"] < TARGET_REPLAYED_POWER]
    lines = [
        "## Power at the declared effect (replayed designs)",
        "",
        f"{len(rows)} assertions replayed on simulated data from the least favourable alternative at exactly "
        "their declared minimum effect (conformance/power/replay.py): same rule, n, alpha and null bins as the "
        f"default-seed reference run. Smallest lower end of the power's 95% interval: {worst:.4f}; "
        f"{len(rows) - len(below)} of {len(rows)} at or above {TARGET_REPLAYED_POWER}"
        + (f"; below: {', '.join(below)}." if below else "."),
        "",
        "| assertion | rule | n | min effect | analytic power | rejected / replicates | lower end | "
        "noncentrality / 4nd^2 | device |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in rows.items():
        lines.append(f"| `{name}` | {r['rule']} | {r['n']} | {r['min_effect']:g} | {r['analytic_power']:.4f} | "
                     f"{r['rejected']} / {r['replicates']} | {r['power_lower95']:.4f} | "
                     f"{_fmt(r['noncentrality_ratio'], '.3f')} | {r['device']} |")
    return lines


def _mutant_power(cal: dict[str, Any]) -> list[str]:
    lines = [
        "## Power on mutants (statistical killers)",
        "",
        "A mutant's statistical killers are the statistical tests of its section that fail it at the default "
        "seed; each is rerun on the power seeds. 'any' is the fraction of seeds on which at least one killer "
        "failed it; 'effect / min' is the median observed effect over the declared minimum effect (how far "
        "above the declared effect the mutant sits). Mutants without a statistical killer are caught by exact "
        "tests (results/mutants/mutants.md).",
        "",
        "| mutant | any killer: killed / seeds (lower end) | test | killed / seeds | lower end | effect / min |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    exact_only = []
    for mutant, tests in cal["power"].items():
        if not tests:
            exact_only.append(mutant)
            continue
        anyk = cal["power_any_killer"].get(mutant)
        any_cell = "-" if anyk is None else f"{anyk['killed']} / {anyk['seeds']} ({anyk['power_lower95']:.3f})"
        for i, (nodeid, r) in enumerate(tests.items()):
            lines.append(f"| {'`' + mutant + '`' if i == 0 else ''} | {any_cell if i == 0 else ''} | "
                         f"`{_short(nodeid)}` | {r['killed']} / {r['seeds']} | {_fmt(r['power_lower95'], '.3f')} | "
                         f"{_fmt(r['median_effect_over_min'], '.1f')} |")
    if exact_only:
        lines += ["", "No statistical killer (caught by exact tests): " + ", ".join(f"`{m}`" for m in exact_only) + "."]
    return lines


def write_reports(cal: dict[str, Any], report_dir: Path, commands: list[str]) -> None:
    """Write ``calibration.json`` and ``calibration.md`` into ``report_dir``."""
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "calibration.json").write_text(json.dumps({**cal, "commands": commands}, indent=1))
    lines = ["# Calibration of the suite's tests on the reference", "",
             "Produced by (the `commands` of calibration.json, which each run that logs a record appends to: "
             "a note on how a run's inputs were made belongs there too, as a `#` line, or the next run drops it):",
             ""]
    lines += [f"    {c}" for c in commands] + [""]
    lines += ["Each case seed comes from its case id alone (`seed_of_case`, conformance/seeds.py; a case older "
              "than case ids keeps the seed of its frozen legacy key), never from a path, module or test name, so "
              "these records reproduce for the cases they name (calibration.json) wherever the suite is installed "
              "and whichever module holds them; a renamed case id gets new seeds.", ""]
    if cal["exact"]["runs"]:
        lines += _exact(cal) + [""]
    if cal["runs"]:
        lines += _whole_run(cal) + [""]
    lines += _declared_power(cal) + [""] + _mutant_power(cal) + [""]
    if cal["runs"]:
        lines += _per_test(cal)
    (report_dir / "calibration.md").write_text("\n".join(lines) + "\n")
