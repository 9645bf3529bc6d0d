"""Replay a whole-suite run's case durations as sleeps under real pytest-xdist, to compare
how the cases are handed out: xdist's own ``load`` scheduling against
``conformance.handout.LongestFirstScheduling``, in the runner's longest-first order
(``conformance.case_order``). Sleeps take no CPU, so 16 workers replay on 2 cores.

    python results/perf/cpu-session29/handout-replay/replay.py RESULTS_JSON [--workers 16]
        [--leave-out CASE_ID ...]

``--leave-out``: cases of another phase (the latency-bound ones of an ``alone`` run).
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.case_order import order_key

CONFTEST = '''import os, pytest
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if os.environ.get("HANDOUT"):
        from conformance.handout import LongestFirstScheduling
        return LongestFirstScheduling(config, log)
'''

parser = argparse.ArgumentParser()
parser.add_argument("results")
parser.add_argument("--workers", default="16")
parser.add_argument("--leave-out", nargs="*", default=[])
args = parser.parse_args()
records = [(t["case"], t["duration_s"] or 0.0) for t in json.loads(Path(args.results).read_text())["tests"]
           if t["case"] not in args.leave_out]
records.sort(key=lambda r: order_key(r[0], False))
print(f"{len(records)} cases, {sum(s for _, s in records):.1f} s of case time, longest {max(s for _, s in records):.1f} s, "
      f"{sum(s for _, s in records) / int(args.workers):.1f} s a worker")
with tempfile.TemporaryDirectory() as tmp:
    Path(tmp, "conftest.py").write_text(CONFTEST)
    Path(tmp, "test_replay.py").write_text(
        f"import time, pytest\nD = {records!r}\n@pytest.mark.parametrize('i', range(len(D)))\n"
        "def test_case(i):\n    time.sleep(D[i][1])\n")
    for label, env in (("xdist load", {}), ("conformance.handout", {"HANDOUT": "1"})):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:dspark_conformance",
                              "-n", args.workers, "test_replay.py"], cwd=tmp, capture_output=True, text=True,
                             env={**__import__("os").environ, **env})
        print(f"{label:22s} {time.perf_counter() - start:6.1f} s wall; pytest: {out.stdout.strip().splitlines()[-1]}")
