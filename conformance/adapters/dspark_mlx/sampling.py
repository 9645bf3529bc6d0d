"""The step sampler (SPEC S3) through dspark-mlx's ``recipe.sample``.

``recipe.sample(logits, temperature)`` is the draw the drafter makes at every block step
(``draft_block_decode``): ``argmax`` at ``temperature == 0``, else the exponential race
``argmax softmax(L / max(T, 1e-5)) / (-log(g + 1e-20))`` with ``g`` uniform from MLX's global
RNG. It takes one temperature (a Python float) for the whole batch, so the adapter calls it
once per distinct temperature (:func:`~conformance.adapters.mlx_arrays.temperature_groups`),
seeding MLX's RNG from the suite's generator before each call. ``top_k`` does not enter
(dspark-mlx's greedy rule is the temperature). The padded tail ``[vocab_size, V_pad)`` is cut
off before the call (dspark-mlx's LM head has exactly ``V`` columns).

Not offered: explicit noise (``NoiseStepSampler``: the uniforms are drawn inside ``sample``)
and truncation (``TruncatedStepSampler``: dspark-mlx has no top-k / top-p / min-p).
"""

from __future__ import annotations

import torch

from conformance.adapters.mlx_arrays import seed_global_rng, temperature_groups, to_mx, to_torch
from conformance.adapters.mlx_engine import MLXEngine

__all__ = ["StepSampler"]


class StepSampler:
    """SPEC S3 through ``recipe.sample`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def sample(self, logits, temperatures, top_k, vocab_size, generator):
        mx, sample = self._engine.mx, self._engine["recipe"].sample
        tokens = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
        for temperature, rows in temperature_groups(temperatures):
            seed_global_rng(mx, generator)
            drawn = sample(to_mx(mx, logits[rows.to(logits.device), :vocab_size]), temperature)
            tokens[rows.to(logits.device)] = to_torch(mx, drawn, logits, torch.int64)
        return tokens
