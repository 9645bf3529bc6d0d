"""``conformance.handout``: the runner's xdist scheduling hands cases out in the collection's
order (longest first), the longest at once on separate workers.

The workers here are stand-ins driven as xdist's controller and workers drive a scheduler:
a worker runs the first item it holds once it holds two or has been told to stop, and each
finished item is reported with ``mark_test_complete``.
"""

from __future__ import annotations

import heapq
from types import SimpleNamespace

import pytest

from conformance.handout import HELD, LongestFirstScheduling

pytest_plugins = ["pytester"]


class _Worker:
    """What a scheduler sees of an xdist worker (``WorkerController``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = SimpleNamespace(id=name)
        self.held: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.held.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(pytester: pytest.Pytester, scheduling: type, workers: int, items: int, **kwargs):
    config = pytester.parseconfig(f"--tx={workers}*popen")
    sched = scheduling(config, **kwargs)
    nodes = [_Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, _ids(items))
    sched.schedule()
    return sched, nodes


def _ids(items: int) -> list[str]:
    return [f"test_x.py::test_case[{i}]" for i in range(items)]


def _makespan(sched, nodes: list[_Worker], seconds: list[float]) -> tuple[float, dict[str, list[int]]]:
    """Run the items of ``seconds`` (by collection index) as xdist's workers would (a worker
    told to stop exits once it has run what it holds, and the scheduler hears of it; once the
    scheduler says the tests are finished, every worker is told to stop); return
    when the last ends and the items each worker ran, in order (``sched.started``: when each
    item started, ``sched.exited``: when each worker exited)."""
    ran: dict[str, list[int]] = {node.name: [] for node in nodes}
    running: list[tuple[float, int, int]] = []  # (end, worker number, item)
    busy: set[int] = set()
    live = set(range(len(nodes)))
    sched.started, sched.exited = {}, {}

    def start(now: float) -> None:
        if sched.tests_finished:  # xdist's controller after each event: stop every worker
            for node in nodes:
                node.shutdown()
        for number, node in enumerate(nodes):
            ready = len(node.held) >= HELD or (node.shutting_down and node.held)
            if number not in busy and ready:
                item = node.held.pop(0)
                ran[node.name].append(item)
                busy.add(number)
                sched.started[item] = now
                heapq.heappush(running, (now + seconds[item], number, item))
        for number in sorted(live - busy):
            if nodes[number].shutting_down and not nodes[number].held:
                live.discard(number)
                sched.exited[nodes[number].name] = now
                sched.remove_node(nodes[number])
                start(now)
                return

    start(0.0)
    now = 0.0
    while running:
        now, number, item = heapq.heappop(running)
        busy.discard(number)
        sched.mark_test_complete(nodes[number], item, seconds[item])
        start(now)
    assert sorted(i for items in ran.values() for i in items) == list(range(len(seconds)))
    assert not live and sched.tests_finished
    return now, ran


def test_each_worker_starts_with_a_head_case_and_holds_a_tail_case_next(pytester):
    _, nodes = _scheduler(pytester, LongestFirstScheduling, workers=3, items=10)
    assert [node.held for node in nodes] == [[0, 9], [1, 8], [2, 7]]


def test_a_finished_case_brings_its_worker_the_head_of_the_rest(pytester):
    sched, nodes = _scheduler(pytester, LongestFirstScheduling, workers=3, items=10)
    nodes[1].held.pop(0)
    sched.mark_test_complete(nodes[1], 1)
    assert nodes[1].held == [8, 3]
    assert not any(node.shutting_down for node in nodes)


def test_workers_are_told_to_stop_once_every_case_is_handed_out(pytester):
    sched, nodes = _scheduler(pytester, LongestFirstScheduling, workers=3, items=5)
    assert [node.held for node in nodes] == [[0, 4], [1, 3], [2]]
    assert all(node.shutting_down for node in nodes)  # the last worker runs its one case and stops
    assert sched.tests_finished is False


def test_the_longest_cases_run_at_once_and_every_worker_stays_busy(pytester):
    """Four workers, cases sorted longest first: 8, 7, 6 and 5 s, then twenty of 1 s (46 s of
    work). Dealt in chunks (xdist's ``load``: two cases a worker here, five at the suite's
    size), the 8 s and 7 s cases share a worker, which ends at 16 s; handed out one ahead from
    the head, the four longest start at once and the run ends at 12 s, the 46 s spread over
    four workers rounded up to whole cases."""
    seconds = [8.0, 7.0, 6.0, 5.0] + [1.0] * 20
    from xdist.scheduler import LoadScheduling

    chunked, _ = _makespan(*_scheduler(pytester, LoadScheduling, workers=4, items=len(seconds)), seconds)
    ours, ran = _makespan(*_scheduler(pytester, LongestFirstScheduling, workers=4, items=len(seconds)), seconds)
    assert chunked == 16.0
    assert ours == 12.0
    assert [items[0] for items in ran.values()] == [0, 1, 2, 3]


@pytest.mark.filterwarnings("ignore:Benchmarks are automatically disabled")  # pytest-benchmark, where installed
def test_the_runner_asks_xdist_for_it_and_a_plain_xdist_run_does_not(pytester):
    from xdist.scheduler import LoadScheduling, WorkStealingScheduling

    def chosen(*args: str) -> type:
        # "--dist=load --tx=2*popen": what xdist makes of "-n 2" alone when its command line runs
        config = pytester.parseconfigure("-n", "2", "--dist=load", "--tx=2*popen", *args)
        return type(config.hook.pytest_xdist_make_scheduler(config=config, log=None))

    assert chosen("--dspark-impl=reference") is LongestFirstScheduling
    assert chosen("--dspark-device=cpu") is LoadScheduling  # the suite without --dspark-impl: xdist's own
    assert chosen("--dspark-impl=reference", "--dist=worksteal") is WorkStealingScheduling


@pytest.mark.parametrize("alone", [[20, 21, 22], [22], [3, 21]], ids=["three-last", "one-last", "two-anywhere"])
def test_cases_run_alone_start_once_every_other_case_and_worker_has_finished(pytester, alone):
    """Items kept back to run alone (the latency-bound cases of ``--latency-bound alone``) run
    one after another on one worker, the first starting when every other item has ended and
    every other worker has exited; xdist counts the run finished only after them."""
    seconds = [8.0, 7.0, 6.0, 5.0] + [1.0] * 16 + [3.0, 2.0, 4.0]
    sched, nodes = _scheduler(pytester, LongestFirstScheduling, workers=4, items=len(seconds),
                              alone=lambda: [_ids(len(seconds))[i] for i in alone])
    assert not sched.tests_finished
    end, ran = _makespan(sched, nodes, seconds)
    (worker,) = [name for name, items in ran.items() if set(alone) <= set(items)]
    assert ran[worker][-len(alone):] == alone
    others_end = max(sched.started[i] + seconds[i] for i in range(len(seconds)) if i not in alone)
    assert sched.started[alone[0]] == max(others_end, *(t for w, t in sched.exited.items() if w != worker))
    assert end == sched.started[alone[0]] + sum(seconds[i] for i in alone)


def test_cases_run_alone_with_nothing_else_selected_run_on_one_worker(pytester):
    sched, nodes = _scheduler(pytester, LongestFirstScheduling, workers=3, items=2, alone=lambda: _ids(2))
    end, ran = _makespan(sched, nodes, [2.0, 3.0])
    assert end == 5.0 and sorted(ran.values()) == [[], [], [0, 1]]


def test_the_last_worker_lost_gives_its_kept_back_cases_to_the_next_worker(pytester):
    """A crash of the worker running the kept-back items: the item it was running is the crash
    item, the others it held are kept back again, and a worker that joins later runs them."""
    sched, nodes = _scheduler(pytester, LongestFirstScheduling, workers=2, items=5, alone=lambda: _ids(5)[2:])
    for node in nodes:  # each runs its head item (0, 1) and reports it
        node.held.pop(0)
    sched.mark_test_complete(nodes[0], 0)
    sched.mark_test_complete(nodes[1], 1)
    last, other = (nodes[0], nodes[1]) if sched.last_worker is nodes[0] else (nodes[1], nodes[0])
    assert other.shutting_down and not last.shutting_down and not sched.tests_finished
    sched.remove_node(other)
    assert last.held == [2, 3, 4] and last.shutting_down
    last.held.pop(0)  # runs 2 and dies in it
    assert sched.remove_node(last) == "test_x.py::test_case[2]"
    assert sched.kept_back == [3, 4] and not sched.tests_finished
    fresh = _Worker("gw2")
    sched.add_node(fresh)
    sched.add_node_collection(fresh, _ids(5))
    sched.schedule()
    assert fresh.held == [3, 4] and fresh.shutting_down


def test_cases_given_back_by_a_crash_never_start_a_kept_back_case_beside_another_worker(pytester):
    """A worker that crashes in the other cases gives back the case it held next. The last
    worker, holding its first kept-back case, does not take it (holding two, it would start the
    kept-back case beside the workers still up); the case goes to a worker xdist starts in the
    crashed one's place, or, once the last worker is alone, before the kept-back cases."""
    sched, (gw0, gw1, gw2) = _scheduler(pytester, LongestFirstScheduling, workers=3, items=8,
                                        alone=lambda: _ids(8)[6:])
    assert [gw0.held, gw1.held, gw2.held] == [[0, 5], [1, 4], [2, 3]] and sched.last_worker is gw0
    for node in (gw0, gw1, gw2):
        node.held.pop(0)  # each runs its first case
    sched.mark_test_complete(gw0, 0)
    assert gw0.held == [5, 6]  # its next case, then the first kept-back one
    gw0.held.pop(0)
    sched.mark_test_complete(gw0, 5)  # gw0 holds 6 and waits: a worker runs a case once it holds the next
    assert sched.remove_node(gw2) == "test_x.py::test_case[2]"  # gw2 dies running 2; 3 is given back
    assert gw0.held == [6] and sched.pending == [3]
    fresh = _Worker("gw3")  # xdist's replacement takes it
    sched.add_node(fresh)
    sched.add_node_collection(fresh, _ids(8))
    sched.schedule()
    assert fresh.held == [3] and fresh.shutting_down and gw0.held == [6]
    fresh.held.pop(0)
    sched.mark_test_complete(fresh, 3)
    sched.remove_node(fresh)
    assert gw0.held == [6] and not gw0.shutting_down  # gw1 is still running 1
    sched.mark_test_complete(gw1, 1)
    gw1.held.pop(0)
    sched.mark_test_complete(gw1, 4)
    sched.remove_node(gw1)
    assert gw0.held == [6, 7] and gw0.shutting_down


