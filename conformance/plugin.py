"""The pytest plugin: options, fixtures, the expected-failure ledger, INCONCLUSIVE, reports.

Registered through the ``pytest11`` entry point (and by the repo-root ``conftest.py`` for
in-repo runs). Options:

* ``--dspark-impl NAME``       implementation under test (see ``conformance.loading``);
* ``--dspark-device cpu|cuda`` device the tests put their tensors on;
* ``--dspark-seed N``          base seed; every case seed is ``derive_seed(N, case id)``;
* ``--dspark-report-json PATH`` write one record per test (outcome, section, stats, time);
* ``--dspark-strict-ledger``   an expected-failure entry that matches no test is an error
  (the main job sets it; a partial run only warns);
* ``--dspark-budget FACTOR``   scale statistical sample sizes (runtime vs power; alpha fixed);
* ``--dspark-hypothesis-profile ci|dev|thorough``.

Fixtures: ``dspark_adapter``, ``require`` (capability or skip), ``dspark_device``,
``case_seed`` and ``case_generator`` (seeded from the test id), ``stat_check`` (asserts a
:class:`~conformance.stats.StatResult` and records it for the report), ``record_reliability``
(keeps reliability-diagram bins for the report).
"""

from __future__ import annotations

import json
import re
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from . import budget
from .contract import Adapter, Inconclusive
from .loading import AdapterLoadError, load_adapter

_ADAPTER_KEY = pytest.StashKey[Adapter]()
_RECORDS_KEY = pytest.StashKey[list]()
_SECTION_RE = re.compile(r"test_(S\d+)")
DEFAULT_BASE_SEED = 20260
_SUITE_DIR = Path(__file__).resolve().parent
SUITE_BUG_TYPES = (NameError, ImportError, SyntaxError)  # with UnboundLocalError, ModuleNotFoundError

try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "ci", max_examples=25, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("dev", max_examples=10, deadline=None)
    settings.register_profile(
        "thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
except ImportError:  # hypothesis is a dependency; keep the plugin importable without it
    settings = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dspark", "DSpark conformance")
    group.addoption("--dspark-impl", default="reference", help="implementation under test")
    group.addoption("--dspark-device", default="cpu", choices=("cpu", "cuda"), help="device for test tensors")
    group.addoption("--dspark-seed", type=int, default=DEFAULT_BASE_SEED, help="base seed for case seeds")
    group.addoption("--dspark-report-json", default=None, help="write per-test records as JSON here")
    group.addoption("--dspark-strict-ledger", action="store_true", help="unmatched expected-failure entries are errors")
    group.addoption(
        "--dspark-budget", type=float, default=1.0,
        help="factor on every statistical sample size: <1 faster with less power, >1 more power "
        "(alpha unchanged; the report states the power achieved)",
    )
    group.addoption(
        "--dspark-hypothesis-profile", default="ci", choices=("ci", "dev", "thorough"),
        help="hypothesis settings profile",
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "gpu: needs CUDA (skipped cleanly without it)",
        "statistical: a distributional assertion drawing on the family-wise alpha budget",
        "slow: long-running; excluded from the quick tier",
    ):
        config.addinivalue_line("markers", line)
    if settings is not None:
        settings.load_profile(config.getoption("--dspark-hypothesis-profile"))
    try:
        budget.set_sample_scale(config.getoption("--dspark-budget"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    try:
        config.stash[_ADAPTER_KEY] = load_adapter(config.getoption("--dspark-impl"))
    except AdapterLoadError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[_RECORDS_KEY] = []


def section_of(name: str) -> str:
    """SPEC section id cited by a test name (``test_S3_...`` -> ``"S3"``), else ``"-"``."""
    match = _SECTION_RE.search(name)
    return match.group(1) if match else "-"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not torch.cuda.is_available():
        skip_gpu = pytest.mark.skip(reason="gpu tier: CUDA is not available")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)
    adapter = config.stash[_ADAPTER_KEY]
    device = config.getoption("--dspark-device")
    for entry in (e for e in adapter.expected_failures if device in e.devices):
        matched = [
            item for item in items
            if item.name == entry.test or getattr(item, "originalname", None) == entry.test
        ]
        for item in matched:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"[{entry.section}] {entry.reason}"))
        if not matched:
            message = f"expected-failure entry {entry.test!r} of {adapter.name} matches no collected test"
            if config.getoption("--dspark-strict-ledger"):
                raise pytest.UsageError(message)
            warnings.warn(message, pytest.PytestWarning)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and call.excinfo.errisinstance(Inconclusive):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"INCONCLUSIVE: {call.excinfo.value}")
        report.user_properties.append(("dspark_outcome", "inconclusive"))
    elif call.excinfo is not None and report.failed:
        report.user_properties.append(("dspark_failure", json.dumps(_failure(call.excinfo))))


def _failure(excinfo: pytest.ExceptionInfo) -> dict[str, Any]:
    """The exception's type, and whether it is a bug of the suite itself: a programming
    error (undefined name, failed import) raised in the suite's own code, which no output
    of an implementation can cause. The kill matrix does not count those as kills."""
    innermost = Path(str(excinfo.traceback[-1].path)) if excinfo.traceback else None
    in_suite = innermost is not None and _SUITE_DIR in innermost.parents
    return {"type": excinfo.typename, "suite_bug": in_suite and excinfo.errisinstance(SUITE_BUG_TYPES)}


