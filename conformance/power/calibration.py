"""Calibration of every test: exact tests on many seeds, false failures and power of the statistical ones.

``dspark-conformance calibrate`` measures four things:

0. **Exact tests on every seed.** The tests not marked ``statistical`` run on the reference
   once per base seed (``--exact-seeds``). An exact test has no false-failure budget: one
   failure (or INCONCLUSIVE, or a suite error) on any seed is a defect of the suite, a case
   whose premise the seed's inputs did not satisfy.

1. **False failures.** The tests marked ``statistical`` run on the reference once per base
   seed (``--dspark-seed``): per test, false failures with a Clopper-Pearson interval and a
   one-sided Kolmogorov-Smirnov test that its p-values are not smaller than U(0, 1);
   per run, the whole-run false-failure rate against the family-wise budget, and the same
   rate at larger family-wise levels (each run's p-values against ``level / 200``), where a
   few hundred runs can tell a valid test from an invalid one.
2. **Power at the declared effect.** Every assertion of a default-seed reference run is
   replayed on simulated data from its least favourable alternative at exactly its declared
   minimum effect (:mod:`conformance.power.replay`).
3. **Power on mutants.** Each mutant runs its section's statistical tests at the default
   seed; the tests that fail it (its statistical killers) then run over the power seeds, and
   the kill rate with its interval and the median observed effect are reported.

Every pytest run appends one JSON line to ``runs.jsonl`` in the report directory as soon as
it ends, and the report aggregates every line in that file
(:mod:`conformance.power.calibration_numbers`): a calibration can be split over machines or
sessions (``--first-seed``) and merged (:func:`merge_logs`, ``dspark-conformance merge-runs``;
concatenating the files is the same merge); a run cut short keeps
what finished, and rerunning the same command resumes it. A run that produced no test
record is not logged: the next invocation retries it.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from conformance import runner, seeds
from conformance.loading import mutants_module
from conformance.report import matrix as report

from . import replay as power_replay
from .calibration_numbers import statistical_killers

RUNS_FILE = "runs.jsonl"
REPLAY_SEED = 1


# --------------------------------------------------------------------------- running


def _pytest_run(impl: str, seed: int | None, device: str, selection: list[str] | None = None,
                cases: list[str] | None = None) -> dict | None:
    """One pytest run (``-m``/``-k`` ``selection``, or the case ids ``cases``); its
    results.json, or None when the run produced no test record (a crash)."""
    _, payload, _ = runner.run_quietly(impl=impl, device=device, seed=seed, extra=selection, cases=cases)
    return payload if payload and payload["tests"] else None


def _outcome(test: dict) -> str:
    """The record's outcome; a failure of the suite's own code (plugin ``failure.suite_bug``)
    is ``suite-error``: neither a false failure nor a kill."""
    if report.is_suite_bug(test):
        return "suite-error"
    return test["outcome"]


def _compact(payload: dict) -> dict[str, dict]:
    """Per case id: outcome and its assertions' (name, p-value, effect, min effect)."""
    return {
        t["case"]: {"outcome": _outcome(t),
                      "stats": [[s["name"], s["p_value"], s["effect"], s["min_effect"]] for s in t["stats"]]}
        for t in payload["tests"]
    }


def _by_case_id(record: dict) -> dict:
    """``record`` with its ``tests`` keyed by case id: a record logged before case ids were the
    identity names its cases by their legacy keys (``conformance.seeds``), so an archived log
    and fresh runs aggregate per case."""
    if "tests" not in record:
        return record
    return {**record, "tests": {seeds.resolve_case(name)[0]: test for name, test in record["tests"].items()}}


REPLAYED_DESIGN = ("name", "rule", "n", "alpha", "min_effect", "analytic_power")


def _replayed_design(row: dict) -> tuple:
    """What a replay row measured: its assertion's name and design (a ``ReplayedPower`` row)."""
    return tuple(row[k] for k in REPLAYED_DESIGN)


def _stat_design(stat: dict) -> tuple:
    """:func:`_replayed_design` of an assertion of a results.json, before it is replayed."""
    return (stat["name"], (stat.get("design") or {}).get("rule"), stat["n"], stat["alpha"], stat["min_effect"],
            stat["power_at_min_effect"])


def _record_key(record: dict) -> tuple:
    """A record's identity: (kind, impl, seed, device) names one run. A replay record also
    holds the designs it replayed, so a replay of changed designs is a record of its own,
    whose rows supersede the older rows of the same assertions
    (:func:`conformance.power.calibration_numbers.aggregate`: the later row of a name wins),
    and a replay of the same designs is a duplicate."""
    key = (record["kind"], record["impl"], record["seed"], record["device"])
    if record["kind"] == "replay":
        key += (tuple(_replayed_design(row) for row in record["replayed"]),)
    return key


