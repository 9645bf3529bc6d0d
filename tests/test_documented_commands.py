"""Every command README.md, docs/VENDORS.md, docs/performance.md and the CI templates show works
as written (issue 44).

Commands are extracted from

* the fenced ``bash`` / ``sh`` / ``shell`` / ``console`` blocks of the Markdown files (:data:`MARKDOWN`)
  (a ``console`` block's commands are its ``$`` lines, the rest is output; ``\\``
  continuations joined, comments dropped);
* their inline code spans that start with ``dspark-conformance``, ``pip``, ``python -m``,
  ``python3 -m`` or ``CI/``;
* the ``run:`` steps of the workflows in ``CI/github/`` (``${{ ... }}`` filled with the
  inputs' defaults, the steps' shell variables with :data:`STEP_VARIABLES`) and the usage
  lines of the CI scripts' header comments;

each split at ``&&``, ``||``, ``;`` and shell keywords, keeping the pieces that start with one
of those programs. Every extracted command needs an entry in :data:`COMMANDS` (an
unclassified command fails, and so does an entry no document holds any more), which says
how it is checked:

``RUN``
    run as written, in a scratch copy of the checkout (``git ls-files``), with this
    interpreter for ``python`` / ``pip`` / ``dspark-conformance`` (the console script's
    target, checked against pyproject.toml); it must exit 0.
``DRY_RUN``
    a ``pip install`` of the checkout or of its wheel: run with ``--dry-run --no-deps
    --no-index --no-build-isolation`` added, in the scratch copy after the README's wheel
    build, so the targets must exist and pip must accept them, without the index.
``PARSE``
    a ``dspark-conformance`` / ``python -m conformance.cli`` command that needs a GPU, an
    engine, the index or minutes: parsed by ``conformance.cli.build_parser()`` (every
    option and value checked, nothing run); an ``--impl module:attr`` whose module a
    document's own Python block defines (``# module.py`` on its first line) is loaded too.
``HELP``
    any other program that needs a GPU, an engine or a long run: the entry's help form
    must exit 0. For pytest the form is the command with :data:`PYTEST_PARSE_ONLY`
    appended, which must exit 5 (every option parsed, nothing collected): pytest's
    ``--help`` accepts unknown options.
``INDEX``
    needs the package index or another download (named in the entry's reason): not run;
    it must not ask the index for this project's own distribution, which is not published
    (install it from the checkout or its wheel).

The README's wheel build is also checked for what the wheel holds: the packages, the suite's
data files, the console script and the pytest entry point.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from conformance import cli, loading

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = ("README.md", "docs/VENDORS.md", "docs/performance.md")
WORKFLOWS = "CI/github"
SCRIPTS = "CI"
PROGRAMS = ("dspark-conformance", "pip", "pip3", "python", "python3", "CI/")
SHELL_FENCES = {"bash", "sh", "shell", "console"}
# The shell variables the workflow steps set or receive, at their inputs' defaults (shard 0).
STEP_VARIABLES = {"FIRST": "1", "ARGS": "", "SHARD_INDEX": "1", "SHARD_COUNT": "24"}
CI_ENTRY = ".ci/run"
# The words of CI_ENTRY that only its run gives a value (a scratch directory, the commit's
# seed, the loop's engine: its first), as the commands are checked; a command still holding
# a "$" after these fails (add its word here).
CI_ENTRY_WORDS = {
    '"$dist/venv/bin/python"': "python", '"$dist/venv/bin/dspark-conformance"': "dspark-conformance",
    '"$dist"': "dist", '"$dist/venv"': "dist/venv", '"$first"': "1001",
    "$(( 16#$(git rev-parse --short=7 HEAD) % 100000 ))": "12345",
    '"$mm"': "DIR", '"$sgl"': "DIR", '"$vll"': "DIR", '"$spc"': "DIR", '"$mlx"': "DIR",
    '"$engine"': "dspark-mlx==0.1.0", '"${name//-/_}"': "dspark_mlx", '"reports/$name-cpu"': "reports/dspark-mlx-cpu",
}

RUN, DRY_RUN, PARSE, HELP, INDEX = "run", "dry-run", "parse", "help", "index"
# A pytest command line parsed, not run: no workers, nothing collected (exit 5).
PYTEST_PARSE_ONLY = ["-n", "0", "--collect-only", "-q", "--ignore-glob=*"]


@dataclasses.dataclass(frozen=True)
class Check:
    """How one documented command is checked: ``kind`` (a class above), why it is not run
    as written (every kind but RUN), and the form checked where the text has placeholders
    (``as_``, PARSE) or its help command (``help``, HELP; default: the text + ``--help``)."""

    kind: str
    reason: str = ""
    as_: str | None = None
    help: str | None = None


_GPU = "needs a CUDA device"
_MINUTES = "runs the suite for minutes"
_ENGINE = "downloads an engine release and its extras from the package index"
_CPU_TORCH = "downloads torch's CPU build from PyTorch's CPU index"

COMMANDS: dict[str, Check] = {
    # README.md
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu": Check(INDEX, _CPU_TORCH),
    "pip install -e .": Check(DRY_RUN, "installs torch and the test tools from the index"),
    "dspark-conformance run": Check(PARSE, _MINUTES),
    "python -m pytest -n 2 --dist worksteal": Check(HELP, "the whole test suite: 20+ minutes"),
    "dspark-conformance merge-reports OUT SRC...": Check(
        PARSE, "a synopsis; merges shard report directories", as_="dspark-conformance merge-reports OUT SRC"),
    "pip wheel --no-deps . -w dist": Check(RUN),
    "pip install dist/dspark_conformance-*.whl": Check(DRY_RUN, "installs torch and the test tools from the index"),
    "pip install --no-deps --target DIR sglang==0.5.23 msgspec": Check(INDEX, _ENGINE),
    "pip install --no-deps --target DIR vllm==0.34.0 regex": Check(INDEX, _ENGINE),
    "pip install --no-deps --target DIR speculators==0.9.0": Check(INDEX, _ENGINE),
    "pip install --no-deps --target DIR dspark-mlx==0.1.0 mlx==0.32.4 mlx-cpu==0.32.4": Check(INDEX, _ENGINE),
    "pip install --no-deps --target DIR mlx-dspark==0.20.3 mlx==0.32.4 mlx-cpu==0.32.4": Check(INDEX, _ENGINE),
    "dspark-conformance engines": Check(PARSE, "installs each engine's newest release from the index"),
    "dspark-conformance mutants": Check(PARSE, "every mutant against its section: an hour"),
    "dspark-conformance calibrate": Check(PARSE, "every exact test over many base seeds: hours"),
    "dspark-conformance null-replay": Check(PARSE, "a million replicates per assertion: minutes"),
    "CI/gate.sh --impl NAME [--device cuda]": Check(HELP, "a synopsis; the gate runs the suite for minutes",
                                                    help="CI/gate.sh --help"),
    "python -m bench all --device cuda --json out.json": Check(HELP, _GPU, help="python -m bench --help"),
    # docs/VENDORS.md
    "PYTHONPATH=. dspark-conformance run --impl toy_engine_adapter:make_adapter": Check(PARSE, _MINUTES),
    "python -m conformance.suite.support.tp_ranks": Check(
        HELP, "started by the suite once per rank, with its arguments, and fed cases on its stdin"),
    "dspark-conformance run --impl my-engine": Check(PARSE, "needs the vendor's engine and its entry point"),
    "dspark-conformance run ...": Check(PARSE, "the gate command above, by its console script", as_=(
        "dspark-conformance run --impl my-engine --device cuda --report reports/gate")),
    "CI/gate.sh --impl my-engine --device cuda": Check(HELP, _GPU, help="CI/gate.sh --help"),
    "python -m pytest": Check(HELP, "names the runner a project's own tests use"),
    "python -m conformance.cli run --impl my-engine --device cuda --report reports/gate": Check(
        PARSE, "needs the vendor's engine and a CUDA device"),
    "dspark-conformance engines --engine vllm --path vllm=$HOME/src/vllm": Check(
        PARSE, "needs a vLLM development tree; installs the adapter's extras from the index",
        as_="dspark-conformance engines --engine vllm --path vllm=."),  # --path must name a directory
    "dspark-conformance engines --engine sglang --release sglang==0.5.23": Check(PARSE, _ENGINE),
    "dspark-conformance run --impl my-engine --shard 3/24 --report reports/shard-3 -- -m statistical": Check(
        PARSE, "needs the vendor's engine; one shard of the statistical cases"),
    "dspark-conformance merge-reports reports/merged reports/shard-*": Check(
        PARSE, "merges the shards' report directories, which a run of every shard makes"),
    "dspark-conformance run --impl ... --device ... --seed ... --case '<case id>'": Check(
        PARSE, "the replay line's template", as_="dspark-conformance run --impl reference --device cpu "
        "--seed 20260 --case 'S5/parity/random-V8-l4-T1'"),
    # docs/performance.md
    "python -m bench verdict": Check(HELP, "times the main job on two revisions: minutes"),
    "python -m bench verdict --device cpu --workers 2 --repeats 3 --json verdict.json": Check(
        HELP, "times the main job on two revisions, three times each: many minutes"),
    "python -m bench verdict --change . -- -k test_S3_": Check(
        HELP, "times a section's main job on two revisions: minutes", help="python -m bench verdict --help"),
    "python -m bench tiers --device cpu --workers 2": Check(HELP, "runs the test tiers: 20+ minutes"),
    "dspark-conformance run --workers 2": Check(PARSE, _MINUTES),
    "dspark-conformance run --device cuda -- -m gpu_tier": Check(PARSE, _GPU),
    "python -m bench.summary": Check(HELP, "reads a bench JSON (the command below names two)",
                                     help="python -m bench.summary --help"),
    "python -m bench.summary results/perf/bench_h100_fused.json results/perf/ceiling_h100.json": Check(RUN),
    # CI/github/*.yml
    "python3 -m pip install -e .": Check(DRY_RUN, "installs torch and the test tools from the index"),
    "dspark-conformance calibrate --first-seed 1 --seeds 100 --power-seeds 0 --replicates 0 --device cpu "
    "--report reports/shard": Check(PARSE, "100 base seeds: an hour"),
    "dspark-conformance merge-runs reports/calibration shards/*/runs.jsonl": Check(
        PARSE, "merges the shards' artifacts"),
    "dspark-conformance calibrate --seeds 0 --power-seeds 0 --replicates 0 --report reports/calibration": Check(
        PARSE, "aggregates the merged shards"),
    "dspark-conformance null-replay --replicates 1000000 --device cpu --report reports/null-replay": Check(
        PARSE, "a million replicates per assertion: minutes"),
    "PYTHONPATH=engine dspark-conformance run --impl mlx-dspark==0.20.3 --shard 1/24 --workers 2 "
    "--report reports/shard-1 -- -m statistical": Check(PARSE, "needs mlx-dspark and MLX; a shard: hours"),
    "dspark-conformance merge-reports reports/mlx-dspark-statistical shards/*": Check(
        PARSE, "merges the shards' artifacts"),
    "python -m pytest -n 2 --dist worksteal --junitxml=reports/pytest-junit.xml": Check(
        HELP, "the whole test suite: 20+ minutes"),
    "CI/gate.sh --impl reference --report reports/gate": Check(HELP, _MINUTES, help="CI/gate.sh --help"),
    "python3 -m pytest tests conformance -m gpu --dspark-device cuda --junitxml=reports/gpu-junit.xml": Check(
        HELP, _GPU),
    "CI/gate.sh --impl reference --device cuda --report reports/gate": Check(HELP, _GPU, help="CI/gate.sh --help"),
    "pip install .": Check(DRY_RUN, "installs torch and the test tools from the index"),
    "dspark-conformance engines --report drift-report": Check(PARSE, "installs each engine's newest release"),
    "pip install --no-deps --target engine dspark-mlx==0.1.0 mlx==0.32.4 mlx-cpu==0.32.4": Check(INDEX, _ENGINE),
    "PYTHONPATH=engine python -m pytest -q -p no:cacheprovider tests/test_mlx_adapters.py -k dspark_mlx": Check(
        HELP, "needs dspark-mlx and MLX", help="python -m pytest -p no:cacheprovider tests/test_mlx_adapters.py "
        "-k dspark_mlx --collect-only -q"),
    "PYTHONPATH=engine CI/gate.sh --impl dspark-mlx==0.1.0 --report reports/dspark-mlx-gate": Check(
        HELP, "needs dspark-mlx and MLX; the whole suite: minutes", help="CI/gate.sh --help"),
    "pip install --no-deps --target engine mlx-dspark==0.20.3 mlx==0.32.4 mlx-cpu==0.32.4": Check(INDEX, _ENGINE),
    "PYTHONPATH=engine python -m pytest -q -p no:cacheprovider tests/test_mlx_adapters.py -k mlx_dspark": Check(
        HELP, "needs mlx-dspark and MLX", help="python -m pytest -p no:cacheprovider tests/test_mlx_adapters.py "
        "-k mlx_dspark --collect-only -q"),
    "PYTHONPATH=engine python -m conformance.cli run --impl mlx-dspark==0.20.3 --workers 2 "
    "--report reports/mlx-dspark-gate -- -m \"not statistical\"": Check(PARSE, "needs mlx-dspark and MLX; minutes"),
    # CI/*.sh header comments
    "CI/gate.sh --impl NAME [--device cpu|cuda] [--report DIR] [--seed N]": Check(
        HELP, "a synopsis", help="CI/gate.sh --help"),
    "CI/mutation.sh MODULES SHARD_INDEX SHARD_COUNT JOBS [OUT] [SECONDS] [DRIVER ARGS...]": Check(
        HELP, "a synopsis; needs mutmut's wheels", help="python CI/mutation/driver.py run --help"),
    "python CI/mutation/driver.py merge OUT [RECHECK_OUT]": Check(
        HELP, "a synopsis; merges shard results", help="python CI/mutation/driver.py merge --help"),
    "CI/vllm_h200.sh VERSION TARBALL [OUTDIR]": Check(HELP, _GPU, help="bash -n CI/vllm_h200.sh"),
    "CI/vllm_h200.sh 0.33.0 shared/vllm-0.33.0.txz $OUT": Check(HELP, _GPU, help="bash -n CI/vllm_h200.sh"),
    "CI/h200_perf.sh OUTDIR": Check(HELP, _GPU, help="bash -n CI/h200_perf.sh"),
    "python -m bench.summary OUTDIR/bench_step.json OUTDIR/bench_ceiling.json --markdown FILE": Check(
        HELP, "reads the H200 run's JSON", help="python -m bench.summary --help"),
    # .ci/run (CI_ENTRY_WORDS filled in)
    "python3 -m pip install -q --upgrade pip": Check(INDEX, "upgrades pip from the index"),
    "python3 -m pip install -q torch==2.13.0": Check(INDEX, "downloads torch (CI: its CPU build from a local wheel)"),
    "python3 -m pip install -q -e .[plots]": Check(DRY_RUN, "installs torch, the test tools and matplotlib from the index"),
    "python3 -m pytest -n 2 --dist worksteal": Check(HELP, "the whole test suite: 20+ minutes"),
    "python3 -m pip install -q libcst~=1.7.0 click setproctitle textual \"toml>=0.10.2; python_version < '3.11'\"": Check(
        INDEX, "mutmut's dependencies, from the index"),
    "python3 -m pip install -q --no-deps --target DIR mutmut==3.3.1": Check(INDEX, "downloads mutmut from the index"),
    "PYTHONPATH=DIR python3 CI/mutation/driver.py sample --count 30 --seed 12345 --jobs 2": Check(
        HELP, "needs mutmut; 30 mutants: minutes"),
    "python3 -m conformance.cli calibrate --exact-seeds 4 --first-seed 1001 --seeds 0 --power-seeds 0 --replicates 0 "
    "--jobs 2 --report reports/ci-exact-seeds": Check(PARSE, "the exact tests on four base seeds: minutes"),
    "python3 -m conformance.cli run --seed 1001 --workers 2 --report reports/ci-statistical-seed -- -m statistical": Check(
        PARSE, _MINUTES),
    "python3 -m pip wheel -q --no-deps . -w dist": Check(
        HELP, "the README's wheel build (pip wheel --no-deps . -w dist), which runs, quiet"),
    "python3 -m venv dist/venv": Check(HELP, "makes a virtual environment for the installed-use run"),
    "python -m pip install -q --upgrade pip": Check(INDEX, "upgrades the virtual environment's pip from the index"),
    "python -m pip install -q torch==2.13.0 dist/dspark_conformance-*.whl": Check(
        HELP, "downloads torch; the wheel's install is the README's (DRY_RUN)"),
    "dspark-conformance run --workers 2 --report installed-report": Check(PARSE, _MINUTES),
    "python3 -m pip install -q --no-deps --target DIR sglang==0.5.23 msgspec": Check(INDEX, _ENGINE),
    "PYTHONPATH=DIR TRITON_INTERPRET=1 python3 -m conformance.cli run --impl sglang==0.5.23 --workers 2 "
    "--report reports/sglang-0.5.23-cpu -- -m \"not statistical\"": Check(PARSE, "needs SGLang; minutes"),
    "python3 -m pip install -q --no-deps --target DIR vllm==0.34.0 regex": Check(INDEX, _ENGINE),
    "PYTHONPATH=DIR TRITON_INTERPRET=1 python3 -m conformance.cli run --impl vllm==0.34.0 --workers 2 "
    "--report reports/vllm-0.34.0-cpu -- -m \"not statistical\"": Check(PARSE, "needs vLLM; minutes"),
    "python3 -m pip install -q --no-deps --target DIR speculators==0.9.0": Check(INDEX, _ENGINE),
    "PYTHONPATH=DIR python3 -m conformance.cli run --impl speculators==0.9.0 --workers 2 "
    "--report reports/speculators-0.9.0-cpu": Check(PARSE, "needs speculators"),
    "python3 -m pip install -q --no-deps --target DIR dspark-mlx==0.1.0 mlx==0.32.4 mlx-cpu==0.32.4": Check(INDEX, _ENGINE),
    "PYTHONPATH=DIR python3 -m pytest -q -p no:cacheprovider tests/test_mlx_adapters.py -k dspark_mlx": Check(
        HELP, "needs dspark-mlx and MLX", help="python3 -m pytest -p no:cacheprovider tests/test_mlx_adapters.py "
        "-k dspark_mlx --collect-only -q"),  # exit 0: the -k still selects the engine's tests
    "PYTHONPATH=DIR python3 -m conformance.cli run --impl dspark-mlx==0.1.0 --workers 2 "
    "--report reports/dspark-mlx-cpu -- -m \"not statistical\"": Check(PARSE, "needs dspark-mlx and MLX; minutes"),
}


# ----------------------------------------------------------------------------- extraction
def _is_command(text: str) -> bool:
    words = text.split()
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # leading VAR=value
        words = words[1:]
    if not words:
        return False
    first = words[0]
    if first in ("python", "python3") and not (len(words) > 1 and (words[1] == "-m" or words[1].endswith(".py"))):
        return False
    return any(first == p or (p.endswith("/") and first.startswith(p)) for p in PROGRAMS)


def _pieces(line: str) -> list[str]:
    """The commands of one logical shell line: split at ``&&``, ``||``, ``;`` outside quotes
    and at shell keywords, subshell parentheses, redirections and trailing comments dropped."""
    line = re.sub(r"\s+#\s.*$", "", line)
    out = []
    for piece in _split_unquoted(line):
        piece = re.sub(r"^\s*(if|then|else|do)\s+", "", piece.strip().removeprefix("(").removesuffix(")"))
        piece = re.sub(r"(^|\s)>>?\s*\S+\s*$", "", piece).strip()
        piece = re.sub(r'"([^"\s]*)"', r"\1", piece)  # "100" -> 100: the shell's word either way
        if piece and _is_command(piece):
            out.append(" ".join(piece.split()))
    return out


def _split_unquoted(line: str) -> list[str]:
    """``line`` split at ``&&``, ``||`` and ``;`` where no quote holds them (a requirement's
    marker, ``"toml; python_version < '3.11'"``, stays whole)."""
    pieces, start = [], 0
    for token in re.finditer(r'"[^"]*"|\'[^\']*\'|&&|\|\||;', line):
        if token.group()[0] not in "\"'":
            pieces.append(line[start:token.start()])
            start = token.end()
    return [*pieces, line[start:]]


def _logical_lines(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def markdown_commands(text: str) -> list[str]:
    """Commands of one Markdown document's shell fences and inline code spans."""
    commands = []
    for block in re.split(r"^```", text, flags=re.M)[1::2]:
        fence, _, body = block.partition("\n")
        if fence.strip() not in SHELL_FENCES:
            continue
        for line in _logical_lines(body):
            if fence.strip() == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            commands += _pieces(line)
    outside = "".join(re.split(r"^```", text, flags=re.M)[0::2])
    for span in re.findall(r"`([^`]+)`", outside):
        span = " ".join(span.split())
        if re.match(r"(dspark-conformance|pip3?|python3? -m)\s|CI/\S+\s", span):
            commands += _pieces(span)
    return commands


