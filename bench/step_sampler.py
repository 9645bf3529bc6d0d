"""Benchmark ``step``: one exponential-race step over logits ``[B, V]`` (SPEC S3).

Every implementation gets the same logits (float32 or bf16), temperatures (0.8, every row
sampling) and float32 Exp(1) noise, all made once, untimed:

* ``ref fused race``: ``fused_exponential_race(logits, temps, noise)``, the one-launch Triton
  race with explicit noise (``dspark_ref/fused_sampling.py``; what the reference adapter's
  ``NoiseStepSampler`` runs on CUDA, and ``tiled_exponential_race(backend="triton")``);
* ``ref fused race, counter noise``: the same kernel making Philox noise in registers,
  its state advanced on the device (the reference ``StepSampler`` on CUDA);
* ``..., deferred check`` (both noise paths, ``[call]`` only): ``check="deferred"``, the
  eager call that returns once its kernel is launched and leaves its value-check flags to
  the next call (``dspark_ref/fused_checks.py``), as SGLang's call returns before its kernel
  ends; the rows above wait for their flags (one device-to-host round trip) before they
  return. A replay checks nothing either way, so these rows have no ``[graph]`` twin;
* ``ref fused race + noise refresh``: ``noise.exponential_()`` then ``ref fused race``,
  which is what the folded draft does every step (fresh noise in place);
* ``eager sample_step`` (the baseline of the speedup column) and ``eager
  exponential_race``: the torch reference, computing ``softmax(L / T) / E`` in float32;
* ``sglang MarkovSampleStep``: SGLang 0.5.22+'s fused bias-add + race kernel (its torch
  path for CPU tensors), with a zero bias and its Philox noise made inside the kernel (loaded lazily through
  ``conformance/adapters/sglang/loader.py``; a skip names the reason when it cannot load);
* ``roofline``: the bytes below at the measured copy bandwidth;
* ``copy, logits+noise bytes``: ``dst.copy_(src)`` moving as many bytes as the
  explicit-noise race (half read, half written), timed like the ``[graph]`` rows: what a
  kernel that only moves those bytes reaches at this size (launch, ramp-up and tail
  included), the practical ceiling under the roofline.

Each runs as called (``[call]``: Python, kernel launches and the reference's host-side
value checks) and, on CUDA, as a CUDA-graph replay of that call (``[graph]``: kernels only).
The two fused rows, SGLang's and the copy also run in steady state (``[steady]``: one graph
of back-to-back calls, each on its own input set, timed per call; ``bench/common.py``), the
regime of the 1 GiB copy that measures the roofline's bandwidth.

Bytes moved per step (``GB/s`` = bytes / median time):

* reference explicit-noise and eager rows: logits ``B*V*itemsize`` + noise ``B*V*4`` (read);
* counter noise: logits only;
* ``+ noise refresh``: also the noise write, ``B*V*4``;
* SGLang: logits + the bias it adds, ``B*V*4`` (noise is generated, not read);
* ``roofline logits+noise``: logits + noise; ``roofline logits only``: the floor for a
  kernel that makes its noise in registers, as SGLang's does.

Outputs (``[B]`` int64) and the kernel's per-program partials are negligible and not
counted. Ratios of ours to SGLang and to the roofline: ``bench/summary.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import NamedTuple

import torch

from dspark_ref import fused_sampling
from dspark_ref.fused_sampling import fused_exponential_race, philox_state
from dspark_ref.sampling import exponential_noise, exponential_race, sample_step

from .common import CopyBandwidth, Row, Timing, describe, measure, measure_steady, roofline_row, skipped_row, steady_sets
from .summary import COPY_SAME_BYTES, DEFERRED

__all__ = ["BATCHES", "VOCABS", "DTYPES", "run", "triton_unavailable"]

BENCHMARK = "step"
BATCHES = (1, 64, 256)
VOCABS = (129_280, 151_936)  # DeepSeek-V3 and Qwen2 vocabularies
DTYPES = (torch.float32, torch.bfloat16)
QUICK_BATCHES, QUICK_VOCABS = (1, 8), (1000,)
TEMPERATURE = 0.8
SGLANG_NOISE_KEY = 0x5EED


class _SGLangStep(NamedTuple):
    """``factory(logits, temperatures) -> call`` of ``MarkovSampleStep``, or why it cannot run."""

    factory: Callable[[torch.Tensor, torch.Tensor], Callable[[], object]] | None
    skip: str | None


def _sglang_step(device: torch.device) -> _SGLangStep:
    try:  # lazily: SGLang is optional, and its loader imports the wheel's modules
        from conformance.adapters.sglang.engine_inputs import TOP_K_ALL, sampling_info
        from conformance.adapters.sglang.loader import load_sglang

        modules = load_sglang()
    except Exception as exc:  # AdapterLoadError (not installed, too old) or a broken install
        return _SGLangStep(None, describe(exc))
    if modules.generation != "philox":
        return _SGLangStep(None, f"sglang=={modules.version} has no MarkovSampleStep (0.5.22+)")

    def factory(logits: torch.Tensor, temperatures: torch.Tensor) -> Callable[[], object]:
        rows, vocab = logits.shape
        top_k = torch.full((rows,), TOP_K_ALL, dtype=torch.int64, device=device)
        params = modules["draft"].resolve_draft_params(
            sampling_info=sampling_info(temperatures, top_k), bs=rows, device=device
        )
        bias = torch.zeros(rows, vocab, dtype=torch.float32, device=device)
        offset = torch.zeros(1, dtype=torch.int64, device=device)
        step = modules["step"].MarkovSampleStep
        return lambda: step.execute(
            base_logits=logits, bias=bias, temperatures=params.step_temperatures,
            key=SGLANG_NOISE_KEY, offset=offset, step=0, step_dtype=logits.dtype,
        )

    return _SGLangStep(factory, None)


def triton_unavailable(device: torch.device) -> str | None:
    """Why the reference's Triton kernels cannot run on ``device`` (None: they can)."""
    if fused_sampling.triton is None:
        return "triton is not installed"
    if device.type != "cuda" and not fused_sampling.KERNEL_INTERPRETED:
        return f"the Triton kernel needs CUDA tensors (or TRITON_INTERPRET=1), device is {device}"
    if device.type != "cuda" and fused_sampling.INTERPRETER_DEFECT is not None:
        return fused_sampling.INTERPRETER_DEFECT
    return None


