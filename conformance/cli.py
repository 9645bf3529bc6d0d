"""``dspark-conformance``: the main job.

``dspark-conformance run [--impl NAME] [--device cpu|cuda] [--report DIR]`` runs the
conformance suite (pytest underneath, xdist-parallel) on one implementation, prints the
conformance matrix by SPEC section and writes ``results.json``, ``report.md`` and
``junit.xml`` under ``--report``.

Exit codes (the gate contract, also used by ``CI/gate.sh``):

====  ==========================================================================
0     PASS: every applicable test passed (skips name missing capabilities)
1     FAIL: a test failed, errored, or a strict expected failure passed
2     INCONCLUSIVE: nothing failed, but some path under test never executed
3     infrastructure error: bad usage, adapter failed to load, nothing collected
====  ==========================================================================
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import report

EXIT_PASS, EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_INFRA = 0, 1, 2, 3
SUITE_DIR = Path(__file__).resolve().parent


def _workers(value: str) -> str:
    if value != "auto" and not value.isdigit():
        raise argparse.ArgumentTypeError(f"--workers: expected 'auto' or an integer, got {value!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dspark-conformance", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the conformance suite and print the matrix")
    run.add_argument("--impl", default="reference", help="implementation under test (default: reference)")
    run.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    run.add_argument("--report", type=Path, default=None, help="directory for results.json, report.md, junit.xml")
    run.add_argument("--seed", type=int, default=None, help="base seed (default: the suite's)")
    run.add_argument("--workers", type=_workers, default="auto", help="xdist workers: 'auto' or N (0 = no xdist)")
    run.add_argument("-k", dest="keyword", default=None, help="pytest -k expression to select tests")
    run.add_argument("pytest_args", nargs="*", help="extra arguments passed to pytest after '--'")
    return parser


def pytest_command(args: argparse.Namespace, json_path: Path, junit_path: Path) -> list[str]:
    """The pytest command line the main job runs (printed with ``-v`` for reproduction)."""
    cmd = [
        sys.executable, "-m", "pytest", str(SUITE_DIR), "-q", "-rN", "-p", "no:cacheprovider",
        f"--dspark-impl={args.impl}", f"--dspark-device={args.device}",
        f"--dspark-report-json={json_path}", f"--junitxml={junit_path}", "--dspark-strict-ledger",
    ]
    if args.seed is not None:
        cmd.append(f"--dspark-seed={args.seed}")
    if args.workers != "0":
        cmd += ["-n", args.workers]
    if args.keyword:
        cmd += ["-k", args.keyword]
    return cmd + list(args.pytest_args)


def run(args: argparse.Namespace) -> int:
    report_dir = args.report or Path(tempfile.mkdtemp(prefix="dspark-report-"))
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path, junit_path = report_dir / "results.json", report_dir / "junit.xml"
    json_path.unlink(missing_ok=True)
    cmd = pytest_command(args, json_path, junit_path)
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if not json_path.exists():
        print(f"dspark-conformance: pytest exited {proc.returncode} before writing results "
              f"(command: {' '.join(cmd)})", file=sys.stderr)
        return EXIT_INFRA
    payload = json.loads(json_path.read_text())
    if not payload["tests"]:
        print("dspark-conformance: no test was collected", file=sys.stderr)
        return EXIT_INFRA
    print(report.format_matrix(payload))
    report.write_markdown(payload, report_dir / "report.md")
    print(f"report: {report_dir}/report.md, results.json, junit.xml")
    verdict = report.overall(report.summarize(payload["tests"]))
    if verdict == "FAIL" or proc.returncode == 1:
        return EXIT_FAIL
    if proc.returncode not in (0, 1):
        return EXIT_INFRA
    return EXIT_INCONCLUSIVE if verdict == "INCONCLUSIVE" else EXIT_PASS


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return run(args)
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
