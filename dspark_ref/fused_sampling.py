"""Fused single-pass exponential race (SPEC S3): one Triton launch from logits to tokens.

Same law and, with explicit noise, the same token as the untiled race
``argmax_v softmax(L / T)_v / E_v`` (``sampling.exponential_race``; greedy rows
``greedy_argmax``), computed tile by tile as in ``tiled_sampling`` but with the combine
inside the kernel:

* the grid is ``(B, S)``: program ``(row, s)`` walks its ``ceil(n_tiles / S)`` tiles of one
  row, keeping a running ``(max, key, index)``: when a tile raises the running maximum
  ``m`` to ``m'``, the running key becomes ``key * exp(m - m')`` and the tile's key
  ``tile_key * exp(tile_max - m')`` (the rescale of the module note of ``tiled_sampling``);
* each program stores its partial and increments its row's counter (an acquire-release
  atomic); the program that sees the count reach ``S`` rescales the ``S`` partials to the
  row maximum, ``key * exp(max_s - global_max)``, writes the winner and resets the counter.
  So one launch does the whole row, and ``S`` is chosen so that ``B * S`` programs fill
  the GPU (``splits``), for ``B = 1`` as for ``B = 256``.

Noise: explicit (``noise [B, V]`` float32, read once), or counter-based: Philox-4x32-10
keyed by ``rng_state[0]`` (the seed) on the counter ``(column / 4, row, call)`` with
``call = rng_state[1]``; ``E = -log(u)``, ``u = (r >> 8 + 1/2) / 2^24`` in ``(0, 1)`` (never 0
or 1, so ``E`` is finite and ``> 0``). The last program of a launch increments
``rng_state[1]``, on the device: a CUDA-graph replay therefore draws fresh noise (SPEC S3
"fresh noise", also under replay), and no host value enters the kernel. The law of ``E``
differs from Exp(1) only by the 24-bit grid of ``u`` (total variation below ``2^-23``).

Rounding bound (SPEC S0), the explicit-noise path against the untiled float32 keys: the
tile keys are the same expressions as ``tiled_sampling``; the running rescale multiplies a
key by at most ``t = ceil(n_tiles / S) + 1`` rounded factors ``exp(a_i)``. Each factor costs
at most ``2`` ulp (libdevice ``expf``) plus ``1/2`` ulp (the product), and the rounding of
the arguments ``a_i = m_i - m_{i+1}`` sums to at most ``2^-24 * |m_0 - m_t| <= 2^-24 * 104``
(below ``-104`` the float32 ``exp`` is 0 anyway). So the rescale adds to a key a relative
error below ``2.5 * t * 2^-23 + 104 * 2^-24 <= 3.0e-7 * t + 6.2e-6``: ``< 3e-5`` for
``t <= 76`` (``V = 151,936`` at the default tile 2048, even with ``S = 1``) and ``< 1e-4``
for ``t <= 300`` (tile 512), a Gumbel-score gap below the ``1e-4`` near-tie margin of
``tests/test_tiled_sampling.py`` and far below the ``1e-3`` relative margin of the S3 exact
cases. Outside such near-ties the token is exactly the untiled one. Greedy rows compare the float32 ``L`` themselves: exactly
``greedy_argmax`` (lowest index among ties).

Value checks: the kernel flags NaN / +inf logits, all ``-inf`` rows, bad noise and bad
temperatures in a device word; an eager call reads that word once (one host sync) and on a
flag re-runs the ``sampling`` checks to raise their message. While a CUDA graph is being
captured nothing is read (as in ``sampling``).

Workspace: one zero-filled int32 buffer per device (row counters, a launch counter, the
flag word) that every launch leaves zeroed; calls on one device must therefore be ordered
on one stream (an engine's step is), not run concurrently from two streams.

Backends: CUDA tensors, or CPU tensors when the kernel was built under
``TRITON_INTERPRET=1`` (:data:`KERNEL_INTERPRETED`).
"""

from __future__ import annotations

import functools
import os

import torch

from dspark_ref._checks import FLOAT_DTYPES, check_int, check_same_device, check_tensor
from dspark_ref.sampling import _check_logits, _check_noise, _check_temperatures

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # CPU-only installs: tiled_sampling's torch backend still works.
    triton = None

__all__ = ["KERNEL_INTERPRETED", "fused_exponential_race", "philox_state", "splits_for"]

