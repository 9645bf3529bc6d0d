"""How an xdist run hands its cases to the workers: in the collection's order, one at a time.

The plugin sorts the suite's cases longest first (``conformance.case_order``). xdist's own
``load`` scheduling then deals the first cases in chunks (five a worker for the suite's 351
cases at 16 workers), so the longest cases land on one worker, one behind another: on an
H100 the reference's parallel phase took 45 s of wall for 17.8 s of case time a worker,
its longest case 27.6 s. :class:`LongestFirstScheduling` keeps xdist's protocol (a worker runs
an item once it holds the next one, or is told to stop) and changes only what it is given:
each worker starts with one case from the head of the order and one from its tail, the
shortest, to run next; then every finished case brings the worker the head of what is left.
So the longest cases start at once on separate workers, the short cases wait behind them
and no worker idles while another holds cases it has not started (greedy longest-first, each
choice made one case ahead, as xdist's protocol requires).

With ``alone`` (the runner's ``--latency-bound alone``), the cases that are latency bound
(thousands of serial round trips to the device, each of which waits behind every other
worker's kernels on a shared GPU) are kept back until every other case has finished and the
other workers have stopped; then one worker, already started, runs them one after another.
So they run alone on the card in the same pytest session, without a second one to start.

The plugin asks xdist for this scheduling in a run that names ``--dspark-impl`` (the
runner's) with ``--dist load`` (``-n`` alone); any other run keeps xdist's own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScheduling

__all__ = ["HELD", "LongestFirstScheduling", "read_node_ids", "write_node_ids"]

#: Items a worker holds: the one it runs and the next (xdist's worker needs the next item to
#: finish the running one's teardown, so it starts an item only once it holds two).
HELD = 2


class LongestFirstScheduling(LoadScheduling):
    """xdist ``load`` scheduling in the collection's order: each worker holds :data:`HELD`
    items, its first from the head of the order and its second from the tail; a finished item
    brings its worker the head of the items not yet handed out.

    ``alone()``, where given, names (by node id) the items to run alone: they are kept back
    until every other item has finished and every other worker has stopped, then run in the
    collection's order by the worker that first found no other item left to take (the others
    are told to stop as they find none). A worker that goes down with items unrun gives them
    back, as in xdist's ``LoadScheduling``: to the end of the order, or to the kept-back items.
    """

    def __init__(self, config: Any, log: Any = None, *, alone: Callable[[], Collection[str]] | None = None) -> None:
        super().__init__(config, log)
        self._alone_ids = alone
        self._alone: frozenset[int] = frozenset()  # indices of the items to run alone
        self.kept_back: list[int] = []  # those not yet handed out, in order
        self.last_worker: Any = None  # the worker that runs them

    @property
    def tests_finished(self) -> bool:
        """xdist's, and no item kept back or held by the last worker before it may run them."""
        waiting = self.last_worker is not None and not self.last_worker.shutting_down
        return not self.kept_back and not waiting and super().tests_finished

    @property
    def has_pending(self) -> bool:
        return bool(self.kept_back) or super().has_pending

    def schedule(self) -> None:
        """Hand out the first items once every worker has collected (xdist calls this, and
        again when a worker joins later)."""
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = next(iter(self.node2collection.values()))
        alone = set(self._alone_ids()) if self._alone_ids is not None else set()
        self._alone = frozenset(i for i, nodeid in enumerate(self.collection) if nodeid in alone)
        self.kept_back = sorted(self._alone)
        self.pending[:] = [i for i in range(len(self.collection)) if i not in self._alone]
        for node in self.nodes:
            if self.pending:
                self._hand(node, self.pending.pop(0))
        for node in self.nodes:
            if self.pending:
                self._hand(node, self.pending.pop())
        for node in self.nodes:
            self.check_schedule(node)

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        """Fill ``node`` up to :data:`HELD` items from the head of the order; once none is left,
        make it the last worker if items are kept back and there is none (the first, or the
        one that went down), else tell it to stop (``duration``, xdist's hint, is not needed:
        the order is set)."""
        if node.shutting_down:
            return
        if node is self.last_worker:
            self._release()
            return
        if self.pending:
            self._fill(node)
            if self.pending:
                return
        if self.last_worker is None and self.kept_back:
            self.last_worker = node
            self._release()
        else:  # it runs what it holds and stops (nothing else may end a wait for a next item)
            node.shutdown()

    def remove_node(self, node: Any) -> str | None:
        """xdist's (a worker gone: the item it was running, if it crashed, and its other items
        given back), the kept-back items started once their worker is alone."""
        held = self.node2pending.pop(node)
        if node is self.last_worker:
            self.last_worker = None
        crashed = None
        if held:
            assert self.collection is not None
            crashed = self.collection[held.pop(0)]
            self.pending.extend(i for i in held if i not in self._alone)
            self.kept_back = sorted({*self.kept_back, *(i for i in held if i in self._alone)})
        for other in self.nodes:
            self.check_schedule(other)
        return crashed

    def _release(self) -> None:
        """The last worker's items. While it holds other items: more from the head of the order,
        else the first kept-back one as its next (a worker runs an item once it holds the next).
        Once it holds no other item: nothing while another worker is up (items given back by a
        crashed worker are for them, or for the worker xdist starts in its place); then, alone,
        after the kept-back item it holds, what is left of the others, the other kept-back
        items and the order to stop."""
        node = self.last_worker
        held = self.node2pending[node]
        if any(i not in self._alone for i in held):
            if self.pending:
                self._fill(node)
            elif len(held) < HELD and self.kept_back:
                self._hand(node, self.kept_back.pop(0))
            return
        if len(self.node2pending) > 1:
            return
        for index in [*self.pending, *self.kept_back]:
            self._hand(node, index)
        self.pending.clear()
        self.kept_back.clear()
        node.shutdown()

    def _fill(self, node: Any) -> None:
        while self.pending and len(self.node2pending[node]) < HELD:
            self._hand(node, self.pending.pop(0))

    def _hand(self, node: Any, index: int) -> None:
        self.node2pending[node].append(index)
        node.send_runtest_some([index])


def write_node_ids(path: str | os.PathLike, node_ids: list[str]) -> None:
    """A worker's list of the node ids to run alone, written whole at ``path`` (each worker
    writes the same list: the last to finish replaces the file at once)."""
    path = Path(path)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(node_ids))
    os.replace(partial, path)


def read_node_ids(path: str | os.PathLike) -> list[str]:
    """The node ids the workers wrote at ``path`` (:func:`write_node_ids`).

    Raises:
        RuntimeError: no worker wrote the file (workers on another host cannot).
    """
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RuntimeError(f"--dspark-latency-bound alone: no worker wrote the latency-bound cases' node ids to "
                           f"{path} (it needs xdist workers on this host)") from None
