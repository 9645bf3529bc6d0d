"""A float64 oracle of the S3 step (exponential race and greedy rows) for the degenerate and
invariance cases (``conformance/suite/test_degenerate.py``, ``test_invariance.py``).

Written from the SPEC text alone; nothing here imports ``dspark_ref`` (STYLE habit 9).
Every function takes and returns CPU tensors.

* :func:`race_keys64`: ``p_v / E_v`` in float64 with ``p = softmax(L / max(T, 1e-5))``;
  zero-probability tokens (logit -inf, or ``p`` underflowing to 0) get -1, so they never
  win, even where ``E_v = 0`` (then a token with ``p > 0`` gets +inf and wins).
* :func:`lowest_argmax`: the greedy token, lowest index among ties.
* :func:`expected_tokens`: greedy rows by a declared rule, the others the race winner.
* :func:`separate`: moves noise away from near-ties, so float32 rounding cannot flip a winner.
"""

from __future__ import annotations

import torch

from conformance.oracles.laws import tempered_softmax64
from conformance.spec import GREEDY_TEMPERATURE_BELOW, GREEDY_TOP_K_AT_MOST

__all__ = ["NEAR_TIE", "race_keys64", "lowest_argmax", "greedy_by_rule",
           "expected_tokens", "separate"]

NEAR_TIE = 1e-3  # exact cases keep the two best keys at least this far apart (relative)


def race_keys64(logits: torch.Tensor, temperatures: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``[B, V]`` float64 race keys ``softmax(L / max(T, 1e-5))_v / E_v``; -1 where ``p = 0``."""
    probs = tempered_softmax64(logits, temperatures)
    return torch.where(probs > 0, probs / noise.double(), -1.0)


def lowest_argmax(logits: torch.Tensor) -> torch.Tensor:
    """``[B]`` int64 row argmax of ``[B, V]`` logits, lowest index among ties (float64)."""
    values = logits.double()
    hits = values == values.max(dim=-1, keepdim=True).values
    return torch.where(hits, torch.arange(values.shape[-1]), values.shape[-1]).min(dim=-1).values


def greedy_by_rule(rule: str, temperatures: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool greedy rows by a declared rule: ``top_k <= 1`` or ``temperature < 1e-5``."""
    return top_k <= GREEDY_TOP_K_AT_MOST if rule == "top_k" else temperatures < GREEDY_TEMPERATURE_BELOW


def expected_tokens(rule: str, logits, temperatures, top_k, noise) -> torch.Tensor:
    """``[B]`` int64: greedy rows (by ``rule``) the argmax, the others the race winner."""
    race = race_keys64(logits, temperatures, noise).argmax(dim=-1)
    return torch.where(greedy_by_rule(rule, temperatures, top_k), lowest_argmax(logits), race)


def separate(logits: torch.Tensor, temperatures: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """A copy of ``noise`` with the winner's noise halved on rows whose two best keys are
    within :data:`NEAR_TIE` (relative), so float32 keys (rounded at ~1e-6) keep the winner."""
    noise = noise.clone()
    top2 = race_keys64(logits, temperatures, noise).topk(2, dim=-1)
    best = top2.values[:, 0]
    close = (top2.values[:, 1] > (1 - NEAR_TIE) * best) & (best > 0) & torch.isfinite(best)
    rows = close.nonzero().flatten()
    noise[rows, top2.indices[rows, 0]] *= 0.5
    return noise
