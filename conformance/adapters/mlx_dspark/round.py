"""One speculative round (SPEC S9) as mlx-dspark's sampled loop runs it.

``generate.speculative_generate`` at ``temperature > 0.0``, per request: the drafter's
``sample_block_probs(base_logits, pending, temperature, top_p, top_k)`` draws the block and
returns its law ``q`` (truncated by the request's top-p / top-k, widened to the target
vocabulary), and ``_spec_sample_accept(v_logits, draft, q_probs, temperature, top_p, top_k)``
verifies it against the truncated target law. The adapter runs exactly that per row, after
seeding MLX's RNG once per call from the suite's generator; ``draft_probs`` is the ``q`` handed
over. Drafts and the verifier's coins come from the one global RNG stream, as in mlx-dspark.

Not supported (``NotImplementedError``, a skip): greedy rows (mlx-dspark's greedy accept is
inline in its loop), min-p (mlx-dspark has none) and seeded rows (no per-row seed).
"""

from __future__ import annotations

import torch

from conformance.adapters.mlx_arrays import seed_global_rng, to_torch
from conformance.adapters.mlx_engine import MLXEngine

from .drafter import build_drafter
from .markov import draft_rows
from .verify import require_sampling_rows, verify_rows

__all__ = ["SpeculativeRound"]


class SpeculativeRound:
    """SPEC S9 "one round" as ``speculative_generate``'s sampled path (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device, dtype):
        return build_drafter(self._engine, head_type, state_dict, vocab_size, rank, dtype=dtype)

    def round(self, head, base_logits, first_prev, hidden, target_logits, temperatures, top_k, top_p, min_p, *,
              generator=None, seeds=None, positions=None):
        if seeds is not None:
            raise NotImplementedError("seeded rows: mlx-dspark has no per-row seed (MLX's RNG is global)")
        if bool((min_p > 0).any()):
            raise NotImplementedError("min-p: mlx-dspark truncates by top-k and top-p only (sampling.truncate_probs)")
        require_sampling_rows(temperatures)
        if generator is None:
            raise ValueError("generator: required (MLX's RNG is seeded from it)")
        mx = self._engine.mx
        seed_global_rng(mx, generator)
        drafts, laws = draft_rows(self._engine, head, base_logits, first_prev, temperatures, top_p, top_k)
        accepted, tokens = verify_rows(self._engine, drafts, target_logits, laws, temperatures, top_p, top_k)
        draft_probs = to_torch(mx, mx.stack(laws), base_logits, torch.float32)
        return drafts, accepted, tokens, draft_probs
