"""Ratios from one ``step`` run: the reference's fused race against SGLang's
``MarkovSampleStep`` and against the copy roofline, side by side, per shape and mode.

For each shape and mode (``call``: as called; ``graph``: a CUDA-graph replay; ``steady``:
per call of a graph of back-to-back calls on rotated inputs) and each of the reference's two
fused rows:

* ``ours / sglang``: our median over ``sglang MarkovSampleStep``'s (same shape and mode;
  below 1: ours is faster; empty when SGLang did not run);
* ``ours / roofline``: our median over the roofline time of the bytes we must move
  (``roofline logits+noise`` for explicit noise, ``roofline logits only`` for counter noise,
  which is what SGLang reads besides its bias); ``% roofline`` is its inverse in percent.

The ``[call]`` mode also has the ``check="deferred"`` rows (``bench/step_sampler.py``).

The issue 18 targets are reported by :func:`targets`: ``% roofline >= 80`` for explicit
noise at ``B=64 V=129280 float32 [graph]``, and ``ours / sglang < 1`` at every shape and
mode for the counter-noise row (the one comparable with SGLang's in-kernel noise); eagerly
the ``check="deferred"`` call is judged, since SGLang's call too returns before its kernel
ends and checks no value, and the ``check="sync"`` call, which waits for its flags, is
reported beside it. Beside
the first, the ``% roofline`` that a plain device copy of the same bytes reaches at that
shape (``copy, logits+noise bytes``): the ceiling a kernel of that size can approach; and
both again in steady state, the regime of the copy that measures the roofline's bandwidth
(``bench/common.py``). Where the rows include the ``ceiling`` benchmark's (``bench all``, or
its JSON given too), the ``% roofline`` of ``read, race order``, a kernel that reads exactly
the race's bytes in its grid and does nothing else, is reported the same way: what any read
of those bytes reaches; and beside the single replay, ``roofline + empty kernel``: the
roofline time plus the single replay of the ceiling benchmark's ``empty kernel`` (one program,
one store), an estimate of what a kernel that moved the bytes at the copy bandwidth would
reach under this timer, which charges every launch that kernel's time. The target is judged on
the single replay; the steady-state figures are reported beside it, never in its place.

Command line (regenerates the tables from bench JSONs, e.g. the H200 run's):
``python -m bench.summary OUTDIR/bench_step.json [OUTDIR/bench_ceiling.json] [--markdown PATH]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["OURS", "OURS_DEFERRED", "DEFERRED", "SGLANG", "ROOFLINES", "COPY_SAME_BYTES", "READ_SAME_BYTES",
           "EMPTY_KERNEL", "ROOFLINE_PLUS_EMPTY", "ratios",
           "targets", "format_ratios", "markdown", "main"]

OURS = ("ref fused race", "ref fused race, counter noise")
DEFERRED = ", deferred check"  # suffix of the check="deferred" rows, [call] only (bench/step_sampler.py)
OURS_DEFERRED = tuple(impl + DEFERRED for impl in OURS)
SGLANG = "sglang MarkovSampleStep"
COPY_SAME_BYTES = "copy, logits+noise bytes"  # a device copy moving the explicit-noise race's bytes
READ_SAME_BYTES = "read, race order"  # the ceiling benchmark's read of those bytes (bench/ceiling.py)
EMPTY_KERNEL = "empty kernel"  # the ceiling benchmark's launch with no bytes (bench/ceiling.py)
ROOFLINE_PLUS_EMPTY = "roofline + empty kernel"
ROOFLINES = {"ref fused race": "roofline logits+noise", "ref fused race, counter noise": "roofline logits only"}
ROOFLINES |= {impl + DEFERRED: roofline for impl, roofline in ROOFLINES.items()}
MODES = ("call", "graph", "steady")
TARGET_SHAPE, TARGET_PCT = "B=64 V=129280 float32", 80.0


def _ms(row: dict[str, Any] | None) -> float | None:
    return row.get("median_ms") if row is not None and row.get("status", "ok") == "ok" else None


def ratios(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (shape, mode, our row) of the ``step`` rows (dicts as in the bench
    JSON), and one for the same-bytes copy per shape and replayed mode: ``shape``, ``mode``,
    ``impl``, ``ours_ms``, ``sglang_ms``, ``ours_over_sglang``, ``roofline_ms``, ``ours_over_roofline``, ``pct_roofline`` (None where a row is missing,
    skipped or failed)."""
    rows = list(rows)
    step = [r for r in rows if r["benchmark"] == "step"]
    index = {(r["shape"], r["impl"]): r for r in step}
    index |= {(r["shape"], r["impl"]): r for r in rows if r["benchmark"] == "ceiling"
              and r["impl"].startswith((READ_SAME_BYTES + " [", EMPTY_KERNEL + " ["))}
    shapes = list(dict.fromkeys(r["shape"] for r in step))
    out = []
    for shape in shapes:
        for mode in MODES:
            sglang = _ms(index.get((shape, f"{SGLANG} [{mode}]")))
            mine = OURS + OURS_DEFERRED if mode == "call" else OURS
            names = [(impl, f"{impl} [{mode}]", ROOFLINES[impl]) for impl in mine]
            if mode != "call":  # the copy is timed like the graph replays (bench/step_sampler.py)
                copy = COPY_SAME_BYTES if mode == "graph" else f"{COPY_SAME_BYTES} [{mode}]"
                names.append((COPY_SAME_BYTES, copy, ROOFLINES[OURS[0]]))
                names.append((READ_SAME_BYTES, f"{READ_SAME_BYTES} [{mode}]", ROOFLINES[OURS[0]]))
            for impl, name, roofline in names:
                ours = _ms(index.get((shape, name)))
                if ours is None and (shape, name) not in index:
                    continue
                roof = _ms(index.get((shape, roofline)))
                versus = sglang if impl in OURS + OURS_DEFERRED else None  # the copy and the read are ceilings
                out.append({
                    "shape": shape, "mode": mode, "impl": impl, "ours_ms": ours, "sglang_ms": versus,
                    "ours_over_sglang": ours / versus if ours and versus else None,
                    "roofline_ms": roof,
                    "ours_over_roofline": ours / roof if ours and roof else None,
                    "pct_roofline": 100.0 * roof / ours if ours and roof else None,
                })
            empty = _ms(index.get((shape, f"{EMPTY_KERNEL} [{mode}]")))
            roof = _ms(index.get((shape, ROOFLINES[OURS[0]])))
            if mode == "graph" and empty and roof:
                out.append({"shape": shape, "mode": mode, "impl": ROOFLINE_PLUS_EMPTY, "ours_ms": roof + empty,
                            "sglang_ms": None, "ours_over_sglang": None, "roofline_ms": roof,
                            "ours_over_roofline": (roof + empty) / roof, "pct_roofline": 100.0 * roof / (roof + empty)})
    return out


