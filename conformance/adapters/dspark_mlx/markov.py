"""Markov block sampling and teacher forcing (SPEC S2) through dspark-mlx's recipe.

* ``sample_block``: ``recipe.draft_block_decode(logits, conf_hidden, anchor, markov_head,
  confidence_head, block_size, temperature)``, the block walk every dspark-mlx backbone calls:
  step ``i`` adds ``markov_head(prev)`` to ``logits[:, i]``, draws with ``recipe.sample`` and
  conditions the next step on the draw; it returns ``[anchor, x_1..x_gamma]`` and the
  corrected logits. One temperature per call: the adapter calls it once per distinct row
  temperature, seeding MLX's global RNG from the suite's generator before each call.
* ``apply_block_logits`` (teacher forcing): dspark-mlx has no teacher-forcing function; the
  adapter adds ``markov_head(prev_k)`` to ``base_logits[:, k]`` step by step, the sum
  ``draft_block_decode`` forms (``li = logits[:, i] + bias``), with given previous tokens.

Vanilla head only (:mod:`.heads`); ``hidden`` is unused by it.
"""

from __future__ import annotations

import torch

from conformance.adapters.mlx_arrays import seed_global_rng, temperature_groups, to_mx, to_torch
from conformance.adapters.mlx_engine import MLXEngine

from .heads import MarkovHandle, load_markov_head

__all__ = ["MarkovBlock", "draft_block"]


def draft_block(engine: MLXEngine, head: MarkovHandle, base_logits: torch.Tensor, first_prev: torch.Tensor,
                temperatures: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens [B, gamma] int64, corrected [B, gamma, V] float32)`` from
    ``draft_block_decode``, one call per distinct temperature, on ``base_logits``' device."""
    mx, decode = engine.mx, engine["recipe"].draft_block_decode
    bs, gamma, vocab = base_logits.shape
    device = base_logits.device
    tokens = torch.empty(bs, gamma, dtype=torch.int64, device=device)
    corrected = torch.empty(bs, gamma, vocab, dtype=torch.float32, device=device)
    if gamma == 0:  # draft_block_decode stacks its (empty) step list: no block to draw
        return tokens, corrected
    for temperature, rows in temperature_groups(temperatures):
        rows = rows.to(device)
        seed_global_rng(mx, generator)
        ids, logits, _ = decode(to_mx(mx, base_logits[rows]), mx.zeros((rows.numel(), gamma, 0)),
                                to_mx(mx, first_prev[rows]), head.markov, head.confidence, gamma, temperature)
        tokens[rows] = to_torch(mx, ids[:, 1:], base_logits, torch.int64)
        corrected[rows] = to_torch(mx, logits, base_logits, torch.float32)
    return tokens, corrected


class MarkovBlock:
    """SPEC S2 through ``draft_block_decode`` and ``DSparkMarkovHead`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device):
        return load_markov_head(self._engine, head_type, state_dict, vocab_size, rank)

    def sample_block(self, head, base_logits, first_prev, hidden, temperatures, top_k, generator):
        return draft_block(self._engine, head, base_logits, first_prev, temperatures, generator)

    def apply_block_logits(self, head, base_logits, token_ids, hidden):
        mx = self._engine.mx
        steps = [to_mx(mx, base_logits[:, k]) + head.markov(to_mx(mx, token_ids[:, k]))[0]
                 for k in range(base_logits.shape[1])]
        if not steps:
            return base_logits.clone()
        return to_torch(mx, mx.stack(steps, axis=1), base_logits, torch.float32)
