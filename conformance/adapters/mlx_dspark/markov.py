"""Markov block sampling and teacher forcing (SPEC S2) through mlx-dspark's drafter.

mlx-dspark drafts one request at a time, as its generate loop picks the sampler
(``generate.speculative_generate``: ``sample_block_probs`` when ``temperature > 0.0``, else
``sample_block``):

* ``sample_block(base_logits [k, V], first_prev_token)``: greedy, ``argmax(base[i] +
  step_bias(prev))`` step by step;
* ``sample_block_probs(base_logits, first_prev_token, temperature, top_p, top_k)``: each step
  drawn from ``truncate_probs(softmax(L_i * (1 / T)), top_p, top_k)`` with
  ``mx.random.categorical`` (MLX's global RNG).

Neither returns the corrected logits, so the adapter forms them by teacher forcing on the
drawn tokens: ``base[:, k] + markov_head.step_bias(prev_k)``, the sum both samplers form
(:func:`.drafter.corrected_step`); ``apply_block_logits`` is the same. ``top_k`` enters only
the greedy rule (``MarkovBlock`` has no truncation: ``top_p = 1``, ``top_k = 0``, mlx-dspark's
neutral values). MLX's RNG is seeded once per call from the suite's generator; the rows then
draw in order from it.
"""

from __future__ import annotations

import torch

from conformance.adapters.mlx_arrays import seed_global_rng, to_mx, to_torch
from conformance.adapters.mlx_engine import MLXEngine

from .drafter import build_drafter
from .sampling import EVAL_CHUNK

__all__ = ["MarkovBlock", "draft_rows", "teacher_forced"]


def draft_rows(engine: MLXEngine, drafter, base_logits: torch.Tensor, first_prev: torch.Tensor,
               temperatures: torch.Tensor, top_p: torch.Tensor | None = None, top_k: torch.Tensor | None = None):
    """``(tokens [B, gamma] int64, laws)`` from the drafter row by row: ``sample_block_probs`` at
    ``T > 0`` (with the row's ``top_p`` / ``top_k``, None: neutral), ``sample_block`` otherwise;
    ``laws[r]`` is the ``[gamma, V]`` mx law ``sample_block_probs`` returned (None on a greedy
    row). The caller seeds MLX's RNG."""
    mx = engine.mx
    bs, gamma, _ = base_logits.shape
    rows, prevs = to_mx(mx, base_logits), first_prev.tolist()
    drawn, laws = [], [None] * bs
    for r, temperature in enumerate(temperatures.tolist()):
        if temperature > 0.0:
            p = 1.0 if top_p is None else float(top_p[r])
            k = 0 if top_k is None else int(top_k[r])
            block, laws[r] = drafter.sample_block_probs(rows[r], prevs[r], temperature, p, k)
        else:
            block = drafter.sample_block(rows[r], first_prev_token=prevs[r])
        drawn.append(block.astype(mx.int64))
        if len(drawn) % EVAL_CHUNK == 0:  # keep MLX's lazy graph small on large batches
            mx.eval(drawn[-EVAL_CHUNK:])
    return to_torch(mx, mx.stack(drawn), base_logits, torch.int64), laws


def teacher_forced(engine: MLXEngine, drafter, base_logits: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor:
    """``[B, gamma, V_d]`` float32: ``base[:, k] + step_bias(prev_tokens[:, k])`` for every
    step (the drafter's corrected logits for given previous tokens)."""
    mx = engine.mx
    if base_logits.shape[1] == 0:
        return base_logits.to(torch.float32).clone()
    steps = []
    for k in range(base_logits.shape[1]):
        base = to_mx(mx, base_logits[:, k])
        steps.append(base if drafter.markov_head is None
                     else base + drafter.markov_head.step_bias(to_mx(mx, prev_tokens[:, k])))
    return to_torch(mx, mx.stack(steps, axis=1), base_logits, torch.float32)


class MarkovBlock:
    """SPEC S2 through ``DSparkDrafter.sample_block`` / ``sample_block_probs`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device):
        return build_drafter(self._engine, head_type, state_dict, vocab_size, rank)

    def sample_block(self, head, base_logits, first_prev, hidden, temperatures, top_k, generator):
        if base_logits.shape[1] == 0:  # the samplers concatenate their (empty) step list
            return first_prev.new_zeros(base_logits.shape[0], 0), base_logits.to(torch.float32).clone()
        seed_global_rng(self._engine.mx, generator)
        tokens, _ = draft_rows(self._engine, head, base_logits, first_prev, temperatures)
        prev = torch.cat([first_prev.to(torch.int64)[:, None], tokens[:, :-1]], dim=1)
        return tokens, teacher_forced(self._engine, head, base_logits, prev)

    def apply_block_logits(self, head, base_logits, token_ids, hidden):
        return teacher_forced(self._engine, head, base_logits, token_ids)
