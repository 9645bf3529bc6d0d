"""One pytest run's DSpark state, kept on the pytest config and registered with its plugin
manager (like xdist's ``DSession``), never in a module global (STYLE 13).

The adapter loads lazily: a run that collects none of the suite's tests never imports
torch or an implementation, unless ``--dspark-impl`` was given (then it loads at configure
time, so a bad name is a usage error before collection).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .budget import StatLedger

if TYPE_CHECKING:
    from .contract import Adapter

DEFAULT_IMPL = "reference"
DEFAULT_BASE_SEED = 20260
SESSION_KEY = pytest.StashKey["RunSession"]()
CASE_PROPERTY = "dspark_case"  # user property that marks a suite test's report, with its case id
#: User property of xdist's report of a case whose worker died running it (its only report).
CRASH_PROPERTY = "dspark_worker_crashed"
#: The most characters of a failed case's traceback its record keeps (``reason``): its last
#: whole lines, where the assertion and its message are.
REASON_CHARS = 2000


class RunSession:
    """Options, adapter, per-test records and statistical ledger of one pytest run.

    Attributes:
        impl / device / base_seed / budget: the run's ``--dspark-*`` options.
        records: one dict per finished suite test (fields: ``conformance.plugin``).
        ledger: every statistical assertion the run checked (``stat_check``).
        started: ``time.time()`` at session start.
        cuda_lost: ``(case id, error)`` of the case that lost the CUDA context of this
            process (``conformance.cuda_context``), or None.
        collection_errors: ``{"module", "error"}`` of each suite module that could not be
            collected (its cases never ran, whatever ``-k`` kept), in the order reported.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.impl_given = config.getoption("--dspark-impl") is not None
        self.impl: str = config.getoption("--dspark-impl") or DEFAULT_IMPL
        self.device: str = config.getoption("--dspark-device")
        self.base_seed: int = config.getoption("--dspark-seed")
        self.budget: float = config.getoption("--dspark-budget")
        self.records: list[dict[str, Any]] = []
        self.ledger = StatLedger()
        self.started = time.time()
        self._adapter: Adapter | None = None
        #: (case id, error) of the case that lost this process's CUDA context, once one has
        self.cuda_lost: tuple[str, str] | None = None
        #: suite cases per SPEC section that the selection (``-k``, ``-m``, ``--dspark-case``,
        #: ``--dspark-phase``) kept, and those the phase left to the other one (None: not known)
        self.selected_by_section: dict[str, int] | None = None
        self.held_for_other_phase: dict[str, int] | None = None
        self.collection_errors: list[dict[str, str]] = []
        #: xdist's controller: a worker's usage error (its message), which ends the run as one
        self.worker_usage_error: str | None = None
        #: ``(I, N)`` of ``--dspark-shard`` (None: not sharded), and the selection the shard was
        #: dealt from (``conformance.shards.selection_digest``; None: not known)
        self.shard: tuple[int, int] | None = None
        self.shard_selection: dict[str, Any] | None = None
        #: xdist's controller with ``--dspark-latency-bound alone``: the file where the workers
        #: write the node ids of the cases to run alone (``conformance.handout``)
        self.alone_ids: Path | None = None

    @property
    def adapter(self) -> "Adapter":
        """The implementation under test, loaded on first use.

        Raises:
            pytest.UsageError: the adapter could not be loaded (the message says why).
        """
        if self._adapter is None:
            from .loading import AdapterLoadError, load_adapter

            try:
                self._adapter = load_adapter(self.impl)
            except AdapterLoadError as exc:
                raise pytest.UsageError(str(exc)) from exc
        return self._adapter

    def replay_command(self, case_id: str) -> str:
        """One line that reruns the case ``case_id`` with the same implementation, device, seed
        and budget (sample sizes follow it), from any directory where the suite is installed;
        it starts with the adapter's ``replay_env`` settings (a ledger turned off)."""
        budget = "" if self.budget == 1.0 else f" --budget {self.budget!r}"
        env = "".join(f"{name}={shlex.quote(value)} " for name, value in sorted(self.adapter.replay_env.items()))
        return (f"{env}dspark-conformance run --impl {shlex.quote(self.impl)} --device {self.device} "
                f"--seed {self.base_seed}{budget} --case {shlex.quote(case_id)}")

    # ------------------------------------------------------------------ hooks
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.records.clear()
        self.collection_errors.clear()
        self.started = time.time()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # Under xdist the controller sees each worker's failed collection once per worker.
        if report.failed and all(e["module"] != report.nodeid for e in self.collection_errors):
            lines = [line for line in str(report.longreprtext).splitlines() if line.strip()]
            error = lines[-1].removeprefix("E").strip() if lines else "collection failed"
            self.collection_errors.append({"module": report.nodeid, "error": error})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case_id = final_case_id(report)
        if case_id is None:
            return
        numerics = [json.loads(v) for k, v in report.user_properties if k == "dspark_numeric"]
        self.records.append({
            "case": case_id,
            "nodeid": report.nodeid,
            "section": case_id.partition("/")[0],
            "outcome": case_outcome(report),
            "duration_s": round(report.duration, 4),
            "reason": _reason(report),
            "stats": [json.loads(v) for k, v in report.user_properties if k == "dspark_stat"],
            "numerics": numerics,
            "bit_identical": all(n["bit_identical"] for n in numerics) if numerics else None,
            "reliability": [json.loads(v) for k, v in report.user_properties if k == "dspark_reliability"],
            "replay": self.replay_command(case_id),
            "failure": next((json.loads(v) for k, v in report.user_properties if k == "dspark_failure"), None),
        })

    # A wrapper, written before any plain implementation runs: xdist's teardown of its workers
    # is one, and a SIGINT that lands there ends pytest at once (exit -2), records unwritten.
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        self._write_json(exitstatus)
        return (yield)

    def _write_json(self, exitstatus: int) -> None:
        path = self.config.getoption("--dspark-report-json")
        if not path or hasattr(self.config, "workerinput"):  # xdist workers forward their reports
            return
        adapter = self.adapter
        payload = {
            "impl": adapter.name,
            "description": adapter.description,
            "replay_env": dict(sorted(adapter.replay_env.items())),
            "conventions": {k: str(v) for k, v in vars(adapter.conventions).items()},
            "capabilities": sorted(cap.__name__ for cap in adapter.capabilities),
            "unavailable": {cap.__name__: why for cap, why in sorted(adapter.unavailable.items(),
                                                                      key=lambda item: item[0].__name__)},
            "carried_forward": sorted({e.carried_forward_from for e in adapter.expected_failures
                                       if e.carried_forward_from and self.device in e.devices}),
            # offered, yet declared unable to run on this run's device or torch build: their cases skip
            "cannot_run_here": {cap.__name__: why for cap in sorted(adapter.capabilities, key=lambda cap: cap.__name__)
                            if (why := adapter.unmet(cap, self.device)) is not None},
            "device": self.device,
            "base_seed": self.base_seed,
            "budget": self.budget,
            "wall_s": round(time.time() - self.started, 2),
            "exit_status": int(exitstatus),
            "selected_by_section": self.selected_by_section,
            "held_for_other_phase": self.held_for_other_phase,
            "collection_errors": self.collection_errors,
            **({"shard": list(self.shard), "shard_selection": self.shard_selection} if self.shard else {}),
            "tests": self.records,
        }
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=1))


