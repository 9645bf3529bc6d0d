"""Shards: one run's selected cases split over many machines, and their reports merged back.

``dspark-conformance run --shard I/N`` (the plugin's ``--dspark-shard I/N``) runs shard ``I``
of ``N`` of the cases the selection keeps (``-k``, ``--case``, pytest ``-m``): the selected
case ids, sorted, dealt round-robin, the ``j``-th (from 0) to shard ``j mod N + 1``
(:func:`shard_cases`). Every shard computes the same partition from the same selection (the
same suite and the same command but for ``--shard``), so the ``N`` shards together run each
selected case exactly once, and their case counts differ by at most one; neighbours in the
sorted order (the cases of one family, of like cost) go to different shards. The partition
is taken before the runner's latency-bound split (``--dspark-phase``), so both phases of a
shard run that shard's cases. A shard's results.json records ``shard`` ``[I, N]`` and
``shard_selection``: the number of cases it was dealt from and a digest of their ids
(:func:`selection_digest`), the same in every shard of one selection.

``dspark-conformance merge-reports OUT SRC...`` merges the shards' results.json into one
(:func:`merge_shards`), refusing shards that are not one complete set of one run
(:func:`check_shards`); the CLI writes the reports and recomputes the verdict from the
merged records as ``run`` does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from .runner import merge_phases

#: What every shard of one run must share (results.json keys): the implementation, device,
#: base seed, statistical budget and the adapter's settings (a ledger switched off).
SHARED_KEYS = ("impl", "device", "base_seed", "budget", "replay_env")


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``, two integers with ``1 <= I <= N``.

    Raises:
        ValueError: anything else (the message says what was expected and what was given).

    >>> parse_shard("3/24")
    (3, 24)
    """
    index, sep, count = text.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ValueError(f"expected I/N, shard I of N with 1 <= I <= N (e.g. 3/24), got {text!r}")
    return int(index), int(count)


def shard_cases(case_ids: Iterable[str], index: int, count: int) -> set[str]:
    """The case ids of shard ``index`` of ``count`` (module note): the ids sorted, dealt
    round-robin, the ``j``-th to shard ``j mod count + 1``.

    >>> sorted(shard_cases(["S1/b", "S1/a", "S2/c", "S3/d"], 1, 3))
    ['S1/a', 'S3/d']
    """
    return {case_id for j, case_id in enumerate(sorted(set(case_ids))) if j % count == index - 1}


def selection_digest(case_ids: Iterable[str]) -> dict[str, Any]:
    """``{"cases": M, "sha256": first 16 hex digits}`` of the selected case ids a shard was
    dealt from: equal in every shard of one selection."""
    ids = sorted(set(case_ids))
    return {"cases": len(ids), "sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]}


class ShardMergeError(ValueError):
    """The sources are not one complete set of shards of one run (the message says how)."""


def _shard_label(source: str, payload: dict[str, Any]) -> str:
    index, count = payload["shard"]
    return f"{source} (shard {index}/{count})"


def check_shards(shards: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Check that ``shards`` (``(source name, results.json)`` pairs) are one complete set of
    shards of one run: each a shard's report with a verdict, all of one shard count and of
    the same :data:`SHARED_KEYS` and selection, each of ``1..N`` once, no case in two.

    Raises:
        ShardMergeError: the first of those that does not hold, naming the sources and what
            differs.
    """
    for source, payload in shards:
        shard = payload.get("shard") if isinstance(payload, dict) else None
        if not (isinstance(shard, list) and len(shard) == 2 and isinstance(payload.get("tests"), list)):
            raise ShardMergeError(f"sources: {source} is no shard's report: its results.json has no 'shard' "
                                  "(run each shard with --shard I/N)")
        if "error" in payload or not payload.get("tests"):
            raise ShardMergeError(f"sources: {_shard_label(source, payload)} ended without a verdict "
                                  f"({payload.get('error', 'no case recorded')}): run that shard again")
    (first, head), rest = shards[0], shards[1:]
    for source, payload in rest:
        if payload["shard"][1] != head["shard"][1]:
            raise ShardMergeError(f"sources: the shards are of different counts: {_shard_label(first, head)}, "
                                  f"{_shard_label(source, payload)}")
        for key in SHARED_KEYS:
            if payload.get(key) != head.get(key):
                raise ShardMergeError(f"sources: the shards differ in {key}: {head.get(key)!r} in {first}, "
                                      f"{payload.get(key)!r} in {source}")
    selections = [(source, payload["shard_selection"]) for source, payload in shards
                  if payload.get("shard_selection")]  # unknown where every worker was interrupted
    for source, selection in selections[1:]:
        if selection != selections[0][1]:
            raise ShardMergeError(
                f"sources: the shards were dealt from different selections of cases: {selections[0][0]} from "
                f"{selections[0][1]['cases']} (digest {selections[0][1]['sha256']}), {source} from "
                f"{selection['cases']} (digest {selection['sha256']}); every shard runs the same command but "
                "for --shard, on the same suite")
    count = head["shard"][1]
    seen: dict[int, str] = {}
    for source, payload in shards:
        index = payload["shard"][0]
        if index in seen:
            raise ShardMergeError(f"sources: {seen[index]} and {source} are both shard {index}/{count}")
        seen[index] = source
    missing = [index for index in range(1, count + 1) if index not in seen]
    if missing:
        raise ShardMergeError(f"sources: shard{'s' if len(missing) > 1 else ''} "
                              f"{', '.join(map(str, missing))} of {count} missing (each of 1..{count} is needed once)")
    owner: dict[str, str] = {}
    for source, payload in shards:
        for record in payload["tests"]:
            other = owner.setdefault(record["case"], source)
            if other != source:
                raise ShardMergeError(f"sources: case {record['case']!r} is in both {other} and {source}")


def merge_shards(shards: Sequence[tuple[str, dict[str, Any]]]) -> tuple[int, dict[str, Any]]:
    """One ``(pytest exit code, results.json)`` from a complete set of shards
    (:func:`check_shards` first): the records of all in shard order, the cases selected per
    section summed, collection errors once each, interrupted if a shard was
    (``conformance.runner.merge_phases``); the wall time the longest shard's, and
    ``shards`` saying where each came from. The verdict is left to the caller (the CLI
    computes it from the records, as ``run`` does).

    Raises:
        ShardMergeError: :func:`check_shards` refused them.
    """
    check_shards(shards)
    ordered = sorted(shards, key=lambda pair: pair[1]["shard"][0])
    code, merged = merge_phases(*((payload.get("exit_status", 0), payload) for _, payload in ordered))
    assert merged is not None  # every shard has records
    for key in ("shard", "overall", "exit_code"):
        merged.pop(key, None)
    merged["wall_s"] = max(payload["wall_s"] for _, payload in ordered)  # the shards ran side by side
    merged["shards"] = {"count": len(ordered), "reports": [source for source, _ in ordered],
                        "wall_s": [payload["wall_s"] for _, payload in ordered]}
    return code, merged
