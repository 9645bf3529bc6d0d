"""Float64 oracles of one speculative round (SPEC S9 round, from S2, S3 truncation and S5):
the truncated target laws ``p_j`` of a row, the law the drafter draws from, the corrected
logits along every draft path, the law of the accepted count, and the SPEC S0 bound on a
float32 evaluation of a handed-over ``q``. Read by ``conformance/suite/test_round.py``;
shares no code with ``dspark_ref``.
"""

from __future__ import annotations

import itertools

import torch

from conformance.oracles.laws import tempered_softmax64
from conformance.oracles.markov_block import UNIT_ROUNDOFF, oracle_block_logits
from conformance.oracles.truncation import truncated_law
from conformance.spec import TEMPERATURE_FLOOR

__all__ = ["target_law", "draft_law", "path_corrected", "accepted_law", "all_paths", "q_bound"]


def target_law(target_row: torch.Tensor, spec, ties: str) -> torch.Tensor:
    """``[gamma + 1, V]`` float64 truncated target laws ``p_j`` of one row's target logits
    ``target_row [gamma + 1, V]``; ``spec`` has the row's ``temperature``, ``top_k``,
    ``top_p``, ``min_p``; ``ties`` the top-k tie rule (SPEC S3, S5)."""
    return torch.stack([truncated_law(tempered_softmax64(t, spec.temperature), spec.top_k, spec.top_p, spec.min_p, ties)
                        for t in target_row])


def draft_law(corrected: torch.Tensor, spec, conventions) -> torch.Tensor:
    """``[..., V]`` float64 law the drafter draws from, for corrected logits ``[..., V]``:
    ``softmax(L / T)``, truncated when the IUT's ``conventions`` declare a truncating drafter
    (``draft_truncates``, ``top_k_ties``; SPEC S9 round handoff)."""
    flat = corrected.reshape(-1, corrected.shape[-1])
    laws = tempered_softmax64(flat, spec.temperature)
    if conventions.draft_truncates:
        laws = torch.stack([truncated_law(law, spec.top_k, spec.top_p, spec.min_p, conventions.top_k_ties)
                            for law in laws])
    return laws.reshape(corrected.shape)


def path_corrected(head_type, state, base, anchor, hidden, paths: torch.Tensor) -> torch.Tensor:
    """Corrected logits ``[P, gamma, V]`` (float64) along every draft path ``paths[P, gamma]``."""
    prev = torch.cat([anchor.expand(paths.shape[0])[:, None], paths[:, :-1]], dim=1)
    rows = paths.shape[0]
    logits, _ = oracle_block_logits(head_type, state, base.expand(rows, *base.shape[1:]), prev,
                                    None if hidden is None else hidden.expand(rows, *hidden.shape[1:]))
    return logits


def accepted_law(p: torch.Tensor, q_paths: torch.Tensor, paths: torch.Tensor) -> torch.Tensor:
    """Law ``[gamma + 1]`` of the accepted count: ``P(>= j) = sum_{x_1..x_j} prod_{i<=j}
    min(p_i(x_i), q_i(x_i | x_{<i}))`` over all ``V^gamma`` enumerated ``paths``."""
    gamma, vocab = paths.shape[1], p.shape[-1]
    steps = torch.arange(gamma)
    m = torch.minimum(p[steps, paths], q_paths[:, steps].gather(-1, paths[..., None])[..., 0])
    at_least = [torch.tensor(1.0, dtype=torch.float64)]
    for j in range(1, gamma + 1):  # each j-prefix appears V^(gamma - j) times among the paths
        at_least.append(m[:, :j].prod(dim=1).sum() / vocab ** (gamma - j))
    at_least.append(torch.tensor(0.0, dtype=torch.float64))
    survival = torch.stack(at_least)
    return (survival[:-1] - survival[1:]).clamp(min=0)


def all_paths(vocab: int, gamma: int) -> torch.Tensor:
    """Every draft path ``[V^gamma, gamma]`` int64, in product order (``x_1`` slowest)."""
    return torch.tensor(list(itertools.product(range(vocab), repeat=gamma)))


def q_bound(exact_logits, logit_bound, temperature, q):
    """SPEC S0 bound on a float32 evaluation of ``q = softmax(L / T)`` (renormalised over a
    kept set): logits within ``B`` of the exact ``L`` move every ``L / T`` by at most
    ``e = max B / T + u max |L / T|``, which scales each probability by a factor in
    ``[exp(-2e), exp(2e)]``; the float32 softmax itself (exp to a few ulps, a V-term sum, a
    division) adds ``(V + 8) u`` relative; doubled for second-order terms. With ``B`` ~1e-6
    this is ~1e-6 relative, while a q rounded to bfloat16 errs by up to 2^-9 relative and a
    q that is not the draw law by O(q)."""
    u = UNIT_ROUNDOFF[torch.float32]
    t = max(float(temperature), TEMPERATURE_FLOOR)
    e = logit_bound.amax(dim=-1, keepdim=True) / t + u * (exact_logits / t).abs().amax(dim=-1, keepdim=True)
    return 2 * (q * (torch.expm1(2 * e) + (exact_logits.shape[-1] + 8) * u)) + u
