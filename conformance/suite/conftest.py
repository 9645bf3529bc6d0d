"""The suite's markers, registered only where the suite is collected, and its one torch
thread (:func:`one_torch_thread`).

Here rather than in the plugin (``conformance.plugin``, loaded by every pytest session of
an environment that has the package installed): registered there, these generic names
(``gpu``, ``slow``, ...) would pass ``--strict-markers`` in a host project's own tests,
hiding a typo or an unregistered marker of theirs. pytest loads this file, and calls its
``pytest_configure``, when it collects the suite's folder (the main job's runs, or
``pytest --pyargs conformance.suite``).
"""

from __future__ import annotations

import pytest
import torch

MARKERS = (
    "gpu: needs CUDA (skipped cleanly without it)",
    "gpu_tier: statistical case sized at its tier's effect: TV 0.002 with --dspark-device cuda, "
    "0.01 on CPU (conformance/budget.py; run the GPU tier alone with -m gpu_tier)",
    "statistical: a distributional assertion drawing on the family-wise alpha budget",
    "slow: long-running; excluded from the quick tier",
    "latency_bound: thousands of serial calls, each read back from the device (a verify step, a schedule); "
    "dspark-conformance run runs these first among the others, or with --device cuda after them, alone in one "
    "process (--latency-bound, --dspark-phase)",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Run the suite with one intra-op torch thread, then restore the setting: on the small
    tensors of most cases the extra threads only spin-wait (on 2 loaded cores a [2, 8]
    softmax took 6 ms with 2 threads, 3 us with 1; the S3, S4, S5 and S9 modules' cases
    2.5-3 times faster). The thread count can move the last bits of a large float reduction
    (a float64 sum of 10^7 values differs between 1 and 2 threads): every p-value of the CPU
    reference run was seen unchanged (issue 45)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