def _fill(text: str, inputs: dict[str, str]) -> str:
    values = {"matrix.shard": "0", **{f"inputs.{k}": str(v) for k, v in inputs.items()}}
    text = re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values.get(m.group(1), m.group(0)), text)
    return re.sub(r"\"?\$([A-Z_]+)\"?", lambda m: STEP_VARIABLES.get(m.group(1), m.group(0)), text)


def _workflow_runs(text: str) -> list[str]:
    """The shell of every ``run:`` step of a workflow: a one-line value, or the block under
    ``run: |`` (the lines indented deeper than the key)."""
    lines, runs = text.splitlines(), []
    for i, line in enumerate(lines):
        key = re.match(r"^(\s*)(?:- )?run:\s*(.*)$", line)
        if not key:
            continue
        if key.group(2) != "|":
            runs.append(key.group(2))
            continue
        depth, block = len(key.group(1)), []
        for body in lines[i + 1:]:
            if body.strip() and len(body) - len(body.lstrip()) <= depth:
                break
            block.append(body.strip())
        runs.append("\n".join(block))
    return runs


def workflow_commands(path: Path) -> list[str]:
    """Commands of a workflow's ``run:`` steps, its ``workflow_dispatch`` inputs at their
    defaults (read as text: the suite does not depend on a YAML parser)."""
    text = path.read_text()
    inputs = {name: value.strip().strip('"\'') for name, value in
              re.findall(r"^\s+(\w+):\n\s+description:[^\n]*\n\s+default:\s*(.*)$", text, flags=re.M)}
    commands = []
    for run in _workflow_runs(text):
        for line in _logical_lines(_fill(run, inputs)):
            commands += _pieces(line)
    return commands


