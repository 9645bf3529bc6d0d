"""The order in which a run hands its cases to pytest's workers: longest first.

A long case handed out late ends a run after every other worker has stopped (the
reference's parallel phase on an H100 in collection order: 16.5 s of work per worker, 38 s
of wall time, its last 10 s two S3 cases). The runner therefore sorts the suite's cases by
what each took when last measured (``case_costs.json``: seconds per case id, the longest of
the whole-suite runs named in its ``about``), the latency-bound ones first where they run
among the others, and the cases a ledger expects to lose the CUDA context last. A case the
table lacks counts as free and keeps its collection order among its peers. xdist's workers
take the cases in this order (``conformance.handout``). The order decides nothing else:
seeds follow case ids, never positions (``conformance.seeds``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

__all__ = ["COSTS_FILE", "case_costs", "order_key"]

#: Seconds per case id (``seconds``) and how they were measured (``about``).
COSTS_FILE = Path(__file__).resolve().parent / "case_costs.json"


@functools.cache
def case_costs() -> dict[str, float]:
    """The measured seconds of each case id in :data:`COSTS_FILE`.

    Raises:
        ValueError: the file holds no ``seconds`` mapping of case ids to numbers >= 0.
    """
    seconds = json.loads(COSTS_FILE.read_text()).get("seconds")
    if not isinstance(seconds, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and v >= 0 for k, v in seconds.items()):
        raise ValueError(f"{COSTS_FILE}: expected a 'seconds' mapping of case ids to seconds >= 0")
    return seconds


def order_key(case_id: str, latency_bound: bool, loses_context: bool = False, *,
              latency_last: bool = False) -> tuple[bool, bool, float]:
    """Sort key of a case: latency-bound cases first (last where ``latency_last``: they run
    alone after the others), then the longest measured first; after them, the cases whose
    ledger entry expects them to lose the CUDA context (``ExpectedFailure.loses_cuda_context``),
    since every later case of their process cannot run and goes again to a fresh one
    (``conformance.cuda_context``)."""
    return (latency_bound if latency_last else not latency_bound, loses_context, -case_costs().get(case_id, 0.0))