def test_without_a_replacement_the_given_back_cases_run_before_the_kept_back_ones(pytester):
    sched, (gw0, gw1) = _scheduler(pytester, LongestFirstScheduling, workers=2, items=6, alone=lambda: _ids(6)[4:])
    assert [gw0.held, gw1.held] == [[0, 3], [1, 2]] and gw1.shutting_down
    gw0.held.pop(0)
    sched.mark_test_complete(gw0, 0)
    gw0.held.pop(0)
    sched.mark_test_complete(gw0, 3)
    assert gw0.held == [4]
    gw1.held.pop(0)
    sched.remove_node(gw1)  # dies running 1, gives back 2; no worker replaces it
    assert gw0.held == [4, 2, 5] and gw0.shutting_down and sched.pending == [] and sched.kept_back == []


def test_a_worker_in_place_of_a_lost_last_worker_becomes_the_last_worker(pytester):
    """The last worker dies before its kept-back cases: the worker xdist starts in its place
    takes the case it held next and, after it, the kept-back ones (none is left unrun)."""
    sched, (gw0, gw1) = _scheduler(pytester, LongestFirstScheduling, workers=2, items=5, alone=lambda: _ids(5)[3:])
    assert [gw0.held, gw1.held] == [[0, 2], [1]] and sched.last_worker is gw0 and gw1.shutting_down
    gw1.held.pop(0)
    sched.mark_test_complete(gw1, 1)
    sched.remove_node(gw1)
    gw0.held.pop(0)
    assert sched.remove_node(gw0) == "test_x.py::test_case[0]"  # dies running 0, gives back 2
    assert sched.last_worker is None and sched.pending == [2] and sched.kept_back == [3, 4]
    fresh = _Worker("gw2")
    sched.add_node(fresh)
    sched.add_node_collection(fresh, _ids(5))
    sched.schedule()
    assert sched.last_worker is fresh and fresh.held == [2, 3] and not fresh.shutting_down
    fresh.held.pop(0)
    sched.mark_test_complete(fresh, 2)
    assert fresh.held == [3, 4] and fresh.shutting_down and sched.tests_finished is False
