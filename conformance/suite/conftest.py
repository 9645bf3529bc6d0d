"""The suite's markers, registered only where the suite is collected.

Here rather than in the plugin (``conformance.plugin``, loaded by every pytest session of
an environment that has the package installed): registered there, these generic names
(``gpu``, ``slow``, ...) would pass ``--strict-markers`` in a host project's own tests,
hiding a typo or an unregistered marker of theirs. pytest loads this file, and calls its
``pytest_configure``, when it collects the suite's folder (the main job's runs, or
``pytest --pyargs conformance.suite``).
"""

from __future__ import annotations

import pytest

MARKERS = (
    "gpu: needs CUDA (skipped cleanly without it)",
    "gpu_tier: statistical case sized at its tier's effect: TV 0.002 with --dspark-device cuda, "
    "0.01 on CPU (conformance/budget.py; run the GPU tier alone with -m gpu_tier)",
    "statistical: a distributional assertion drawing on the family-wise alpha budget",
    "slow: long-running; excluded from the quick tier",
    "latency_bound: thousands of serial calls, each read back from the device (a verify step, a schedule); "
    "dspark-conformance run runs these after the others, alone in one process (--dspark-phase)",
    "xdist_group(name): cases of one group run in turn on one xdist worker (dspark-conformance run "
    "distributes with --dist loadgroup): GPU cases too large to run side by side on one card",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
