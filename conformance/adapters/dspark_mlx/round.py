"""One speculative round (SPEC S9) from dspark-mlx's drafter and verifier.

dspark-mlx's shipped loops are greedy (``loop.generate_eager``: ``draft`` then
``greedy_accept``); its sampled verifier ``speculative_sample_accept`` takes the draft law
``q`` as probabilities. The round joins the two as its parts define them:

* draft: ``recipe.draft_block_decode`` (:func:`.markov.draft_block`), the drafts drawn from
  ``softmax(L_k / max(T, 1e-5))`` of the corrected logits (``recipe.sample``), argmax at
  temperature 0;
* handover: that law, ``q = softmax(corrected / max(T, 1e-5))`` (one-hot on temperature-0
  rows, where ``greedy_accept`` reads no law): the only law dspark-mlx's drafter draws from;
* verify: :class:`.verify.ChainVerifier`'s row loop (``speculative_sample_accept`` with one
  NumPy rng seeded from the suite's generator, ``greedy_accept`` at temperature 0).

dspark-mlx has no top-k / top-p / min-p anywhere (drafter or verifier): a round with a
truncation on a sampling row raises ``NotImplementedError`` (a skip), as do seeded rows (no
per-row seed; MLX's RNG is global).
"""

from __future__ import annotations

import torch

from conformance.adapters.mlx_engine import MLXEngine

from .heads import load_markov_head
from .markov import draft_block
from .verify import ChainVerifier, tempered_laws

__all__ = ["SpeculativeRound"]


def _truncates(temperatures, top_k, top_p, min_p, vocab: int) -> bool:
    """Whether a sampling row (temperature != 0) asks for a top-k, top-p or min-p cut."""
    sampling = temperatures != 0
    cut = (top_k < vocab) | (top_p < 1) | (min_p > 0)
    return bool((sampling & cut).any())


class SpeculativeRound:
    """SPEC S9 "one round" from dspark-mlx's parts (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine
        self._verifier = ChainVerifier(engine)

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device, dtype):
        return load_markov_head(self._engine, head_type, state_dict, vocab_size, rank, dtype)

    def round(self, head, base_logits, first_prev, hidden, target_logits, temperatures, top_k, top_p, min_p, *,
              generator=None, seeds=None, positions=None):
        if seeds is not None:
            raise NotImplementedError("seeded rows: dspark-mlx has no per-row seed (MLX's RNG is global)")
        if _truncates(temperatures, top_k, top_p, min_p, base_logits.shape[-1]):
            raise NotImplementedError("top-k / top-p / min-p: dspark-mlx's drafter and verifier have no truncation")
        if generator is None:
            raise ValueError("generator: required (MLX's RNG and the verifier's rng are seeded from it)")
        drafts, corrected = draft_block(self._engine, head, base_logits, first_prev, temperatures, generator)
        q = tempered_laws(self._engine, corrected, temperatures)
        p = tempered_laws(self._engine, target_logits, temperatures)
        accepted, tokens = self._verifier.verify_laws(drafts, target_logits, q, p, temperatures, generator)
        greedy = (temperatures == 0).cpu()
        one_hot = torch.nn.functional.one_hot(drafts.cpu(), base_logits.shape[-1]).to(torch.float32)
        draft_probs = torch.where(greedy[:, None, None], one_hot, torch.from_numpy(q)).to(base_logits.device)
        return drafts, accepted, tokens, draft_probs