def script_usage_commands(path: Path) -> list[str]:
    """Usage lines and inline commands of a CI script's header comments."""
    commands = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            continue
        comment = line.lstrip("#").strip()
        spans = re.findall(r"`([^`]+)`", comment)
        for text in spans or [comment]:
            text = re.sub(r"\s+#\s.*$", "", text)
            if _is_command(text.split("&&")[0]) and re.match(r"(CI/|python3? )", text):
                commands += _pieces(text)
    return commands


def script_commands(path: Path) -> list[str]:
    """Commands of a shell script's code (comments left out), with :data:`CI_ENTRY_WORDS`
    filled in."""
    commands = []
    for line in _logical_lines(path.read_text()):
        if line.lstrip().startswith("#"):
            continue
        for word, value in CI_ENTRY_WORDS.items():
            line = line.replace(word, value)
        commands += _pieces(line)
    return commands


def documented_commands() -> dict[str, list[str]]:
    """``{command: [documents showing it]}`` over README.md, docs/VENDORS.md, CI/ and CI_ENTRY."""
    found: dict[str, list[str]] = {}
    sources = [(name, markdown_commands((ROOT / name).read_text())) for name in MARKDOWN]
    sources += [(str(p.relative_to(ROOT)), workflow_commands(p)) for p in sorted((ROOT / WORKFLOWS).glob("*.yml"))]
    sources += [(str(p.relative_to(ROOT)), script_usage_commands(p)) for p in sorted((ROOT / SCRIPTS).glob("*.sh"))]
    sources.append((CI_ENTRY, script_commands(ROOT / CI_ENTRY)))
    for name, commands in sources:
        for command in commands:
            found.setdefault(command, []).append(name)
    return found


