"""Tiled (online) exponential race (SPEC S3): a Triton kernel and a torch mirror of it.

Production samplers never materialise ``softmax(L / T)`` over a 129k-151k vocabulary;
they split each row into tiles and keep, per tile, only

* ``tile_max``  = ``max_v L_v / T`` over the tile,
* ``tile_key``  = ``max_v exp(L_v / T - tile_max) / E_v`` and its (lowest) index.

Rescaling every tile key to the global maximum, ``tile_key * exp(tile_max - global_max)``,
gives ``Z * p_v / E_v`` for the tile winner (``Z`` the softmax normaliser, the same for
every tile), so the best rescaled key is the untiled race winner
``argmax_v softmax(L / T)_v / E_v``. Dropping the rescale compares keys measured against
different maxima, and is a classic bug.

Tie caveat: the tiled keys and the untiled keys are different float32 expressions of the
same real numbers (``exp(x - tile_max) / E * exp(tile_max - global_max)`` against
``exp(x - global_max) / sum / E``), each rounded a few times. So both pick the same token
unless the two best keys of a row lie within a few float32 ulps of each other (an exact
tie in real arithmetic, or a near-tie that rounding reorders); then either may win. The
Triton kernel and the torch mirror evaluate the same expressions; ``exp`` may differ in
the last bits between them (the Triton interpreter uses numpy, the GPU kernel libdevice).

Greedy rows take the tile-wise maximum of the logits, lowest index among ties (the first
tile reaching the global maximum, then the first index in it): exactly ``greedy_argmax``
for float32, bf16 and fp16 logits (float64 logits are compared after rounding to float32).

Backends: ``"triton"`` runs the race in one launch, combine included
(``fused_sampling.fused_exponential_race``, whose running rescale and rounding bound its
module note gives), and :func:`tile_partials` runs ``_race_tile_kernel`` (one program per
(row, tile)); ``"torch"`` computes the partials with tensor ops and combines them in torch;
``"auto"`` picks Triton for CUDA tensors, or for any tensors when the kernels were built
under ``TRITON_INTERPRET=1`` (the Triton interpreter, which runs on CPU tensors) and the
interpreter can run them here (``fused_sampling.INTERPRETER_DEFECT``; else torch).
``TRITON_INTERPRET`` is read once, when ``fused_sampling`` is imported, because
``triton.jit`` decides there whether the kernels are compiled or interpreted.
"""

from __future__ import annotations

import math

import torch

from dspark_ref._checks import check_choice, check_int, check_same_device, check_tensor
from dspark_ref.fused_sampling import (INTERPRETER_DEFECT, KERNEL_INTERPRETED, fused_exponential_race, interpreter_errstate,
                                       triton)
from dspark_ref.sampling import (
    TEMPERATURE_FLOOR,
    _check_logits,
    _check_noise,
    _check_temperatures,
    _first_argmax,
)

if triton is not None:
    import triton.language as tl

__all__ = ["BACKENDS", "KERNEL_INTERPRETED", "tile_partials", "tiled_exponential_race"]

BACKENDS = ("auto", "triton", "torch")
_MIN_TILE = 16
# Tile key of a zero-probability token: below every key >= 0 of a token with p > 0.
_ZERO_PROBABILITY_KEY = -1.0


if triton is not None:
    from triton.language.extra import libdevice

    @triton.jit
    def _race_tile_kernel(
        logits_ptr,
        temperatures_ptr,
        noise_ptr,
        greedy_ptr,
        tile_max_ptr,
        tile_key_ptr,
        tile_idx_ptr,
        vocab_size,
        n_tiles,
        logits_row_stride,
        noise_row_stride,
        TILE: tl.constexpr,
        LIBDEVICE_EXP: tl.constexpr,
    ):
        """One (row, tile): writes tile_max, best key and its lowest index."""
        row = tl.program_id(0).to(tl.int64)
        tile = tl.program_id(1)
        cols = tile * TILE + tl.arange(0, TILE)
        in_vocab = cols < vocab_size
        logits = tl.load(logits_ptr + row * logits_row_stride + cols, mask=in_vocab, other=-float("inf"))
        greedy = tl.load(greedy_ptr + row) != 0
        temperature = tl.where(greedy, 1.0, tl.load(temperatures_ptr + row))
        scaled = tl.math.div_rn(logits.to(tl.float32), temperature)
        tile_max = tl.max(scaled, axis=0)
        # An all -inf tile has tile_max = -inf; subtracting 0 instead avoids -inf - -inf.
        shifted = scaled - tl.where(tile_max > -float("inf"), tile_max, 0.0)
        if LIBDEVICE_EXP:
            weight = libdevice.exp(shifted)  # the CUDA expf torch uses, not ex2.approx
        else:
            weight = tl.exp(shifted)
        noise = tl.load(noise_ptr + row * noise_row_stride + cols, mask=in_vocab, other=1.0)
        key = tl.where(weight > 0, tl.math.div_rn(weight, noise), -1.0)  # _ZERO_PROBABILITY_KEY
        key = tl.where(greedy, scaled, key)
        best = tl.max(key, axis=0)
        best_idx = tl.min(tl.where(key == best, cols, vocab_size + TILE), axis=0)
        out = row * n_tiles + tile
        tl.store(tile_max_ptr + out, tile_max)
        tl.store(tile_key_ptr + out, best)
        tl.store(tile_idx_ptr + out, best_idx)