def targets(summary: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue 18 targets (module note): ``roofline_pct`` at the target shape (single
    replay), whether it is met, ``copy_pct`` (the same-bytes copy's ``% roofline`` there),
    ``read_pct`` (the ceiling benchmark's read of those bytes), ``floor_pct`` (``roofline +
    empty kernel``: the roofline plus an empty launch's single replay), ``steady_pct``,
    ``steady_copy_pct`` and ``steady_read_pct`` (the same in steady state; each None without
    its row); against SGLang, per mode, the counter-noise row that is judged (``judged``: graph
    and steady the replayed row, call the ``check="deferred"`` row, which like SGLang's call
    returns before its kernel ends), how many of its shapes had an SGLang time
    (``compared``) and which were not faster (``slower_than_sglang``), and the same for the
    eager ``check="sync"`` row, reported beside it (``sync_call_compared``,
    ``sync_call_slower``)."""
    def pct(impl: str, mode: str) -> float | None:
        found = [s for s in summary if s["impl"] == impl and s["shape"] == TARGET_SHAPE and s["mode"] == mode]
        return found[0]["pct_roofline"] if found else None

    def versus(impl: str, modes: tuple[str, ...]) -> tuple[int, list[str]]:
        rows = [s for s in summary if s["impl"] == impl and s["mode"] in modes and s["ours_over_sglang"] is not None]
        return len(rows), [f"{s['shape']} [{s['mode']}]" for s in rows if s["ours_over_sglang"] >= 1.0]

    replayed, replayed_slower = versus(OURS[1], ("graph", "steady"))
    deferred, deferred_slower = versus(OURS_DEFERRED[1], ("call",))
    sync, sync_slower = versus(OURS[1], ("call",))
    single = pct(OURS[0], "graph")
    return {"roofline_pct": single, "roofline_met": single is not None and single >= TARGET_PCT,
            "copy_pct": pct(COPY_SAME_BYTES, "graph"), "read_pct": pct(READ_SAME_BYTES, "graph"),
            "floor_pct": pct(ROOFLINE_PLUS_EMPTY, "graph"),
            "steady_pct": pct(OURS[0], "steady"), "steady_copy_pct": pct(COPY_SAME_BYTES, "steady"),
            "steady_read_pct": pct(READ_SAME_BYTES, "steady"),
            "judged": {"graph": OURS[1], "steady": OURS[1], "call": OURS_DEFERRED[1]},
            "compared": replayed + deferred, "slower_than_sglang": replayed_slower + deferred_slower,
            "sync_call_compared": sync, "sync_call_slower": sync_slower}


def _num(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


_HEAD = ("shape", "mode", "impl", "ours ms", "sglang ms", "ours/sglang", "roofline ms", "ours/roofline", "% roofline")


def _cells(s: dict[str, Any]) -> list[str]:
    return [s["shape"], s["mode"], s["impl"], _num(s["ours_ms"], ".4f"), _num(s["sglang_ms"], ".4f"),
            _num(s["ours_over_sglang"], ".3f"), _num(s["roofline_ms"], ".4f"), _num(s["ours_over_roofline"], ".3f"),
            _num(s["pct_roofline"], ".1f")]


def _versus(compared: int, slower: list[str], unit: str) -> str:
    if not compared:  # SGLang was skipped (its rows say why): nothing was compared, nothing was won
        return "not compared (no SGLang times)"
    text = f"{compared - len(slower)} of {compared} {unit} faster"
    return text + (f", slower at {', '.join(slower)}" if slower else "")


def format_ratios(summary: Sequence[dict[str, Any]]) -> str:
    """The ratios as a fixed-width table, then the targets line."""
    cells = [_cells(s) for s in summary]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(_HEAD)]

    def line(values):
        return "  ".join(v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths)))

    met = targets(summary)
    tail = (f"targets: {TARGET_SHAPE} [graph] explicit noise at {_num(met['roofline_pct'], '.1f') or '-'}% of the "
            f"roofline (>= {TARGET_PCT:g}%: {'met' if met['roofline_met'] else 'NOT met'}; a copy of the same bytes: "
            f"{_num(met['copy_pct'], '.1f') or '-'}%"
            + (f", a kernel that only reads them: {_num(met['read_pct'], '.1f')}%" if met["read_pct"] else "")
            + (f", the copy bandwidth plus an empty launch: {_num(met['floor_pct'], '.1f')}%" if met["floor_pct"] else "")
            + f"; steady state: {_num(met['steady_pct'], '.1f') or '-'}%, "
            f"the copy {_num(met['steady_copy_pct'], '.1f') or '-'}%"
            + (f", the read {_num(met['steady_read_pct'], '.1f')}%" if met["steady_read_pct"] else "")
            + "); counter noise vs SGLang (replays, and "
            f"eager calls with check='deferred'): " + _versus(met['compared'], met['slower_than_sglang'], "shapes/modes")
            + "; eager with check='sync' (waits for its flags): "
            + _versus(met["sync_call_compared"], met["sync_call_slower"], "shapes"))
    return "\n".join([line(_HEAD), line(["-" * w for w in widths])] + [line(c) for c in cells] + ["", tail])


def markdown(summary: Sequence[dict[str, Any]], environment: dict[str, Any] | None = None) -> str:
    """The ratios as a markdown table (for a document or a session's notes), headed by the device."""
    lines = []
    if environment:
        lines.append(f"Device {environment.get('device_name')}, torch {environment.get('torch')}, triton "
                     f"{environment.get('triton')}, sglang {environment.get('sglang')}; "
                     f"`{environment.get('command', '')}`.\n")
    lines.append("| " + " | ".join(_HEAD) + " |")
    lines.append("|" + "|".join("---" if i < 3 else "---:" for i in range(len(_HEAD))) + "|")
    lines += ["| " + " | ".join(_cells(s)) + " |" for s in summary]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.summary JSON [JSON ...] [--markdown PATH]``: print the ratios of the
    rows of bench JSONs of one run (``step``, and ``ceiling`` beside it)."""
    parser = argparse.ArgumentParser(prog="python -m bench.summary", description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", help="bench JSONs (python -m bench step|ceiling|all --json PATH)")
    parser.add_argument("--markdown", metavar="PATH", help="also write the markdown table here")
    args = parser.parse_args(argv)
    payloads = []
    for path in args.json:
        with open(path, encoding="utf-8") as handle:
            payloads.append(json.load(handle))
    summary = ratios(row for payload in payloads for row in payload["rows"])
    if not summary:
        parser.error(f"{', '.join(args.json)}: no step rows of the fused race")
    print(format_ratios(summary))
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(markdown(summary, payloads[0].get("environment")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
