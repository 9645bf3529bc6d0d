"""Confidence head, sequential temperature scaling (STS) and calibration metrics (SPEC S7).

The confidence head scores each draft position ``k`` of a block with
``c_k = sigmoid(w . [h_k ; W1[x_{k-1}]] + b)`` (paper Eq. 7): the probability that draft token
``x_k`` survives verification given that every earlier draft token of the block was accepted.
The prefix survival ``a_k = prod_{i<=k} c_i`` is what the prefix scheduler (SPEC S8) consumes,
so the magnitudes must be calibrated: STS divides each position's raw logit by a temperature
``t_k`` fitted left to right on held-out data (paper Section 3.2.1).

Metrics (``ece``, ``brier``, ``auroc``) take one position at a time: probabilities ``[N]`` and
boolean labels ``[N]``. To add a metric, give it the same signature and validation helper.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from dspark_ref._checks import (
    FLOAT_DTYPES,
    check_finite,
    check_int,
    check_same_device,
    check_tensor,
)

__all__ = [
    "ConfidenceHead",
    "DEFAULT_STS_GRID",
    "calibrate",
    "prefix_survival",
    "fit_sts",
    "ece",
    "brier",
    "auroc",
]

# Temperatures tried by STS at every position: 400 points spaced geometrically in [0.05, 20].
DEFAULT_STS_GRID = torch.logspace(math.log10(0.05), math.log10(20.0), 400, dtype=torch.float64)

# Bound on grid_chunk * N elements held at once by the STS grid search.
_STS_CHUNK_ELEMENTS = 1 << 22


class ConfidenceHead(torch.nn.Module):
    """Linear confidence head over ``[h_k ; W1[x_{k-1}]]`` (SPEC S7, paper Eq. 7).

    Parameters live in one ``torch.nn.Linear`` named ``proj``: state-dict keys
    ``proj.weight`` ``[1, hidden_size + markov_rank]`` (hidden part first) and ``proj.bias``
    ``[1]``, float32.

    Args:
        hidden_size: draft hidden size ``d`` (>= 1).
        markov_rank: Markov rank ``r`` of the feature ``W1[x_{k-1}]``; ``None`` builds a head
            over the hidden state only.
        generator: optional ``torch.Generator`` for a reproducible initialisation
            (weights ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, bias 0).

    Raises:
        TypeError / ValueError: ``hidden_size`` or ``markov_rank`` not a positive int.

    Example:
        >>> head = ConfidenceHead(8, markov_rank=4, generator=torch.Generator().manual_seed(0))
        >>> head(torch.zeros(2, 5, 8), torch.zeros(2, 5, 4)).shape
        torch.Size([2, 5])
    """

    def __init__(
        self,
        hidden_size: int,
        *,
        markov_rank: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        check_int("hidden_size", hidden_size, minimum=1)
        if markov_rank is not None:
            check_int("markov_rank", markov_rank, minimum=1)
        super().__init__()
        self.hidden_size = hidden_size
        self.markov_rank = markov_rank
        fan_in = hidden_size + (markov_rank or 0)
        self.proj = torch.nn.Linear(fan_in, 1)
        with torch.no_grad():
            bound = 1.0 / math.sqrt(fan_in)
            self.proj.weight.copy_(torch.rand(1, fan_in, generator=generator) * 2 * bound - bound)
            self.proj.bias.zero_()

    def raw_logits(
        self, hidden: torch.Tensor, markov_features: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Uncalibrated logits ``w . [h_k ; W1[x_{k-1}]] + b`` for every block position.

        Args:
            hidden: ``[B, gamma, d]`` draft hidden states, any float dtype; ``gamma`` is the
                runtime block length and fixes the output shape.
            markov_features: ``[B, gamma, r]`` Markov embeddings of the previous tokens, i.e.
                ``W1[prev]`` with ``prev = [x0, x_0 .. x_{gamma-2}]`` (the same ``prev`` the
                Markov head sees, SPEC S2); required iff the head has a ``markov_rank``.

        Returns:
            ``[B, gamma]`` float32 raw logits.

        Raises:
            TypeError: non-tensor or non-float input.
            ValueError: wrong rank or shape, features given to (or missing from) the head,
                device mismatch, or non-finite values.
        """
        self._check_inputs(hidden, markov_features)
        features = hidden.float()
        if markov_features is not None:
            features = torch.cat([features, markov_features.float()], dim=-1)
        return self.proj(features).squeeze(-1)

    def forward(
        self,
        hidden: torch.Tensor,
        markov_features: torch.Tensor | None = None,
        temperatures: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Calibrated confidences ``c[B, gamma] = sigmoid(raw / t)`` (SPEC S7).

        ``temperatures`` is ``[gamma]`` from :func:`fit_sts`; ``None`` means ``t = 1``.
        Shapes, dtypes and errors as :meth:`raw_logits` and :func:`calibrate`.
        """
        raw = self.raw_logits(hidden, markov_features)
        if temperatures is None:
            return torch.sigmoid(raw)
        return calibrate(raw, temperatures)

    def _check_inputs(self, hidden: torch.Tensor, markov_features: torch.Tensor | None) -> None:
        check_tensor("hidden", hidden, shape=(None, None, self.hidden_size), dtypes=FLOAT_DTYPES)
        check_finite("hidden", hidden)
        if self.markov_rank is None:
            if markov_features is not None:
                raise ValueError(
                    "markov_features: expected None for a head built without markov_rank, "
                    f"got a tensor of shape {tuple(markov_features.shape)}"
                )
            return
        if markov_features is None:
            raise ValueError(
                f"markov_features: expected [B, gamma, {self.markov_rank}] (the head was built "
                "with markov_rank), got None"
            )
        check_tensor(
            "markov_features",
            markov_features,
            shape=(hidden.shape[0], hidden.shape[1], self.markov_rank),
            dtypes=FLOAT_DTYPES,
        )
        check_finite("markov_features", markov_features)
        check_same_device(hidden=hidden, markov_features=markov_features)


def calibrate(raw: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """Sequential temperature scaling ``c[..., k] = sigmoid(raw[..., k] / t[k])`` (SPEC S7).

    Args:
        raw: ``[..., gamma]`` float raw confidence logits.
        temperatures: ``[gamma]`` positive finite float temperatures.

    Returns:
        ``[..., gamma]`` confidences in ``[0, 1]``, dtype of ``raw``.

    Raises:
        TypeError: non-tensor or non-float input.
        ValueError: ``raw`` of rank 0 or non-finite; ``temperatures`` not ``[gamma]``,
            not finite or not positive; device mismatch.
    """
    _check_calibrate(raw, temperatures)
    return torch.sigmoid(raw / temperatures.to(raw.dtype))


def prefix_survival(confidences: torch.Tensor) -> torch.Tensor:
    """Prefix survival ``a[..., k] = prod_{i<=k} c[..., i]`` (SPEC S7, paper Section 3.2.2).

    Args:
        confidences: ``[..., gamma]`` float confidences in ``[0, 1]``.

    Returns:
        ``[..., gamma]`` cumulative products, dtype of ``confidences``; non-increasing in k.

    Raises:
        TypeError: non-tensor or non-float input.
        ValueError: rank 0, NaN, or a value outside ``[0, 1]``.
    """
    _check_probabilities("confidences", confidences, min_ndim=1)
    return torch.cumprod(confidences, dim=-1)


def fit_sts(
    raw: torch.Tensor,
    accepted: torch.Tensor,
    *,
    grid: torch.Tensor | Sequence[float] | None = None,
    n_bins: int = 15,
) -> torch.Tensor:
    """Fit STS temperatures left to right by 1-D grid search (SPEC S7, paper Section 3.2.1).

    At position ``k`` every temperature ``t`` of ``grid`` is tried with ``t_1 .. t_{k-1}``
    held at their fitted values; the chosen ``t_k`` minimises
    ``ece(prod_{i<=k} sigmoid(raw[:, i] / t_i), accepted[:, k])``. Ties go to the earliest
    grid entry. Scaling by a positive temperature preserves the order of ``raw`` at each
    position.

    Args:
        raw: ``[N, gamma]`` float raw confidence logits of held-out blocks (N >= 1).
        accepted: ``[N, gamma]`` bool prefix-accepted indicators: ``accepted[n, k]`` is true
            iff draft tokens ``0..k`` of block ``n`` were all accepted (non-increasing in k).
        grid: 1-D positive finite candidate temperatures; default :data:`DEFAULT_STS_GRID`.
        n_bins: ECE bins (>= 1).

    Returns:
        ``[gamma]`` float64 temperatures, each an entry of ``grid``.

    Raises:
        TypeError: non-tensor, non-float ``raw`` or non-bool ``accepted``.
        ValueError: shape mismatch, N = 0, non-finite ``raw``, ``accepted`` not a prefix
            indicator, or ``grid`` empty / not finite / not positive.
    """
    grid = _check_fit_sts(raw, accepted, grid, n_bins)
    raw = raw.double()
    labels = accepted.double()
    survival = torch.ones(raw.shape[0], dtype=torch.float64, device=raw.device)
    temperatures = torch.empty(raw.shape[1], dtype=torch.float64, device=raw.device)
    chunk = max(1, _STS_CHUNK_ELEMENTS // raw.shape[0])
    for k in range(raw.shape[1]):
        errors = torch.cat(
            [
                _binned_ece(survival * torch.sigmoid(raw[:, k] / t[:, None]), labels[:, k], n_bins)
                for t in grid.split(chunk)
            ]
        )
        temperatures[k] = grid[torch.argmin(errors)]
        survival = survival * torch.sigmoid(raw[:, k] / temperatures[k])
    return temperatures


def ece(prob: torch.Tensor, label: torch.Tensor, n_bins: int = 15) -> float:
    """Expected calibration error with equal-width bins (Naeini et al., 2015; SPEC S7).

    Bin ``b`` holds ``prob`` in ``[b/n_bins, (b+1)/n_bins)``; the last bin also holds 1.
    ``ECE = sum_b (n_b / N) |mean(label in b) - mean(prob in b)|``.

    Args:
        prob: ``[N]`` float probabilities in ``[0, 1]`` (N >= 1).
        label: ``[N]`` bool outcomes.
        n_bins: number of bins (>= 1).

    Returns:
        ECE as a Python float in ``[0, 1]``.

    Raises:
        TypeError / ValueError: see :func:`brier`; ``n_bins`` not a positive int.
    """
    _check_binary_scores(prob, label, n_bins=n_bins)
    return float(_binned_ece(prob.double()[None], label.double(), n_bins)[0])


def brier(prob: torch.Tensor, label: torch.Tensor) -> float:
    """Brier score ``mean((prob - label)^2)`` (SPEC S7).

    Args:
        prob: ``[N]`` float probabilities in ``[0, 1]`` (N >= 1).
        label: ``[N]`` bool outcomes.

    Returns:
        The score as a Python float in ``[0, 1]``.

    Raises:
        TypeError: non-tensor, non-float ``prob`` or non-bool ``label``.
        ValueError: not 1-D, N = 0, shapes differ, devices differ, NaN or values outside [0, 1].
    """
    _check_binary_scores(prob, label)
    return float(torch.mean((prob.double() - label.double()) ** 2))


def auroc(score: torch.Tensor, label: torch.Tensor) -> float:
    """Area under the ROC curve via the Mann-Whitney rank statistic, ties averaged (SPEC S7).

    ``AUROC = (sum of ranks of positives - P (P + 1) / 2) / (P * Q)`` for ``P`` positives and
    ``Q`` negatives: the probability a random positive outscores a random negative, ties
    counting one half (Hanley and McNeil, 1982).

    Args:
        score: ``[N]`` float scores in ``[0, 1]`` (e.g. prefix survival).
        label: ``[N]`` bool outcomes with both classes present.

    Returns:
        AUROC as a Python float in ``[0, 1]``.

    Raises:
        TypeError / ValueError: see :func:`brier`; ``label`` with a single class.
    """
    _check_binary_scores(score, label, name="score")
    positives = int(label.sum())
    negatives = label.numel() - positives
    if positives == 0 or negatives == 0:
        raise ValueError(
            f"label: expected both classes, got {positives} positives and {negatives} negatives"
        )
    import scipy.stats  # here: 1.3 s of import for every process loading dspark_ref (a TP rank)

    ranks = scipy.stats.rankdata(score.double().cpu().numpy())
    rank_sum = float(ranks[label.cpu().numpy()].sum())
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def _binned_ece(prob: torch.Tensor, label: torch.Tensor, n_bins: int) -> torch.Tensor:
    """ECE of each row of ``prob[G, N]`` against ``label[N]`` (float64), returned ``[G]``.

    ``(n_b / N) |mean_y - mean_p| = |sum_y - sum_p| / N``, so no per-bin division is needed.
    """
    bins = torch.clamp((prob * n_bins).floor().long(), max=n_bins - 1)
    gap = torch.zeros(prob.shape[0], n_bins, dtype=torch.float64, device=prob.device)
    gap.scatter_add_(1, bins, label.expand_as(prob) - prob)
    return gap.abs().sum(dim=1) / prob.shape[1]


def _check_probabilities(name: str, value: torch.Tensor, *, min_ndim: int) -> None:
    check_tensor(name, value, dtypes=FLOAT_DTYPES)
    if value.dim() < min_ndim:
        raise ValueError(f"{name}: expected at least {min_ndim}-D, got {value.dim()}-D")
    if bool(torch.isnan(value).any()):
        raise ValueError(f"{name}: expected values in [0, 1], got NaN")
    low, high = (float(value.min()), float(value.max())) if value.numel() else (0.0, 0.0)
    if low < 0.0 or high > 1.0:
        raise ValueError(f"{name}: expected values in [0, 1], got range [{low}, {high}]")


def _check_temperatures(temperatures: torch.Tensor, gamma: int) -> None:
    check_tensor("temperatures", temperatures, shape=(gamma,), dtypes=FLOAT_DTYPES)
    check_finite("temperatures", temperatures)
    if gamma and float(temperatures.min()) <= 0.0:
        raise ValueError(f"temperatures: expected positive values, got {temperatures.tolist()}")


def _check_calibrate(raw: torch.Tensor, temperatures: torch.Tensor) -> None:
    check_tensor("raw", raw, dtypes=FLOAT_DTYPES)
    if raw.dim() < 1:
        raise ValueError("raw: expected at least 1-D [..., gamma], got 0-D")
    check_finite("raw", raw)
    _check_temperatures(temperatures, raw.shape[-1])
    check_same_device(raw=raw, temperatures=temperatures)


def _check_fit_sts(
    raw: torch.Tensor,
    accepted: torch.Tensor,
    grid: torch.Tensor | Sequence[float] | None,
    n_bins: int,
) -> torch.Tensor:
    """Validate ``fit_sts`` arguments; returns the grid as a float64 tensor on raw's device."""
    check_tensor("raw", raw, ndim=2, dtypes=FLOAT_DTYPES)
    if raw.shape[0] == 0:
        raise ValueError(f"raw: expected at least one held-out block, got shape {tuple(raw.shape)}")
    check_finite("raw", raw)
    check_tensor("accepted", accepted, shape=tuple(raw.shape), dtypes=(torch.bool,))
    check_same_device(raw=raw, accepted=accepted)
    grows = accepted[:, 1:] & ~accepted[:, :-1]
    if bool(grows.any()):
        n, k = (int(i) for i in grows.nonzero()[0])
        raise ValueError(
            "accepted: expected prefix indicators (non-increasing along gamma), got "
            f"accepted[{n}, {k + 1}] true after accepted[{n}, {k}] false"
        )
    check_int("n_bins", n_bins, minimum=1)
    if grid is None:
        return DEFAULT_STS_GRID.to(raw.device)
    if not isinstance(grid, torch.Tensor):
        grid = torch.tensor(list(grid), dtype=torch.float64)
    check_tensor("grid", grid, ndim=1, dtypes=FLOAT_DTYPES)
    if grid.numel() == 0:
        raise ValueError("grid: expected at least one temperature, got an empty grid")
    check_finite("grid", grid)
    if float(grid.min()) <= 0.0:
        raise ValueError(f"grid: expected positive temperatures, got minimum {float(grid.min())}")
    return grid.to(device=raw.device, dtype=torch.float64)


def _check_binary_scores(
    prob: torch.Tensor, label: torch.Tensor, *, name: str = "prob", n_bins: int | None = None
) -> None:
    check_tensor(name, prob, ndim=1, dtypes=FLOAT_DTYPES)
    if prob.numel() == 0:
        raise ValueError(f"{name}: expected at least one element, got an empty tensor")
    _check_probabilities(name, prob, min_ndim=1)
    check_tensor("label", label, shape=tuple(prob.shape), dtypes=(torch.bool,))
    check_same_device(**{name: prob, "label": label})
    if n_bins is not None:
        check_int("n_bins", n_bins, minimum=1)
