"""Float64 oracles of SPEC S7's confidence head and calibration metrics, with the SPEC S0
bounds an IUT's float32 (or coarser) evaluation is held to: the head's confidences
``sigmoid((w . [h ; m] + b) / t)`` (:func:`oracle_confidences`), the prefix survival's bound
(:func:`survival_bound`) and the binned ECE (:func:`binned_ece`). Read by the S7 tests; the
STS fit's oracle is :mod:`conformance.oracles.sts_oracle`. Shares no code with ``dspark_ref``.
"""

from __future__ import annotations

import torch

__all__ = ["EPS32", "ECE_BINS", "oracle_confidences", "higham_gamma", "survival_bound", "binned_ece"]

#: float32 machine epsilon (``2^-23``), the step of the head's float32 error bound.
EPS32 = torch.finfo(torch.float32).eps
#: Equal-width bins of the S7 ECE (SPEC S7 "ECE (binned)"; the STS oracle's default too).
ECE_BINS = 15


def oracle_confidences(state, hidden, markov_features, temperatures):
    """float64 ``sigmoid((w . [h ; m] + b) / t)`` and its float32 error bound, both ``[B, gamma]``.

    Bound: a float32 dot product of n terms errs by at most ``n eps32 sum |w_i x_i|``
    (Higham, Thm 3.5, with margin for the bias and the division by t); sigmoid is
    1/4-Lipschitz, and its own rounding adds a few eps32.
    """
    features = hidden.double()
    if markov_features is not None:
        features = torch.cat([features, markov_features.double()], dim=-1)
    weight, bias = state["proj.weight"].double()[0], state["proj.bias"].double()[0]
    t = torch.ones(hidden.shape[1], dtype=torch.float64, device=hidden.device)
    if temperatures is not None:
        t = temperatures.double()
    raw = features @ weight + bias
    magnitude = (features * weight).abs().sum(-1) + bias.abs()
    bound = (features.shape[-1] + 3) * EPS32 * magnitude / (4 * t) + 4 * EPS32
    return torch.sigmoid(raw / t), bound


def higham_gamma(n: int, u: float) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: a chain of ``n`` roundings errs by at most
    this, relatively (Higham, Lemma 3.1)."""
    return n * u / (1 - n * u)


def survival_bound(expected: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """SPEC S0 bound on ``|a_k - e_k|`` between an IUT's prefix survival ``a`` in result dtype
    ``dtype`` and ``expected``, the float64 left-to-right product ``e``, both ``[..., gamma]``.

    The IUT may associate the ``k - 1`` products of ``a_k`` in any order, in ``dtype`` (a
    float32 product against a float64 one, SPEC S0): with ``u`` the dtype's unit roundoff,
    ``n_k = k - 1`` roundings in float64, ``n_k = 2k - 1`` in a coarser dtype (each of the
    ``k`` float64 confidences rounded into it, then the products), so ``a_k = P_k (1 +
    t)``, ``|t| <= gamma_{n_k}(u)``, for the exact product ``P_k``. ``e_k`` is within
    ``gamma_{k-1}(2^-53)`` of ``P_k`` likewise, and ``|P_k| <= |e_k| / (1 - gamma_{k-1}(2^-53))``.
    Underflow adds at most the dtype's smallest normal ``tiny`` per rounding (gradual or
    flushed to zero; later factors are <= 1 and do not enlarge it). Hence

        ``|a_k - e_k| <= (gamma_{n_k}(u) + g_k) / (1 - g_k) |e_k| + n_k tiny + (k - 1) tiny64``,
        ``g_k = gamma_{k-1}(2^-53)``.

    At gamma 7 in float32 that is ``7.7e-7 |e_7|`` (float64: ``1.3e-15 |e_7|``), at most
    7.7e-7; a survival that is not the cumulative product is off by ``c_k (1 - P_{k-1})``
    (the conditional ``c_k``) or ``P_k - P_{k-1}`` (a shifted prefix): up to 0.93 and 0.74
    on one draw of these confidences.
    """
    u, tiny = torch.finfo(dtype).eps / 2, torch.finfo(dtype).tiny
    u64, tiny64 = torch.finfo(torch.float64).eps / 2, torch.finfo(torch.float64).tiny
    bound = torch.empty_like(expected)
    for k in range(1, expected.shape[-1] + 1):
        n = k - 1 if dtype == torch.float64 else 2 * k - 1
        g = higham_gamma(k - 1, u64)
        bound[..., k - 1] = (higham_gamma(n, u) + g) / (1 - g) * expected[..., k - 1].abs() + n * tiny + (k - 1) * tiny64
    return bound


def binned_ece(prob: torch.Tensor, label: torch.Tensor) -> float:
    """Equal-width ECE (Naeini et al., 2015): ``sum_b (n_b / N) |mean label - mean prob|``."""
    prob, label = prob.double().cpu(), label.double().cpu()
    bins = torch.clamp((prob * ECE_BINS).floor().long(), max=ECE_BINS - 1)
    gap = torch.zeros(ECE_BINS, dtype=torch.float64).index_add_(0, bins, label - prob)
    return float(gap.abs().sum()) / prob.numel()
