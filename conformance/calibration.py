"""Calibration of the statistical tests: false-failure rate on the reference, power on mutants.

``calibrate(seeds)`` runs the tests marked ``statistical`` against the reference once per
base seed (``--dspark-seed``), and each mutant's section once per power seed. It reports:

* per statistical test: false failures / runs with a Clopper-Pearson 95% upper bound, and
  the p-values' Kolmogorov-Smirnov distance from uniform (a drifting statistic shows);
* per run: the whole-run false-failure rate with its 95% upper bound against the
  declared family-wise budget (``budget.FAMILY_WISE_ALPHA``);
* per (mutant, statistical test of its section): the observed power, i.e. the fraction of
  seeds on which the test failed, with a 95% lower bound.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scipy import stats as sps

from . import budget, cli


def _binomial_bounds(k: int, n: int) -> tuple[float, float]:
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return ci.low, ci.high


def _statistical_run(impl: str, seed: int, keyword: str | None, device: str) -> dict | None:
    with tempfile.TemporaryDirectory(prefix="dspark-calib-") as tmp:
        json_path = Path(tmp) / "results.json"
        cmd = cli.pytest_command(impl=impl, device=device, json_path=json_path, seed=seed, workers="0",
                                 keyword=keyword, extra=["-m", "statistical"])
        _, payload = cli.run_suite(cmd, json_path, quiet=True)
    return payload


@dataclasses.dataclass
class Calibration:
    """Aggregated calibration numbers (see the module docstring)."""

    runs: int
    failed_runs: int
    run_rate_upper95: float
    budget: float
    per_test: dict[str, dict]
    power: dict[str, dict]

    def within_budget(self) -> bool:
        return self.failed_runs == 0 or self.run_rate_upper95 <= self.budget


def calibrate(seeds: list[int], power_seeds: list[int], *, device: str = "cpu",
              mutants: list[str] | None = None, jobs: int | None = None) -> Calibration:
    """Run the calibration (reference over ``seeds``, mutants over ``power_seeds``)."""
    from fixtures.mutants import load_all

    registry = load_all()
    mutant_ids = mutants or sorted(registry)
    jobs = jobs or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        ref_payloads = list(pool.map(lambda s: _statistical_run("reference", s, None, device), seeds))
        plan = [(m, s) for m in mutant_ids for s in power_seeds]
        mut_payloads = list(pool.map(
            lambda ms: _statistical_run(f"mutant:{ms[0]}", ms[1], f"test_{registry[ms[0]].section}_", device),
            plan,
        ))
    runs = [p for p in ref_payloads if p is not None]
    outcomes: dict[str, list[str]] = defaultdict(list)
    pvalues: dict[str, list[float]] = defaultdict(list)
    failed_runs = 0
    for payload in runs:
        failed_runs += any(t["outcome"] == "failed" for t in payload["tests"])
        for t in payload["tests"]:
            outcomes[t["nodeid"]].append(t["outcome"])
            pvalues[t["nodeid"]] += [s["p_value"] for s in t["stats"]]
    per_test = {}
    for nodeid, outs in sorted(outcomes.items()):
        k = outs.count("failed")
        ps = pvalues[nodeid]
        per_test[nodeid] = {
            "runs": len(outs), "false_failures": k, "rate_upper95": _binomial_bounds(k, len(outs))[1],
            "pvalue_ks": sps.kstest(ps, "uniform").statistic if len(ps) >= 5 else None,
        }
    kills: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for (mutant_id, _), payload in zip(plan, mut_payloads):
        for t in (payload or {"tests": []})["tests"]:
            if t["outcome"] in ("passed", "failed"):
                kills[(mutant_id, t["nodeid"])].append(t["outcome"] == "failed")
    power = {}
    for mutant_id in mutant_ids:
        tests = {n: v for (m, n), v in kills.items() if m == mutant_id}
        power[mutant_id] = {
            n: {"seeds": len(v), "killed": sum(v), "power_lower95": _binomial_bounds(sum(v), len(v))[0]}
            for n, v in sorted(tests.items())
        }
    upper = _binomial_bounds(failed_runs, len(runs))[1] if runs else 1.0
    return Calibration(len(runs), failed_runs, upper, budget.FAMILY_WISE_ALPHA, per_test, power)


def write_reports(cal: Calibration, report_dir: Path, command: str) -> None:
    """Write ``calibration.json`` and ``calibration.md``."""
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "calibration.json").write_text(json.dumps(dataclasses.asdict(cal), indent=1))
    lines = [
        "# Calibration of the statistical tests",
        "",
        f"Command: `{command}`",
        "",
        f"Whole run (statistical tests on the reference): {cal.failed_runs} failed runs of {cal.runs}; "
        f"95% upper bound on the false-failure rate {cal.run_rate_upper95:.3g} "
        f"(declared budget {cal.budget:g}). With {cal.runs} runs a bound below the budget needs "
        f"about {int(3 / cal.budget)} clean runs; the bound reported is what the runs support.",
        "",
        "## False failures per statistical test (reference)",
        "",
        "| test | runs | false failures | 95% upper bound | KS distance of p-values from U(0,1) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for nodeid, row in cal.per_test.items():
        ks = "-" if row["pvalue_ks"] is None else f"{row['pvalue_ks']:.3f}"
        lines.append(f"| `{nodeid.split('::')[-1]}` | {row['runs']} | {row['false_failures']} | "
                     f"{row['rate_upper95']:.3g} | {ks} |")
    lines += ["", "## Observed power against mutants (statistical tests of the mutant's section)", "",
              "| mutant | test | seeds | failed | power 95% lower bound |", "| --- | --- | --- | --- | --- |"]
    for mutant_id, tests in cal.power.items():
        best = sorted(tests.items(), key=lambda kv: -kv[1]["killed"])[:3]
        if not best:
            lines.append(f"| `{mutant_id}` | (no statistical test in its section ran) | - | - | - |")
        for nodeid, row in best:
            lines.append(f"| `{mutant_id}` | `{nodeid.split('::')[-1]}` | {row['seeds']} | {row['killed']} | "
                         f"{row['power_lower95']:.3f} |")
    (report_dir / "calibration.md").write_text("\n".join(lines) + "\n")
