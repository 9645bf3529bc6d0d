"""Block layouts and draft vocabularies (SPEC S1) through mlx-dspark's drafter.

mlx-dspark's drafter carries both S1 variants in its config (:mod:`.drafter`):

* layout: ``logits_start`` 0 (DeepSpec heads: anchor-first) or 1 (DFlash-lineage heads: slot 0
  is a pure anchor, "bonus-anchor"); ``DSparkDrafter.head_slice(block, cap)`` takes the block
  positions ``[s, s + cap)`` whose logits are draft predictions. The lm head is per position, so
  the adapter applies ``head_slice`` to the base logits (``Q = gamma + s`` positions);
* vocabulary: the target's, or a reduced one (``draft_vocab_size = V_d``, the contract's ``d2t``
  target ids passed as mlx-dspark's offsets to ``set_draft_vocab_map``): ``sample_block`` /
  ``sample_block_probs`` sample in draft space and map each draw with ``to_target_ids`` before it
  is returned and before it conditions the next step (``markov_w1`` is target-indexed).

The corrected logits are teacher-forced in draft space (:func:`.markov.teacher_forced`) and
lifted to the target columns ``to_target_ids(arange(V_d))``, ``-inf`` elsewhere (the contract's
layout; mlx-dspark lifts only probabilities, with ``widen_to_target``). A padded draft vocabulary
(``V_d > V`` without a map) is not mlx-dspark's: not declared.
"""

from __future__ import annotations

import torch

from conformance.adapters.mlx_arrays import seed_global_rng, to_mx, to_torch
from conformance.adapters.mlx_engine import MLXEngine

from .drafter import build_drafter
from .markov import draft_rows, teacher_forced

__all__ = ["DraftLayouts", "LOGITS_START"]

#: Layout -> mlx-dspark's ``logits_start`` (model.py ``head_slice``).
LOGITS_START = {"anchor-first": 0, "bonus-anchor": 1}


class DraftLayouts:
    """SPEC S1 through ``head_slice``, ``sample_block`` / ``sample_block_probs`` and
    ``to_target_ids`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def draft_block(self, head_type, state_dict, base_logits, first_prev, hidden, temperatures, top_k, generator, *,
                    layout, vocab_size, d2t):
        if layout not in LOGITS_START:
            raise ValueError(f"layout: expected one of {sorted(LOGITS_START)}, got {layout!r}")
        mx = self._engine.mx
        bs, positions, draft_vocab = base_logits.shape
        start = LOGITS_START[layout]
        rank = state_dict["W1.weight"].shape[1]
        drafter = build_drafter(self._engine, head_type, state_dict, vocab_size, rank,
                                draft_vocab_size=None if d2t is None else draft_vocab, d2t=d2t, logits_start=start)
        gamma = positions - start
        block = to_torch(mx, drafter.head_slice(to_mx(mx, base_logits), gamma), base_logits, torch.float32)
        seed_global_rng(mx, generator)
        tokens, _ = draft_rows(self._engine, drafter, block, first_prev, temperatures)
        prev = torch.cat([first_prev.to(torch.int64)[:, None], tokens[:, :-1]], dim=1)
        corrected = teacher_forced(self._engine, drafter, block, prev)
        if d2t is None:
            return tokens, corrected
        columns = to_torch(mx, drafter.to_target_ids(mx.arange(draft_vocab)), base_logits, torch.int64)
        lifted = corrected.new_full((bs, gamma, vocab_size), float("-inf"))
        lifted[..., columns] = corrected
        return tokens, lifted
