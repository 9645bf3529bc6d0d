"""The torch <-> MLX / NumPy boundary shared by the MLX adapters (``dspark_mlx``, ``mlx_dspark``).

MLX engines take ``mx.array`` (or NumPy) inputs and draw their noise from MLX's global RNG
(``mx.random``), which has no generator object. The adapters convert at the boundary only:
:func:`to_mx` / :func:`to_numpy` on the way in, :func:`to_torch` on the way out, and
:func:`seed_global_rng` seeds MLX's RNG from a draw of the suite's ``torch.Generator``
before every engine call that samples, so every draw derives from that generator (contract:
randomness) and a case seed reproduces a run.

``mx`` is passed in (``mlx.core`` of the loaded engine): this module imports no MLX itself,
so it loads where MLX is absent.
"""

from __future__ import annotations

import types

import numpy as np
import torch

__all__ = ["SEED_BOUND", "to_numpy", "to_mx", "to_torch", "draw_seed", "seed_global_rng", "temperature_groups"]

#: Seeds are drawn in ``[0, SEED_BOUND)``: MLX and NumPy take any non-negative 64-bit seed.
SEED_BOUND = 2**62


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A NumPy copy of ``tensor`` on the host (bfloat16 / float16 widened to float32: NumPy
    has no bfloat16)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.to(torch.float32)
    return tensor.numpy()


def to_mx(mx: types.ModuleType, tensor: torch.Tensor):
    """``tensor`` as an ``mx.array`` of the same dtype (bfloat16 stays bfloat16)."""
    array = mx.array(to_numpy(tensor))
    return array.astype(mx.bfloat16) if tensor.dtype == torch.bfloat16 else array


def to_torch(mx: types.ModuleType, array, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``array`` (``mx.array`` or NumPy) as a torch tensor on ``like``'s device, in ``dtype``
    (None: an mx ``bfloat16`` array stays bfloat16, other dtypes follow NumPy's)."""
    bf16 = False
    if isinstance(array, mx.array):
        bf16 = array.dtype == mx.bfloat16
        array = np.array(array.astype(mx.float32) if bf16 else array)
    out = torch.from_numpy(np.ascontiguousarray(array))
    if dtype is None and bf16:
        dtype = torch.bfloat16
    return out.to(device=like.device, dtype=dtype or out.dtype)


def draw_seed(generator: torch.Generator) -> int:
    """One seed in ``[0, SEED_BOUND)`` drawn from ``generator`` (advances it)."""
    return int(torch.randint(SEED_BOUND, (1,), generator=generator, device=generator.device).item())


def seed_global_rng(mx: types.ModuleType, generator: torch.Generator) -> None:
    """Seed MLX's global RNG (``mx.random.seed``) from a draw of ``generator``: the next MLX
    draws derive from the suite's generator, fresh on every call."""
    mx.random.seed(draw_seed(generator))


def temperature_groups(temperatures: torch.Tensor) -> list[tuple[float, torch.Tensor]]:
    """``[(T, rows)]``: the distinct values of ``temperatures [B]`` (as Python floats, NaN
    included once) with the row indices (int64, CPU) holding each, in first-seen order. MLX
    engines take one temperature per call (a Python float); the adapters call once per group.
    """
    values = temperatures.detach().to(torch.float64).cpu()
    groups: dict[object, list[int]] = {}
    for row, value in enumerate(values.tolist()):
        groups.setdefault("nan" if value != value else value, []).append(row)
    return [(float("nan") if key == "nan" else key, torch.tensor(rows, dtype=torch.int64))
            for key, rows in groups.items()]
