"""Confidences (SPEC S7) through mlx-dspark's ``model.ConfidenceHead``.

``DSparkDrafter.confidence_logits(block_hidden, prev_token_ids)`` feeds ``ConfidenceHead``
(``proj = nn.Linear(d [+ r], 1)``, with bias: the reference layout ``proj.weight [1, d + r]``,
hidden part first, ``proj.bias [1]``) the features ``cat([block_hidden, markov_w1[prev]])``
(or ``block_hidden`` alone without the Markov feature), and ``speculative_generate`` turns the
raw logit into a confidence with ``mx.sigmoid``. The contract hands the Markov features
themselves (``W1[prev]``), so the adapter calls the engine's ``ConfidenceHead`` on that same
concatenation and applies ``mx.sigmoid``. Each position is scored independently
(``checkpoint_gamma`` plays no part).

What mlx-dspark lacks (``NotImplementedError``: a skip): STS temperatures and ``fit_sts``
(none), and ``prefix_survival`` (its loop forms the running product inline in
``speculative_generate``'s confidence cut, with no function that returns it).
"""

from __future__ import annotations

from typing import Mapping

import torch

from conformance.adapters.confidence_head import head_weights
from conformance.adapters.mlx_arrays import to_mx, to_torch
from conformance.adapters.mlx_engine import MLXEngine

__all__ = ["Confidence"]


class Confidence:
    """SPEC S7 confidences through ``ConfidenceHead`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def confidences(self, state_dict: Mapping[str, torch.Tensor], hidden: torch.Tensor,
                    markov_features: torch.Tensor | None, temperatures: torch.Tensor | None, *,
                    checkpoint_gamma: int) -> torch.Tensor:
        """``c [B, gamma]`` float32 on ``hidden``'s device: ``sigmoid(ConfidenceHead(cat([hidden,
        markov_features])))``.

        Raises:
            NotImplementedError: ``temperatures`` given (mlx-dspark has no STS).
            ValueError: ``hidden`` not ``[B, gamma, d]``, ``markov_features`` not ``[B, gamma,
                r]``, or ``proj.weight`` / ``proj.bias`` missing or not ``[1, d (+ r)]`` / ``[1]``.
        """
        if temperatures is not None:
            raise NotImplementedError("STS temperatures: mlx-dspark applies sigmoid(raw) and fits no temperatures")
        weight, bias = head_weights(state_dict, hidden, markov_features)
        features = hidden if markov_features is None else torch.cat([hidden, markov_features.to(hidden.dtype)], -1)
        mx = self._engine.mx
        head = self._engine["model"].ConfidenceHead(weight.shape[1])
        head.load_weights([("proj.weight", to_mx(mx, weight.float())), ("proj.bias", to_mx(mx, bias.float()))])
        return to_torch(mx, mx.sigmoid(head(to_mx(mx, features.float()))), hidden, torch.float32)

    def prefix_survival(self, confidences: torch.Tensor) -> torch.Tensor:
        """Raises NotImplementedError: mlx-dspark forms the running product inline (module note)."""
        raise NotImplementedError("prefix survival: mlx-dspark forms the running product inline in "
                                  "speculative_generate's confidence cut, with no function that returns it")

    def fit_sts(self, raw: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
        """Raises NotImplementedError: mlx-dspark fits no STS temperatures."""
        raise NotImplementedError("STS: mlx-dspark fits no temperatures for its confidence head")
