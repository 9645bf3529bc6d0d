"""Fused single-pass exponential race (SPEC S3): one Triton launch from logits to tokens.

Same law and, with explicit noise, the same token as the untiled race
``argmax_v softmax(L / T)_v / E_v`` (``sampling.exponential_race``; greedy rows
``greedy_argmax``), computed tile by tile as in ``tiled_sampling`` but with the combine
inside the kernel:

* the grid is ``(B, S)``: program ``(row, s)`` walks its chunk of ``ceil(n_tiles / S)``
  tiles of one row. A tile is ``tile / 4`` groups of 4 consecutive columns, each group in
  one thread, and every group slot keeps its own running ``(max, key, index)``, so the
  loop has no cross-thread reduction: the new maximum ``m' = max(m, x_1..x_4)`` is taken
  first, each element's key is ``exp(x - m') / E`` (one ``exp`` per element) and the
  running key becomes ``key * exp(m - m')`` (one ``exp`` per group; the factor is 1 while
  the maximum stays). A tile's loads are issued one iteration ahead, the first before the
  row's temperature is waited for. After the loop the slots are rescaled to the program
  maximum, ``key * exp(m_slot - max)`` (the rescale of the module note of ``tiled_sampling``);
* each program stores its partial and increments its row's counter (an acquire-release
  atomic); the program that sees the count reach ``S`` rescales the ``S`` partials to the
  row maximum, ``key * exp(max_s - global_max)``, writes the winner and resets the counter.
  So one launch does the whole row, and ``S`` is chosen so that ``B * S`` programs fill
  the GPU (``splits``), for ``B = 1`` as for ``B = 256``.

Noise: explicit (``noise [B, V]`` float32, read once), or counter-based: Philox-4x32-10
keyed by ``rng_state[0]`` (the seed) on the counter ``(column / 4, row, call)`` with
``call = rng_state[1]``, one draw per group of 4 columns. With counter noise each group
races as one competitor (competing exponentials: over a group, ``min_v E_v / p_v`` is
``Exp(W)`` with ``W`` the group's total weight, and its argmin is independent of it, with
``P(v) = p_v / W``): the group's key is ``W / E`` for one Exp(1) ``E`` from the first word,
and its token the first column whose running sum of weights exceeds ``u W`` for a uniform
``u`` from the second. The law is the untiled race's (``softmax(L / T)``) with one logarithm
per 4 columns instead of 4 (H200, ``B=64 V=129,280`` fp32, graphed: 38.4 -> 29.0 us). A
32-bit word ``r`` gives ``v = (r + 1/2) 2^-32`` (float32, at most ``1 - 2^-24``): ``u = v``,
and ``E = -log1p(-v)`` (Goldberg's ``log1p(y) = log(1 + y) y / ((1 + y) - 1)``, with
libdevice's ``logf`` on the GPU): small ``E``, the values that make a group win, keep
float32's relative precision (``E ~ v`` down to ``2^-33``), so ``E`` is finite, ``> 0`` and
equal in law to Exp(1) up to a relative rounding of a few ``2^-24``. (Until session 10 the
kernel used ``u = (r >> 8 + 1/2) 2^-24`` and ``-log u``: the float32 sum rounds ``2^24 - 1/2``
up to ``2^24``, so ``u = 1`` and ``E = 0`` with probability ``2^-24`` per element, an infinite
key won by a uniform token in ``V / 2^24`` of the rows: the TV of 0.007-0.009 at ``V`` =
129,280 / 151,936 measured on the H200.) The last program of a launch increments
``rng_state[1]``, on the device: a CUDA-graph replay therefore draws fresh noise (SPEC S3
"fresh noise", also under replay), and no host value enters the kernel.

Weights: an element's weight against a running maximum ``m`` of the raw logits is
``2^((L - m) r)`` with the row's ``r = RN(log2(e) / T)`` (IEEE division), so ``exp((L - m) /
T)`` with one subtraction, one multiplication and one ``ex2.approx.ftz`` per element (the
scaled logits ``L / T`` are never formed); a running key is rescaled by ``2^((m - m') r)``.
(Until session 16: ``L / T`` rounded to nearest by Markstein's scheme, 5 instructions, and
libdevice's ``expf``, 9: the loop was 149 SASS instructions per 4 elements of explicit
noise, the kernel issue-bound; now 82.)

Rounding bound (SPEC S0), the explicit-noise path against the exact keys ``exp((L - M) / T)
/ E`` (``M`` the row maximum): the arguments of a key's exponentials, its own ``(L - m_1) r``
and one ``(m_i - m_(i+1)) r`` per rescale, are each computed with a relative error below
``3.3 * 2^-24`` (the difference, ``r`` and the product), and, all of one sign, they add up to
``(L - M) log2(e) / T``; a key that is not flushed to zero has that sum above ``-127``, so the
arguments cost at most ``127 * 3.3 * 2^-24 * ln 2 < 1.8e-5`` relative. A key is one ``exp2``
divided by ``E`` (``div.approx``: 2 ulp for ``E`` in ``[2^-126, 2^126]``), then multiplied by
at most ``t = ceil(n_tiles / S) + 2`` rounded factors (one per rise of its group's maximum,
then group to program, program to row), each ``2`` ulp (``ex2.approx``: the bound of CUDA's
``exp2f``, which is that instruction) plus ``1/2`` ulp (the product). So a key's relative
error is ``eps <= 2.5 * (t + 2) * 2^-23 + 1.8e-5 <= 3.0e-7 * t + 1.9e-5``, and two keys keep
their order when their exact keys differ by more than ``2 eps``. The launch keeps ``t <= 66``
(``S >= n_tiles / 64``): ``2 eps < 8e-5``, below the ``1e-4`` near-tie margin of
``tests/test_tiled_sampling.py`` and far below the ``1e-3`` relative margin of the S3 exact
cases. Outside such near-ties the token is exactly the untiled one. (A weight below
``2^-126``, a token whose probability is below ``2^-126`` times the row maximum's, is flushed
to zero and cannot win, where the untiled race keeps the subnormal and picks it only for an
``E`` below ``2^-126``; an ``E`` outside ``[2^-126, 2^126]``, probability below ``2^-126``
per Exp(1) draw and never made by the counter path, whose ``E`` lies in ``[2^-33, 17]``, may
get the key ``inf`` or ``0`` where IEEE division gives a huge or tiny finite one.) Greedy
rows compare the float32 ``L`` themselves: exactly ``greedy_argmax`` (lowest index among
ties).

Value checks: the kernel flags NaN / +inf logits (they survive a NaN-propagating running
maximum), all ``-inf`` rows, bad noise (NaN-propagating running extremes of ``E``: NaN, a
negative value or ``+inf``; ``-0.0`` is not below 0 and passes, as in ``sampling``) and bad
temperatures in a device word: what the ``sampling`` checks reject, in the values the kernel
reads (a greedy row reads no noise, so its noise is not checked). Each thread ORs its own
flags into the word (an atomic only where one is set), so no reduction over a program's
threads is spent on them (H100, ``B=64 V=129,280`` fp32, graphed, with the loads issued
ahead: 29.8 -> 29.0 us). An eager call on
CUDA passes a launch id ``>= 2``: the launch's last program (found with the launch counter)
swaps the word for 0 and writes ``launch_id << 32 | flags`` to a ring of int64 words in
pinned host memory in one 8-byte store, which the host reads instead of synchronizing the
stream and copying the word (H200, B=1: the host time of an eager call 45-52 us, SGLang's
``MarkovSampleStep`` 121-136 us); ``check="sync"`` waits for it and re-runs the ``sampling``
checks on a flag to raise their message, ``check="deferred"`` leaves it to a later call
(``fused_checks``). A launch captured in a CUDA graph passes ``-1`` and records no flags (as
``sampling`` reads none while capturing). Under the interpreter the host reads the device
word after the launch.

Launches: the grid, the integer arguments and the constexprs of a call are cached per
argument signature (each tensor's shape, strides, dtype, device and 16-byte alignment, which
triton specializes pointers on), with the compiled kernel's own launcher after the first
launch, so that a repeated call skips the argument checks and triton's per-call
specialization.

Workspace: one zero-filled int32 buffer per device (the flag word, the launch counter, row
counters) that every launch leaves zeroed, and one scratch buffer of partials; calls on one
device must therefore be ordered on one stream (an engine's step is), not run concurrently
from two streams. Outgrown buffers are kept alive, since a captured graph may use them.

Backends: CUDA tensors, or CPU tensors when the kernel was built under
``TRITON_INTERPRET=1`` (:data:`KERNEL_INTERPRETED`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
from typing import NamedTuple

import torch
from packaging.version import InvalidVersion, Version

from dspark_ref import fused_checks
from dspark_ref._checks import FLOAT_DTYPES, check_int, check_same_device, check_tensor
from dspark_ref.sampling import _check_logits, _check_noise, _check_temperatures

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # CPU-only installs: tiled_sampling's torch backend still works.
    triton = None

__all__ = ["INTERPRETER_DEFECT", "KERNEL_INTERPRETED", "fused_exponential_race", "interpreter_defect",
           "interpreter_errstate", "philox_state", "splits_for"]


_MIN_TILE = 16
_DEFAULT_TILE = 512  # the largest default tile (H200 sweep, results/perf/performance-history.md)
_PROGRAMS_PER_SM = 16  # programs a launch aims to keep per SM (grid B * S; the same sweep)
_MAX_TILES_PER_PROGRAM = 64  # bounds the rescales of a group key (module note)
_INTERPRETED_PROGRAMS = 8  # the interpreter's stand-in for the GPU's program count
# Bits of the kernel's value-check word: 1 NaN/+inf logit, 2 all -inf row, 4 bad noise,
# 8 bad temperature (any bit: the host re-runs the sampling checks for the message).


if triton is not None:

    @triton.jit
    def _log(x, LIBDEVICE: tl.constexpr):
        # tl.log is lg2.approx on the GPU (absolute error ~2^-22 near 1): libdevice's logf there.
        if LIBDEVICE:
            return libdevice.log(x)
        else:
            return tl.log(x)

    @triton.jit
    def _ratio(x, y, LIBDEVICE: tl.constexpr):
        # div.approx (2 ulp for |y| in [2^-126, 2^126]) on the GPU; the interpreter divides exactly.
        if LIBDEVICE:
            return libdevice.fast_dividef(x, y)
        else:
            return x / y

    @triton.jit
    def _uniform_from_bits(bits):
        """uint32 draws -> float32 uniforms ``(r + 1/2) 2^-32`` in ``(0, 1)`` (at most ``1 - 2^-24``)."""
        return tl.minimum((bits.to(tl.float32) + 0.5) * 2.3283064365386963e-10, 0.99999994)

    @triton.jit
    def _exponential_from_bits(bits, LIBDEVICE: tl.constexpr):
        """uint32 draws -> float32 Exp(1): ``E = -log1p(-v)``, ``v = (r + 1/2) 2^-32`` (module note)."""
        v = _uniform_from_bits(bits)
        w = 1.0 - v
        return tl.where(w == 1.0, v, -_log(w, LIBDEVICE) * _ratio(v, 1.0 - w, LIBDEVICE))

    @triton.jit
    def _pick_in_group(weight, total, uniform, cols, vocab_size):
        """Per group (``[G, 4]`` weights, ``[G]`` totals and uniforms): the first column whose
        running sum of weights exceeds ``uniform * total``, the token drawn in proportion to
        its weight; a zero weight never exceeds it (its running sum is the previous one), and
        where rounding leaves no sum above it, the group's last positive weight."""
        above = tl.cumsum(weight, axis=1) > (uniform * total)[:, None]
        first = tl.min(tl.where(above, cols, vocab_size), axis=1)
        last = tl.max(tl.where(weight > 0.0, cols, -1), axis=1)
        return tl.where(first < vocab_size, first, last)

    @triton.jit
    def _max_nan(a, b):
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)

    @triton.jit
    def _min_nan(a, b):
        return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)

    @triton.jit
    def _argmax_lowest(key_a, idx_a, key_b, idx_b):
        # (key, index) pairs: the larger key; among equal keys the lower index.
        take_a = (key_a > key_b) | ((key_a == key_b) & (idx_a < idx_b))
        return tl.where(take_a, key_a, key_b), tl.where(take_a, idx_a, idx_b)

    # launch_id is not specialized: a first launch whose id is a multiple of 16 would build a
    # kernel that assumes it of every later id, and the ring slot is launch_id % SIGNAL_SLOTS.
    @triton.jit(do_not_specialize=["launch_id"])
    def _fused_race_kernel(
        logits_ptr, temps_ptr, greedy_ptr, noise_ptr, rng_ptr,
        part_max_ptr, part_key_ptr, part_idx_ptr, sync_ptr, out_ptr, signal_ptr,
        rows, vocab_size, chunk, splits, logits_row_stride, noise_row_stride, launch_id,
        BLOCK: tl.constexpr, SPLITS_POW2: tl.constexpr, COUNTER_NOISE: tl.constexpr,
        HAS_GREEDY: tl.constexpr, LIBDEVICE: tl.constexpr, SIGNAL_SLOTS: tl.constexpr,
    ):
        """Program (row, split): the running race of each thread's groups over its chunk,
        then the row combine (module note). ``sync_ptr``: int32 ``[2 + rows]``: the flag
        word, the launch counter, row counters; ``part_*``: ``[rows * splits]`` partials;
        ``launch_id > 0`` (an eager CUDA call): the launch's last program moves the flag word
        to word ``launch_id % SIGNAL_SLOTS`` of ``signal_ptr`` (a ring of int64 in pinned host
        memory) as ``launch_id << 32 | flags``, one 8-byte store; ``0`` (the interpreter): the
        flags stay in the word for the host; ``-1`` (a captured launch): none are recorded."""
        row = tl.program_id(0).to(tl.int64)
        split = tl.program_id(1)
        if HAS_GREEDY:
            greedy = tl.load(greedy_ptr + row) != 0
        else:
            greedy = False
        raw_temperature = tl.load(temps_ptr + row)  # waited for only after the first tile's loads
        # A tile is GROUPS groups of 4 consecutive columns, one group per thread slot: the
        # reductions over a group's axis stay inside a thread (no shuffles in the loop).
        GROUPS: tl.constexpr = BLOCK // 4
        within = tl.arange(0, GROUPS)[:, None] * 4 + tl.arange(0, 4)[None, :]
        run_max = tl.full([GROUPS], -float("inf"), tl.float32)  # NaN / +inf propagate: the flag
        run_idx = tl.full([GROUPS], vocab_size, tl.int32)
        start = split * chunk
        stop = tl.minimum(start + chunk, vocab_size)
        logits_row = logits_ptr + row * logits_row_stride
        if COUNTER_NOISE:  # before the greedy branch: the last program advances `call` either way
            seed = tl.load(rng_ptr)
            call = tl.load(rng_ptr + 1)
            call_lo = (call & 0xFFFFFFFF).to(tl.uint32)
            call_hi = ((call >> 32) & 0xFFFFFFFF).to(tl.uint32)
            zero = tl.zeros([GROUPS], tl.uint32)
        else:
            # NaN-propagating running extremes of E: NaN, a negative value or +inf shows in them;
            # -0.0 does not (it is not below 0.0), as in the sampling checks.
            noise_lo = tl.full([GROUPS], 1.0, tl.float32)
            noise_hi = tl.full([GROUPS], 1.0, tl.float32)
        if greedy:  # the argmax of L itself; strict > keeps a group's lowest index
            rate = 0.0  # unused by greedy rows
            for base in range(start, stop, BLOCK):
                cols = base + within
                logits = tl.load(logits_row + cols, mask=cols < vocab_size, other=-float("inf")).to(tl.float32)
                best = tl.reduce(logits, 1, _max_nan)
                first = tl.min(tl.where(logits == best[:, None], cols, vocab_size), axis=1)
                take = best > run_max
                run_idx = tl.where(take, first, run_idx)
                run_max = _max_nan(run_max, best)
            run_key = run_max
        else:
            run_key = tl.full([GROUPS], -1.0, tl.float32)  # -1: the key of a zero-probability token
            # Each tile's loads are issued one iteration ahead (the first before the temperature
            # is waited for), so that a tile's arithmetic overlaps the next tile's loads.
            ahead = start + within
            in_chunk = (ahead < stop) & (ahead < vocab_size)
            next_logits = tl.load(logits_row + ahead, mask=in_chunk, other=-float("inf"))
            if not COUNTER_NOISE:
                next_noise = tl.load(noise_ptr + row * noise_row_stride + ahead, mask=in_chunk, other=1.0)
            # Weights are 2^((L - m) * rate), rate = log2(e) / T: exp((L - m) / T) (module note).
            rate = tl.math.div_rn(1.4426950408889634, tl.maximum(raw_temperature, 1e-5))
            for base in range(start, stop, BLOCK):
                cols = base + within
                logits = next_logits.to(tl.float32)
                ahead = cols + BLOCK
                in_chunk = (ahead < stop) & (ahead < vocab_size)
                next_logits = tl.load(logits_row + ahead, mask=in_chunk, other=-float("inf"))
                if not COUNTER_NOISE:
                    noise = next_noise
                    next_noise = tl.load(noise_ptr + row * noise_row_stride + ahead, mask=in_chunk, other=1.0)
                # The group's weights against the raised running maximum (one exp2 per element);
                # below, the running key is rescaled by exp(old max - new max), 1 while it stays.
                top = _max_nan(run_max, tl.reduce(logits, 1, _max_nan))
                weight = tl.math.exp2((logits - top[:, None]) * rate)  # NaN only for -inf - -inf: weight 0
                if COUNTER_NOISE:  # the group races as one: its total weight / E, then its token
                    group = (base // 4 + tl.arange(0, GROUPS)).to(tl.uint32)
                    r0, r1, _, _ = tl.philox(seed, group, zero + row.to(tl.uint32), zero + call_lo, zero + call_hi)
                    total = tl.sum(weight, axis=1)
                    best = tl.where(total > 0.0, _ratio(total, _exponential_from_bits(r0, LIBDEVICE), LIBDEVICE), -1.0)
                    first = _pick_in_group(weight, total, _uniform_from_bits(r1), cols, vocab_size)
                else:
                    noise_lo = _min_nan(noise_lo, tl.reduce(noise, 1, _min_nan))
                    noise_hi = _max_nan(noise_hi, tl.reduce(noise, 1, _max_nan))
                    key = tl.where(weight > 0.0, _ratio(weight, noise, LIBDEVICE), -1.0)
                    best = tl.max(key, axis=1)
                    first = tl.min(tl.where(key == best[:, None], cols, vocab_size), axis=1)
                factor = tl.math.exp2((run_max - top) * rate)
                kept = tl.where((run_key >= 0.0) & (factor > 0.0), run_key * factor, -1.0)
                take = best > kept  # ties keep the group's earlier, lower index
                run_key = tl.where(take, best, kept)
                run_idx = tl.where(take, first, run_idx)
                run_max = top
        # The program's combine over groups: rescale every group to the program maximum.
        # Each reduction over the program's threads is a barrier on the kernel's tail (the
        # last program's combine waits for them), hence two: the maximum and the (key, index)
        # pair; the value checks need none (each thread ORs its own flags into the word, below).
        lane_flag = tl.where((run_max != run_max) | (run_max == float("inf")), 1, 0)  # NaN / +inf logit read
        part_max = tl.max(run_max, axis=0)
        if greedy:
            lane_key = run_key
        else:
            arg = tl.where(run_max > -float("inf"), run_max - part_max, -float("inf"))
            scale = tl.math.exp2(arg * rate)
            lane_key = tl.where((run_key >= 0.0) & (scale > 0.0), run_key * scale, -1.0)
        part_key, part_idx = tl.reduce((lane_key, run_idx), 0, _argmax_lowest)
        if not COUNTER_NOISE:  # NaN fails >= 0
            lane_flag = lane_flag | tl.where(noise_lo >= 0.0, 0, 4) | tl.where(noise_hi == float("inf"), 4, 0)
        bad_temperature = (raw_temperature != raw_temperature) | (raw_temperature < 0.0)
        bad_temperature = bad_temperature | (raw_temperature == float("inf"))
        lane_flag = lane_flag | tl.where(bad_temperature & (split == 0), 8, 0)
        # A captured launch (-1) records no flags (launch_id is broadcast to the lanes: the
        # interpreter's atomics take only a tensor mask). The barrier orders every thread's OR
        # before the release of the row counter below, which one thread performs.
        recording = (lane_flag * 0 + launch_id) >= 0
        tl.atomic_or(sync_ptr + lane_flag * 0, lane_flag, mask=(lane_flag != 0) & recording)
        tl.debug_barrier()
        part = row * splits + split
        tl.store(part_max_ptr + part, part_max)
        tl.store(part_key_ptr + part, part_key)
        tl.store(part_idx_ptr + part, part_idx)
        arrived = tl.atomic_add(sync_ptr + 2 + row, 1, sem="acq_rel")
        if arrived == splits - 1:  # the last of the row's programs: combine
            s = tl.arange(0, SPLITS_POW2)
            here = s < splits
            maxima = tl.load(part_max_ptr + row * splits + s, mask=here, other=-float("inf"), cache_modifier=".cg")
            keys = tl.load(part_key_ptr + row * splits + s, mask=here, other=-float("inf"), cache_modifier=".cg")
            idx = tl.load(part_idx_ptr + row * splits + s, mask=here, other=vocab_size, cache_modifier=".cg")
            global_max = tl.max(maxima, axis=0)
            if greedy:
                rescaled = keys
            else:
                arg = tl.where(maxima > -float("inf"), maxima - global_max, -float("inf"))
                scale = tl.math.exp2(arg * rate)
                rescaled = tl.where((keys >= 0.0) & (scale > 0.0), keys * scale, -1.0)
            rescaled = tl.where(here, rescaled, -float("inf"))
            best, winner = tl.reduce((rescaled, idx), 0, _argmax_lowest)
            # A row with no finite key (all -inf, NaN: flagged) gets token 0: an id in [0, V) for a
            # caller that indexes with it before a deferred check raises.
            tl.store(out_ptr + row, tl.where(winner < vocab_size, winner, 0).to(tl.int64))
            if global_max == -float("inf"):
                tl.atomic_or(sync_ptr, 2)
            tl.store(sync_ptr + 2 + row, 0)
            if (launch_id > 0) | COUNTER_NOISE:
                done = rows - 1  # one row: its last program is the launch's last (triton specializes 1)
                if rows > 1:
                    done = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel")
                if done == rows - 1:  # the launch's last program: every program has read `call` and flagged
                    if rows > 1:
                        tl.store(sync_ptr + 1, 0)
                    if COUNTER_NOISE:
                        tl.store(rng_ptr + 1, call + 1)
                    if launch_id > 0:
                        flags = tl.atomic_xchg(sync_ptr, 0)
                        slot = signal_ptr + (launch_id & (SIGNAL_SLOTS - 1))
                        tl.store(slot, (launch_id.to(tl.int64) << 32) | flags.to(tl.int64))


def _leading_release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a PEP 440 version; ``(0, 0)`` where it is not one (a local build)."""
    try:
        return (Version(version).release + (0,))[:2]
    except InvalidVersion:
        return (0, 0)


def _release(name: str, version: object) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``"3.6.0"``, ``"2.4.0rc1"``, ``"3.7.0+git1a2b"``
    (PEP 440, read by ``packaging``), checked: TypeError / ValueError naming ``name`` for
    anything else, and for a version without a minor part or with an epoch."""
    if not isinstance(version, str):
        raise TypeError(f"{name}: expected a version string, got {type(version).__name__}")
    try:
        parsed = Version(version)
    except InvalidVersion:
        parsed = None
    if parsed is None or parsed.epoch or len(parsed.release) < 2:
        raise ValueError(f"{name}: expected a version 'MAJOR.MINOR[.PATCH][aN|bN|rcN][.postN][.devN][+local]', "
                         f"got {version!r}")
    return parsed.release[:2]


def interpreter_defect(triton_version: str, numpy_version: str | None) -> str | None:
    """Why Triton's interpreter cannot run this package's kernels with these versions, as a
    message naming them and the fix; ``None`` if it can (``numpy_version`` None: NumPy is not
    installed, and the interpreter's own import says so).

    Triton before 3.7 turns a scalar tensor, such as the fused race's loop bound, into an
    index with ``int()`` of a one-element array, which NumPy 2.4 refuses (deprecated since
    NumPy 1.25); triton 3.7 squeezes the array first. Seen with triton 3.6.0 (torch 2.11's)
    and NumPy 2.4.6 / 2.5.2: every interpreted launch raised ``InterpreterError``.

    Raises:
        TypeError: a version that is not a string (``numpy_version`` may be None).
        ValueError: a version string that is not ``MAJOR.MINOR[.PATCH...]`` (PEP 440, no epoch).
    """
    triton_release = _release("triton_version", triton_version)
    if numpy_version is None:
        return None
    if _release("numpy_version", numpy_version) < (2, 4) or triton_release >= (3, 7):
        return None
    return (f"the Triton interpreter of triton {triton_version} cannot run with NumPy {numpy_version} "
            f"(triton < 3.7 converts a loop bound with int() of a one-element array, which NumPy >= 2.4 "
            f"refuses): install triton >= 3.7 or numpy < 2.4, or run on CUDA")


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _installed_defect() -> str | None:
    try:
        return interpreter_defect(triton.__version__, _installed_version("numpy"))
    except ValueError:  # a version this check cannot read (a local build): no known defect
        return None


def interpreter_errstate() -> contextlib.AbstractContextManager:
    """The context to launch a kernel in: under the interpreter, NumPy's floating-point
    warnings off, since the kernels rely on IEEE results that NumPy reports (the NaN of
    ``-inf - -inf``, whose weight fails ``> 0``; the ``inf`` of ``x / 0``), and a caller's
    ``-W error`` would turn them into ``InterpreterError``; compiled: nothing."""
    if not KERNEL_INTERPRETED:
        return contextlib.nullcontext()
    import numpy  # the interpreter's own dependency

    return numpy.errstate(all="ignore")


#: Whether the kernels were built for the Triton interpreter (CPU tensors): ``triton.jit``
#: decided that when this module was imported, from ``TRITON_INTERPRET`` (any spelling triton
#: takes for true), so the kernel object itself says which it is.
KERNEL_INTERPRETED = triton is not None and not isinstance(_fused_race_kernel, triton.runtime.JITFunction)
#: Why the interpreter cannot run the kernels in this environment (``interpreter_defect``);
#: None: it can, or triton is not installed. Interpreted calls raise it as a RuntimeError.
INTERPRETER_DEFECT = None if triton is None else _installed_defect()
# A compiled kernel's launcher takes every argument, constexprs included, from triton 3.6 (the
# H200's; 3.9 alike); older versions re-launch through the JIT function on every call.
_REUSE_LAUNCHER = triton is not None and not KERNEL_INTERPRETED and _leading_release(triton.__version__) >= (3, 6)


class _Workspace(NamedTuple):
    sync: torch.Tensor  # int32 [>= 2 + rows]: flag word, launch counter, row counters
    part_max: torch.Tensor  # float32 [rows * splits]
    part_key: torch.Tensor  # float32 [rows * splits]
    part_idx: torch.Tensor  # int32 [rows * splits]
    flag: torch.Tensor  # sync[0], the value-check word (a 0-d view, read by interpreted eager calls)


_SYNC: dict[torch.device, torch.Tensor] = {}  # int32, zero between launches
_PARTIALS: dict[torch.device, torch.Tensor] = {}  # int32, scratch
_RETIRED: list[torch.Tensor] = []  # outgrown buffers: a captured CUDA graph may still use them
_VIEWS: dict[tuple[torch.device, int, int], _Workspace] = {}


def _grown(cache: dict[torch.device, torch.Tensor], device: torch.device, need: int) -> torch.Tensor:
    buffer = cache.get(device)
    if buffer is None or buffer.numel() < need:
        if buffer is not None:
            _RETIRED.append(buffer)
        buffer = torch.zeros(max(need, 1 << 12), dtype=torch.int32, device=device)
        cache[device] = buffer
        for key in [k for k in _VIEWS if k[0] == device]:
            del _VIEWS[key]
    return buffer


def _workspace(device: torch.device, rows: int, splits: int) -> _Workspace:
    """The device's sync words (zero-filled; every launch leaves them zeroed) and partials
    (module note), cached per ``(device, rows, splits)`` so that an eager call allocates
    only its output. Outgrown buffers stay alive: a captured graph may hold them."""
    views = _VIEWS.get((device, rows, splits))
    if views is None:
        sync = _grown(_SYNC, device, 2 + rows)
        parts = _grown(_PARTIALS, device, 3 * rows * splits)[:3 * rows * splits].view(3, rows * splits)
        views = _Workspace(sync, parts[0].view(torch.float32), parts[1].view(torch.float32), parts[2], sync[0])
        _VIEWS[(device, rows, splits)] = views
    return views


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def splits_for(rows: int, vocab_size: int, tile: int, device: torch.device) -> int:
    """Programs per row ``S``: as many as keep ``rows * S`` within ``16 x SM count``
    programs (the interpreter: 8), the programs resident at once, so the grid runs in one
    wave (a second, partial wave cost 13% at ``B=256`` on the H200: 2,304 programs against
    the 2,112 resident on its 132 SMs), at least one, at most one per tile, then trimmed so
    none is left without a tile. Returns an int in ``[1, ceil(vocab_size / tile)]``."""
    n_tiles = -(-vocab_size // tile)
    if device.type == "cuda":
        target = _PROGRAMS_PER_SM * _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    else:
        target = _INTERPRETED_PROGRAMS
    splits = min(n_tiles, max(1, target // rows))
    per_program = -(-n_tiles // splits)
    return -(-n_tiles // per_program)


class _Plan(NamedTuple):
    """What a call's argument metadata fixes: the grid ``(B, S, 1)``, the kernel's integer
    arguments and constexprs, and the compiled kernel's launcher, kept by the first launch
    so that later calls skip triton's per-call specialization."""

    rows: int
    splits: int
    grid: tuple[int, int, int]
    scalars: tuple[int, ...]  # rows, V, chunk, S, logits row stride, noise row stride
    constexprs: dict[str, object]  # in the kernel's parameter order
    num_warps: int
    launcher: list  # [] until the first compiled launch, then [the compiled kernel's launcher]


_PLANS: dict[tuple, _Plan] = {}
_MAX_PLANS = 1024  # signatures kept (batch sizes x dtypes x devices); past that the cache restarts


def _signature(*arguments: object) -> tuple | None:
    """A call's arguments as a plan key: each tensor's shape, strides, dtype, device and
    16-byte alignment (what triton specializes a pointer on), each other argument with its
    type; None (no plan is cached) when one is neither None, an int nor a tensor."""
    key = []
    for value in arguments:
        if isinstance(value, torch.Tensor):
            key.append((value.shape, value.stride(), value.dtype, value.device, value.data_ptr() % 16 == 0))
        elif value is None or type(value) is int:
            key.append((type(value), value))
        else:
            return None
    return tuple(key)


def _plan(logits, noise, greedy_mask, tile, splits, num_warps) -> _Plan:
    """The launch of checked arguments (module note: grid, chunk, the rounding bound's ``t``)."""
    rows, vocab = logits.shape
    n_tiles = -(-vocab // tile)
    splits = splits_for(rows, vocab, tile, logits.device) if splits is None else min(splits, n_tiles)
    splits = max(splits, -(-n_tiles // _MAX_TILES_PER_PROGRAM))  # the rounding bound's t (module note)
    per_program = -(-n_tiles // splits)
    splits = -(-n_tiles // per_program)
    scalars = (rows, vocab, per_program * tile, splits, logits.stride(0), 0 if noise is None else noise.stride(0))
    constexprs = dict(BLOCK=tile, SPLITS_POW2=triton.next_power_of_2(splits), COUNTER_NOISE=noise is None,
                      HAS_GREEDY=greedy_mask is not None, LIBDEVICE=not KERNEL_INTERPRETED,
                      SIGNAL_SLOTS=fused_checks.SLOTS)
    return _Plan(rows, splits, (rows, splits, 1), scalars, constexprs,
                 num_warps or max(1, min(8, tile // 128)), [])


def philox_state(seed: int, device: torch.device | str) -> torch.Tensor:
    """The counter-noise state ``[seed, call]`` (int64 ``[2]`` on ``device``, call 0).

    Every :func:`fused_exponential_race` call with it draws fresh noise and increments
    ``call`` on the device (module note), so it can live inside a captured CUDA graph.

    Raises:
        TypeError / ValueError: ``seed`` not an int in ``[0, 2^63)``.

    Example:
        >>> philox_state(7, "cpu").tolist()
        [7, 0]
    """
    check_int("seed", seed, minimum=0, maximum=2**63 - 1)
    return torch.tensor([seed, 0], dtype=torch.int64, device=device)


def _check_fused(logits, temperatures, noise, greedy_mask, rng_state, tile, splits, num_warps) -> None:
    check_tensor("logits", logits, ndim=2, dtypes=FLOAT_DTYPES)
    if logits.shape[1] == 0:
        raise ValueError(f"logits: expected a non-empty vocabulary axis, got shape {tuple(logits.shape)}")
    if (noise is None) == (rng_state is None):
        raise ValueError("noise / rng_state: expected exactly one of them (explicit noise, or counter noise)")
    check_tensor("temperatures", temperatures, shape=(logits.shape[0],), dtypes=FLOAT_DTYPES)
    if noise is not None:
        check_tensor("noise", noise, shape=tuple(logits.shape), dtypes=(torch.float32,))
    if rng_state is not None:
        check_tensor("rng_state", rng_state, shape=(2,), dtypes=(torch.int64,))
    if greedy_mask is not None:
        check_tensor("greedy_mask", greedy_mask, shape=(logits.shape[0],), dtypes=(torch.bool,))
    check_same_device(logits=logits, temperatures=temperatures, noise=noise, greedy_mask=greedy_mask,
                      rng_state=rng_state)
    check_int("tile", tile, minimum=_MIN_TILE)
    if tile & (tile - 1):
        raise ValueError(f"tile: expected a power of two >= {_MIN_TILE}, got {tile}")
    if splits is not None:
        check_int("splits", splits, minimum=1)
    if num_warps is not None:
        check_int("num_warps", num_warps, minimum=1, maximum=32)
        if num_warps & (num_warps - 1):
            raise ValueError(f"num_warps: expected a power of two, got {num_warps}")
    if triton is None:
        raise ValueError("fused_exponential_race: triton is not installed")
    if logits.device.type != "cuda" and not KERNEL_INTERPRETED:
        raise ValueError(f"logits: the fused kernel needs CUDA tensors or TRITON_INTERPRET=1 at import, "
                         f"got device {logits.device}")
    if logits.device.type != "cuda" and INTERPRETER_DEFECT is not None:
        raise RuntimeError(f"fused_exponential_race: {INTERPRETER_DEFECT}")


def _raise_flagged(logits, temperatures, noise, launch_id: int, flags: int) -> None:
    """A launch flagged bad values: raise the ``sampling`` checks' message (the flags are
    exact, ``fused_checks``; the flags' own message if those checks pass all the same)."""
    _check_logits("logits", logits)
    _check_temperatures(temperatures)
    if noise is not None:
        _check_noise(noise, logits.shape)
    raise fused_checks.flagged_error(launch_id, flags, deferred=False)


def fused_exponential_race(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    noise: torch.Tensor | None = None,
    *,
    rng_state: torch.Tensor | None = None,
    greedy_mask: torch.Tensor | None = None,
    tile: int | None = None,
    splits: int | None = None,
    num_warps: int | None = None,
    check: str = "sync",
) -> torch.Tensor:
    """One-launch exponential race over ``[B, V]`` logits (SPEC S3; module note).

    Args:
        logits: ``[B, V]`` float32 / bf16 / fp16 tensor (unit row stride; a column slice
            ``logits[:, :V]`` of padded logits is fine), computed in float32 (float64 is
            rounded to float32 on load: a value beyond its range becomes ``inf`` and raises).
            ``B = 0`` returns an empty result (on a device the kernel can run on: the
            device checks come first).
        temperatures: ``[B]`` float tensor, values ``>= 0``, clamped to ``1e-5``.
        noise: ``[B, V]`` float32 iid Exp(1) (explicit noise), or None with ``rng_state``.
        rng_state: int64 ``[2]`` from :func:`philox_state` (counter noise; advanced in place).
        greedy_mask: optional ``[B]`` bool; True rows take the argmax of ``L`` (lowest index).
        tile: columns per tile, a power of two ``>= 16`` (default: ``V`` rounded up to a
            power of two, within ``[16, 512]``).
        splits: programs per row (default :func:`splits_for`).
        num_warps: warps per program (default ``tile / 128`` within ``[1, 8]``); ``splits``,
            ``tile`` and ``num_warps`` change the speed, never the law (the token only within
            the rounding bound of the module note).
        check: when an eager call reads its launch's value-check flags
            (``dspark_ref.fused_checks``): ``"sync"`` before it returns, raising there;
            ``"deferred"`` at the next call on the device or ``fused_checks.check_deferred``, which
            raise for it (the call itself returns once the kernel is launched).

    Returns:
        ``[B]`` int64 token ids in ``[0, V)`` (a row with bad values, which a ``"deferred"``
        call returns before its check raises, gets some id in that range).

    Raises:
        TypeError: wrong dtype, a non-int ``tile`` / ``splits``.
        ValueError: wrong rank or shape, devices differ, both or neither of ``noise`` and
            ``rng_state``, a bad ``tile`` or ``check``, no triton or neither CUDA nor the
            interpreter; on an eager ``"sync"`` call also NaN/+inf logits or an all ``-inf``
            row, NaN/inf/negative noise, NaN/inf/negative temperatures (the ``sampling``
            messages); on any eager call, those of an earlier ``"deferred"`` call on the device.
        RuntimeError: CPU tensors where the interpreter cannot run (``INTERPRETER_DEFECT``).

    Example:
        >>> logits = torch.tensor([[0.0, 1.0, 4.0, 2.0]])  # doctest: +SKIP (needs CUDA or the interpreter)
        >>> fused_exponential_race(logits, torch.ones(1), torch.ones(1, 4), tile=16)  # doctest: +SKIP
        tensor([2])
    """
    if check not in fused_checks.CHECKS:
        raise ValueError(f"check: expected one of {fused_checks.CHECKS}, got {check!r}")
    signature = _signature(logits, temperatures, noise, rng_state, greedy_mask, tile, splits, num_warps)
    plan = _PLANS.get(signature)
    if plan is None:
        if tile is None and isinstance(logits, torch.Tensor) and logits.ndim == 2:
            tile = min(_DEFAULT_TILE, max(_MIN_TILE, 1 << max(0, logits.shape[1] - 1).bit_length()))
        _check_fused(logits, temperatures, noise, greedy_mask, rng_state, tile, splits, num_warps)
        if logits.shape[0] == 0:  # no program to launch (nor a plan: the grid would be empty)
            return torch.empty(0, dtype=torch.int64, device=logits.device)
        converted = (logits.stride(1) != 1 or temperatures.dtype != torch.float32
                     or (noise is not None and noise.stride(1) != 1))
        if converted:  # this call's copies: a plan for their layout, not cached under the caller's
            logits, temperatures = logits.contiguous(), temperatures.to(torch.float32)
            noise = None if noise is None else noise.contiguous()
        plan = _plan(logits, noise, greedy_mask, tile, splits, num_warps)
        if signature is not None and not converted:
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[signature] = plan
    device = logits.device
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    # A captured launch writes no flags and nothing reads them (as in ``sampling``).
    signal = None if capturing else fused_checks.signal_for(device, pinned=not KERNEL_INTERPRETED)
    if signal is not None:
        signal.make_room()  # earlier deferred launches raise first
    launch_id = -1 if signal is None else signal.next_id()
    # The kernel's id: -1 captured, 0 interpreted (the host reads the device word), else the ring's.
    kernel_id = 0 if signal is not None and signal.words is None else launch_id
    work = _workspace(device, plan.rows, plan.splits)
    out = torch.empty(plan.rows, dtype=torch.int64, device=device)
    args = (
        logits, temperatures, logits if greedy_mask is None else greedy_mask.view(torch.int8),
        logits if noise is None else noise, work.sync if rng_state is None else rng_state,
        work.part_max, work.part_key, work.part_idx, work.sync, out,
        signal.words if kernel_id > 0 else work.sync, *plan.scalars, kernel_id,
    )
    if plan.launcher:
        plan.launcher[0](*args, *plan.constexprs.values())
    else:
        with interpreter_errstate():
            kernel = _fused_race_kernel[plan.grid](*args, **plan.constexprs, num_warps=plan.num_warps)
        if _REUSE_LAUNCHER:  # the compiled kernel's own launcher: no re-specialization next time
            plan.launcher.append(kernel[plan.grid])
    if signal is None:
        return out
    flags = None
    if signal.words is None:  # the interpreter: the device word, read now
        flags = int(work.flag)
        if flags:
            work.flag.zero_()
    if check == "deferred":
        signal.deferred.append((launch_id, flags))
        return out
    if flags is None:
        flags = signal.wait(launch_id)
    if signal.deferred:  # launched before this one, on the same stream: their words are written
        signal.collect()
    if flags:
        _raise_flagged(logits, temperatures, noise, launch_id, flags)
    return out