DOCUMENTED = documented_commands()


def _of_kind(kind: str) -> list[str]:
    return [c for c in DOCUMENTED if c in COMMANDS and COMMANDS[c].kind == kind]


def _help_forms() -> dict[str, list[str]]:
    """``{help command: [the documented commands it stands for]}``, each help form once."""
    forms: dict[str, list[str]] = {}
    for command in _of_kind(HELP):
        if COMMANDS[command].help:
            form = COMMANDS[command].help
        elif _argv(command)[1][1:3] == ["-m", "pytest"]:
            form = shlex.join([*shlex.split(command), *PYTEST_PARSE_ONLY])
        else:
            form = f"{command} --help"
        forms.setdefault(form, []).append(command)
    return forms


def _python_files() -> dict[str, str]:
    """The Python blocks of the Markdown documents that name their file (``# name.py``)."""
    files = {}
    for name in MARKDOWN:
        for block in re.split(r"^```", (ROOT / name).read_text(), flags=re.M)[1::2]:
            fence, _, body = block.partition("\n")
            first = body.splitlines()[0] if body.strip() else ""
            if fence.strip() == "python" and re.fullmatch(r"# \w+\.py", first):
                files[first[2:]] = body
    return files


# ----------------------------------------------------------------------------- running
def _argv(command: str) -> tuple[dict[str, str], list[str]]:
    """``(environment additions, argv)`` with this checkout's interpreter for the programs."""
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    program, rest = words[0], words[1:]
    if program == "dspark-conformance":
        return env, [sys.executable, "-m", "conformance.cli", *rest]
    if program in ("pip", "pip3"):
        return env, [sys.executable, "-m", "pip", *rest]
    if program in ("python", "python3"):
        return env, [sys.executable, *rest]
    return env, [program, *rest]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300):
    full_env = {**os.environ, "PYTHON": sys.executable, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})}
    if "PYTHONPATH" in (env or {}):
        full_env["PYTHONPATH"] = os.pathsep.join([str(cwd / env["PYTHONPATH"]), str(cwd)])
    return subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def _shell(argv: list[str], cwd: Path):
    """Run through bash so a glob (``dist/*.whl``) expands as the document's shell would, in
    this environment less ``PYTHONPATH``, as a reader's shell would run the command (a
    checkout there, as ``python -m bench verdict`` sets it, holds this project's egg-info: pip
    then takes the wheel as installed)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(["bash", "-c", " ".join(shlex.quote(a) if "*" not in a else a for a in argv)],
                          cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> tuple[Path, dict[str, subprocess.CompletedProcess]]:
    """A scratch copy of the tracked files (what a fresh clone holds), and what each RUN
    command did there, run in the order the documents show them (the README's wheel build
    among them)."""
    copy = tmp_path_factory.mktemp("checkout")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    ran = {}
    for command in _of_kind(RUN):
        env, argv = _argv(command)
        ran[command] = _run(argv, copy, env)
    return copy, ran


# ----------------------------------------------------------------------------- tests
def test_every_documented_command_is_classified():
    unclassified = {c: where for c, where in DOCUMENTED.items() if c not in COMMANDS}
    assert not unclassified, (
        "documented commands without an entry in COMMANDS (say how each is checked): "
        + "; ".join(f"{c!r} in {', '.join(w)}" for c, w in unclassified.items())
    )


def test_the_ci_entry_commands_have_every_word_filled_in():
    unfilled = [command for command in script_commands(ROOT / CI_ENTRY) if "$" in command]
    assert not unfilled, f"{CI_ENTRY} commands with a shell word CI_ENTRY_WORDS does not fill in: {unfilled}"


def test_every_entry_is_still_documented():
    stale = sorted(set(COMMANDS) - set(DOCUMENTED))
    assert not stale, f"COMMANDS entries no document shows any more (remove them): {stale}"


def test_every_entry_but_run_names_its_reason():
    assert all(check.kind == RUN or check.reason for check in COMMANDS.values())
    assert {check.kind for check in COMMANDS.values()} <= {RUN, DRY_RUN, PARSE, HELP, INDEX}


def test_the_console_script_is_the_module_the_checks_run():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["dspark-conformance"] == "conformance.cli:main"


@pytest.mark.parametrize("command", _of_kind(PARSE))
def test_parse_commands_parse_with_the_cli(command, tmp_path, monkeypatch):
    check = COMMANDS[command]
    env, argv = _argv(check.as_ or command)
    assert argv[1:3] == ["-m", "conformance.cli"], f"{command!r}: PARSE is for the suite's CLI; use HELP"
    try:
        args = cli.build_parser().parse_args(argv[3:])
    except SystemExit as exc:
        pytest.fail(f"{command!r} does not parse (exit {exc.code}): see the message above")
    impl = getattr(args, "impl", None) or ""
    module = impl.split(":")[0] + ".py"
    if ":" in impl and module in _python_files():
        for name, body in _python_files().items():
            (tmp_path / name).write_text(body)
        monkeypatch.syspath_prepend(str(tmp_path))
        adapter = loading.load_adapter(impl)
        assert adapter.capabilities, f"{command!r}: the documented adapter offers no capability"


# Runs ``python -m MODULE ARGS`` help forms one after another in one interpreter (torch and
# the suite's plugin load once); prints their exit codes as JSON.
_MODULE_HELP = """
import json, runpy, sys
import pytest
codes = []
for module, args in json.loads(sys.argv[1]):
    if module == "pytest":
        codes.append(int(pytest.main(args)))  # PYTEST_PARSE_ONLY appended by the caller
        continue
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        codes.append(0)
    except SystemExit as exc:
        codes.append(exc.code or 0)