def _outcome(report: pytest.TestReport) -> str:
    props = dict(report.user_properties)
    if props.get("dspark_outcome") == "inconclusive":
        return "inconclusive"
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return report.outcome


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    final = report.when == "call" or (report.when == "setup" and not report.passed)
    if not final:
        return
    config = _CONFIG.get("config")
    if config is None:
        return
    reason = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2].removeprefix("Skipped: ")
    elif report.failed:
        reason = str(getattr(report, "longreprtext", ""))[-2000:]
    elif hasattr(report, "wasxfail"):
        reason = report.wasxfail
    config.stash[_RECORDS_KEY].append({
        "nodeid": report.nodeid,
        "section": section_of(report.nodeid.split("::")[-1]),
        "outcome": _outcome(report),
        "duration_s": round(report.duration, 4),
        "reason": reason,
        "stats": [json.loads(v) for k, v in report.user_properties if k == "dspark_stat"],
        "reliability": [json.loads(v) for k, v in report.user_properties if k == "dspark_reliability"],
        "replay": replay_command(config, report.nodeid),
        "failure": next((json.loads(v) for k, v in report.user_properties if k == "dspark_failure"), None),
    })


def replay_command(config: pytest.Config, nodeid: str) -> str:
    """One line that re-runs a single test with the same implementation, device and seed."""
    return (
        f"python -m pytest '{nodeid}' --dspark-impl {config.getoption('--dspark-impl')} "
        f"--dspark-device {config.getoption('--dspark-device')} --dspark-seed {config.getoption('--dspark-seed')}"
    )


_CONFIG: dict[str, pytest.Config] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG["config"] = session.config
    session.config.stash[_RECORDS_KEY].clear()
    session.config._dspark_started = time.time()  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--dspark-report-json")
    if not path or hasattr(session.config, "workerinput"):  # xdist workers forward reports
        return
    adapter = session.config.stash[_ADAPTER_KEY]
    payload = {
        "impl": adapter.name,
        "description": adapter.description,
        "conventions": {k: str(v) for k, v in vars(adapter.conventions).items()},
        "capabilities": sorted(cap.__name__ for cap in adapter.capabilities),
        "device": session.config.getoption("--dspark-device"),
        "base_seed": session.config.getoption("--dspark-seed"),
        "budget": session.config.getoption("--dspark-budget"),
        "wall_s": round(time.time() - session.config._dspark_started, 2),  # type: ignore[attr-defined]
        "tests": session.config.stash[_RECORDS_KEY],
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=1))


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def dspark_adapter(pytestconfig: pytest.Config) -> Adapter:
    """The implementation under test."""
    return pytestconfig.stash[_ADAPTER_KEY]


@pytest.fixture(scope="session")
def dspark_device(pytestconfig: pytest.Config) -> torch.device:
    """The device test tensors live on; ``cuda`` without CUDA is a usage error."""
    name = pytestconfig.getoption("--dspark-device")
    if name == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--dspark-device cuda: CUDA is not available on this machine")
    return torch.device(name)


@pytest.fixture
def require(dspark_adapter: Adapter) -> Callable[[type], Any]:
    """``require(Capability)`` -> the adapter's implementation, or skip naming the capability."""

    def _require(capability: type) -> Any:
        impl = dspark_adapter.get(capability)
        if impl is None:
            pytest.skip(f"capability {capability.__name__} not offered by {dspark_adapter.name}")
        return impl

    return _require


@pytest.fixture
def case_seed(request: pytest.FixtureRequest) -> int:
    """Seed for this test case: ``derive_seed(--dspark-seed, node id)`` (xdist-safe)."""
    from .stats import derive_seed

    return derive_seed(request.config.getoption("--dspark-seed"), request.node.nodeid)


@pytest.fixture
def case_generator(case_seed: int, dspark_device: torch.device) -> torch.Generator:
    """A ``torch.Generator`` on the test device seeded with :func:`case_seed`."""
    gen = torch.Generator(device=dspark_device)
    gen.manual_seed(case_seed)
    return gen


@pytest.fixture
def stat_check(request: pytest.FixtureRequest) -> Callable[[Any], Any]:
    """``stat_check(result)``: record a StatResult for the report, then assert it passed."""

    def _check(result: Any) -> Any:
        request.node.user_properties.append(("dspark_stat", json.dumps(result.to_dict())))
        result.assert_ok()
        return result

    return _check


@pytest.fixture
def record_reliability(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``record_reliability(name, prob[N], label[N], bins=10)``: keep a reliability diagram's
    bins (mean predicted probability, observed frequency, count) for the report (SPEC S7)."""

    def _record(name: str, prob: torch.Tensor, label: torch.Tensor, bins: int = 10) -> None:
        prob, label = prob.double().flatten().cpu(), label.double().flatten().cpu()
        index = torch.clamp((prob * bins).floor().long(), max=bins - 1)
        count = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, torch.ones_like(prob))
        mean = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, prob) / count.clamp(min=1)
        hits = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, label) / count.clamp(min=1)
        keep = count > 0
        request.node.user_properties.append(("dspark_reliability", json.dumps({
            "name": name, "predicted": mean[keep].tolist(), "observed": hits[keep].tolist(),
            "count": count[keep].long().tolist(),
        })))

    return _record
