"""The pytest plugin: options, fixtures, the expected-failure ledger, INCONCLUSIVE, reports.

Registered through the ``pytest11`` entry point (and by the repo-root ``conftest.py`` for
in-repo runs). Inert until asked (STYLE 12): in a run that collects none of the suite's
tests it loads no adapter, imports no torch, skips nothing and records nothing. The
suite's tests are the test functions of its own modules (:func:`is_suite_item`); only they
get the GPU-tier skip (by their ``gpu`` marker), the ledger's expected failures and records.
A test ended by an adapter's ``NotImplementedError`` (``conformance.boundary.UnsupportedFeature``:
a feature the IUT lacks) is reported as a skip naming the capability, the method and the reason;
one ended by ``conformance.contract.CannotRunHere`` (the engine's path needs what this machine
lacks) as a skip that says ``cannot run here`` and why.
On CUDA a lost context (an out-of-bounds kernel access) is attributed to the case whose kernels
raised it, is never an expected failure unless its ledger entry says so, and ends the later
cases of that process as not run (``conformance.cuda_context``; the main job reruns them).

Options:

* ``--dspark-impl NAME``       implementation under test (see ``conformance.loading``;
  default ``reference``, loaded when the first suite test needs it);
* ``--dspark-device cpu|cuda`` device the tests put their tensors on;
* ``--dspark-seed N``          base seed; every case seed is ``seed_of_case(N, case id)``
  (``conformance.seeds``);
* ``--dspark-case ID``         run only the case with this case id (repeatable): the replay form
  (a legacy key ``conformance/test_x.py::test_y[id]`` is still taken, with a deprecation warning);
* ``--dspark-report-json PATH`` write one record per suite test (outcome, section, stats, time);
* ``--dspark-strict-ledger``   an expected-failure entry that matches no test is an error
  (the main job sets it; a partial run only warns);
* ``--dspark-budget FACTOR``   scale statistical sample sizes (runtime vs power; alpha fixed).
* ``--dspark-shard I/N``       run only shard I of N of the selected cases (``conformance.shards``:
  the selected case ids sorted and dealt round-robin; taken before ``--dspark-phase``);
* ``--dspark-latency-bound alone`` the ``latency_bound`` cases last, and under the runner's
  xdist scheduling alone on one worker once every other case and worker has finished
  (``conformance.handout``; default ``with-others``: first among the others);
* ``--dspark-progress``       a line per SPEC section as its cases finish, in place of the
  dots, and the suite cases' tracebacks left to the reports (``conformance.progress``);
  ``--dspark-tracebacks`` prints those too.

Fixtures: ``dspark_adapter``, ``dspark_impl`` (its ``--dspark-impl`` name), ``require`` (capability behind the boundary checks of
``conformance.boundary``, or a skip: not offered, or declared unable to run on this device /
torch build), ``dspark_device``,
``case_seed`` and ``case_generator`` (seeded from the case id), ``stat_check`` (asserts a
:class:`~conformance.stats.StatResult` and records it for the report), ``numeric_check``
(asserts a bounded :class:`~conformance.numerics.Comparison`, SPEC S0, and records it with
its bit identity), ``record_reliability`` (keeps reliability-diagram bins for the report).

A suite test's identity is its case id (``conformance.seeds``: the ``Case`` of its ``case``
parameter; a suite test without one, or two tests with the same case id, is a usage error
at collection). A record of ``--dspark-report-json`` holds ``case`` (the case id: the
test's identity wherever the suite is installed and whichever module holds it), ``nodeid`` (pytest's, which depends on the rootdir),
``section``, ``outcome``, ``duration_s``, ``reason``, ``stats``, ``numerics`` (the bounded
comparisons), ``bit_identical`` (all of them bit-identical: true / false; null when the test
made none), ``reliability``, ``replay`` (one command that reruns it) and ``failure``.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from . import budget
from .case_order import order_key
from .cuda_context import CudaContextLost, is_context_error, is_out_of_memory, release_cached_memory, synchronize
from .sections import section_of
from .seeds import resolve_case, seed_of_case
from .shards import parse_shard, selection_digest, shard_cases
from .session import CASE_PROPERTY, CRASH_PROPERTY, DEFAULT_BASE_SEED, SESSION_KEY, RunSession, run_session

if TYPE_CHECKING:
    import torch

    from .contract import Adapter

SUITE_PACKAGE = "conformance.suite"  # the suite's test modules live here
_SUITE_DIR = Path(__file__).resolve().parent
SUITE_BUG_TYPES = (NameError, ImportError, SyntaxError)  # with UnboundLocalError, ModuleNotFoundError
_LOSES_CONTEXT = pytest.StashKey[bool]()  # the item's ledger entry expects a lost CUDA context
PHASES = ("all", "parallel", "serial")
#: Where the suite's ``latency_bound`` cases run among the others (``--dspark-latency-bound``).
LATENCY_PLACES = ("with-others", "alone")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dspark", "DSpark conformance")
    group.addoption("--dspark-impl", default=None, help="implementation under test (default: reference)")
    group.addoption("--dspark-device", default="cpu", choices=("cpu", "cuda"), help="device for test tensors")
    group.addoption("--dspark-seed", type=int, default=DEFAULT_BASE_SEED, help="base seed for case seeds")
    group.addoption("--dspark-case", action="append", default=[], metavar="CASE_ID",
                    help="run only the case with this case id (repeatable; the replay form; a legacy key "
                    "conformance/test_x.py::test_y[id] is deprecated)")
    group.addoption("--dspark-report-json", default=None, help="write per-test records as JSON here")
    group.addoption("--dspark-phase", default="all", choices=PHASES,
                    help="'parallel': leave out the latency_bound cases; 'serial': only those (the runner's two "
                    "phases: on a GPU shared by parallel workers every round trip waits on their kernels)")
    group.addoption("--dspark-latency-bound", default="with-others", choices=LATENCY_PLACES,
                    help="'with-others': the latency_bound cases first among the others; 'alone': last, and with "
                    "--dspark-impl under xdist's load scheduling, only once every other case has finished and every "
                    "other worker has stopped, one after another on one worker (conformance.handout)")
    group.addoption("--dspark-shard", default=None, metavar="I/N",
                    help="run only shard I of N (1 <= I <= N) of the cases the selection keeps (-k, -m, "
                    "--dspark-case): their case ids sorted and dealt round-robin, so N shards run each case once")
    group.addoption("--dspark-strict-ledger", action="store_true", help="unmatched expected-failure entries are errors")
    group.addoption("--dspark-progress", action="store_true",
                    help="in place of pytest's dots, a line per SPEC section as its cases finish (done of selected, "
                    "elapsed, an estimate of the time left); the suite cases' tracebacks stay in the reports "
                    "(--junitxml, --dspark-report-json) unless --dspark-tracebacks")
    group.addoption("--dspark-tracebacks", action="store_true",
                    help="with --dspark-progress: print the failing suite cases' tracebacks too, as pytest does")
    group.addoption(
        "--dspark-budget", type=float, default=1.0,
        help="factor on every statistical sample size: <1 faster with less power, >1 more power "
        "(alpha unchanged; the report states the power achieved)",
    )


def pytest_configure(config: pytest.Config) -> None:
    try:
        budget.set_sample_scale(config.getoption("--dspark-budget"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    session = RunSession(config)
    dist = getattr(config.option, "dist", None)
    if session.impl_given and dist == "each":
        raise pytest.UsageError("--dist each: runs every case on every xdist worker, where a verdict counts each case "
                                "once; leave --dist to the runner (or use load, worksteal, loadfile)")
    if _runs_alone(config) and _is_xdist_controller(config) and dist != "load":
        raise pytest.UsageError(f"--dist {dist}: the latency-bound cases run alone (--dspark-latency-bound alone, the "
                                "runner's --latency-bound default on CUDA) only with xdist's load scheduling; leave "
                                "--dist to the runner, or run them --latency-bound with-others")
    if config.getoption("--dspark-shard") is not None:
        try:
            session.shard = parse_shard(config.getoption("--dspark-shard"))
        except ValueError as exc:
            raise pytest.UsageError(f"--dspark-shard: {exc}") from exc
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "dspark_session")
    if _runs_alone(config) and _is_xdist_controller(config):
        session.alone_ids = Path(tempfile.mkdtemp(prefix="dspark-alone-")) / "node-ids.json"
    if config.getoption("--dspark-progress") and not hasattr(config, "workerinput"):  # the process that prints
        from .progress import SectionProgress

        config.pluginmanager.register(SectionProgress(config, tracebacks=config.getoption("--dspark-tracebacks")),
                                      "dspark_progress")
    if session.impl_given and not _is_xdist_controller(config):  # asked for by name: a bad name is a usage error now
        session.adapter


def _is_xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _runs_alone(config: pytest.Config) -> bool:
    """Whether the runner's latency-bound cases run alone (``--dspark-latency-bound alone``
    with ``--dspark-impl``)."""
    return config.getoption("--dspark-impl") is not None and config.getoption("--dspark-latency-bound") == "alone"


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and session.alone_ids is not None:
        shutil.rmtree(session.alone_ids.parent, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session) -> Any:
    result = yield
    # xdist's controller loads the adapter (a bad name is a usage error) only once its workers
    # have started (xdist starts them in its own pytest_sessionstart): they import torch and the
    # adapter meanwhile, where loading it at configure delayed every worker by its imports.
    if _is_xdist_controller(session.config) and run_session(session.config).impl_given:
        run_session(session.config).adapter
    return result


def is_suite_item(item: pytest.Item) -> bool:
    """Whether ``item`` is a test function of one of the suite's own modules."""
    module = getattr(item, "module", None)
    return (isinstance(item, pytest.Function) and module is not None
            and module.__name__.startswith(SUITE_PACKAGE + "."))


