"""Benchmark ``ceiling``: what kernels that only read the step's bytes reach (issue 18).

The ``step`` benchmark judges the fused race against a roofline (logits + noise, read once,
at the measured copy bandwidth) and sets a copy of the same bytes beside it. That copy reads
half the bytes and writes the other half, and under a single graph replay its writes may
still sit in the L2 when the timed window closes, so it is not what a kernel that reads all
of them can reach. These rows time kernels that read exactly the race's bytes and do almost
nothing else, so that the race's gap to the roofline splits into what any read of those
bytes pays (launch, ramp-up, tail, DRAM) and what the race adds:

* ``read, race order``: a Triton kernel over logits and noise ``[B, V]`` with the fused
  race's grid ``(B, S)`` (``splits_for``, tile 512, 4 columns a thread), program ``s`` reading
  one contiguous chunk of ``ceil(n_tiles / S)`` tiles, as the race does; a running maximum of
  ``logits + noise`` instead of the race (every loaded value is used), one partial a program;
* ``read, interleaved``: the same kernel with program ``s`` reading tiles ``s, s + S, s + 2S,
  ...``, so that the ``S`` programs of a row read neighbouring tiles at the same time;
* ``read, flat``: one buffer of the same bytes, read by 16 programs per SM (the interpreter:
  8) in a grid-stride loop, the order of a plain streaming kernel;
* ``copy, both halves``: ``dst.copy_(src)`` of a buffer of the race's bytes (read ``N``,
  write ``N``, ``2N`` counted), beside the step benchmark's ``copy, logits+noise bytes``
  (``N / 2`` each way);
* ``empty kernel``: one Triton program that stores one float32 and reads nothing, timed like
  the others: what the timer charges any launch (the event, the graph's launch, the kernel's
  start and end) besides its bytes. A single replay of a kernel that moved the race's bytes
  at the copy bandwidth would take about the roofline time plus this (``bench/summary.py``).

Each row runs as called and, on CUDA, as a CUDA-graph replay (``[graph]``) and in steady state
(``[steady]``, ``bench/common.py``), at the step benchmark's shapes. The Triton rows need CUDA
or ``TRITON_INTERPRET=1`` (a CPU smoke run); elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from dspark_ref import fused_sampling
from dspark_ref.fused_sampling import splits_for

from .common import CopyBandwidth, Row, Timing, measure, measure_steady, skipped_row, steady_sets
from .step_sampler import BATCHES, DTYPES, QUICK_BATCHES, QUICK_VOCABS, VOCABS, triton_unavailable
from .summary import EMPTY_KERNEL, READ_SAME_BYTES

__all__ = ["TILE", "empty_kernel", "read_partials", "run"]

BENCHMARK = "ceiling"
TILE = 512  # the fused race's default tile at the step's vocabularies
_FLAT_TILE = 512
_FLAT_PROGRAMS_PER_SM = 16
_INTERPRETED_PROGRAMS = 8

if fused_sampling.triton is not None:
    triton, tl = fused_sampling.triton, fused_sampling.tl

    @triton.jit
    def _read_rows(logits_ptr, noise_ptr, out_ptr, vocab_size, chunk, splits, logits_row_stride, noise_row_stride,
                   BLOCK: tl.constexpr, INTERLEAVED: tl.constexpr):
        """Program (row, split): the running maximum of ``logits + noise`` over its tiles."""
        row = tl.program_id(0).to(tl.int64)
        split = tl.program_id(1)
        within = tl.arange(0, BLOCK // 4)[:, None] * 4 + tl.arange(0, 4)[None, :]
        best = tl.full([BLOCK // 4, 4], -float("inf"), tl.float32)
        if INTERLEAVED:
            first, last, step = split * BLOCK, vocab_size, splits * BLOCK
        else:
            first = split * chunk
            last = tl.minimum(first + chunk, vocab_size)
            step = BLOCK
        for base in range(first, last, step):
            cols = base + within
            valid = cols < vocab_size
            logits = tl.load(logits_ptr + row * logits_row_stride + cols, mask=valid, other=-float("inf"))
            noise = tl.load(noise_ptr + row * noise_row_stride + cols, mask=valid, other=0.0)
            best = tl.maximum(best, logits.to(tl.float32) + noise)
        tl.store(out_ptr + row * splits + split, tl.max(tl.max(best, axis=1), axis=0))

    @triton.jit
    def _empty(out_ptr):
        """One program: one store, no read."""
        tl.store(out_ptr, 0.0)

    @triton.jit
    def _read_flat(data_ptr, out_ptr, n, BLOCK: tl.constexpr):
        """Program p: the maximum of ``data[p * BLOCK + k * programs * BLOCK + j]`` (grid stride)."""
        program = tl.program_id(0).to(tl.int64)
        offsets = tl.arange(0, BLOCK)
        best = tl.full([BLOCK], -float("inf"), tl.float32)
        for base in range(program * BLOCK, n, tl.num_programs(0) * BLOCK):
            index = base + offsets
            best = tl.maximum(best, tl.load(data_ptr + index, mask=index < n, other=-float("inf")))
        tl.store(out_ptr + program, tl.max(best, axis=0))


def _programs(device: torch.device) -> int:
    if device.type == "cuda":
        return _FLAT_PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    return _INTERPRETED_PROGRAMS


def read_partials(logits: torch.Tensor, noise: torch.Tensor, *, order: str) -> Callable[[], torch.Tensor]:
    """The read of ``order`` (``"race"``, ``"interleaved"``: of ``logits [B, V]`` and ``noise
    [B, V]`` float32, in the fused race's grid; ``"flat"``: of ``noise`` viewed as one buffer)
    as a callable returning its per-program maxima (``[B * S]`` or ``[programs]`` float32;
    their maximum is that of ``logits + noise``, or of ``noise``, for a test to check that
    every value was read). Needs CUDA tensors or the interpreter (``triton_unavailable``).

    Raises:
        ValueError: an unknown ``order``.
    """
    if order == "flat":
        flat = noise.reshape(-1)
        out = torch.empty(_programs(noise.device), dtype=torch.float32, device=noise.device)
        grid = (out.numel(),)
        return lambda: (_read_flat[grid](flat, out, flat.numel(), BLOCK=_FLAT_TILE), out)[1]
    if order not in ("race", "interleaved"):
        raise ValueError(f"order: expected 'race', 'interleaved' or 'flat', got {order!r}")
    rows, vocab = logits.shape
    splits = splits_for(rows, vocab, TILE, logits.device)
    chunk = -(-(-(-vocab // TILE)) // splits) * TILE  # ceil(n_tiles / S) tiles
    out = torch.empty(rows * splits, dtype=torch.float32, device=logits.device)
    interleaved = order == "interleaved"

    def call():
        _read_rows[(rows, splits)](logits, noise, out, vocab, chunk, splits, logits.stride(0), noise.stride(0),
                                   BLOCK=TILE, INTERLEAVED=interleaved, num_warps=TILE // 128)
        return out

    return call


def empty_kernel(device: torch.device) -> Callable[[], torch.Tensor]:
    """The ``empty kernel`` row's call (module note): one program storing ``0.0`` into a
    ``[1]`` float32 tensor on ``device``, which it returns. Needs CUDA or the interpreter
    (``triton_unavailable``)."""
    out = torch.ones(1, dtype=torch.float32, device=device)
    return lambda: (_empty[(1,)](out), out)[1]


_READS = ((READ_SAME_BYTES, "race"), ("read, interleaved", "interleaved"), ("read, flat", "flat"))


def _shape_rows(batch: int, vocab: int, dtype: torch.dtype, timing: Timing) -> list[Row]:
    device = timing.device
    gen = torch.Generator(device).manual_seed(batch * vocab)
    dtype_name = str(dtype).removeprefix("torch.")
    shape, params = f"B={batch} V={vocab} {dtype_name}", {"B": batch, "V": vocab, "dtype": dtype_name}
    race_bytes = batch * vocab * (dtype.itemsize + 4)
    no_triton = triton_unavailable(device)
    sets = steady_sets(race_bytes) if timing.use_graphs else 1
    inputs = [((3.0 * torch.randn(batch, vocab, generator=gen, device=device)).to(dtype),
               torch.empty(batch, vocab, device=device).exponential_(generator=gen)) for _ in range(sets)]
    flats = [torch.empty(race_bytes // 4, device=device).exponential_(generator=gen) for _ in range(sets)]
    modes = ("call", "graph") if timing.use_graphs else ("call",)
    rows = []
    for (name, order), mode in itertools.product(_READS, modes):
        label = f"{name} [{mode}]"
        if no_triton is not None:
            rows.append(skipped_row(BENCHMARK, shape, label, params, no_triton))
            continue
        logits, noise = inputs[0] if order != "flat" else (None, flats[0])
        rows.append(measure(BENCHMARK, shape, label, params, lambda: read_partials(logits, noise, order=order),
                            timing, bytes_moved=race_bytes, graph=mode == "graph"))
    for mode in modes:
        label = f"{EMPTY_KERNEL} [{mode}]"
        rows.append(skipped_row(BENCHMARK, shape, label, params, no_triton) if no_triton is not None else
                    measure(BENCHMARK, shape, label, params, lambda: empty_kernel(device), timing,
                            graph=mode == "graph", note="one program, one 4-byte store"))
    whole = [(torch.zeros(race_bytes, dtype=torch.uint8, device=device),) for _ in range(sets)]
    copies = [lambda src=src, dst=torch.empty_like(src): dst.copy_(src) for (src,) in whole]
    for mode in modes:
        rows.append(measure(BENCHMARK, shape, f"copy, both halves [{mode}]", params, lambda: copies[0], timing,
                            bytes_moved=2 * race_bytes, graph=mode == "graph", note="read N, write N"))
    if timing.use_graphs:
        for name, order in _READS:
            if no_triton is not None:
                continue
            sources = inputs if order != "flat" else [(None, flat) for flat in flats]
            rows.append(measure_steady(BENCHMARK, shape, f"{name} [steady]", params,
                                       lambda order=order, sources=sources: [
                                           read_partials(logits, noise, order=order) for logits, noise in sources],
                                       timing, bytes_moved=race_bytes))
        rows.append(measure_steady(BENCHMARK, shape, "copy, both halves [steady]", params, lambda: copies, timing,
                                   bytes_moved=2 * race_bytes, note="read N, write N"))
    return rows


def run(timing: Timing, copy: CopyBandwidth, *, quick: bool = False) -> list[Row]:
    """Time the reads and the copy (module note) at every step shape; rows in table order.

    ``quick`` shrinks the shapes to ``B in (1, 8)``, ``V = 1000`` (CPU smoke runs).
    """
    batches, vocabs = (QUICK_BATCHES, QUICK_VOCABS) if quick else (BATCHES, VOCABS)
    rows: list[Row] = []
    for dtype, vocab, batch in itertools.product(DTYPES, vocabs, batches):
        rows += _shape_rows(batch, vocab, dtype, timing)
    return rows
