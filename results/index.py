"""The index of the committed run results (results/README.md), generated from the files.

``python results/index.py`` rewrites ``results/README.md``; ``python results/index.py --check``
exits 1 when the committed index differs from what the files give (``tests/test_results_index.py``
runs the same comparison). The index lists:

* every conformance run under ``conformance/ENGINE/``: engine, release, device, the run's
  kind (full run, ``gate``, ``gate-rerun``, ``executor``), the verdict and its files. The
  verdict is recomputed from ``results.json`` by the suite's own rule
  (:func:`conformance.report.matrix.overall`); a run that kept only its ``report.md`` gives
  the verdict that report printed, marked ``(report.md)``;
* every benchmark file under ``perf/`` (``python -m bench``): device, torch, triton, rows;
  and each document there (``*.md``, the sessions' measurements as recorded) by its title;
* every file of the calibration reports under ``calibration/`` (``dspark-conformance
  calibrate``, ``null-replay``): the run logs with their record counts, the reference runs
  whose ``results.json`` are the null replay's designs (with their verdicts), the reports;
* the kill matrix under ``mutants/`` (``dspark-conformance mutants``): mutants registered,
  run, killed, and those not run on the device of the record;
* every mutation run period under ``mutation/raw/`` (``CI/mutation/driver.py run``) with
  its modules, and the merged ``mutation/summary.json`` / ``results.md``.

No result file records its date: ``git log --follow FILE`` gives when it was committed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's conformance package, run as a script too

from conformance.report.matrix import overall, run_rows  # noqa: E402

INDEX = HERE / "README.md"
#: A run's files: ``ENGINE-RELEASE-DEVICE[-CARD][-KIND]`` plus one of these suffixes.
SUFFIXES = (".json", ".md", ".junit.xml", ".log")
_KINDS = ("gate-rerun", "gate", "executor")
_OVERALL = re.compile(r"overall \*\*([A-Z]+)\*\*")
_HEADER = re.compile(r"^# DSpark conformance: `([^`]+)` on (\S+)", re.M)
#: A console log's matrix header and verdict (a run whose report files did not come back).
_LOG_HEADER = re.compile(r"^DSpark conformance: impl=(\S+) device=(\S+)", re.M)
_LOG_OVERALL = re.compile(r"^overall: ([A-Z]+)", re.M)


def _stem(path: Path) -> str:
    return next(path.name[: -len(s)] for s in SUFFIXES if path.name.endswith(s))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def conformance_rows(root: Path = HERE) -> list[list[str]]:
    """One row per conformance run under ``root/conformance``: engine, release, device, kind,
    verdict, files (links relative to ``root``).

    Raises:
        ValueError: a run with neither ``results.json`` nor a report or console header to read.
    """
    runs: dict[Path, list[Path]] = {}
    for path in sorted((root / "conformance").glob("*/*")):
        if path.is_file() and path.name.endswith(SUFFIXES):
            runs.setdefault(path.with_name(_stem(path)), []).append(path)
    rows = []
    for stem, files in runs.items():
        engine = stem.parent.name
        json_file, md_file = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".md")
        log_file = stem.with_name(stem.name + ".log")
        if json_file.exists():
            payload = json.loads(json_file.read_text())
            impl, device = payload["impl"], payload["device"]
            verdict = overall(run_rows(payload), payload)
        elif md_file.exists() and (header := _HEADER.search(md_file.read_text())):
            impl, device = header.groups()
            found = _OVERALL.search(md_file.read_text())
            verdict = f"{found.group(1)} (report.md)" if found else "not recorded"
        elif log_file.exists() and (header := _LOG_HEADER.search(log_file.read_text())):
            impl, device = header.groups()
            found = _LOG_OVERALL.search(log_file.read_text())
            verdict = f"{found.group(1)} (console log)" if found else "not recorded"
        else:
            raise ValueError(f"{stem}: neither {json_file.name} nor a report or console header to read the run "
                             "from")
        release = impl.partition("==")[2]
        label = stem.name.removeprefix(f"{engine}-{release}-" if release else f"{engine}-")
        kind = next((k for k in _KINDS if label.endswith("-" + k)), "")
        card = label.removesuffix("-" + kind) if kind else label
        card = card.removeprefix(device).lstrip("-")
        links = ", ".join(f"[{p.name[len(stem.name):] or p.name}]({p.relative_to(root)})" for p in sorted(files))
        rows.append([engine, release or "-", device + (f" ({card})" if card else ""), kind or "run", verdict, links])
    return rows


def perf_rows(root: Path = HERE) -> list[list[str]]:
    """One row per benchmark file under ``root/perf``: file, device, torch, triton, rows."""
    rows = []
    for path in sorted((root / "perf").glob("*.json")):
        data = json.loads(path.read_text())
        env = data.get("environment", {})
        rows.append([f"[{path.name}]({path.relative_to(root)})", _cell(str(env.get("device_name", "-"))),
                     str(env.get("torch", "-")), str(env.get("triton", "-")), str(len(data.get("rows", [])))])
    return rows


def perf_documents(root: Path = HERE) -> list[str]:
    """One list item per document under ``root/perf``: a link and the document's title; and
    one per folder of a measurement (its ``README.md`` says what each file is): the README's
    link and title, then a link to each of its other files."""
    items = []
    for path in sorted((root / "perf").glob("*.md")):
        items.append(f"- [{path.name}]({path.relative_to(root)}): {_title(path)}")
    for folder in sorted(p for p in (root / "perf").iterdir() if p.is_dir()):
        readme = folder / "README.md"
        if not readme.is_file():
            raise ValueError(f"{folder.relative_to(root)}: a measurement's folder has a README.md saying what it holds")
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p != readme)
        items.append(f"- [{folder.name}/]({readme.relative_to(root)}): {_title(readme)}; "
                     + ", ".join(f"[{p.relative_to(folder)}]({p.relative_to(root)})" for p in files))
    return items


def _title(path: Path) -> str:
    return next((line[2:].strip() for line in path.read_text().splitlines() if line.startswith("# ")), path.stem)


def _calibration_what(path: Path) -> str:
    if path.name.startswith("runs.jsonl"):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            records = sum(1 for line in f if line.strip())
            return f"run log: {records} record{'' if records == 1 else 's'}"
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "impl" in data and "tests" in data:
            return (f"results.json of `{data['impl']}` on {data['device']}: "
                    f"{overall(run_rows(data), data)}, {len(data['tests'])} records")
    return {"calibration": "calibration report", "null-replay": "null-replay report",
            "case-keys": "the case keys the committed records name",
            "law-fine-h100": "console log: S3/law-fine on an H100 (reference on three seeds, the bfloat16-noise mutant, "
                             "its GPU-tier law, null and power replay)"}.get(path.stem.partition(".")[0], "")


def calibration_rows(root: Path = HERE) -> list[list[str]]:
    """One row per file under ``root/calibration``: file, what it holds."""
    return [[f"[{p.relative_to(root / 'calibration')}]({p.relative_to(root)})", _calibration_what(p)]
            for p in sorted((root / "calibration").rglob("*")) if p.is_file()]


def mutation_rows(root: Path = HERE) -> list[list[str]]:
    """One row per run period under ``root/mutation/raw``: folder, files, modules."""
    rows = []
    for folder in sorted(p for p in (root / "mutation" / "raw").glob("*") if p.is_dir()):
        files = sorted(folder.glob("*.json"))
        modules = sorted({p.name.partition(".")[0] for p in files})
        rows.append([f"[{folder.name}/]({folder.relative_to(root)})", str(len(files)), ", ".join(modules)])
    return rows


def kill_matrix_rows(root: Path = HERE) -> list[list[str]]:
    """One row per kill matrix under ``root/mutants``: files, mutants, run, killed, not run."""
    rows = []
    for path in sorted((root / "mutants").glob("*.json")):
        records = json.loads(path.read_text())
        ran = [r for r in records if not r.get("not_run")]
        links = ", ".join(f"[{p.suffix}]({p.relative_to(root)})" for p in (path, path.with_suffix(".md")) if p.exists())
        rows.append([links, str(len(records)), str(len(ran)), str(sum(r["killed"] for r in ran)),
                     ", ".join(r["id"] for r in records if r.get("not_run")) or "-"])
    return rows


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def render(root: Path = HERE) -> str:
    """The index of ``root`` as markdown (the text of ``results/README.md``)."""
    runs = conformance_rows(root)
    lines = [
        "# Run results (generated by `python results/index.py`; do not edit)", "",
        "What the suite and its tools wrote, kept as they came back; what each run established is",
        "in the findings (`docs/conformance/*-findings.md`, `docs/mutation/README.md`,",
        "`docs/performance.md`, `README.md` for calibration). No file records its date: `git log --follow FILE` gives it.", "",
        f"## Conformance runs ({len(runs)})", "",
        "`dspark-conformance run` reports (`report.md`, `results.json`, `junit.xml`) by engine.",
        "Verdict: recomputed from results.json by the suite's rule; `(report.md)` where only",
        "the report was kept. Kind: `run` (a whole run; a report says on its description line",
        "when the expected-failure ledger was off), `gate` (the CI gate's invocation, ledger on),",
        "`gate-rerun` (a gate's failing cases again), `executor` (the S6 executor cases alone).", "",
        *_table(["engine", "release", "device", "kind", "verdict", "files"], runs), "",
        "## Benchmarks (`python -m bench`)", "",
        *_table(["file", "device", "torch", "triton", "rows"], perf_rows(root)), "",
        *(line for item in perf_documents(root) for line in (item, "")),
        "## Calibration (`dspark-conformance calibrate`, `null-replay`)", "",
        "Report directories: a rerun with `--report results/calibration` (or `.../gpu-tier`) appends",
        "to its run log and rewrites its reports.", "",
        *_table(["file", "what"], calibration_rows(root)), "",
        "## Kill matrix (`dspark-conformance mutants --report results/mutants`)", "",
        "Each mutant (`fixtures/mutants`) against the tests of its SPEC section, every killer listed;",
        "`tests/test_kill_matrix.py` runs these killers first. `mutants-added` holds the mutants registered",
        "after `mutants` was run (the same command, naming them).", "",
        *_table(["files", "mutants", "run", "killed", "not run on its device"], kill_matrix_rows(root)), "",
        "## Mutation runs (`CI/mutation/driver.py run`)", "",
        "Merged by `python CI/mutation/driver.py merge` (the order: `docs/mutation/README.md`) into",
        "[mutation/summary.json](mutation/summary.json) and [mutation/results.md](mutation/results.md).", "",
        *_table(["period", "files", "modules"], mutation_rows(root)), "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Write the index, or with ``--check`` return 1 when the committed one is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if results/README.md is not what the files give")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if INDEX.exists() and INDEX.read_text() == text:
            return 0
        print(f"{INDEX} is stale: run python results/index.py", file=sys.stderr)
        return 1
    INDEX.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