#: Whether the kernels were built for the Triton interpreter (CPU tensors): ``triton.jit``
#: decides that when the module is imported, from ``TRITON_INTERPRET``.
KERNEL_INTERPRETED = triton is not None and os.environ.get("TRITON_INTERPRET") == "1"

_MIN_TILE = 16
_MAX_TILE = 2048  # the default tile at production vocabularies
_PROGRAMS_PER_SM = 4  # programs a launch aims to keep per SM (grid B * S)
_INTERPRETED_PROGRAMS = 8  # the interpreter's stand-in for the GPU's program count
# Bits of the kernel's value-check word: 1 NaN/+inf logit, 2 all -inf row, 4 bad noise,
# 8 bad temperature (any bit: the host re-runs the sampling checks for the message).


if triton is not None:

    @triton.jit
    def _fused_race_kernel(
        logits_ptr, temps_ptr, greedy_ptr, noise_ptr, rng_ptr,
        part_max_ptr, part_key_ptr, part_idx_ptr, sync_ptr, out_ptr,
        rows, vocab_size, n_tiles, tiles_per_program, splits,
        logits_row_stride, noise_row_stride,
        TILE: tl.constexpr, SPLITS_POW2: tl.constexpr, COUNTER_NOISE: tl.constexpr,
        LIBDEVICE_EXP: tl.constexpr,
    ):
        """Program (row, split): its tiles' running race, then the row combine (module note).

        ``sync_ptr``: int32 ``[2 + rows]``: the flag word, the launch counter, row counters.
        """
        row = tl.program_id(0).to(tl.int64)
        split = tl.program_id(1)
        greedy = tl.load(greedy_ptr + row) != 0
        raw_temperature = tl.load(temps_ptr + row)
        bad_temperature = (raw_temperature != raw_temperature) | (raw_temperature < 0.0)
        bad_temperature = bad_temperature | (raw_temperature == float("inf"))
        temperature = tl.where(greedy, 1.0, tl.maximum(raw_temperature, 1e-5))
        if COUNTER_NOISE:
            seed = tl.load(rng_ptr)
            call = tl.load(rng_ptr + 1)
            call_lo = (call & 0xFFFFFFFF).to(tl.uint32)
            call_hi = ((call >> 32) & 0xFFFFFFFF).to(tl.uint32)
        run_max = tl.max(tl.full([2], -float("inf"), tl.float32), axis=0)
        run_key = tl.where(greedy, run_max, -1.0)  # -1: the key of a zero-probability token
        run_idx = tl.min(tl.full([2], vocab_size, tl.int32), axis=0)
        flags = tl.min(tl.full([2], 0, tl.int32), axis=0)
        first = split * tiles_per_program
        last = tl.minimum(first + tiles_per_program, n_tiles)
        for tile in range(first, last):
            cols = tile * TILE + tl.arange(0, TILE)
            in_vocab = cols < vocab_size
            logits = tl.load(logits_ptr + row * logits_row_stride + cols, mask=in_vocab, other=-float("inf"))
            logits = logits.to(tl.float32)
            bad = (logits != logits) | (logits == float("inf"))
            flags = flags | tl.where(tl.max(bad.to(tl.int32), axis=0) > 0, 1, 0)
            scaled = tl.math.div_rn(logits, temperature)
            tile_max = tl.max(scaled, axis=0)
            shifted = scaled - tl.where(tile_max > -float("inf"), tile_max, 0.0)
            if LIBDEVICE_EXP:
                weight = libdevice.exp(shifted)
            else:
                weight = tl.exp(shifted)
            if COUNTER_NOISE:
                quarter = tile * (TILE // 4) + tl.arange(0, TILE // 4)
                zero = tl.zeros([TILE // 4], tl.uint32)
                r0, r1, r2, r3 = tl.philox(seed, quarter.to(tl.uint32), zero + row.to(tl.uint32),
                                           zero + call_lo, zero + call_hi)
                bits = tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), [TILE])
                uniform = ((bits >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
                noise = -tl.log(uniform)
                key = tl.where(weight > 0, weight / noise, -1.0)
            else:
                noise = tl.load(noise_ptr + row * noise_row_stride + cols, mask=in_vocab, other=1.0)
                bad_noise = (noise != noise) | (noise < 0.0) | (noise == float("inf"))
                flags = flags | tl.where(tl.max(bad_noise.to(tl.int32), axis=0) > 0, 4, 0)
                key = tl.where(weight > 0, tl.math.div_rn(weight, noise), -1.0)
            key = tl.where(greedy, scaled, key)
            tile_key = tl.max(key, axis=0)
            tile_idx = tl.min(tl.where(key == tile_key, cols, vocab_size + TILE), axis=0)
            new_max = tl.maximum(run_max, tile_max)
            # -inf arguments where a maximum is -inf (no -inf - -inf): the scale is then 0.
            old_arg = tl.where(run_max > -float("inf"), run_max - new_max, -float("inf"))
            new_arg = tl.where(tile_max > -float("inf"), tile_max - new_max, -float("inf"))
            if LIBDEVICE_EXP:
                old_scale = libdevice.exp(old_arg)
                new_scale = libdevice.exp(new_arg)
            else:
                old_scale = tl.exp(old_arg)
                new_scale = tl.exp(new_arg)
            # A zero scale is a probability underflowing to 0: key -1, also for an inf key (E = 0).
            old = tl.where(greedy, run_key,
                           tl.where((run_key >= 0.0) & (old_scale > 0.0), run_key * old_scale, -1.0))
            new = tl.where(greedy, tile_key,
                           tl.where((tile_key >= 0.0) & (new_scale > 0.0), tile_key * new_scale, -1.0))
            take = new > old  # ties keep the earlier tile: the lower index
            run_key = tl.where(take, new, old)
            run_idx = tl.where(take, tile_idx, run_idx)
            run_max = new_max
        flags = flags | tl.where(bad_temperature & (split == 0), 8, 0)
        part = row * splits + split
        tl.store(part_max_ptr + part, run_max)
        tl.store(part_key_ptr + part, run_key)
        tl.store(part_idx_ptr + part, run_idx)
        if flags != 0:
            tl.atomic_or(sync_ptr, flags)
        arrived = tl.atomic_add(sync_ptr + 2 + row, 1, sem="acq_rel")
        if arrived == splits - 1:  # the last of the row's programs: combine
            s = tl.arange(0, SPLITS_POW2)
            here = s < splits
            maxima = tl.load(part_max_ptr + row * splits + s, mask=here, other=-float("inf"), cache_modifier=".cg")
            keys = tl.load(part_key_ptr + row * splits + s, mask=here, other=-float("inf"), cache_modifier=".cg")
            idx = tl.load(part_idx_ptr + row * splits + s, mask=here, other=vocab_size, cache_modifier=".cg")
            global_max = tl.max(maxima, axis=0)
            arg = tl.where(maxima > -float("inf"), maxima - global_max, -float("inf"))
            if LIBDEVICE_EXP:
                scale = libdevice.exp(arg)
            else:
                scale = tl.exp(arg)
            rescaled = tl.where(greedy, keys, tl.where((keys >= 0.0) & (scale > 0.0), keys * scale, -1.0))
            rescaled = tl.where(here, rescaled, -float("inf"))
            best = tl.max(rescaled, axis=0)
            winner = tl.min(tl.where(rescaled == best, idx, vocab_size), axis=0)
            tl.store(out_ptr + row, winner.to(tl.int64))
            if global_max == -float("inf"):
                tl.atomic_or(sync_ptr, 2)
            tl.store(sync_ptr + 2 + row, 0)
            done = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel")
            if done == rows - 1:  # the launch's last program: every program has read `call`
                tl.store(sync_ptr + 1, 0)
                if COUNTER_NOISE:
                    tl.store(rng_ptr + 1, call + 1)


_WORKSPACES: dict[torch.device, torch.Tensor] = {}


def _workspace(device: torch.device, rows: int) -> torch.Tensor:
    """The device's zeroed int32 sync buffer ``[flags, launch counter, row counters...]``,
    at least ``2 + rows`` long (module note)."""
    buffer = _WORKSPACES.get(device)
    if buffer is None or buffer.numel() < rows + 2:
        buffer = torch.zeros(max(rows + 2, 258), dtype=torch.int32, device=device)
        _WORKSPACES[device] = buffer
    return buffer


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def splits_for(rows: int, vocab_size: int, tile: int, device: torch.device) -> int:
    """Programs per row ``S``: enough for ``rows * S`` to reach ``4 x SM count`` programs
    (the interpreter: 8), at most one per tile, then trimmed so none is left without a
    tile. Returns an int in ``[1, ceil(vocab_size / tile)]``."""
    n_tiles = -(-vocab_size // tile)
    if device.type == "cuda":
        target = _PROGRAMS_PER_SM * _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    else:
        target = _INTERPRETED_PROGRAMS
    splits = min(n_tiles, max(1, -(-target // rows)))
    per_program = -(-n_tiles // splits)
    return -(-n_tiles // per_program)


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


def _raise_flagged(logits, temperatures, noise) -> None:
    """A launch flagged bad values: raise the ``sampling`` checks' message."""
    _check_logits("logits", logits)
    _check_temperatures(temperatures)
    if noise is not None:
        _check_noise(noise, logits.shape)


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
) -> torch.Tensor:
    """One-launch exponential race over ``[B, V]`` logits (SPEC S3; module note).

    Args:
        logits: ``[B, V]`` float32 / bf16 / fp16 tensor (unit row stride; a column slice
            ``logits[:, :V]`` of padded logits is fine), computed in float32.
        temperatures: ``[B]`` float tensor, values ``>= 0``, clamped to ``1e-5``.
        noise: ``[B, V]`` float32 iid Exp(1) (explicit noise), or None with ``rng_state``.
        rng_state: int64 ``[2]`` from :func:`philox_state` (counter noise; advanced in place).
        greedy_mask: optional ``[B]`` bool; True rows take the argmax of ``L`` (lowest index).
        tile: columns per tile, a power of two ``>= 16`` (default: ``V`` rounded up to a
            power of two, within ``[16, 2048]``).
        splits: programs per row (default :func:`splits_for`).
        num_warps: warps per program (default ``tile / 256`` within ``[1, 8]``); ``splits``,
            ``tile`` and ``num_warps`` change the speed, never the law (the token only within
            the rounding bound of the module note).

    Returns:
        ``[B]`` int64 token ids in ``[0, V)``.

    Raises:
        TypeError: wrong dtype, a non-int ``tile`` / ``splits``.
        ValueError: wrong rank or shape, devices differ, both or neither of ``noise`` and
            ``rng_state``, a bad ``tile``, no triton or neither CUDA nor the interpreter; on
            an eager call also NaN/+inf logits or an all ``-inf`` row, NaN/inf/negative
            noise, NaN/inf/negative temperatures (the ``sampling`` messages).

    Example:
        >>> logits = torch.tensor([[0.0, 1.0, 4.0, 2.0]])  # doctest: +SKIP (needs CUDA or the interpreter)
        >>> fused_exponential_race(logits, torch.ones(1), torch.ones(1, 4), tile=16)  # doctest: +SKIP
        tensor([2])
    """
    if tile is None and isinstance(logits, torch.Tensor) and logits.ndim == 2:
        tile = min(_MAX_TILE, max(_MIN_TILE, 1 << max(0, logits.shape[1] - 1).bit_length()))
    _check_fused(logits, temperatures, noise, greedy_mask, rng_state, tile, splits, num_warps)
    rows, vocab = logits.shape
    device = logits.device
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if noise is not None and noise.stride(1) != 1:
        noise = noise.contiguous()
    if greedy_mask is None:
        greedy_mask = torch.zeros(rows, dtype=torch.bool, device=device)
    n_tiles = -(-vocab // tile)
    splits = splits_for(rows, vocab, tile, device) if splits is None else min(splits, n_tiles)
    per_program = -(-n_tiles // splits)
    splits = -(-n_tiles // per_program)
    part_max = torch.empty(rows, splits, dtype=torch.float32, device=device)
    part_key = torch.empty_like(part_max)
    part_idx = torch.empty(rows, splits, dtype=torch.int32, device=device)
    out = torch.empty(rows, dtype=torch.int64, device=device)
    sync = _workspace(device, rows)
    counter_noise = noise is None
    _fused_race_kernel[(rows, splits)](
        logits, temperatures.to(torch.float32), greedy_mask.view(torch.int8),
        logits if counter_noise else noise, rng_state if counter_noise else sync,
        part_max, part_key, part_idx, sync, out,
        rows, vocab, n_tiles, per_program, splits,
        logits.stride(0), 0 if counter_noise else noise.stride(0),
        TILE=tile, SPLITS_POW2=triton.next_power_of_2(splits), COUNTER_NOISE=counter_noise,
        LIBDEVICE_EXP=not KERNEL_INTERPRETED, num_warps=num_warps or max(1, min(8, tile // 256)),
    )
    if not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        flag_word = sync[0]
        if int(flag_word) != 0:
            flag_word.zero_()
            _raise_flagged(logits, temperatures, noise)
    return out
