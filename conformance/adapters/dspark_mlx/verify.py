"""Chain and greedy verification (SPEC S5) through dspark-mlx's ``verify`` module.

dspark-mlx verifies one request at a time on the host, in NumPy:

* ``greedy_accept(draft_tokens [K], base_logits [K + 1, V])``: accept while the draft equals
  the target argmax (NumPy ``argmax``: the lowest index among ties), then the argmax at the
  first mismatch (or the bonus);
* ``speculative_sample_accept(draft_tokens [K], draft_probs [K, V], base_probs [K + 1, V],
  rng)``: accept ``d_i`` when ``rng.random() < min(1, p_i(d_i) / q_i(d_i))``, else resample
  from ``norm(relu(p_i - q_i))``; the bonus is ``rng.choice`` from ``p_{K + 1}``. ``rng`` is a
  ``numpy.random.Generator``: the adapter builds one per call, seeded from a draw of the
  suite's generator, and verifies the rows in order with it.

The adapter lays the contract's batch out as the engine's loop would, row by row:

* the rule by temperature, as the module docstring of ``verify.py`` assigns them:
  ``greedy_accept`` at temperature 0, ``speculative_sample_accept`` otherwise;
* the laws are ``softmax(L / max(T, 1e-5))`` of the target and of the draft's corrected
  logits, in float32, the law ``recipe.sample`` draws the drafts from (``mx.softmax``);
* a row's drafts stop at its first ``-1`` sentinel, and a cap ``c`` (an int, or ``[B]``)
  verifies its first ``max(c - 1, 0)`` drafts: dspark-mlx shortens a block by slicing the
  drafts and their ``K + 1`` target rows (``loop.generate_eager``'s confidence gate,
  ``d = d[:klen]``), which is what the adapter does.

Explicit uniforms and seeded rows raise ``NotImplementedError`` (the coins are drawn inside
``speculative_sample_accept`` from its one ``rng``; there is no per-row seed).

``TruncatedChainVerifier`` is ``speculative_sample_accept``'s own interface: the draft law
handed over as probabilities (as given, float32), the target law ``softmax(L / max(T,
1e-5))``. dspark-mlx has no truncation, so only the neutral values (``top_k = V``, ``top_p =
1``, ``min_p = 0``) run; a truncating row raises ``NotImplementedError`` (a skip).
"""

from __future__ import annotations

import numpy as np
import torch

from conformance.adapters.mlx_arrays import draw_seed, temperature_groups, to_mx, to_numpy
from conformance.adapters.mlx_engine import MLXEngine
from conformance.adapters.verified_drafts import verified_counts

__all__ = ["ChainVerifier", "GreedyVerifier", "TruncatedChainVerifier", "TEMPERATURE_FLOOR", "tempered_laws",
           "tempered_probs"]

#: recipe.sample's clamp ``max(temperature, 1e-5)`` (dspark_mlx/recipe.py, ``sample``).
TEMPERATURE_FLOOR = 1e-5


def tempered_probs(engine: MLXEngine, logits: torch.Tensor, temperature: float) -> np.ndarray:
    """``softmax(L / max(T, 1e-5))`` of ``logits [..., V]`` in float32 NumPy: ``recipe.sample``'s
    law (``mx.softmax(logits.astype(mx.float32) / max(temperature, 1e-5))``)."""
    mx = engine.mx
    return np.array(mx.softmax(to_mx(mx, logits).astype(mx.float32) / max(temperature, TEMPERATURE_FLOOR), axis=-1))