def item_case_id(item: pytest.Item) -> str:
    """The case id of a test function: the id of the :class:`~conformance.cases.Case` in its
    ``case`` parameter (``conformance.seeds``), never its module, name or path.

    Raises:
        ValueError: the test has no ``Case`` in a ``case`` parameter.
    """
    from .cases import Case

    case = getattr(item, "callspec", None) and item.callspec.params.get("case")
    if not isinstance(case, Case):
        raise ValueError(f"{item.nodeid}: a suite test is parametrized by a conformance.cases.Case in its 'case' "
                         "parameter (its case id is its identity: seed, --case, reports); this one has none")
    return case.id


def _case_ids(suite: list[pytest.Item]) -> dict[int, str]:
    """``{id(item): case id}`` of the collected suite tests.

    Raises:
        pytest.UsageError: a test without a case, or two tests with the same case id (both named).
    """
    ids: dict[int, str] = {}
    first: dict[str, pytest.Item] = {}
    for item in suite:
        try:
            case_id = item_case_id(item)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        other = first.setdefault(case_id, item)
        if other is not item:
            raise pytest.UsageError(f"case id {case_id!r} is used by two tests, {other.nodeid} and {item.nodeid}: "
                                    "a case id is a case's identity (its seed, --case, reports); give each its own")
        ids[id(item)] = case_id
    return ids


