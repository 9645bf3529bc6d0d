"""Command line: ``python -m bench {all,step,ceiling,folded,throughput,tiers,verdict} [options]``.

``all`` runs ``step``, ``ceiling`` (what kernels that only read the step's bytes reach),
``folded`` and ``throughput`` in one process, side by side after one
copy-bandwidth measurement, prints one table and with ``--json PATH`` writes it with the
environment (device name, torch / triton / sglang versions, timer). Columns: median ms;
GB/s = bytes moved / median (GB = 1e9 B; each benchmark's note says which bytes);
% copy BW = GB/s / measured copy bandwidth; speedup vs eager = median of the shape's
baseline row (``eager sample_step [call]`` for ``step``, ``FoldedDraftSampler.propose
[eager]`` for ``folded``) / this median. ``--quick`` shrinks shapes and time budgets for a
CPU smoke run. Exit status 1 if any implementation failed (its row says why), else 0.

With the ``step`` rows, a second table gives each ratio of the reference's fused race to
SGLang's ``MarkovSampleStep`` and to the copy roofline side by side (``bench/summary.py``;
``python -m bench.summary JSON`` regenerates it from the JSON). SGLang is imported from
``--sglang-path DIR`` (default ``$DSPARK_SGLANG_PATH``) when given, else from the
environment; when it is absent its rows say so and its ratio columns stay empty.

``tiers`` times the test tiers in a subprocess each (not part of ``all``): the CPU tier
``python -m pytest conformance tests -q -n W`` and, with ``--device cuda``, the GPU tier
(the same plus ``--dspark-device cuda``); it reports wall seconds and pytest's summary.

``verdict`` times the main job (and its start-up, and with ``--tests`` the README's test
command) on two revisions side by side, ``--baseline`` (default ``main``) and ``--change``
(default ``HEAD``), and prints each ratio change / baseline beside the cases, assertions and
power both ran (``bench/verdict.py``); options after ``--`` go to the main job's ``run``,
e.g. ``python -m bench verdict --device cpu --workers 2 -- -k test_S1_``.

Example (H200): ``python -m bench all --device cuda --json bench_h200.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from pathlib import Path

import torch

from . import ceiling, folded, step_sampler, summary, throughput, verdict
from .common import Timing, copy_bandwidth, environment, finalize, format_table, write_json
from .wall import time_command

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = {"step": step_sampler.run, "ceiling": ceiling.run, "folded": folded.run, "throughput": throughput.run}
MIB = 2**20
# (warmup ms, rep ms, copy MiB): full runs, and --quick smoke runs.
FULL_BUDGET = (25.0, 100.0, {"cuda": 1024, "cpu": 256})
QUICK_BUDGET = (2.0, 10.0, {"cuda": 64, "cpu": 16})


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {text!r}")
    return int(text)


def _workers(text: str) -> str:
    if text != "auto" and not (text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected 'auto' or an int >= 0, got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m bench`` argument parser (see the module note)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Benchmarks of the reference DSpark kernels: a table, and JSON."
    )
    parser.add_argument("benchmark", choices=("all", *BENCHMARKS, "tiers", "verdict"),
                        help="all = step + ceiling + folded + throughput; tiers times the test tiers; verdict "
                        "times the main job on two revisions side by side (options after '--' go to its run)")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if available")
    parser.add_argument("--json", metavar="PATH", help="write environment and rows as JSON")
    parser.add_argument("--quick", action="store_true", help="tiny shapes and budgets (CPU smoke run)")
    parser.add_argument("--warmup-ms", type=float, help="warm-up budget per timing (default 25, quick 2)")
    parser.add_argument("--rep-ms", type=float, help="timed budget per timing (default 100, quick 10)")
    parser.add_argument("--copy-mib", type=int, help="copy-bandwidth buffer in MiB (default 1024 on cuda)")
    parser.add_argument("--no-graphs", action="store_true", help="skip the [graph] rows of the step benchmark")
    parser.add_argument("--workers", type=_workers, default="auto",
                        help="tiers, verdict: pytest-xdist -n (default auto)")
    group = parser.add_argument_group("verdict")
    group.add_argument("--baseline", default="main", metavar="REV|DIR",
                       help="git revision (checked out in a temporary worktree) or checkout directory (default main)")
    group.add_argument("--change", default="HEAD", metavar="REV|DIR",
                       help="as --baseline (default HEAD; '.' times this checkout with its uncommitted changes)")
    group.add_argument("--repeats", type=_positive, default=1, help="runs per side, alternating; medians (default 1)")
    group.add_argument("--tests", action="store_true", help="also time the README's test command (long)")
    group.add_argument("--reports", metavar="DIR",
                       help="keep each run's report directory as DIR/SIDE-N (default: removed with the scratch space)")
    group.add_argument("--startup-case", default=verdict.STARTUP_CASE, metavar="CASE_ID",
                       help=f"the exact case whose lone run times start-up (default {verdict.STARTUP_CASE})")
    group.add_argument("--no-startup", dest="startup_case", action="store_const", const=None,
                       help="leave the start-up run out (a GPU pair that must fit one time limit)")
    parser.add_argument("--sglang-path", metavar="DIR", default=os.environ.get("DSPARK_SGLANG_PATH"),
                        help="directory holding the sglang package (pip --target DIR); default $DSPARK_SGLANG_PATH")
    return parser


def use_sglang_path(parser: argparse.ArgumentParser, path: str | None) -> None:
    """Put ``path`` first on ``sys.path`` so the SGLang rows import that copy (None: no change)."""
    if path is None:
        return
    if not os.path.isdir(os.path.join(path, "sglang")):
        parser.error(f"--sglang-path: {path!r} holds no sglang package directory")
    sys.path.insert(0, os.path.abspath(path))


def _device(parser: argparse.ArgumentParser, name: str | None) -> torch.device:
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine")
    return torch.device(name)


def tier_commands(workers: str, device: torch.device) -> dict[str, list[str]]:
    """argv of each test tier: ``cpu`` always, ``gpu`` (``--dspark-device cuda``) on CUDA."""
    cpu = [sys.executable, "-m", "pytest", "conformance", "tests", "-q", "-n", workers]
    commands = {"cpu": cpu}
    if device.type == "cuda":
        commands["gpu"] = [*cpu, "--dspark-device", "cuda"]
    return commands


def run_tiers(commands: dict[str, list[str]]) -> list[dict]:
    """Run each tier from the repository root; wall seconds, exit code and pytest's summary."""
    results = []
    for tier, command in commands.items():
        print(f"{tier} tier: {shlex.join(command)}", flush=True)
        timed = time_command(command, ROOT)
        results.append({"tier": tier, "command": timed.command, "seconds": timed.seconds,
                        "returncode": timed.returncode, "summary": timed.last_line})
        print(f"  {timed.seconds:.1f} s, exit {timed.returncode}: {timed.last_line}", flush=True)
    return results