def final_case_id(report: pytest.BaseReport) -> str | None:
    """The case id of a suite case's report that ends the case (its call, a setup that did
    not pass: a skip or an error, or xdist's report of its worker's crash,
    :data:`CRASH_PROPERTY`), else None (a passed setup, a teardown, a collection report, a
    test that is no suite case)."""
    properties = dict(getattr(report, "user_properties", ()))
    final = report.when == "call" or (report.when == "setup" and not report.passed) or CRASH_PROPERTY in properties
    return properties.get(CASE_PROPERTY) if final else None


def case_outcome(report: pytest.TestReport) -> str:
    """A case's outcome as its record says it: pytest's, or ``inconclusive``, ``xfailed``,
    ``xpassed``."""
    props = dict(report.user_properties)
    if props.get("dspark_outcome") == "inconclusive":
        return "inconclusive"
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return report.outcome


def _reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2].removeprefix("Skipped: ")
    if report.failed:
        return _last_lines(str(getattr(report, "longreprtext", "")), REASON_CHARS)
    return getattr(report, "wasxfail", "")


def _last_lines(text: str, limit: int) -> str:
    """The last whole lines of ``text`` within ``limit`` characters (the end of the last line
    where it alone is longer)."""
    if len(text) <= limit:
        return text
    tail = text[-limit:]
    cut = tail.find("\n")
    return tail if cut == -1 or cut == len(tail) - 1 else tail[cut + 1:]


def run_session(config: pytest.Config) -> RunSession:
    """The :class:`RunSession` of ``config`` (set by the plugin at configure time)."""
    return config.stash[SESSION_KEY]
