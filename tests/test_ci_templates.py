"""The sharded calibration workflow (CI/github/calibrate-sharded.yml): every command it runs
exists with the options it passes, its shards cover the base seeds once, and its defaults
reach the clean runs a direct bound at the family-wise budget needs."""

import re
import shlex
from pathlib import Path

import pytest

from conformance import budget, cli
from conformance.power import calibration_numbers as numbers

yaml = pytest.importorskip("yaml")

WORKFLOW = Path(__file__).resolve().parents[1] / "CI" / "github" / "calibrate-sharded.yml"


def _workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def _inputs():
    doc = _workflow()
    return {k: v["default"] for k, v in doc[True]["workflow_dispatch"]["inputs"].items()}  # YAML reads 'on' as True


def _commands(shard=0):
    """Every ``dspark-conformance`` command line of the workflow, its expressions filled in."""
    inputs = _inputs()
    first = shard * int(inputs["seeds_per_shard"]) + 1
    values = {"matrix.shard": str(shard), **{f"inputs.{k}": v for k, v in inputs.items()}}
    out = []
    for job in _workflow()["jobs"].values():
        for step in job["steps"]:
            text = re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values.get(m.group(1), "X"), step.get("run", ""))
            text = text.replace('"$FIRST"', str(first))
            for line in text.splitlines():
                line = line.split(" || ")[0].strip()
                if line.startswith("dspark-conformance "):
                    out.append(shlex.split(line)[1:])
    return out


def test_every_command_of_the_workflow_parses_with_the_cli():
    commands = _commands()
    assert {c[0] for c in commands} == {"calibrate", "merge-runs", "null-replay"}
    parser = cli.build_parser()
    for argv in commands:
        if argv[0] == "merge-runs":
            argv = [a if "*" not in a else "shards/0/runs.jsonl" for a in argv]
        parser.parse_args(argv)  # SystemExit (exit 3) on an unknown option or a bad value


def test_shards_cover_the_seeds_once_and_reach_a_direct_bound_at_the_budget():
    inputs = _inputs()
    shards, per = int(inputs["shards"]), int(inputs["seeds_per_shard"])
    seeds = []
    parser = cli.build_parser()
    for shard in range(shards):
        argv = next(c for c in _commands(shard) if c[0] == "calibrate" and "--first-seed" in c)
        args = parser.parse_args(argv)
        assert (args.power_seeds, args.replicates) == (0, 0)
        seeds += range(args.first_seed, args.first_seed + args.seeds)
    assert seeds == list(range(1, shards * per + 1))
    assert len(seeds) >= numbers.clean_runs_needed(budget.FAMILY_WISE_ALPHA) == 3688


def test_merge_job_aggregates_what_it_merged():
    merge, aggregate = [c for c in _commands() if c[0] in ("merge-runs",)
                        or (c[0] == "calibrate" and "--first-seed" not in c)]
    parser = cli.build_parser()
    out = parser.parse_args(merge).out
    args = parser.parse_args(aggregate)
    assert args.report == out and (args.seeds, args.power_seeds, args.replicates) == (0, 0, 0)
