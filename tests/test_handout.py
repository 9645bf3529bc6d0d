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


def _scheduler(pytester: pytest.Pytester, scheduling: type, workers: int, items: int):
    config = pytester.parseconfig(f"--tx={workers}*popen")
    sched = scheduling(config)
    nodes = [_Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, [f"test_x.py::test_case[{i}]" for i in range(items)])
    sched.schedule()
    return sched, nodes


def _makespan(sched, nodes: list[_Worker], seconds: list[float]) -> tuple[float, dict[str, list[int]]]:
    """Run the items of ``seconds`` (by collection index) as xdist's workers would; return
    when the last ends and the items each worker ran, in order."""
    ran: dict[str, list[int]] = {node.name: [] for node in nodes}
    running: list[tuple[float, int, int]] = []  # (end, worker number, item)
    busy: set[int] = set()

    def start(now: float) -> None:
        for number, node in enumerate(nodes):
            ready = len(node.held) >= HELD or (node.shutting_down and node.held)
            if number not in busy and ready:
                item = node.held.pop(0)
                ran[node.name].append(item)
                busy.add(number)
                heapq.heappush(running, (now + seconds[item], number, item))

    start(0.0)
    now = 0.0
    while running:
        now, number, item = heapq.heappop(running)
        busy.discard(number)
        sched.mark_test_complete(nodes[number], item, seconds[item])
        start(now)
    assert sorted(i for items in ran.values() for i in items) == list(range(len(seconds)))
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
