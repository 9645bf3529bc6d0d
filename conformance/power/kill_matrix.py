"""The kill matrix: run each mutant against the tests of its SPEC section.

A mutant (``fixtures/mutants``) is the reference with one known fault. It is *killed* when
at least one test of its own section fails against it under the default seeds. The
matrix records, per mutant, the killing tests and their evidence (the p-value of a
statistical assertion, or the last line of an exact mismatch). A mutant declared for CUDA
(a fault below the CPU tier's effect) is not run on CPU: its row says so, and it counts
neither as killed nor as survived.
"""

from __future__ import annotations

import dataclasses
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conformance import runner
from conformance.loading import mutants_module
from conformance.report import matrix as report


@dataclasses.dataclass
class KillRecord:
    """One row of the kill matrix."""

    id: str
    section: str
    fault: str
    mirrors: str
    killed: bool
    killers: list[dict]
    counts: dict[str, int]
    error: str = ""
    suite_bugs: list[dict] = dataclasses.field(default_factory=list)
    not_run: str = ""  # why this device cannot kill it (a CUDA mutant on CPU); "" when run


def _evidence(record: dict) -> str:
    failed = [s for s in record.get("stats", []) if not s.get("passed", True)]
    if failed:
        s = failed[0]
        return f"p={s['p_value']:.3g} < alpha={s['alpha']:.2g}, {s['effect_name']}={s['effect']:.4g}"
    return report.short_reason(record, 240)


def kill_one(mutant_id: str, *, device: str = "cpu", seed: int | None = None,
             first_failure: bool = False, try_first: list[str] | None = None) -> KillRecord:
    """Run the section tests of one mutant and decide whether it was killed.

    ``first_failure``: stop the run at the section's first failure (pytest ``--maxfail=1``),
    which decides ``killed`` unless that failure is a suite bug (then the record is not
    killed and names it); the record lists that one killer. The kill matrix report runs
    every test, to list every killer.

    ``try_first`` (with ``first_failure``): case ids (``conformance.seeds``) to run alone
    before the whole section, such as the killers a committed kill matrix recorded. Their
    first kill decides the record at the cost of one case, not of every case ahead of it in
    the section; when none of them kills (a case id unknown to the suite, or a killer that
    no longer fails), the whole section runs as without them, so the verdict is the same.

    Raises:
        ValueError: ``try_first`` without ``first_failure`` (the full matrix lists every
            killer, so it runs every test anyway).
    """
    if try_first and not first_failure:
        raise ValueError("try_first: needs first_failure=True (a full kill record runs every test of the section)")
    m = mutants_module().load_all()[mutant_id]
    if m.device == "cuda" and device != "cuda":
        return KillRecord(m.id, m.section, m.fault, m.mirrors, False, [], {},
                          not_run="needs --device cuda: only a CUDA case sees this fault")
    if try_first:
        record = _run_section(m, device=device, seed=seed, first_failure=True, cases=list(try_first))
        if record.killed:
            return record
    return _run_section(m, device=device, seed=seed, first_failure=first_failure)


def _run_section(m, *, device: str, seed: int | None, first_failure: bool,
                 cases: list[str] | None = None) -> KillRecord:
    """One quiet run of mutant ``m`` on its section's tests (only ``cases`` when given)."""
    returncode, payload, cmd = runner.run_quietly(impl=f"mutant:{m.id}", device=device, seed=seed,
                                                  keyword=f"test_{m.section}_", cases=cases,
                                                  extra=["--maxfail=1"] if first_failure else None)
    if payload is None:
        return KillRecord(m.id, m.section, m.fault, m.mirrors, False, [], {},
                          error=f"pytest exited {returncode} without results: {' '.join(cmd)}")
    counts: dict[str, int] = {}
    for record in payload["tests"]:
        counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
    killers, suite_bugs = split_failures(payload["tests"], m.section)
    return KillRecord(m.id, m.section, m.fault, m.mirrors, bool(killers), killers, counts, suite_bugs=suite_bugs)


def split_failures(tests: list[dict], section: str) -> tuple[list[dict], list[dict]]:
    """The failed tests of ``section`` as ``(killers, suite_bugs)``, each ``{test, evidence}``:
    a failure of the suite's own code (:func:`report.is_suite_bug`) is not a kill."""
    failed = [r for r in tests if r["outcome"] == "failed" and r["section"] == section]
    entries = [({"test": r["case"], "evidence": _evidence(r)}, report.is_suite_bug(r)) for r in failed]
    return [e for e, bug in entries if not bug], [e for e, bug in entries if bug]


def kill_matrix(ids: list[str] | None = None, *, device: str = "cpu", seed: int | None = None,
                jobs: int | None = None) -> list[KillRecord]:
    """Kill records for the given mutant ids (default: all), ``jobs`` runs in parallel."""
    ids = sorted(mutants_module().load_all()) if not ids else ids
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda i: kill_one(i, device=device, seed=seed), ids))


def write_reports(records: list[KillRecord], report_dir: Path) -> None:
    """Write ``mutants.json`` and ``mutants.md`` (mutant x section, killer, evidence)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "mutants.json").write_text(json.dumps([dataclasses.asdict(r) for r in records], indent=1))
    killed, ran = sum(r.killed for r in records), [r for r in records if not r.not_run]
    lines = [
        "# Mutant kill matrix",
        "",
        f"{killed} of {len(ran)} mutants killed ({100 * killed / max(len(ran), 1):.0f}%)"
        + (f"; {len(records) - len(ran)} not run on this device (see their rows)." if len(ran) < len(records) else "."),
        "",
        "| mutant | section | fault | mirrors | killed | by test | evidence |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        first = r.killers[0] if r.killers else {"test": r.error or r.not_run or "-", "evidence": ""}
        more = f" (+{len(r.killers) - 1} more)" if len(r.killers) > 1 else ""
        verdict = "not run" if r.not_run else "yes" if r.killed else "**NO**"
        lines.append(
            f"| `{r.id}` | {r.section} | {r.fault} | {r.mirrors or '-'} | {verdict} | "
            f"`{first['test'].split('::')[-1]}`{more} | {first['evidence'].replace('|', '/')} |"
        )
    bugs = [(r.id, b) for r in records for b in r.suite_bugs]
    if bugs:
        lines += ["", "Failures caused by the suite's own code (not counted as kills; fix the test):", ""]
        lines += [f"- `{i}`: `{b['test'].split('::')[-1]}`: {b['evidence']}" for i, b in bugs]
    (report_dir / "mutants.md").write_text("\n".join(lines) + "\n")


def format_matrix(records: list[KillRecord]) -> str:
    """Short text table for the terminal."""
    width = max((len(r.id) for r in records), default=10)
    rows = [f"{'mutant'.ljust(width)}  section  killed  by"]
    for r in records:
        by = r.killers[0]["test"].split("::")[-1] if r.killers else (r.error or r.not_run or "-")
        verdict = "n/a" if r.not_run else "yes" if r.killed else "NO "
        rows.append(f"{r.id.ljust(width)}  {r.section.ljust(7)}  {verdict}     {by}")
    ran = [r for r in records if not r.not_run]
    rows.append(f"killed {sum(r.killed for r in ran)}/{len(ran)}"
                + (f"; not run on this device: {', '.join(r.id for r in records if r.not_run)}" if len(ran) < len(records) else ""))
    return "\n".join(rows)
