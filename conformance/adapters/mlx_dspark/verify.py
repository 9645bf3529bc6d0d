"""Chain verification (SPEC S5) through mlx-dspark's ``generate._spec_sample_accept``.

``_spec_sample_accept(v_logits [1 + L, V], draft, q_probs [>= L, V], temperature, top_p, top_k)
-> (n_accepted, replacement)`` verifies one request's block: the target law is
``truncate_probs(softmax(v_logits / T), top_p, top_k)``; draft ``i`` is accepted iff ``u_i <
min(1, p(x) / max(q(x), 1e-9))`` with ``u = mx.random.uniform`` (MLX's global RNG); the first
rejection resamples from ``norm(max(0, p - q))``, else the bonus comes from ``p_L``. The adapter
calls it row by row after seeding MLX's RNG once per call from the suite's generator:

* ``ChainVerifier``: the draft law is the one ``sample_block_probs`` draws from, ``truncate_probs
  (softmax(L * (1 / T)), 1.0, 0)`` of the corrected logits (no truncation: ``ChainVerifier``'s
  ``top_k`` is the greedy rule's);
* ``TruncatedChainVerifier``: the handed-over ``draft_probs`` and the row's ``top_p`` / ``top_k``
  (``V``: mlx-dspark's neutral 0); no min-p in mlx-dspark (``NotImplementedError``);
* a row's drafts stop at its first ``-1`` sentinel and a cap ``c`` keeps its first ``max(c - 1,
  0)``: mlx-dspark shortens a block by slicing the draft list (``draft = draft[:keep]``, its
  confidence cut); the drafts go in as a NumPy int64 array (its loop passes a list of ints:
  an empty list would index as float, which its loop never meets, as it always proposes one).

Greedy rows (``temperature > 0.0`` false) raise ``NotImplementedError``: mlx-dspark's greedy
verification is inline in ``speculative_generate`` (an argmax-match loop), with no function
to call. So is ``GreedyVerifier`` not offered. Explicit uniforms and seeded rows raise
``NotImplementedError`` (the coins come from MLX's global RNG).
"""

from __future__ import annotations

import numpy as np
import torch

from conformance.adapters.mlx_arrays import seed_global_rng, to_mx
from conformance.adapters.mlx_engine import MLXEngine
from conformance.adapters.verified_drafts import verified_counts

__all__ = ["ChainVerifier", "TruncatedChainVerifier", "verify_rows", "require_sampling_rows"]


def require_sampling_rows(temperatures: torch.Tensor) -> None:
    """Raises NotImplementedError when a row is greedy by mlx-dspark's rule (not ``T > 0``)."""
    if not bool((temperatures > 0).all()):
        raise NotImplementedError("greedy rows: mlx-dspark's greedy verification is inline in speculative_generate "
                                  "(an argmax-match loop), with no function to call")


def verify_rows(engine: MLXEngine, draft_tokens: torch.Tensor, target_logits: torch.Tensor, laws, temperatures,
                top_p=None, top_k=None, cap=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(accepted [B], tokens [B, l + 1])`` (padded with -1, on the drafts' device) from
    ``_spec_sample_accept`` row by row; ``laws[r]`` is row ``r``'s draft law (mx ``[>= n, V]``).
    The caller seeds MLX's RNG."""
    mx, accept = engine.mx, engine["generate"]._spec_sample_accept
    counts = verified_counts(draft_tokens, cap)
    drafts = draft_tokens.cpu().numpy().astype(np.int64)
    tokens = torch.full((draft_tokens.shape[0], draft_tokens.shape[1] + 1), -1, dtype=torch.int64)
    accepted = torch.zeros(draft_tokens.shape[0], dtype=torch.int64)
    for r, (n, temperature) in enumerate(zip(counts, temperatures.tolist())):
        n_acc, replacement = accept(to_mx(mx, target_logits[r, : n + 1]), drafts[r, :n], laws[r], temperature,
                                    1.0 if top_p is None else float(top_p[r]), 0 if top_k is None else int(top_k[r]))
        tokens[r, :n_acc] = torch.from_numpy(drafts[r, :n_acc])
        tokens[r, n_acc] = replacement
        accepted[r] = n_acc
    return accepted.to(draft_tokens.device), tokens.to(draft_tokens.device)


class ChainVerifier:
    """SPEC S5 through ``_spec_sample_accept``, sampling rows only (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def verify(self, draft_tokens, target_logits, draft_logits, temperatures, top_k, *, generator=None,
               accept_uniforms=None, final_uniforms=None, seeds=None, positions=None, cap=None):
        if accept_uniforms is not None or final_uniforms is not None:
            raise NotImplementedError("explicit uniforms: _spec_sample_accept draws its coins from MLX's global RNG")
        if seeds is not None:
            raise NotImplementedError("seeded rows: mlx-dspark has no per-row seed (MLX's RNG is global)")
        if generator is None:
            raise ValueError("generator: required (MLX's RNG is seeded from it)")
        require_sampling_rows(temperatures)
        mx, truncate = self._engine.mx, self._engine["sampling"].truncate_probs
        laws = [truncate(mx.softmax(to_mx(mx, draft_logits[r]) * (1.0 / t), axis=-1), 1.0, 0)
                for r, t in enumerate(temperatures.tolist())]
        seed_global_rng(mx, generator)
        return verify_rows(self._engine, draft_tokens, target_logits, laws, temperatures, cap=cap)


class TruncatedChainVerifier:
    """SPEC S5 truncation through ``_spec_sample_accept``'s ``top_p`` / ``top_k`` with the
    handed-over draft law (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def verify_truncated(self, draft_tokens, target_logits, draft_probs, temperatures, top_k, top_p, min_p,
                         generator):
        if bool((min_p > 0).any()):
            raise NotImplementedError("min-p: mlx-dspark truncates by top-k and top-p only (sampling.truncate_probs)")
        require_sampling_rows(temperatures)
        mx = self._engine.mx
        laws = [to_mx(mx, draft_probs[r].to(torch.float32)) for r in range(draft_probs.shape[0])]
        seed_global_rng(mx, generator)
        return verify_rows(self._engine, draft_tokens, target_logits, laws, temperatures, top_p, top_k)