def _padded(results, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(accepted [B], tokens [B, width])`` from ``AcceptResult``s, tokens padded with -1."""
    tokens = torch.full((len(results), width), -1, dtype=torch.int64)
    for row, result in enumerate(results):
        tokens[row, : result.tokens.shape[0]] = torch.from_numpy(result.tokens.astype(np.int64))
    accepted = torch.tensor([result.n_accepted for result in results], dtype=torch.int64)
    return accepted.to(device), tokens.to(device)


class GreedyVerifier:
    """SPEC S5 greedy verification through ``verify.greedy_accept`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def verify_greedy(self, draft_tokens, target_logits, cap=None):
        greedy_accept = self._engine["verify"].greedy_accept
        counts = verified_counts(draft_tokens, cap)
        drafts, target = draft_tokens.cpu().numpy(), target_logits.detach().cpu().to(torch.float32).numpy()
        results = [greedy_accept(drafts[r, :n], target[r, : n + 1]) for r, n in enumerate(counts)]
        return _padded(results, draft_tokens.shape[1] + 1, draft_tokens.device)


def tempered_laws(engine: MLXEngine, logits: torch.Tensor, temperatures: torch.Tensor) -> np.ndarray:
    """Per row ``r``, ``softmax(logits[r] / max(T_r, 1e-5))`` (:func:`tempered_probs`, one MLX
    call per distinct temperature) of ``logits [B, ..., V]``: float32 NumPy, same shape."""
    laws = np.empty(tuple(logits.shape), dtype=np.float32)
    for temperature, rows in temperature_groups(temperatures):
        laws[rows.numpy()] = tempered_probs(engine, logits[rows.to(logits.device)], temperature)
    return laws


class ChainVerifier:
    """SPEC S5 chain verification through ``verify.speculative_sample_accept`` (temperature >
    0) and ``verify.greedy_accept`` (temperature 0); see the module note."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def verify(self, draft_tokens, target_logits, draft_logits, temperatures, top_k, *, generator=None,
               accept_uniforms=None, final_uniforms=None, seeds=None, positions=None, cap=None):
        if accept_uniforms is not None or final_uniforms is not None:
            raise NotImplementedError("explicit uniforms: speculative_sample_accept draws its coins from its own "
                                      "numpy Generator")
        if seeds is not None:
            raise NotImplementedError("seeded rows: dspark-mlx verifies every row with one numpy Generator")
        if generator is None:
            raise ValueError("generator: required (dspark-mlx's rng is seeded from it)")
        q = tempered_laws(self._engine, draft_logits, temperatures)
        p = tempered_laws(self._engine, target_logits, temperatures)
        return self.verify_laws(draft_tokens, target_logits, q, p, temperatures, generator, cap)

    def verify_laws(self, draft_tokens, target_logits, q, p, temperatures, generator, cap=None):
        """Verify row by row: ``speculative_sample_accept`` with the laws ``q [B, l, V]`` and
        ``p [B, l + 1, V]`` (float32 NumPy) and one NumPy rng seeded from ``generator``;
        ``greedy_accept`` on ``target_logits`` where the temperature is 0."""
        verify = self._engine["verify"]
        rng = np.random.default_rng(draw_seed(generator))
        counts = verified_counts(draft_tokens, cap)
        drafts = draft_tokens.cpu().numpy()
        target = target_logits.detach().cpu().to(torch.float32).numpy()
        results = []
        for r, (n, temperature) in enumerate(zip(counts, temperatures.tolist())):
            if temperature == 0:
                results.append(verify.greedy_accept(drafts[r, :n], target[r, : n + 1]))
            else:
                results.append(verify.speculative_sample_accept(drafts[r, :n], q[r, :n], p[r, : n + 1], rng))
        return _padded(results, draft_tokens.shape[1] + 1, draft_tokens.device)


class TruncatedChainVerifier:
    """SPEC S5 with the draft law handed over (``speculative_sample_accept``'s inputs), neutral
    truncation only (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine
        self._chain = ChainVerifier(engine)

    def verify_truncated(self, draft_tokens, target_logits, draft_probs, temperatures, top_k, top_p, min_p,
                         generator):
        vocab = target_logits.shape[-1]
        if bool(((top_k < vocab) | (top_p < 1) | (min_p > 0))[temperatures != 0].any()):
            raise NotImplementedError("top-k / top-p / min-p: dspark-mlx's verifier has no truncation")
        q = to_numpy(draft_probs.to(torch.float32))
        p = tempered_laws(self._engine, target_logits, temperatures)
        return self._chain.verify_laws(draft_tokens, target_logits, q, p, temperatures, generator)
