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

The plugin asks xdist for this scheduling in a run that names ``--dspark-impl`` (the
runner's) with ``--dist load`` (``-n`` alone); any other run keeps xdist's own.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScheduling

__all__ = ["HELD", "LongestFirstScheduling"]

#: Items a worker holds: the one it runs and the next (xdist's worker needs the next item to
#: finish the running one's teardown, so it starts an item only once it holds two).
HELD = 2


class LongestFirstScheduling(LoadScheduling):
    """xdist ``load`` scheduling in the collection's order: each worker holds :data:`HELD`
    items, its first from the head of the order and its second from the tail; a finished item
    brings its worker the head of the items not yet handed out.

    A worker that goes down with items unrun gives them back (xdist's ``LoadScheduling``
    puts them at the end of the order and fills the other workers).
    """

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
        self.pending[:] = range(len(self.collection))
        for node in self.nodes:
            if self.pending:
                self._hand(node, self.pending.pop(0))
        for node in self.nodes:
            if self.pending:
                self._hand(node, self.pending.pop())
        if not self.pending:
            for node in self.nodes:
                node.shutdown()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        """Fill ``node`` up to :data:`HELD` items from the head of the order, or tell it to stop
        once none is left (``duration``, xdist's hint, is not needed: the order is set)."""
        if node.shutting_down:
            return
        if not self.pending:
            node.shutdown()
            return
        while self.pending and len(self.node2pending[node]) < HELD:
            self._hand(node, self.pending.pop(0))

    def _hand(self, node: Any, index: int) -> None:
        self.node2pending[node].append(index)
        node.send_runtest_some([index])