print(json.dumps(codes))
"""


def _module_form(help_form: str) -> bool:
    env, argv = _argv(help_form)
    return argv[1] == "-m" and not env


@pytest.fixture(scope="module")
def module_help_codes() -> dict[str, int]:
    """Exit code of every ``python -m`` help form."""
    forms = [form for form in _help_forms() if _module_form(form)]
    modules = [[argv[2], argv[3:]] for argv in (_argv(f)[1] for f in forms)]
    done = _run([sys.executable, "-c", _MODULE_HELP, json.dumps(modules)], ROOT, timeout=300)
    assert done.returncode == 0, f"the help forms did not run: {done.stderr[-2000:]}"
    return dict(zip(forms, json.loads(done.stdout.strip().splitlines()[-1])))


@pytest.mark.parametrize("help_form", _help_forms())
def test_help_forms_succeed(help_form, request):
    if _module_form(help_form):
        code = request.getfixturevalue("module_help_codes")[help_form]
    else:
        env, argv = _argv(help_form)
        code = _run(argv, ROOT, env, timeout=120).returncode
    expected = 5 if help_form.endswith(shlex.join(PYTEST_PARSE_ONLY)) else 0
    assert code == expected, f"{help_form} (for {_help_forms()[help_form]}): exit {code}, expected {expected}"


@pytest.mark.parametrize("command", _of_kind(RUN))
def test_run_commands_exit_zero(command, checkout):
    done = checkout[1][command]
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-2000:]}"


@pytest.mark.parametrize("command", _of_kind(DRY_RUN))
def test_local_installs_resolve_without_the_index(command, checkout):
    env, argv = _argv(command)
    assert argv[1:4] == ["-m", "pip", "install"], f"{command!r}: DRY_RUN is for pip install"
    options = [arg for arg in argv[4:] if arg not in ("-q", "--quiet")]  # the dry run's report is what is checked
    done = _shell(argv[:4] + ["--dry-run", "--no-deps", "--no-index", "--no-build-isolation", *options], checkout[0])
    assert done.returncode == 0 and "Would install dspark-conformance" in done.stdout, (
        f"{command}: exit {done.returncode}\n{done.stdout[-1000:]}\n{done.stderr[-2000:]}"
    )


_PIP_VALUE_OPTIONS = {"--target", "-t", "--index-url", "-i", "--extra-index-url", "-c", "-r", "-w", "-f",
                      "--find-links", "--constraint", "--requirement"}


@pytest.mark.parametrize("command", _of_kind(INDEX))
def test_index_installs_never_ask_for_this_project(command):
    own = canonicalize_name(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"])
    words = shlex.split(command)
    assert "install" in words, f"{command!r}: INDEX is for pip install"
    names, skip = [], False
    for word in words[words.index("install") + 1:]:
        if skip or word.startswith("-"):
            skip = word in _PIP_VALUE_OPTIONS
            continue
        try:
            names.append(canonicalize_name(Requirement(word).name))
        except InvalidRequirement:
            pytest.fail(f"{command!r}: {word!r} is neither a requirement nor an option")
    assert names, f"{command!r}: installs nothing"
    assert own not in names, (
        f"{command!r} asks the index for {own}, which is not published: install the checkout "
        "(pip install -e .) or its wheel (pip wheel --no-deps . -w dist)"
    )


def test_the_wheel_holds_the_suite_and_its_entry_points(checkout):
    wheels = sorted((checkout[0] / "dist").glob("dspark_conformance-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in dist/, got {wheels}"
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    for required in ("conformance/cli.py", "conformance/suite/test_verify_rule.py", "conformance/legacy_case_keys.json",
                     "dspark_ref/verify.py", "dspark_conformance_plugin.py"):
        assert required in names, f"the wheel lacks {required}"
    assert not any(n.startswith(("fixtures/", "tests/")) for n in names), "the wheel ships the checkout's fixtures"
    assert re.search(r"^\[console_scripts\]\s*\ndspark-conformance = conformance\.cli:main", entry_points, re.M)
    assert re.search(r"^\[pytest11\]\s*\ndspark_conformance = dspark_conformance_plugin", entry_points, re.M)


def test_ci_scripts_are_valid_shell():
    for script in sorted((ROOT / SCRIPTS).glob("*.sh")):
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"


def test_workflows_are_valid_yaml():
    yaml = pytest.importorskip("yaml")
    for workflow in sorted((ROOT / WORKFLOWS).glob("*.yml")):
        doc = yaml.safe_load(workflow.read_text())
        assert doc["jobs"], f"{workflow.name}: no jobs"
