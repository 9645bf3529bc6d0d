"""Timing, copy bandwidth, result rows and the printed table shared by every benchmark.

Units: times in milliseconds (ms), sizes in bytes, bandwidth in GB/s with GB = 1e9 bytes.

Timers: on CUDA the median of CUDA-event times of ``rep_ms`` worth of calls after
``warmup_ms`` of warm-up, each call preceded by a read pass over a 256 MiB buffer that
evicts the L2 cache (the repeat counts of ``triton.testing.do_bench``); on CPU the median of
``time.perf_counter`` around each call, after the same warm-up. The flush reads instead of
writing (``do_bench`` zero-fills its buffer) because a written flush leaves the L2 full of
dirty lines whose write-back is then charged to the timed call: on the H200 that adds 5.2 us
(18%) to the fused race at ``B=64, V=129,280`` fp32 (29.0 against 23.8 us), 2.6 us to a
plain copy of the same 66 MB, and 0.5% to the 1 GiB copy of the bandwidth measurement
(``results/perf/performance-history.md``, session 12). ``graph_replay`` captures a
call once in a CUDA graph so that only its kernels are timed (no Python, no launches, and
no host-side value checks: the reference skips those while a graph is being captured).

Steady state (``measure_steady``): one graph of ``n`` back-to-back calls, each on its own
input set (``steady_sets`` of them, together at least 256 MiB, so that no call finds its
inputs in the L2), timed per replay as above and divided by ``n``. A single replay charges
one graph launch and one grid's ramp-up and drain to a 20 us kernel (an empty kernel's
replay times 2.75 us on the H200); the copy that measures the bandwidth moves 2 GiB in one
call, where those costs are 0.5%. The steady-state time puts a kernel in that regime, the
way an engine's captured decode step runs it among other kernels.

To add a benchmark: write ``bench/<name>.py`` with ``run(timing, copy, *, quick) ->
list[Row]`` and register it in ``bench/__main__.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from dspark_ref._checks import check_int

__all__ = [
    "GB",
    "Timing",
    "CopyBandwidth",
    "Row",
    "median_ms",
    "graph_replay",
    "steady_sets",
    "copy_bandwidth",
    "describe",
    "measure",
    "measure_steady",
    "roofline_row",
    "skipped_row",
    "finalize",
    "format_table",
    "environment",
    "write_json",
]

GB = 1e9
_MIN_HOST_REPEATS = 3
_MAX_HOST_REPEATS = 1000
_REASON_CHARS = 160  # a skip / failure reason is cut to one readable line


@dataclasses.dataclass(frozen=True)
class Timing:
    """Where and how long to time: ``device``, ``warmup_ms`` and ``rep_ms`` budgets (ms),
    and ``graphs`` (also time CUDA-graph replays; CUDA only)."""

    device: torch.device
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    graphs: bool = True

    @property
    def use_graphs(self) -> bool:
        return self.graphs and self.device.type == "cuda"

    @property
    def timer(self) -> str:
        if self.device.type == "cuda":
            return "CUDA-event median (L2 evicted by a read pass before each call)"
        return "time.perf_counter median"


@dataclasses.dataclass(frozen=True)
class CopyBandwidth:
    """Measured ``dst.copy_(src)`` of one buffer: ``bytes`` (one buffer), ``median_ms``,
    ``gbs = 2 * bytes / time`` (read + write, GB/s)."""

    bytes: int
    median_ms: float
    gbs: float


@dataclasses.dataclass
class Row:
    """One measurement. ``bytes_moved``: bytes the operation must read (and write, where a
    benchmark says so) per call; ``status``: ``"ok"``, ``"skipped: <reason>"`` or
    ``"failed: <reason>"``. ``gbs`` (GB/s), ``pct_copy`` (% of copy bandwidth) and
    ``speedup`` (baseline median / this median) are filled by ``finalize``."""

    benchmark: str
    shape: str
    impl: str
    params: dict[str, Any]
    median_ms: float | None = None
    bytes_moved: int | None = None
    baseline: bool = False
    note: str = ""
    status: str = "ok"
    gbs: float | None = None
    pct_copy: float | None = None
    speedup: float | None = None


def _host_median_ms(fn: Callable[[], object], warmup_ms: float, rep_ms: float) -> float:
    start = time.perf_counter()
    fn()  # first call: lazy initialisation, allocation, compilation
    while (time.perf_counter() - start) * 1e3 < warmup_ms:
        fn()
    times: list[float] = []
    while len(times) < _MIN_HOST_REPEATS or (sum(times) < rep_ms and len(times) < _MAX_HOST_REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


_FLUSH_BYTES = 256 * 2**20  # well above the L2 of current GPUs (H100/H200: 50 MB)
_FLUSH: dict[torch.device, torch.Tensor] = {}


def _evict_l2(device: torch.device) -> None:
    """Read a 256 MiB buffer: the L2 then holds clean lines only (module note)."""
    buffer = _FLUSH.get(device)
    if buffer is None:
        buffer = _FLUSH[device] = torch.zeros(_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    buffer.max()


def _device_median_ms(fn: Callable[[], object], device: torch.device, warmup_ms: float, rep_ms: float) -> float:
    fn()
    torch.cuda.synchronize(device)
    probe = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    probe[0].record()
    for _ in range(5):
        _evict_l2(device)
        fn()
    probe[1].record()
    torch.cuda.synchronize(device)
    estimate_ms = max(probe[0].elapsed_time(probe[1]) / 5, 1e-3)  # the flush included, as do_bench does
    for _ in range(max(1, int(warmup_ms / estimate_ms))):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(max(1, int(rep_ms / estimate_ms)))]
    for start, end in events:
        _evict_l2(device)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(start.elapsed_time(end) for start, end in events)


def median_ms(fn: Callable[[], object], timing: Timing) -> float:
    """Median time of one call of ``fn`` in ms: CUDA events after an L2-evicting read
    pass on CUDA, ``time.perf_counter`` on CPU (module note)."""
    if timing.device.type == "cuda":
        return _device_median_ms(fn, timing.device, timing.warmup_ms, timing.rep_ms)
    return _host_median_ms(fn, timing.warmup_ms, timing.rep_ms)


class _GraphReplay:
    """A captured graph's ``replay``, holding the captured callable too: the tensors that
    callable closes over (inputs its factory made, such as SGLang's bias and temperatures)
    live outside the graph's pool, and freed they would be reused while the graph still
    reads them."""

    def __init__(self, graph: torch.cuda.CUDAGraph, captured: Callable[[], object]):
        self._graph, self._captured = graph, captured

    def __call__(self) -> None:
        self._graph.replay()


def graph_replay(fn: Callable[[], object], device: torch.device) -> Callable[[], None]:
    """Capture one call of ``fn`` in a CUDA graph; returns a callable that replays it.

    ``fn`` runs twice on a side stream first (Triton compiles, the allocator warms up).
    The returned callable keeps the graph, its memory pool and ``fn`` (with every tensor
    ``fn`` holds) alive; drop it to free them.

    Raises:
        ValueError: ``device`` is not a CUDA device.
    """
    if device.type != "cuda":
        raise ValueError(f"device: CUDA graphs need a CUDA device, got {device}")
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return _GraphReplay(graph, fn)


_STEADY_MIN_CALLS = 8  # calls per steady-state graph, at least


def steady_sets(bytes_per_call: int) -> int:
    """Input sets a steady-state graph cycles through: enough that together they hold at
    least 256 MiB (the L2 flush's size), and at least 2. Returns an int >= 2.

    Raises:
        TypeError / ValueError: ``bytes_per_call`` not an int >= 1.
    """
    check_int("bytes_per_call", bytes_per_call, minimum=1)
    return max(2, -(-_FLUSH_BYTES // bytes_per_call))


def _steady_replay(fns: Sequence[Callable[[], object]], device: torch.device) -> tuple[Callable[[], None], int]:
    calls = max(len(fns), _STEADY_MIN_CALLS)
    order = [fns[i % len(fns)] for i in range(calls)]

    def all_calls():
        for fn in order:
            fn()

    return graph_replay(all_calls, device), calls


def copy_bandwidth(timing: Timing, nbytes: int) -> CopyBandwidth:
    """Device-to-device copy bandwidth: time ``dst.copy_(src)`` of an ``nbytes`` buffer and
    count ``2 * nbytes`` (each byte read once and written once).

    Raises:
        TypeError / ValueError: ``nbytes`` not an int >= 1 MiB.
    """
    check_int("nbytes", nbytes, minimum=2**20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=timing.device).random_(0, 256)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), timing)
    return CopyBandwidth(bytes=nbytes, median_ms=ms, gbs=2 * nbytes / (ms * 1e-3) / GB)


def describe(exc: BaseException) -> str:
    """One line naming an exception (type and message), for a skip or failure reason."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."


def measure(
    benchmark: str,
    shape: str,
    impl: str,
    params: dict[str, Any],
    make_fn: Callable[[], Callable[[], object]],
    timing: Timing,
    *,
    bytes_moved: int | None = None,
    baseline: bool = False,
    graph: bool = False,
    note: str = "",
) -> Row:
    """Build the call with ``make_fn()`` (untimed), then time it (as a CUDA-graph replay if
    ``graph``). An exception is reported in the row (``status = "failed: ..."``), so one
    broken implementation does not hide the others."""
    row = Row(benchmark, shape, impl, dict(params), bytes_moved=bytes_moved, baseline=baseline, note=note)
    try:
        fn = make_fn()
        if graph:
            fn = graph_replay(fn, timing.device)
        row.median_ms = median_ms(fn, timing)
    except Exception as exc:  # reported in the table, never swallowed silently
        row.status = f"failed: {describe(exc)}"
    return row


def measure_steady(
    benchmark: str,
    shape: str,
    impl: str,
    params: dict[str, Any],
    make_fns: Callable[[], Sequence[Callable[[], object]]],
    timing: Timing,
    *,
    bytes_moved: int | None = None,
    note: str = "",
) -> Row:
    """Steady-state time of one call (module note): ``make_fns()`` (untimed) builds one call
    per input set; the calls, cycled to at least 8, are captured back to back in one CUDA
    graph, and the row's ``median_ms`` is the replay's median over the number of calls
    (``params["calls_per_graph"]``). Failures are reported in the row, as by ``measure``;
    without CUDA graphs (``timing.use_graphs`` false) the row is skipped."""
    if not timing.use_graphs:
        return skipped_row(benchmark, shape, impl, params, "steady state needs CUDA graphs")
    row = Row(benchmark, shape, impl, dict(params), bytes_moved=bytes_moved, note=note)
    try:
        fns = list(make_fns())
        if not fns:
            raise ValueError("make_fns built no call")
        replay, calls = _steady_replay(fns, timing.device)
        row.params.update(calls_per_graph=calls, input_sets=len(fns))
        row.median_ms = median_ms(replay, timing) / calls
    except Exception as exc:  # reported in the table, never swallowed silently
        row.status = f"failed: {describe(exc)}"
    return row


def roofline_row(benchmark: str, shape: str, impl: str, params: dict[str, Any], nbytes: int,
                 copy: CopyBandwidth, note: str) -> Row:
    """The HBM roofline: ``nbytes`` at the measured copy bandwidth, ``nbytes / copy.gbs``."""
    return Row(benchmark, shape, impl, dict(params), median_ms=nbytes / (copy.gbs * GB) * 1e3,
               bytes_moved=nbytes, note=note)


def skipped_row(benchmark: str, shape: str, impl: str, params: dict[str, Any], reason: str) -> Row:
    """A row for an implementation that cannot run here; ``reason`` says why."""
    return Row(benchmark, shape, impl, dict(params), status=f"skipped: {reason}")


def finalize(rows: Iterable[Row], copy: CopyBandwidth | None) -> list[Row]:
    """Fill ``gbs``, ``pct_copy`` and ``speedup`` (per ``(benchmark, shape)``, against the row
    marked ``baseline``) in place; returns the rows as a list."""
    rows = list(rows)
    baselines = {(r.benchmark, r.shape): r.median_ms for r in rows if r.baseline and r.median_ms}
    for r in rows:
        if not r.median_ms:
            continue
        if r.bytes_moved is not None:
            r.gbs = r.bytes_moved / (r.median_ms * 1e-3) / GB
            if copy is not None:
                r.pct_copy = 100.0 * r.gbs / copy.gbs
        base = baselines.get((r.benchmark, r.shape))
        if base is not None:
            r.speedup = base / r.median_ms
    return rows


_COLUMNS = ("benchmark", "shape", "impl", "median ms", "GB/s", "% copy BW", "speedup vs eager", "note")


def _cells(r: Row) -> Sequence[str]:
    def num(value, fmt):
        return "" if value is None else format(value, fmt)

    note = r.note if r.status == "ok" else r.status
    return (r.benchmark, r.shape, r.impl, num(r.median_ms, ".4f"), num(r.gbs, ".1f"), num(r.pct_copy, ".1f"),
            num(r.speedup, ".2f") + ("x" if r.speedup is not None else ""), note)


def format_table(rows: Sequence[Row]) -> str:
    """A fixed-width text table, one line per row, a blank line between shapes."""
    cells = [_cells(r) for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(_COLUMNS[:-1])]

    def line(values):
        fixed = [v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(fixed + [values[-1]]).rstrip()

    out = [line(_COLUMNS), line(["-" * w for w in widths] + ["-" * 4])]
    previous = None
    for r, c in zip(rows, cells):
        if previous is not None and (r.benchmark, r.shape) != previous:
            out.append("")
        previous = (r.benchmark, r.shape)
        out.append(line(c))
    return "\n".join(out)


def _installed(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def environment(timing: Timing) -> dict[str, Any]:
    """Device name, CPU count, library versions, timer and its budgets, for the JSON record."""
    device = timing.device
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    return {
        "device": str(device),
        "device_name": name,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": _installed("triton"),
        "sglang": _installed("sglang"),
        "python": sys.version.split()[0],
        "timer": timing.timer,
        "warmup_ms": timing.warmup_ms,
        "rep_ms": timing.rep_ms,
        "cuda_graphs": timing.use_graphs,
    }


def write_json(path: str, payload: dict[str, Any]) -> None:
    """Write ``payload`` (rows as dicts) to ``path`` as indented JSON."""
    def default(obj):
        if dataclasses.is_dataclass(obj):
            return dataclasses.asdict(obj)
        raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")

    with open(path, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, default=default)
        handle.write("\n")
