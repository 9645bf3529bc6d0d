"""The step sampler (SPEC S3), plain and truncated, through mlx-dspark's ``generate._sample_arr``.

``_sample_arr(logits_row, temperature, top_p=1.0, top_k=0)`` is the one draw of mlx-dspark's
generate loops (the first committed token, every target-side sample): ``argmax`` unless
``temperature > 0.0``, else ``mx.random.categorical`` over ``truncate_probs(softmax(L / T),
top_p, top_k)`` (top-k first, then the nucleus; ties at the k-th value all kept). It takes one
row (its greedy ``argmax`` has no axis), so the adapter calls it row by row after seeding
MLX's global RNG once per call from the suite's generator. ``top_k`` of ``StepSampler`` feeds
only the greedy rule (mlx-dspark's is the temperature); the padded tail ``[vocab_size,
V_pad)`` is cut off first. ``TruncatedStepSampler`` passes the row's ``top_p`` and ``top_k``
(``V`` is mlx-dspark's neutral ``0``: no cut); mlx-dspark has no min-p, so a row with ``min_p >
0`` raises ``NotImplementedError``. No explicit noise (``NoiseStepSampler``): the draw is
``mx.random.categorical``'s own.
"""

from __future__ import annotations

import torch

from conformance.adapters.mlx_arrays import seed_global_rng, to_mx, to_torch
from conformance.adapters.mlx_engine import MLXEngine

__all__ = ["StepSampler", "TruncatedStepSampler", "sample_rows"]

EVAL_CHUNK = 4096  # rows per MLX evaluation


def sample_rows(engine: MLXEngine, logits: torch.Tensor, temperatures: torch.Tensor, top_p=None, top_k=None,
                *, generator: torch.Generator) -> torch.Tensor:
    """``[B]`` int64 on ``logits``' device: ``_sample_arr`` on each row, one seeding of MLX's RNG."""
    mx, sample_arr = engine.mx, engine["generate"]._sample_arr
    seed_global_rng(mx, generator)
    rows = to_mx(mx, logits)
    drawn = []
    for r, temperature in enumerate(temperatures.tolist()):
        drawn.append(sample_arr(rows[r], temperature, 1.0 if top_p is None else float(top_p[r]),
                                0 if top_k is None else int(top_k[r])))
        if len(drawn) % EVAL_CHUNK == 0:  # keep MLX's lazy graph small on large batches
            mx.eval(drawn[-EVAL_CHUNK:])
    if not drawn:
        return torch.empty(0, dtype=torch.int64, device=logits.device)
    return to_torch(mx, mx.stack([d.astype(mx.int64) for d in drawn]), logits, torch.int64)


class StepSampler:
    """SPEC S3 through ``_sample_arr`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def sample(self, logits, temperatures, top_k, vocab_size, generator):
        return sample_rows(self._engine, logits[:, :vocab_size], temperatures, generator=generator)


class TruncatedStepSampler:
    """SPEC S3 truncation through ``_sample_arr``'s ``top_p`` / ``top_k`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def sample_truncated(self, logits, temperatures, top_k, top_p, min_p, generator):
        if bool((min_p > 0).any()):
            raise NotImplementedError("min-p: mlx-dspark truncates by top-k and top-p only (sampling.truncate_probs)")
        return sample_rows(self._engine, logits, temperatures, top_p, top_k, generator=generator)