class RunLog:
    """``runs.jsonl``: one record per pytest run, appended as runs end (thread-safe).

    A run that produced no test record is not logged (:attr:`crashed` names it), so the next
    invocation retries it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.crashed: list[str] = []
        self.added = 0
        self._lock = threading.Lock()

    def records(self) -> list[dict]:
        """Every record in the file (and in an archived ``runs.jsonl.gz`` beside it, read
        first), in order, the first of each key (:func:`_record_key`) kept: one record per
        run; every distinct replay record, older first, as a newer one supersedes the rows of
        the assertions it replayed again. A last line cut short (a run killed mid-write) is
        skipped.

        Raises:
            ValueError: any other line that is not a JSON record, naming file and line.
        """
        seen, out = set(), []
        for path, lines in self._sources():
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    if number == len(lines) and not line.endswith("\n"):
                        continue
                    raise ValueError(f"{path}:{number}: not a JSON record ({exc})") from None
                key = _record_key(record)
                if key not in seen:
                    seen.add(key)
                    out.append(_by_case_id(record))
        return out

    def _sources(self) -> list[tuple[Path, list[str]]]:
        archive = self.path.with_name(self.path.name + ".gz")
        sources = []
        if archive.exists():
            sources.append((archive, gzip.decompress(archive.read_bytes()).decode().splitlines(keepends=True)))
        if self.path.exists():
            sources.append((self.path, self.path.read_text().splitlines(keepends=True)))
        return sources

    def append(self, record: dict) -> None:
        with self._lock, self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            self.added += 1

    def append_run(self, record: dict, payload: dict | None, what: str) -> None:
        """Log ``record`` with ``tests`` from ``payload``; a None payload is a crash: not logged."""
        if payload is None:
            with self._lock:
                self.crashed.append(what)
            return
        self.append({**record, "tests": _compact(payload)})


def source_log(path: Path) -> RunLog:
    """The run log at ``path``: a report directory (its ``runs.jsonl`` and archive), a
    ``runs.jsonl`` file, or a ``runs.jsonl.gz`` archive.

    Raises:
        FileNotFoundError: nothing at ``path``, or a directory with neither ``runs.jsonl`` nor
            its archive (a shard's report directory that was never written is not an empty log).
    """
    if path.is_dir():
        log = path / RUNS_FILE
        if not log.exists() and not log.with_name(log.name + ".gz").exists():
            raise FileNotFoundError(f"{path}: a directory without {RUNS_FILE} or {RUNS_FILE}.gz "
                                    f"(expected a report directory of calibration runs)")
        return RunLog(log)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run log (expected a report directory, runs.jsonl or runs.jsonl.gz)")
    return RunLog(path.with_suffix("") if path.suffix == ".gz" else path)


def merge_logs(out_dir: Path, sources: list[Path]) -> dict[str, int]:
    """Append to ``out_dir/runs.jsonl`` every record of ``sources`` (:func:`source_log`)
    whose key (:func:`_record_key`) it does not hold yet, first source first: how shards of
    a calibration (``--first-seed`` / ``--seeds`` per shard) become one log to aggregate.

    Returns counts: ``added``, ``duplicates`` (records already held, dropped) and
    ``conflicts`` (duplicates whose tests differ from the record kept: the same run gave
    another result, e.g. on other hardware; the first is kept).

    Every source is read before anything is written: on an error ``out_dir`` is left as it
    was (not created, nothing appended).

    Raises:
        FileNotFoundError / ValueError: a missing source, or a line that is not a JSON record.
    """
    incoming = [record for source in sources for record in source_log(source).records()]
    out = RunLog(out_dir / RUNS_FILE)
    held = {_record_key(r): r for r in out.records()}
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {"added": 0, "duplicates": 0, "conflicts": 0}
    for record in incoming:
        kept = held.get(_record_key(record))
        if kept is None:
            held[_record_key(record)] = record
            out.append(record)
            counts["added"] += 1
        else:
            counts["duplicates"] += 1
            counts["conflicts"] += kept != record
    return counts


def _statistical_selection(section: str | None = None) -> list[str]:
    return ["-m", "statistical"] + (["-k", f"test_{section}_"] if section else [])


EXACT_SELECTION = ["-m", "not statistical"]


def reference_statistical_run(device: str) -> dict | None:
    """A default-seed reference run of the statistical tests on ``device``: its results.json
    (every assertion's design), or None when the run produced no test record."""
    return _pytest_run("reference", None, device, _statistical_selection())


def run_reference(log: RunLog, seeds: Iterable[int], device: str, pool: ThreadPoolExecutor,
                  kind: str = "reference") -> None:
    """Run the statistical tests (``kind="reference"``) or the exact ones (``kind="exact"``)
    on the reference once per base seed not yet logged; log each run."""
    selection = EXACT_SELECTION if kind == "exact" else _statistical_selection()
    done = {r["seed"] for r in log.records() if r["kind"] == kind and r["device"] == device}

    def one(seed: int) -> None:
        payload = _pytest_run("reference", seed, device, selection)
        log.append_run({"kind": kind, "impl": "reference", "seed": seed, "device": device}, payload,
                       f"{kind} seed {seed}")
    list(pool.map(one, [s for s in seeds if s not in done]))


def run_mutants(log: RunLog, mutant_ids: list[str], power_seeds: list[int], device: str,
                pool: ThreadPoolExecutor) -> None:
    """Find each mutant's statistical killers at the default seed, then rerun them per power seed."""
    registry = mutants_module().load_all()
    done = {r["impl"] for r in log.records() if r["kind"] == "mutant-default" and r["device"] == device}

    def default(mutant_id: str) -> None:
        impl = f"mutant:{mutant_id}"
        if impl not in done:
            payload = _pytest_run(impl, None, device, _statistical_selection(registry[mutant_id].section))
            log.append_run({"kind": "mutant-default", "impl": impl, "seed": None, "device": device}, payload,
                           f"{impl} default seed")
    list(pool.map(default, mutant_ids))
    records = log.records()
    killers = {impl: tests for (impl, dev), tests in statistical_killers(records).items() if dev == device}
    logged = {(r["impl"], r["seed"]) for r in records if r["kind"] == "mutant-power" and r["device"] == device}
    plan = [(m, s) for s in power_seeds for m in mutant_ids  # seed-major: a cut-short run stays even
            if killers.get(f"mutant:{m}") and (f"mutant:{m}", s) not in logged]

    def power(item: tuple[str, int]) -> None:
        impl = f"mutant:{item[0]}"
        payload = _pytest_run(impl, item[1], device, cases=sorted(killers[impl]))
        log.append_run({"kind": "mutant-power", "impl": impl, "seed": item[1], "device": device}, payload,
                       f"{impl} power seed {item[1]}")
    list(pool.map(power, plan))


def run_replay(log: RunLog, device: str, replicates: int, payload: dict | None = None) -> None:
    """Replay at its declared effect every assertion of ``payload`` (a results.json) whose
    design (:data:`REPLAYED_DESIGN`) the latest replay on its device does not hold yet, and
    log them as one replay record: its rows supersede the older rows of those assertions,
    which stay in the log as history. So a case whose design changed is replayed again, and
    rerunning the same command replays nothing.

    Without ``payload``, a default-seed reference run of the statistical tests on ``device``
    is replayed, once per device: a device already replayed is left as it is (a fresh run
    costs the whole statistical suite; pass its results.json to replay changed designs).
    """
    device = payload["device"] if payload else device
    replays = [r for r in log.records() if r["kind"] == "replay" and r["device"] == device]
    if replays and payload is None:
        return
    payload = payload or reference_statistical_run(device)
    if payload is None:
        log.crashed.append(f"reference default seed on {device} (for the replay)")
        return
    held = {row["name"]: _replayed_design(row) for r in replays for row in r["replayed"]}  # the later row wins
    replayed = [
        dataclasses.asdict(power_replay.replay_power(s, replicates=replicates, seed=REPLAY_SEED))
        for t in payload["tests"] for s in t["stats"]
        if not math.isnan(s["power_at_min_effect"]) and held.get(s["name"]) != _stat_design(s)
    ]
    if replayed:
        log.append({"kind": "replay", "impl": "reference", "seed": None, "device": device, "replayed": replayed})


def calibrate(report_dir: Path, *, seeds: list[int], power_seeds: list[int], replicates: int,
              device: str = "cpu", mutants: list[str] | None = None, jobs: int | None = None,
              replay_payload: dict | None = None, exact_seeds: Iterable[int] = ()) -> RunLog:
    """Run what is asked, appending to ``report_dir/runs.jsonl``; return the log (its
    ``added`` and ``crashed`` say what this call did; ``records()`` is the whole file).

    ``replay_payload``: a results.json whose assertions are replayed instead of a fresh
    default-seed run (e.g. one from a GPU run, which alone holds the GPU-only assertions).
    """
    report_dir.mkdir(parents=True, exist_ok=True)
    log = RunLog(report_dir / RUNS_FILE)
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        if replicates:
            run_replay(log, device, replicates, replay_payload)
        run_reference(log, exact_seeds, device, pool, kind="exact")
        run_reference(log, seeds, device, pool)
        if power_seeds:
            run_mutants(log, mutants or sorted(mutants_module().load_all()), power_seeds, device, pool)
    return log