class _Impl(NamedTuple):
    name: str
    make: Callable[[], Callable[[], object]]  # untimed setup -> the timed call
    bytes_moved: int
    skip: str | None = None  # why it cannot run here
    baseline: bool = False
    replayed: bool = True  # also timed as a CUDA-graph replay


def _impls(logits, temps, noise, sglang: _SGLangStep, device) -> list[_Impl]:
    batch, vocab = logits.shape
    logit_bytes = batch * vocab * logits.dtype.itemsize
    race_bytes = logit_bytes + batch * vocab * 4  # logits + float32 noise
    greedy = torch.zeros(batch, dtype=torch.bool, device=device)
    no_triton = triton_unavailable(device)

    def fused_race(check="sync"):
        return fused_exponential_race(logits, temps, noise, check=check)

    def counter_race(check="sync"):
        state = philox_state(SGLANG_NOISE_KEY, device)
        return lambda: fused_exponential_race(logits, temps, rng_state=state, check=check)

    def refreshed_fused_race():
        noise.exponential_()
        return fused_race()

    return [
        _Impl("eager sample_step", lambda: lambda: sample_step(logits, temps, greedy, noise=noise),
              race_bytes, baseline=True),
        _Impl("eager exponential_race", lambda: lambda: exponential_race(logits, temps, noise), race_bytes),
        _Impl("ref fused race", lambda: fused_race, race_bytes, no_triton),
        _Impl("ref fused race, counter noise", counter_race, logit_bytes, no_triton),
        _Impl(f"ref fused race{DEFERRED}", lambda: lambda: fused_race("deferred"), race_bytes, no_triton,
              replayed=False),
        _Impl(f"ref fused race, counter noise{DEFERRED}", lambda: counter_race("deferred"), logit_bytes, no_triton,
              replayed=False),
        _Impl("ref fused race + noise refresh", lambda: refreshed_fused_race, race_bytes + batch * vocab * 4,
              no_triton),
        # SGLang reads a float32 bias [B, V] instead of noise: the same byte count.
        _Impl("sglang MarkovSampleStep", lambda: sglang.factory(logits, temps), race_bytes, sglang.skip),
    ]


STEADY_IMPLS = ("ref fused race", "ref fused race, counter noise", "sglang MarkovSampleStep")