def _timing(args, device: torch.device) -> tuple[Timing, int]:
    warmup, rep, copy_mib = QUICK_BUDGET if args.quick else FULL_BUDGET
    timing = Timing(device, warmup_ms=args.warmup_ms if args.warmup_ms is not None else warmup,
                    rep_ms=args.rep_ms if args.rep_ms is not None else rep, graphs=not args.no_graphs)
    return timing, (args.copy_mib or copy_mib[device.type]) * MIB


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmark(s); print the table; exit status as in the module note."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, run_options = parser.parse_args(argv[:split]), argv[split + 1:]
    if run_options and args.benchmark != "verdict":
        parser.error(f"options after '--' are for verdict's main job, not {args.benchmark}: {shlex.join(run_options)}")
    use_sglang_path(parser, args.sglang_path)
    device = _device(parser, args.device)
    timing, copy_bytes = _timing(args, device)
    env = {**environment(timing), "command": shlex.join(["python", "-m", "bench", *argv])}
    print(f"device: {env['device_name']}; torch {env['torch']}, triton {env['triton']}, sglang {env['sglang']}")
    if args.benchmark == "tiers":
        results = run_tiers(tier_commands(args.workers, device))
        if args.json:
            write_json(args.json, {"environment": env, "tiers": results})
        return int(any(r["returncode"] != 0 for r in results))
    if args.benchmark == "verdict":
        kernel_timer = ("timer", "warmup_ms", "rep_ms", "cuda_graphs")  # verdict times whole commands instead
        try:
            return verdict.compare(baseline=args.baseline, change=args.change, repo=ROOT, device=device.type,
                                   workers=args.workers, run_options=run_options, startup_case=args.startup_case,
                                   tests=args.tests, repeats=args.repeats, json_path=args.json,
                                   environment={k: v for k, v in env.items() if k not in kernel_timer},
                                   reports=args.reports)
        except (ValueError, RuntimeError) as exc:
            parser.error(str(exc))
    copy = copy_bandwidth(timing, copy_bytes)
    print(f"copy bandwidth: {copy.gbs:.1f} GB/s (dst.copy_(src) of {copy.bytes / MIB:.0f} MiB in "
          f"{copy.median_ms:.3f} ms, read + write counted); timer: {timing.timer}\n")
    names = list(BENCHMARKS) if args.benchmark == "all" else [args.benchmark]
    rows = []
    for name in names:
        rows += BENCHMARKS[name](timing, copy, quick=args.quick)
    rows = finalize(rows, copy)
    print(format_table(rows))
    ratios = summary.ratios(dataclasses.asdict(r) for r in rows)
    if ratios:
        print("\n" + summary.format_ratios(ratios))
    if args.json:
        write_json(args.json, {"environment": env, "copy_bandwidth": copy, "rows": rows, "ratios": ratios,
                               "targets": summary.targets(ratios)})
        print(f"\nwrote {args.json}")
    return int(any(r.status.startswith("failed") for r in rows))


if __name__ == "__main__":
    sys.exit(main())