#: The worker output key under which an xdist worker sends the controller its usage error.
_USAGE_ERROR_KEY = "dspark_usage_error"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Any:
    """Select and prepare the suite's cases (:func:`_prepare_suite`), before the other
    plugins' hooks (pytest's ``-k`` / ``-m`` deselection among them). In an xdist worker a
    usage error of any of them (an unknown ``--dspark-case``, a bad seed, no CUDA, a ``-k``
    expression that does not parse) leaves nothing to run and goes to the controller, which
    ends the run with it (xdist's controller takes a worker's failed collection hook as an
    internal error, the message lost)."""
    with _usage_error_to_controller(config, items):
        _prepare_suite(config, items)
    with _usage_error_to_controller(config, items):
        return (yield)


@contextlib.contextmanager
def _usage_error_to_controller(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """In an xdist worker, a usage error raised inside leaves nothing of the collection to run,
    and the controller gets the first such error to end the run with; elsewhere it propagates."""
    try:
        yield
    except pytest.UsageError as exc:
        if not hasattr(config, "workeroutput"):
            raise
        config.workeroutput.setdefault(_USAGE_ERROR_KEY, str(exc))
        _deselect(config, items, list(items))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """xdist's controller: a worker's usage error ends the run as pytest's own would (its
    ``ERROR:`` line on stderr, exit status 4)."""
    error = run_session(session.config).worker_usage_error
    if error is not None:
        sys.stderr.write(f"ERROR: {error}\n")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def _prepare_suite(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the selected suite cases (``--dspark-case``), check the run's device and seed,
    skip the GPU-tier cases without CUDA and mark the ledger's expected failures.

    Raises:
        pytest.UsageError: an unknown case id, CUDA asked for and absent, a seed out of
            range, or (strict ledger) an entry that matches no collected case.
    """
    collected = [item for item in items if is_suite_item(item)]
    if not collected:
        return
    suite = _select_cases(config, items, collected, _case_ids(collected))
    session = run_session(config)
    import torch

    if session.device == "cuda" and not torch.cuda.is_available():  # before any case runs
        raise pytest.UsageError("--dspark-device cuda: CUDA is not available on this machine")
    if not 0 <= session.base_seed < 2**64:
        raise pytest.UsageError(f"--dspark-seed: expected an integer in [0, 2^64), got {session.base_seed}")

    if not torch.cuda.is_available():
        skip_gpu = pytest.mark.skip(reason="needs CUDA (a case marked gpu), which this machine does not have")
        for item in suite:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip_gpu)
    adapter = session.adapter
    for entry in (e for e in adapter.expected_failures if session.device in e.devices):
        matched = [  # among every collected case: a --dspark-case selection leaves entries out
            item for item in collected
            if item.name == entry.test or getattr(item, "originalname", None) == entry.test
        ]
        for item in matched:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"[{entry.section}] {entry.reason}"))
            item.stash[_LOSES_CONTEXT] = entry.loses_cuda_context
        if not matched:
            message = f"expected-failure entry {entry.test!r} of {adapter.name} matches no collected test"
            if config.getoption("--dspark-strict-ledger"):
                raise pytest.UsageError(message)
            warnings.warn(message, pytest.PytestWarning)


def _select_cases(config: pytest.Config, items: list[pytest.Item], suite: list[pytest.Item],
                  case_ids: dict[int, str]) -> list[pytest.Item]:
    """Apply ``--dspark-case``: keep the suite items whose case id is named (foreign items
    stay). A legacy key of ``conformance.seeds``'s table names its case, with a deprecation warning.

    Raises:
        pytest.UsageError: a name that matches no collected case (the closest case id suggested).
    """
    wanted = set()
    for name in config.getoption("--dspark-case"):
        case_id, legacy = resolve_case(name)
        if legacy:
            warnings.warn(DeprecationWarning(f"--dspark-case {name!r}: keys with a module and test name are "
                                             f"deprecated and go in the next release; name the case id {case_id!r}"))
        wanted.add(case_id)
    if not wanted:
        return suite
    known = sorted(set(case_ids.values()))
    unknown = sorted(wanted - set(known))
    if unknown:
        # A pytest node id or a key (test_x.py::test_y[S5/a/b]) is the likeliest slip: its [...] is the case id.
        bracketed = _parameter_id(unknown[0]) or unknown[0]
        near = difflib.get_close_matches(bracketed, known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise pytest.UsageError(f"--dspark-case: no collected case has the case id {unknown[0]!r}{hint} "
                                "(case ids are printed in results.json 'case' and in replay lines)")
    _deselect(config, items, [item for item in suite if case_ids[id(item)] not in wanted])
    return [item for item in suite if case_ids[id(item)] in wanted]


#: The worker output key under which an xdist worker sends the controller its cases left to the other phase.
_HELD_KEY = "dspark_held_for_other_phase"
#: The worker input key naming the file where a worker writes the node ids of the cases to run
#: alone (``--dspark-latency-bound alone``), read by the controller's scheduling.
_ALONE_KEY = "dspark_alone_ids"
#: ... and the selection its shard was dealt from (``conformance.shards.selection_digest``).
_SHARD_KEY = "dspark_shard_selection"


# trylast: after -k / -m deselect, so that the counts are of cases that would run
@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_by_phase(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Apply ``--dspark-shard`` (``conformance.shards``: the suite items that -k / -m /
    ``--dspark-case`` kept, dealt by case id; the same in both phases, taken before the phase),
    then ``--dspark-phase``: ``parallel`` deselects the suite's ``latency_bound`` items,
    ``serial`` every other suite item (foreign items stay); ``all`` keeps them. The suite's
    items run longest first, those a ledger expects to lose the CUDA context last
    (``conformance.case_order``; foreign items keep their places). Records the
    selected suite cases per SPEC section, and those left to the other phase
    (``selected_by_section`` and ``held_for_other_phase`` of the run's JSON; under xdist the
    controller counts its workers' collection, and a worker sends the second through
    ``workeroutput``): the runner skips a phase that would have none, and the report counts
    the cases an interrupted run never ran."""
    phase = config.getoption("--dspark-phase")
    _longest_first(items, latency_last=config.getoption("--dspark-latency-bound") == "alone")
    session = run_session(config)
    suite = [item for item in items if is_suite_item(item)]
    if session.shard is not None and suite:
        case_ids = {id(item): item_case_id(item) for item in suite}
        kept = shard_cases(case_ids.values(), *session.shard)
        _deselect(config, items, [item for item in suite if case_ids[id(item)] not in kept])
        suite = [item for item in suite if case_ids[id(item)] in kept]
        session.shard_selection = selection_digest(case_ids.values())
        if hasattr(config, "workeroutput"):
            config.workeroutput[_SHARD_KEY] = session.shard_selection
    held = [] if phase == "all" else [
        item for item in suite if (item.get_closest_marker("latency_bound") is not None) != (phase == "serial")]
    _deselect(config, items, held)
    session.selected_by_section = _by_section(item.name for item in suite if item not in held)
    session.held_for_other_phase = _by_section(item.name for item in held)
    if hasattr(config, "workeroutput"):
        config.workeroutput[_HELD_KEY] = session.held_for_other_phase
    alone_ids = getattr(config, "workerinput", {}).get(_ALONE_KEY)
    if alone_ids is not None:
        from .handout import write_node_ids  # imports xdist: only under xdist

        write_node_ids(alone_ids, [item.nodeid for item in items
                                   if is_suite_item(item) and item.get_closest_marker("latency_bound") is not None])


def _longest_first(items: list[pytest.Item], *, latency_last: bool) -> None:
    """Sort the suite's items in place by :func:`conformance.case_order.order_key` (the
    runner's xdist workers take them in this order: ``conformance.handout``), the
    latency-bound ones last where ``latency_last``, else first; other items keep their places."""
    slots = [i for i, item in enumerate(items) if is_suite_item(item)]
    ordered = sorted((items[i] for i in slots), key=lambda item: order_key(
        item_case_id(item), item.get_closest_marker("latency_bound") is not None, item.stash.get(_LOSES_CONTEXT, False),
        latency_last=latency_last))
    for slot, item in zip(slots, ordered):
        items[slot] = item


def _by_section(test_names: Iterable[str]) -> dict[str, int]:
    return dict(Counter(section_of(name) for name in test_names))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's controller: hand the runner's cases out longest first
    (``conformance.handout``) where the run names ``--dspark-impl`` and deals by ``load``;
    None (xdist's own scheduling) in any other run."""
    session = run_session(config)
    if not session.impl_given or config.getvalue("dist") != "load":
        return None
    from .handout import LongestFirstScheduling, read_node_ids  # imports xdist: only under xdist

    alone = None if session.alone_ids is None else functools.partial(read_node_ids, session.alone_ids)
    return LongestFirstScheduling(config, log, alone=alone)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, a worker starting: where the latency-bound cases run alone, the file
    in which it writes their node ids as it collects."""
    path = run_session(node.config).alone_ids
    if path is not None:
        node.workerinput[_ALONE_KEY] = str(path)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    """xdist's controller, a worker that died running ``crashitem`` (a segfault or an abort in
    the implementation, the process killed): where it is a suite case, xdist's failed report
    of it names the case (its test id's parameter, ``[<case id>]``), so that the run records
    the case as failed, with its reason and replay line, not as a case that never ran."""
    case_id = _parameter_id(crashitem)
    if f"/{SUITE_PACKAGE.replace('.', '/')}/" in f"/{crashitem.partition('::')[0]}" and case_id is not None:
        report.user_properties += [(CASE_PROPERTY, case_id), (CRASH_PROPERTY, True)]


def _parameter_id(nodeid: str) -> str | None:
    """The ``[...]`` that ends a test's node id (``path::test_x[S5/a/b]`` -> ``S5/a/b``: a suite
    test's is its case id), or None where it has none."""
    name = nodeid.partition("::")[2]
    return name[name.index("[") + 1:-1] if name.endswith("]") and "[" in name else None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist's controller, a worker's collection (every worker's is the same): the selected
    cases per section, known before any runs (an interrupted worker sends no output)."""
    run_session(node.config).selected_by_section = _by_section(nodeid.rpartition("::")[2] for nodeid in ids)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller, a worker gone: its usage error, if any, and the cases per section
    it left to the other phase."""
    output = getattr(node, "workeroutput", {})
    if output.get(_USAGE_ERROR_KEY) is not None:
        run_session(node.config).worker_usage_error = output[_USAGE_ERROR_KEY]
    if output.get(_HELD_KEY) is not None:
        run_session(node.config).held_for_other_phase = output[_HELD_KEY]
    if output.get(_SHARD_KEY) is not None:
        run_session(node.config).shard_selection = output[_SHARD_KEY]


def _deselect(config: pytest.Config, items: list[pytest.Item], dropped: list[pytest.Item]) -> None:
    """Remove ``dropped`` from ``items`` in place, reported to pytest as deselected."""
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = {id(item) for item in dropped}
        items[:] = [item for item in items if id(item) not in gone]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    lost = run_session(item.config).cuda_lost
    if lost is not None and is_suite_item(item):
        raise CudaContextLost(*lost)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    result = yield
    if is_suite_item(item) and run_session(item.config).device == "cuda":
        synchronize()  # an asynchronous kernel error belongs to this case (conformance.cuda_context)
    return result


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # A GPU-tier case may allocate gigabytes (S4/gpu-production: B 256 over a 152k vocabulary);
    # cached in its worker, they are lost to the run's other workers on the same card.
    if (is_suite_item(item) and item.get_closest_marker("gpu") is not None
            and run_session(item.config).device == "cuda"):
        release_cached_memory()


# tryfirst: outside pytest's own xfail wrapper, so a lost CUDA context is never an expected failure
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    if not is_suite_item(item):
        return
    from .boundary import UnsupportedFeature
    from .contract import CannotRunHere, Inconclusive

    report = outcome.get_result()
    if (CASE_PROPERTY, item_case_id(item)) not in report.user_properties:
        report.user_properties.append((CASE_PROPERTY, item_case_id(item)))
    if call.excinfo is not None and is_context_error(call.excinfo.value):
        session = run_session(item.config)
        if session.cuda_lost is None:
            session.cuda_lost = (item_case_id(item), str(call.excinfo.value).splitlines()[0])
        expected = item.stash.get(_LOSES_CONTEXT, False) and not call.excinfo.errisinstance(CudaContextLost)
        if hasattr(report, "wasxfail") and not expected:
            del report.wasxfail
            report.outcome = "failed"
        if report.failed:
            report.user_properties.append(("dspark_failure", json.dumps(_failure(call.excinfo))))
    elif call.excinfo is not None and call.excinfo.errisinstance(Inconclusive):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"INCONCLUSIVE: {call.excinfo.value}")
        report.user_properties.append(("dspark_outcome", "inconclusive"))
    elif call.excinfo is not None and call.excinfo.errisinstance(CannotRunHere):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"Skipped: cannot run here: {call.excinfo.value}")
    elif call.excinfo is not None and report.failed and call.excinfo.errisinstance(UnsupportedFeature):
        exc = call.excinfo.value
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"Skipped: {exc.where}: not supported by the IUT ({exc})")
    elif call.excinfo is not None and report.failed:
        report.user_properties.append(("dspark_failure", json.dumps(_failure(call.excinfo))))


def _failure(excinfo: pytest.ExceptionInfo) -> dict[str, Any]:
    """The exception's type; whether it is a bug of the suite itself: a programming error
    (undefined name, failed import) raised in the suite's own code, which no output of an
    implementation can cause (the kill matrix does not count those as kills); and whether
    the device ran out of memory (the main job runs such a case again alone)."""
    innermost = Path(str(excinfo.traceback[-1].path)) if excinfo.traceback else None
    in_suite = innermost is not None and _SUITE_DIR in innermost.parents
    return {"type": excinfo.typename, "suite_bug": in_suite and excinfo.errisinstance(SUITE_BUG_TYPES),
            "out_of_memory": is_out_of_memory(excinfo.value)}


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def dspark_adapter(pytestconfig: pytest.Config) -> "Adapter":
    """The implementation under test."""
    return run_session(pytestconfig).adapter


@pytest.fixture(scope="session")
def dspark_impl(pytestconfig: pytest.Config) -> str:
    """The ``--dspark-impl`` name of the implementation under test (``reference`` by default):
    what a case that starts processes of its own (SPEC S5 tensor parallelism) loads there."""
    return run_session(pytestconfig).impl


@pytest.fixture(scope="session")
def dspark_device(pytestconfig: pytest.Config) -> "torch.device":
    """The device test tensors live on; ``cuda`` without CUDA is a usage error."""
    import torch

    name = run_session(pytestconfig).device
    if name == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--dspark-device cuda: CUDA is not available on this machine")
    return torch.device(name)


@pytest.fixture
def require(dspark_adapter: "Adapter", pytestconfig: pytest.Config) -> Callable[[type], Any]:
    """``require(Capability)`` -> the adapter's implementation behind the boundary checks
    (``conformance.boundary``: every value it returns is validated before the test sees it),
    or a skip that names the capability: not offered, or declared unable to run on this run's
    device or torch build (``Adapter.unmet``, from ``conventions.devices`` and
    ``Adapter.requirements``). The one place where a declared device limit becomes a skip; a
    test that passes ``require`` runs. A capability the adapter declares ``unavailable`` (the
    engine release should offer it, a module did not load) is INCONCLUSIVE with the reason."""
    device = run_session(pytestconfig).device

    def _require(capability: type) -> Any:
        from .boundary import validating
        from .contract import Inconclusive

        why_unavailable = dspark_adapter.unavailable.get(capability)
        if why_unavailable is not None:
            raise Inconclusive(f"capability {capability.__name__} should be offered by {dspark_adapter.name} "
                               f"but did not load: {why_unavailable}")
        impl = dspark_adapter.get(capability)
        if impl is None:
            pytest.skip(f"capability {capability.__name__} not offered by {dspark_adapter.name}")
        why = dspark_adapter.unmet(capability, device)
        if why is not None:
            pytest.skip(f"capability {capability.__name__} of {dspark_adapter.name} {why}")
        return validating(capability, impl)

    return _require


@pytest.fixture
def tier_min_tv(request: pytest.FixtureRequest) -> float:
    """The minimum TV this case is sized for: ``budget.tier_min_tv`` of the run's device and
    the case's ``gpu_tier`` marker (0.002 on CUDA for a marked case, else 0.01)."""
    device = run_session(request.config).device
    return budget.tier_min_tv(device, request.node.get_closest_marker("gpu_tier") is not None)


@pytest.fixture
def case_seed(request: pytest.FixtureRequest) -> int:
    """Seed for this test case: ``seed_of_case(--dspark-seed, case id)`` (``conformance.seeds``:
    xdist-safe, and the same wherever the suite is installed and whichever module holds the test)."""
    return seed_of_case(run_session(request.config).base_seed, item_case_id(request.node))


@pytest.fixture
def case_generator(case_seed: int, dspark_device: "torch.device") -> "torch.Generator":
    """A ``torch.Generator`` on the test device seeded with :func:`case_seed`."""
    import torch

    gen = torch.Generator(device=dspark_device)
    gen.manual_seed(case_seed)
    return gen


@pytest.fixture
def stat_check(request: pytest.FixtureRequest) -> Callable[[Any], Any]:
    """``stat_check(result)``: record a StatResult in the run's ledger and for the report,
    then assert it passed."""

    def _check(result: Any) -> Any:
        run_session(request.config).ledger.record(result.name, result)
        request.node.user_properties.append(("dspark_stat", json.dumps(result.to_dict())))
        result.assert_ok()
        return result

    return _check


@pytest.fixture
def numeric_check(request: pytest.FixtureRequest) -> Callable[[Any], Any]:
    """``numeric_check(comparison)``: record a :class:`~conformance.numerics.Comparison` for
    the report (its bit identity is the stricter SPEC S0 level, shown apart and never a
    failure), then assert it is within its bound."""

    def _check(comparison: Any) -> Any:
        request.node.user_properties.append(("dspark_numeric", json.dumps(comparison.to_dict())))
        return comparison.assert_ok()

    return _check


@pytest.fixture
def record_reliability(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``record_reliability(name, prob[N], label[N], bins=10)``: keep a reliability diagram's
    bins (mean predicted probability, observed frequency, count) for the report (SPEC S7)."""
    import torch

    def _record(name: str, prob: "torch.Tensor", label: "torch.Tensor", bins: int = 10) -> None:
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
