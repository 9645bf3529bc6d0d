"""Merge mutation results (CI/mutation/driver.py run) with the triage into results/mutation/.

``merge(paths)``: every ``*.json`` result file under ``paths`` (directories or files, in the
order given: the first run of a mutant is its baseline, the last its final status, so a
re-check after a gap-closing test goes last) plus docs/mutation/triage.json (hand-written)
-> per-module ``results/mutation/summary.json`` and ``results/mutation/results.md`` (every
survivor with its verdict and reason). The recorded runs are ``results/mutation/raw/PERIOD/``.

Counts per module: ``killed`` (baseline: by the exact tests, by the statistical tests at the
run's budget, or by mutmut's CPU-time limit), ``survived_equivalent``, ``survived_gap``
(survived the baseline, triaged a real gap), ``equivalent_by_reason`` (the first word of
each equivalent's reason: message, validation, unreached, device, ...), ``gap_closed`` (of those, killed in the final
run by the test named in the triage), ``untriaged`` (survived, no verdict yet), and
``score = (killed + gap_closed) / (mutants - survived_equivalent)``, the share of
non-equivalent mutants the suite kills now (``score_baseline`` without the gap tests).
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRIAGE = REPO / "docs" / "mutation" / "triage.json"
#: Where the merge writes (summary.json, results.md) and the recorded runs live (raw/).
RESULTS = REPO / "results" / "mutation"
KILLED = ("killed", "killed-statistical", "timeout")
COMMAND = ("python CI/mutation/driver.py run --modules {modules} --shard I/N --jobs J --out DIR; "
           "python CI/mutation/driver.py merge DIR [RECHECK_DIR]")
VERDICTS = ("equivalent", "gap")


def load_triage(path: Path = TRIAGE) -> dict:
    """Mutant name -> ``{"verdict": "equivalent" | "gap", "why": str, "change": [changed lines],
    ["test": node id of the closing test]}``.

    Raises:
        ValueError: an entry without a known verdict or a reason, or a gap without its test.
    """
    if not path.exists():
        return {}
    triage = json.loads(path.read_text())
    for name, entry in triage.items():
        if entry.get("verdict") not in VERDICTS or not entry.get("why"):
            raise ValueError(f"{path}: {name}: expected a verdict in {VERDICTS} and a 'why', got {entry}")
        if entry["verdict"] == "gap" and not entry.get("test"):
            raise ValueError(f"{path}: {name}: a gap names the test that closes it ('test')")
    return triage


def equivalent_keys(path: Path = TRIAGE) -> set:
    """(function, changed lines) of every mutant triaged equivalent (driver.triage_key)."""
    return {(n.rpartition("__mutmut_")[0], tuple(e["change"])) for n, e in load_triage(path).items()
            if e["verdict"] == "equivalent"}


def _result_files(paths: list[Path]) -> list[Path]:
    files = []
    for p in paths:
        files.extend(sorted(p.glob("*.json")) if p.is_dir() else [p])
    return files


def _function_of(name: str) -> str:
    """``dspark_ref.m.x_f__mutmut_3`` -> ``dspark_ref.m.x_f``."""
    return name.rpartition("__mutmut_")[0]


def _changed_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines()[3:] if line[:1] in "+-"]


def records(results: list[dict]) -> tuple[dict, dict, dict]:
    """``(first, last, diffs)`` of result records in run order: each mutant's first status
    (``(module, status)``, its baseline), last status, and first recorded diff.

    A run whose diff of a mutant differs from the one recorded earlier saw that function's
    source changed since (mutmut numbers a function's mutants afresh, so the same name is a
    different mutant): the earlier records of EVERY mutant of that function are dropped, and
    this run's become their baseline (a function re-run after a change starts over). So does a
    function whose mutant names in the run's source (``functions``, from session 27) are not
    the names recorded for it earlier: it gained or lost mutants, so it changed, even where
    no recorded diff shows it (runs before session 27 kept the diffs of survivors only).
    """
    first, last, diffs = {}, {}, {}
    for r in results:
        mine = r.get("diffs", {})
        changed = {_function_of(n) for n, d in mine.items()
                   if n in diffs and _changed_lines(d) != _changed_lines(diffs[n])}
        earlier = {}
        for n in first:
            earlier.setdefault(_function_of(n), set()).add(n)
        changed |= {f for f, names in r.get("functions", {}).items() if earlier.get(f, set(names)) != set(names)}
        for table in (first, last, diffs) if changed else ():
            for n in [n for n in table if _function_of(n) in changed]:
                del table[n]
        for name, status in r["status"].items():
            first.setdefault(name, (r["module"], status))
            last[name] = status
            if name in mine:
                diffs.setdefault(name, mine[name])
    return first, last, diffs


def summarise(results: list[dict], triage: dict) -> tuple[dict, dict]:
    """Per-module counts and per-module survivor rows from result records (in run order;
    :func:`records` drops the records of a function that a later run saw changed)."""
    meta = {}
    for r in results:
        meta.setdefault(r["module"], r)
    first, last, diffs = records(results)
    summary, rows = {}, {}
    for module, m in sorted(meta.items()):
        names = sorted(n for n, (mod, _) in first.items() if mod == module)
        c = dict.fromkeys(("killed", "killed_exact", "killed_statistical", "timeout", "survived_equivalent",
                           "survived_gap", "gap_closed", "untriaged", "no_tests", "stale_triage"), 0)
        rows[module] = []
        kinds = {}
        for n in names:
            base, final = first[n][1], last[n]
            verdict = triage.get(n, {}).get("verdict")
            if base in KILLED:
                c["killed"] += 1
                c[{"killed": "killed_exact", "killed-statistical": "killed_statistical"}.get(base, "timeout")] += 1
                c["stale_triage"] += verdict is not None
                continue
            c["no_tests"] += base == "no-tests"
            if verdict == "equivalent":
                c["survived_equivalent"] += 1
                kind = triage[n]["why"].split(":")[0]
                kinds[kind] = kinds.get(kind, 0) + 1
                c["stale_triage"] += final in KILLED
            elif verdict == "gap":
                c["survived_gap"] += 1
                c["gap_closed"] += final in KILLED
            else:
                c["untriaged"] += 1
            rows[module].append((n, base, final, triage.get(n, {}), diffs.get(n, "")))
        live = len(names) - c["survived_equivalent"]
        summary[module] = {
            "section": m["section"], "tests": m["tests"], "tool": m["tool"], "tool_version": m["tool_version"],
            "command": COMMAND.format(modules=module), "statistical_budget": m["statistical_budget"],
            "source_sha256": m["source_sha256"], "mutants": len(names), **c,
            "non_equivalent": live, "equivalent_by_reason": dict(sorted(kinds.items())),
            "score_baseline": round(c["killed"] / live, 4) if live else None,
            "score": round((c["killed"] + c["gap_closed"]) / live, 4) if live else None,
        }
    return summary, rows


def _markdown(summary: dict, rows: dict) -> str:
    out = ["# Mutation results (generated by `python CI/mutation/driver.py merge`; do not edit)", "",
           "| module | SPEC | mutants | killed | survived-equivalent | survived-gap (closed) | untriaged | "
           "score over non-equivalent |", "|---|---|---|---|---|---|---|---|"]
    for module, s in summary.items():
        out.append(f"| {module} | {s['section']} | {s['mutants']} | {s['killed']} | {s['survived_equivalent']} | "
                   f"{s['survived_gap']} ({s['gap_closed']}) | {s['untriaged']} | {s['score']} |")
    for module, items in rows.items():
        out += ["", f"## {module}: survivors of the baseline run ({len(items)})", ""]
        for name, base, final, entry, diff in items:
            changed = " / ".join(line[1:].strip() for line in diff.splitlines()[3:] if line[:1] in "+-")
            verdict = entry.get("verdict", "UNTRIAGED")
            why = entry.get("why", "")
            test = f" Closed by `{entry['test']}` (final: {final})." if verdict == "gap" else ""
            out.append(f"- `{name.rpartition('.')[2]}` ({base}) **{verdict}**: {why}{test}  \n  `{changed[:240]}`")
    return "\n".join(out) + "\n"


def merge(paths: list[Path], out: Path = RESULTS) -> int:
    """Write ``out/summary.json`` and ``out/results.md`` (default results/mutation/); return 0."""
    results = [json.loads(f.read_text()) for f in _result_files(paths)]
    if not results:
        raise ValueError(f"paths: no result files under {[str(p) for p in paths]}")
    summary, rows = summarise(results, load_triage())
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    (out / "results.md").write_text(_markdown(summary, rows))
    for module, s in summary.items():
        print(f"{module:15s} mutants {s['mutants']:5d} killed {s['killed']:5d} equivalent {s['survived_equivalent']:4d} "
              f"gap {s['survived_gap']:3d} (closed {s['gap_closed']}) untriaged {s['untriaged']:4d} score {s['score']}")
    return 0
