"""The float64 oracle of truncated laws (SPEC S3 truncation, S5 truncation), for the S3, S5
and S9 tests. Written from the SPEC text; shares no code with ``dspark_ref``.

A law ``p = softmax(L / T)`` (tempered first: the top-p and min-p sets depend on ``T``) is
restricted to the tokens a request keeps and renormalised:

* top-k: the ``k`` most probable tokens; where several tie with the k-th probability, the
  declared rule keeps ``"all"`` of them or the ``"lowest"`` indices (exactly ``k``);
  ``k <= 0`` or ``k >= V`` keeps every token.
* top-p: the smallest set of most probable tokens whose mass reaches ``top_p`` (every token
  tied with the last one kept).
* min-p: the tokens with ``p >= min_p * max p``.

Applied in that order (top-p on the renormalised top-k law); the suite's cases use one
truncation at a time, with cuts far from ties unless a case is about a tie.
"""

from __future__ import annotations

import torch

from conformance.inputs import NO_TOP_K_CUT

__all__ = ["NEUTRAL", "truncated_law"]

#: Parameters that keep every token (``top_k`` at or above any vocabulary).
NEUTRAL = {"top_k": NO_TOP_K_CUT, "top_p": 1.0, "min_p": 0.0}


def _keep_top_k(p: torch.Tensor, k: int, ties: str) -> torch.Tensor:
    vocab = p.shape[-1]
    if k <= 0 or k >= vocab:
        return torch.ones_like(p, dtype=torch.bool)
    kth = p.sort(descending=True).values[k - 1]
    if ties == "all":
        return p >= kth
    keep = p > kth
    tied = (p == kth).nonzero()[:, 0]
    keep[tied[: k - int(keep.sum())]] = True
    return keep


def _keep_top_p(p: torch.Tensor, top_p: float) -> torch.Tensor:
    ranked = p.sort(descending=True).values
    before = ranked.cumsum(0) - ranked
    return p >= ranked[before < top_p].min()


def truncated_law(p: torch.Tensor, top_k: int, top_p: float, min_p: float, ties: str = "all") -> torch.Tensor:
    """The renormalised truncated law of one row.

    Args:
        p: ``[V]`` float64 tempered law (:func:`conformance.oracles.laws.tempered_softmax64`).
        top_k, top_p, min_p: the request's parameters (:data:`NEUTRAL` keeps all).
        ties: the top-k tie rule, ``"all"`` or ``"lowest"`` (``Conventions.top_k_ties``).
    Returns:
        ``[V]`` float64, zero outside the kept set, summing to 1.
    """
    law = torch.where(_keep_top_k(p, int(top_k), ties), p, 0.0)
    law = law / law.sum()
    if top_p < 1.0:
        law = torch.where(_keep_top_p(law, float(top_p)), law, 0.0)
        law = law / law.sum()
    if min_p > 0.0:
        law = torch.where(law >= min_p * law.max(), law, 0.0)
        law = law / law.sum()
    return law
