"""Wiring of the project's own tests (not of the installed suite, which is inert here).

* hypothesis profiles: ``ci`` (the default here: 25 derandomised examples), ``dev`` and
  ``thorough``; pick one with hypothesis's own ``--hypothesis-profile NAME``.
* ``@pytest.mark.gpu`` tests of this folder skip cleanly without CUDA (the suite's plugin
  does the same for the suite's own items only).
* ``preloaded_runs``: a test's quiet suite runs (``conformance.runner.run_quietly``, as the
  kill matrix makes them) go through one preloaded interpreter per session
  (``tests/preloaded_pytest.py``).
"""

import pytest
import torch
from hypothesis import HealthCheck, settings

from conformance import runner
from tests.preloaded_pytest import preloaded_server

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=10, deadline=None)
settings.register_profile("thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="gpu: CUDA is not available")
    here = config.rootpath / "tests"
    for item in items:
        if item.get_closest_marker("gpu") is not None and here in item.path.parents:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module single-threaded and restore the setting: on tiny tensors intra-op threads
    only spin-wait (seconds on a busy machine, 16 times slower measured for the S9 models).
    A module opts in with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)



@pytest.fixture(scope="session")
def _preloaded_run_suite():
    with preloaded_server() as run_suite:
        yield run_suite


@pytest.fixture
def preloaded_runs(_preloaded_run_suite, monkeypatch):
    """``conformance.runner.run_suite`` replaced, for the test, by the session's preloaded
    server (quiet runs only: the kill matrix's, ``runner.run_quietly``)."""
    monkeypatch.setattr(runner, "run_suite", _preloaded_run_suite)