def _inputs(batch: int, vocab: int, dtype: torch.dtype, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    logits = (3.0 * torch.randn(batch, vocab, generator=gen, device=gen.device)).to(dtype)
    return logits, exponential_noise((batch, vocab), generator=gen)


def _steady_rows(batch: int, vocab: int, dtype: torch.dtype, timing: Timing, sglang: _SGLangStep, shape: str,
                 params: dict) -> list[Row]:
    """The ``[steady]`` rows (module note): every input set a fresh ``(logits, noise)``, a
    same-bytes copy a fresh ``(src, dst)``; the sets are freed with the rows' graphs."""
    device = timing.device
    race_bytes = batch * vocab * (dtype.itemsize + 4)
    sets = steady_sets(race_bytes)
    gen = torch.Generator(device).manual_seed(batch * vocab + 1)
    temps = torch.full((batch,), TEMPERATURE, device=device)
    inputs = [_inputs(batch, vocab, dtype, gen) for _ in range(sets)]
    impls = [{impl.name: impl for impl in _impls(logits, temps, noise, sglang, device)} for logits, noise in inputs]
    rows = []
    for name in STEADY_IMPLS:
        first = impls[0][name]
        label = f"{name} [steady]"
        if first.skip is not None:
            rows.append(skipped_row(BENCHMARK, shape, label, params, first.skip))
            continue
        rows.append(measure_steady(BENCHMARK, shape, label, params,
                                   lambda name=name: [by_name[name].make() for by_name in impls], timing,
                                   bytes_moved=first.bytes_moved))

    def copies():
        sources = [torch.zeros(race_bytes // 2, dtype=torch.uint8, device=device) for _ in range(sets)]
        return [lambda src=src, dst=torch.empty_like(src): dst.copy_(src) for src in sources]

    rows.append(measure_steady(BENCHMARK, shape, f"{COPY_SAME_BYTES} [steady]", params, copies, timing,
                               bytes_moved=race_bytes, note="half read, half written"))
    return rows


def _shape_rows(batch: int, vocab: int, dtype: torch.dtype, timing: Timing, copy: CopyBandwidth,
                sglang: _SGLangStep) -> list[Row]:
    device = timing.device
    gen = torch.Generator(device).manual_seed(batch * vocab)
    logits, noise = _inputs(batch, vocab, dtype, gen)
    temps = torch.full((batch,), TEMPERATURE, device=device)
    dtype_name = str(dtype).removeprefix("torch.")
    shape, params = f"B={batch} V={vocab} {dtype_name}", {"B": batch, "V": vocab, "dtype": dtype_name}
    modes = ("call", "graph") if timing.use_graphs else ("call",)
    rows = []
    for impl, mode in itertools.product(_impls(logits, temps, noise, sglang, device), modes):
        if mode == "graph" and not impl.replayed:
            continue
        name = f"{impl.name} [{mode}]"
        if impl.skip is not None:
            rows.append(skipped_row(BENCHMARK, shape, name, params, impl.skip))
            continue
        rows.append(measure(BENCHMARK, shape, name, params, impl.make, timing, bytes_moved=impl.bytes_moved,
                            baseline=impl.baseline and mode == "call", graph=mode == "graph"))
    logit_bytes = batch * vocab * dtype.itemsize
    race_bytes = logit_bytes + batch * vocab * 4  # logits + float32 noise
    rows.append(roofline_row(BENCHMARK, shape, "roofline logits+noise", params, race_bytes,
                             copy, "logits + noise read at copy BW"))
    rows.append(roofline_row(BENCHMARK, shape, "roofline logits only", params, logit_bytes, copy,
                             "logits read at copy BW (noise made in-kernel)"))

    def same_bytes_copy():
        src = torch.zeros(race_bytes // 2, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)

    rows.append(measure(BENCHMARK, shape, COPY_SAME_BYTES, params, same_bytes_copy, timing, bytes_moved=race_bytes,
                        graph=timing.use_graphs, note="half read, half written"))
    if timing.use_graphs:
        rows += _steady_rows(batch, vocab, dtype, timing, sglang, shape, params)
    return rows


def run(timing: Timing, copy: CopyBandwidth, *, quick: bool = False) -> list[Row]:
    """Time one race step for every (B, V, dtype) (module note); rows in table order.

    ``quick`` shrinks the shapes to ``B in (1, 8)``, ``V = 1000`` (CPU smoke runs).
    """
    batches, vocabs = (QUICK_BATCHES, QUICK_VOCABS) if quick else (BATCHES, VOCABS)
    sglang = _sglang_step(timing.device)
    rows: list[Row] = []
    for dtype, vocab, batch in itertools.product(DTYPES, vocabs, batches):
        rows += _shape_rows(batch, vocab, dtype, timing, copy, sglang)
    return rows
