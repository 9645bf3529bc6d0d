"""Confidences (SPEC S7) through dspark-mlx's ``DSparkConfidenceHead``.

``model.heads.DSparkConfidenceHead(input_dim, bias)`` is ``proj(cat([hidden, markov_embed])
.float())[..., 0]``, the raw acceptance logit of each drafted position (the Qwen3 / Gemma4
drafters build it with ``bias=True`` over ``hidden_size + markov_rank``: the reference layout
``proj.weight [1, d + r]``, hidden part first, ``proj.bias [1]``). dspark-mlx turns it into a
probability with a plain sigmoid where it reads it (``loop._confident_prefix_length``:
``1 / (1 + exp(-logits))``), which the adapter applies (``mx.sigmoid``). Each position is
scored independently, so ``checkpoint_gamma`` plays no part; without Markov features the head
reads ``hidden`` alone (a width-0 Markov embedding, fan-in ``d``).

What dspark-mlx lacks (each raises ``NotImplementedError``: a skip): STS temperatures (it
applies ``sigmoid(raw)`` and fits none), ``fit_sts``, and ``prefix_survival`` (its loop gates
on each position's probability against a threshold, never on a running product).
"""

from __future__ import annotations

from typing import Mapping

import torch

from conformance.adapters.confidence_head import head_weights
from conformance.adapters.mlx_arrays import to_mx, to_torch
from conformance.adapters.mlx_engine import MLXEngine

__all__ = ["Confidence"]


class Confidence:
    """SPEC S7 confidences through ``DSparkConfidenceHead`` (see the module note)."""

    def __init__(self, engine: MLXEngine) -> None:
        self._engine = engine

    def confidences(self, state_dict: Mapping[str, torch.Tensor], hidden: torch.Tensor,
                    markov_features: torch.Tensor | None, temperatures: torch.Tensor | None, *,
                    checkpoint_gamma: int) -> torch.Tensor:
        """``c [B, gamma]`` float32 on ``hidden``'s device: ``sigmoid(DSparkConfidenceHead(hidden,
        markov_features))``.

        Raises:
            NotImplementedError: ``temperatures`` given (dspark-mlx has no STS).
            ValueError: ``hidden`` not ``[B, gamma, d]``, ``markov_features`` not ``[B, gamma,
                r]``, or ``proj.weight`` / ``proj.bias`` missing or not ``[1, d (+ r)]`` / ``[1]``.
        """
        if temperatures is not None:
            raise NotImplementedError("STS temperatures: dspark-mlx applies sigmoid(raw) and fits no temperatures")
        weight, bias = head_weights(state_dict, hidden, markov_features)
        mx = self._engine.mx
        head = self._engine["heads"].DSparkConfidenceHead(weight.shape[1], bias=True)
        head.load_weights([("proj.weight", to_mx(mx, weight.float())), ("proj.bias", to_mx(mx, bias.float()))])
        embed = mx.zeros((*hidden.shape[:2], 0)) if markov_features is None else to_mx(mx, markov_features.float())
        raw = head(to_mx(mx, hidden.float()), embed)
        return to_torch(mx, mx.sigmoid(raw), hidden, torch.float32)

    def prefix_survival(self, confidences: torch.Tensor) -> torch.Tensor:
        """Raises NotImplementedError: dspark-mlx forms no running product (module note)."""
        raise NotImplementedError("prefix survival: dspark-mlx gates each position's sigmoid against a threshold "
                                  "(loop._confident_prefix_length), with no running product")

    def fit_sts(self, raw: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
        """Raises NotImplementedError: dspark-mlx fits no STS temperatures."""
        raise NotImplementedError("STS: dspark-mlx fits no temperatures for its confidence head")