def _triton_partials(logits, temps, noise, greedy, tile):
    rows, vocab = logits.shape
    n_tiles = triton.cdiv(vocab, tile)
    tile_max = torch.empty(rows, n_tiles, dtype=torch.float32, device=logits.device)
    tile_key = torch.empty_like(tile_max)
    tile_idx = torch.empty(rows, n_tiles, dtype=torch.int32, device=logits.device)
    logits, noise = logits.contiguous(), noise.contiguous()
    with interpreter_errstate():
        _race_tile_kernel[(rows, n_tiles)](
            logits, temps, noise, greedy.to(torch.int8), tile_max, tile_key, tile_idx,
            vocab, n_tiles, logits.stride(0), noise.stride(0),
            TILE=tile, LIBDEVICE_EXP=not KERNEL_INTERPRETED,
        )
    return tile_max, tile_key, tile_idx.to(torch.int64)


def _torch_partials(logits, temps, noise, greedy, tile):
    """The kernel's math on ``[B, n_tiles, tile]`` views, padding with -inf logits."""
    rows, vocab = logits.shape
    n_tiles = -(-vocab // tile)
    pad = n_tiles * tile - vocab
    temperature = torch.where(greedy, 1.0, temps)[:, None]
    scaled = torch.nn.functional.pad(logits.to(torch.float32) / temperature, (0, pad), value=-math.inf)
    scaled = scaled.view(rows, n_tiles, tile)
    noise = torch.nn.functional.pad(noise, (0, pad), value=1.0).view(rows, n_tiles, tile)
    tile_max = scaled.amax(dim=-1)
    weight = torch.exp(scaled - torch.where(tile_max > -math.inf, tile_max, 0.0)[..., None])
    key = torch.where(weight > 0, weight / noise, _ZERO_PROBABILITY_KEY)
    key = torch.where(greedy[:, None, None], scaled, key)
    best = key.amax(dim=-1, keepdim=True)
    positions = torch.arange(tile, device=logits.device)
    local = torch.where(key == best, positions, tile).amin(dim=-1)
    tile_idx = local + tile * torch.arange(n_tiles, device=logits.device)
    return tile_max, best.squeeze(-1), tile_idx


def _combine(tile_max, tile_key, tile_idx, greedy, best_scaled):
    """Pick each row's winning tile: rescaled race key, or the largest tile_max if greedy.

    A tile key counts as zero mass (-1, never wins) where the untiled race sees a zero
    probability: the tile is all -inf, its rescale ``exp(tile_max - global_max)``
    underflows (a finite tail far below the rest), or the key is +inf (noise E = 0) on a
    token whose own ``exp(L / T - global_max)`` underflows (``best_scaled``: ``L / T`` of
    each tile's key token). Without this, ``inf * 0`` is NaN and no tile wins (SPEC S3
    degenerate inputs)."""
    global_max = tile_max.amax(dim=1, keepdim=True)
    scale = torch.exp(tile_max - global_max)
    mass = torch.where(torch.isinf(tile_key), torch.exp(best_scaled - global_max), scale)
    rescaled = torch.where((tile_max > -math.inf) & (mass > 0), tile_key * scale, _ZERO_PROBABILITY_KEY)
    winner = torch.where(greedy, _first_argmax(tile_max), _first_argmax(rescaled))
    return tile_idx.gather(1, winner[:, None]).squeeze(1)


def _partials(logits, temperatures, noise, greedy, tile, backend):
    """``(tile_max, tile_key, tile_idx)`` from the backend's partials; arguments validated."""
    backend = _resolve_backend(backend, logits.device)
    temps = temperatures.to(torch.float32).clamp(min=TEMPERATURE_FLOOR)
    partials = _triton_partials if backend == "triton" else _torch_partials
    return partials(logits, temps, noise, greedy, tile)


def _resolve_backend(backend: str, device: torch.device) -> str:
    if backend == "auto":
        usable = triton is not None and (device.type == "cuda" or (KERNEL_INTERPRETED and INTERPRETER_DEFECT is None))
        return "triton" if usable else "torch"
    if backend == "triton":
        if triton is None:
            raise ValueError("backend: 'triton' requested but triton is not installed; use 'torch'")
        if device.type != "cuda" and not KERNEL_INTERPRETED:
            raise ValueError(
                f"backend: 'triton' needs CUDA tensors or TRITON_INTERPRET=1 at import, got device {device}"
            )
    return backend


def _check_tiled_race(logits, temperatures, noise, greedy_mask, tile, backend) -> None:
    _check_logits("logits", logits)
    _check_temperatures(temperatures, logits.shape[0])
    _check_noise(noise, logits.shape)
    if greedy_mask is not None:
        check_tensor("greedy_mask", greedy_mask, shape=(logits.shape[0],), dtypes=(torch.bool,))
    check_same_device(logits=logits, temperatures=temperatures, noise=noise, greedy_mask=greedy_mask)
    check_int("tile", tile, minimum=_MIN_TILE)
    if tile & (tile - 1):
        raise ValueError(f"tile: expected a power of two >= {_MIN_TILE}, got {tile}")
    check_choice("backend", backend, BACKENDS)


def tile_partials(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    noise: torch.Tensor,
    *,
    greedy_mask: torch.Tensor | None = None,
    tile: int = 1024,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The per-tile partials of the tiled race, before the combine (SPEC S3, module note).

    Per row and tile of ``tile`` columns (the last one padded with ``-inf`` logits):
    ``tile_max = max_v L_v / T``; ``tile_key = max_v exp(L_v / T - tile_max) / E_v`` (-1
    where every weight is 0); ``tile_idx`` the (lowest) index of that key. Greedy rows
    (``T = 1``) key on ``L_v`` itself. :func:`tiled_exponential_race` picks the winning
    tile from these with the rescale ``tile_key * exp(tile_max - global_max)``.

    Args: as :func:`tiled_exponential_race`.

    Returns:
        ``(tile_max, tile_key, tile_idx)``, each ``[B, ceil(V / tile)]``: float32, float32,
        int64 (column ids in ``[0, V)``).

    Raises:
        TypeError / ValueError: as :func:`tiled_exponential_race`.

    Example:
        >>> tile_max, _, tile_idx = tile_partials(torch.tensor([[0.0, 1.0] * 16]), torch.ones(1),
        ...                                       torch.ones(1, 32), tile=16, backend="torch")
        >>> tile_max, tile_idx
        (tensor([[1., 1.]]), tensor([[ 1, 17]]))
    """
    _check_tiled_race(logits, temperatures, noise, greedy_mask, tile, backend)
    if greedy_mask is None:
        greedy_mask = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
    return _partials(logits, temperatures, noise, greedy_mask, tile, backend)


def tiled_exponential_race(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    noise: torch.Tensor,
    *,
    greedy_mask: torch.Tensor | None = None,
    tile: int = 1024,
    backend: str = "auto",
) -> torch.Tensor:
    """Exponential race computed tile by tile with the max rescale (SPEC S3).

    Same token as ``sampling.exponential_race(logits, temperatures, noise)`` for sampling
    rows and ``sampling.greedy_argmax(logits)`` for greedy rows, barring near-ties (module
    note). Temperatures are clamped to ``TEMPERATURE_FLOOR``.

    Args:
        logits: ``[B, V]`` float tensor (computed in float32).
        temperatures: ``[B]`` float tensor, values ``>= 0``.
        noise: ``[B, V]`` float32 iid Exp(1).
        greedy_mask: optional ``[B]`` bool; True rows take the argmax (default: none).
        tile: vocabulary columns per tile, a power of two ``>= 16``.
        backend: ``"auto"``, ``"triton"`` or ``"torch"`` (module note).

    Returns:
        ``[B]`` int64 token ids.

    Raises:
        TypeError: wrong dtype or a non-int ``tile``.
        ValueError: wrong rank or shape, devices differ, bad logits, temperatures or noise
            values (as ``exponential_race``), a bad ``tile``, an unknown ``backend``, or
            ``"triton"`` without triton or without CUDA / the interpreter.
        RuntimeError: ``"triton"`` on CPU tensors where the interpreter cannot run the fused
            race (``fused_sampling.INTERPRETER_DEFECT``, raised by it).

    Example:
        >>> logits = torch.tensor([[0.0, 1.0, 4.0, 2.0]])
        >>> tiled_exponential_race(logits, torch.ones(1), torch.ones(1, 4), tile=16, backend="torch")
        tensor([2])
    """
    check_choice("backend", backend, BACKENDS)
    if isinstance(logits, torch.Tensor) and _resolve_backend(backend, logits.device) == "triton":
        # One launch; it checks its arguments, and the values in-kernel (one host read).
        return fused_exponential_race(logits, temperatures, noise, greedy_mask=greedy_mask, tile=tile)
    _check_tiled_race(logits, temperatures, noise, greedy_mask, tile, backend)
    if greedy_mask is None:
        greedy_mask = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
    tile_max, tile_key, tile_idx = _partials(logits, temperatures, noise, greedy_mask, tile, backend)
    temps = torch.where(greedy_mask, 1.0, temperatures.to(torch.float32).clamp(min=TEMPERATURE_FLOOR))
    best_scaled = logits.to(torch.float32).gather(1, tile_idx) / temps[:, None]
    return _combine(tile_max, tile_key, tile_idx, greedy_mask, best_scaled)
