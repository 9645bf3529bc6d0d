"""The sharded workflows. The calibration (CI/github/calibrate-sharded.yml): every command it
runs exists with the options it passes, its shards cover the base seeds once, and its defaults
reach the clean runs a direct bound at the family-wise budget needs. mlx-dspark's statistical
matrix (CI/github/mlx-dspark-statistical.yml): its plan makes shards 1..N, each runs the same
command but for ``--shard I/N``, and the merge job merges what they upload."""

import os
import re
import shlex
import subprocess
import sys
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


STATISTICAL = WORKFLOW.parent / "mlx-dspark-statistical.yml"
FINDINGS = WORKFLOW.parents[2] / "docs" / "conformance" / "mlx-dspark-findings.md"


def _step(job: dict, text: str) -> dict:
    return next(step for step in job["steps"] if text in step.get("run", "") or text in step.get("uses", ""))


def _plan(job: dict, shards: str, tmp_path: Path) -> dict[str, str]:
    """The plan step run (its python3 this interpreter) for the input ``shards``: its outputs."""
    output = tmp_path / "github-output"
    step = _step(job, "GITHUB_OUTPUT")
    env = {**os.environ, "GITHUB_OUTPUT": str(output),
           **{k: v.replace("${{ inputs.shards || '24' }}", shards) for k, v in step["env"].items()}}
    done = subprocess.run(["bash", "-c", step["run"].replace("python3 ", f"{shlex.quote(sys.executable)} ", 1)],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


def test_the_statistical_shards_each_run_one_shard_of_one_command(tmp_path):
    doc = yaml.safe_load(STATISTICAL.read_text())
    triggers, jobs = doc[True], doc["jobs"]
    assert triggers["schedule"] and "workflow_dispatch" in triggers
    default = triggers["workflow_dispatch"]["inputs"]["shards"]["default"]
    assert default == "24" and "|| '24'" in _step(jobs["plan"], "GITHUB_OUTPUT")["env"]["SHARD_COUNT"]
    plan = _plan(jobs["plan"], default, tmp_path)
    count = int(plan["count"])
    assert yaml.safe_load(plan["shards"]) == list(range(1, count + 1)) and count == 24
    shard = jobs["shard"]
    assert shard["timeout-minutes"] == 360 and shard["strategy"]["fail-fast"] is False
    step = _step(shard, "dspark-conformance run")
    line = next(text for text in step["run"].splitlines() if "dspark-conformance run" in text).split(" || ")[0]
    parser, runs = cli.build_parser(), []
    for index in range(1, count + 1):
        values = {"${{ matrix.shard }}": str(index), "${{ needs.plan.outputs.count }}": str(count)}
        env = {name: values[value] for name, value in step["env"].items()}
        words = shlex.split(re.sub(r"\$(\w+)", lambda m: env[m.group(1)], line))
        assert words[:2] == ["PYTHONPATH=engine", "dspark-conformance"], words
        runs.append(vars(parser.parse_args(words[2:])))
    assert [run["shard"] for run in runs] == [(index, count) for index in range(1, count + 1)]
    assert [run["report"] for run in runs] == [Path(f"reports/shard-{index}") for index in range(1, count + 1)]
    others = [{k: v for k, v in run.items() if k not in ("shard", "report", "command_parser")} for run in runs]
    assert all(other == others[0] for other in others)
    assert (others[0]["impl"], others[0]["workers"], others[0]["pytest_args"]) == (
        "mlx-dspark==0.20.3", "2", ["-m", "statistical"])
    # the engine installed by the findings' install line (its packages and pins)
    install = re.search(r"^pip install --no-deps --target \S+ (mlx-dspark==.*)$", FINDINGS.read_text(), re.M)
    assert f"pip install --no-deps --target engine {install.group(1)}" in _step(shard, "mlx-dspark==")["run"]
    upload = _step(shard, "actions/upload-artifact")["with"]
    assert (upload["name"], upload["path"]) == ("shard-${{ matrix.shard }}", "reports/shard-${{ matrix.shard }}/")


def test_the_statistical_merge_job_merges_every_shards_upload():
    jobs = yaml.safe_load(STATISTICAL.read_text())["jobs"]
    merge = jobs["merge"]
    assert merge["needs"] == "shard" and merge["if"] == "always()"
    download = _step(merge, "actions/download-artifact")["with"]
    assert download == {"pattern": "shard-*", "path": "shards"}  # one folder per artifact: shards/shard-I/
    args = cli.build_parser().parse_args(shlex.split(_step(merge, "merge-reports")["run"])[1:])
    assert args.sources == [Path("shards/*")] and args.out == Path("reports/mlx-dspark-statistical")
    assert _step(merge, "actions/upload-artifact")["with"]["path"] == f"{args.out}/"
