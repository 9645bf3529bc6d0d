"""The confidence head's inputs as the contract hands them (SPEC S7), checked once for the
adapters that load them into an engine's own head (``dspark_mlx/confidence.py``,
``mlx_dspark/confidence.py``, ``vllm/confidence.py``): one linear layer ``proj`` over ``cat([hidden, markov_features])``
in the reference layout, ``proj.weight [1, d + r]`` (hidden part first) and ``proj.bias [1]``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["head_weights"]


def head_weights(state_dict: Mapping[str, torch.Tensor], hidden: torch.Tensor,
                 markov_features: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(proj.weight [1, d + r], proj.bias [1])`` of ``state_dict``, checked against ``hidden
    [B, gamma, d]`` and ``markov_features [B, gamma, r]`` (None: ``r = 0``).

    Raises:
        ValueError: ``hidden`` not ``[B, gamma, d]``, ``markov_features`` not ``[B, gamma, r]``,
            or ``proj.weight`` / ``proj.bias`` missing or not ``[1, d (+ r)]`` / ``[1]``.
    """
    if hidden.dim() != 3:
        raise ValueError(f"hidden: expected [B, gamma, d], got {tuple(hidden.shape)}")
    bs, gamma, d = hidden.shape
    if markov_features is not None and tuple(markov_features.shape[:2]) != (bs, gamma):
        raise ValueError(f"markov_features: expected [B={bs}, gamma={gamma}, r], got "
                         f"{tuple(markov_features.shape)}")
    fan_in = d + (0 if markov_features is None else markov_features.shape[-1])
    weight, bias = state_dict.get("proj.weight"), state_dict.get("proj.bias")
    if weight is None or tuple(weight.shape) != (1, fan_in) or bias is None or tuple(bias.shape) != (1,):
        raise ValueError(f"state_dict: expected proj.weight [1, {fan_in}] and proj.bias [1], got "
                         f"{ {k: tuple(v.shape) for k, v in state_dict.items()} }")
    return weight, bias
