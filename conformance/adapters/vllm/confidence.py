"""The DSpark confidence head (SPEC S7) through vLLM's model file, 0.28.0+.

vLLM's DSpark drafter (``DSparkSpeculator._sample_sequential``, 0.28.0+) scores each drafted
position with the draft model's confidence head when the checkpoint ships one:
``model.compute_confidence(sample_hidden, markov_embeds)`` on the flattened ``[B * gamma]``
rows, i.e. ``sigmoid(DSparkConfidenceHead(hidden, W1[prev]))`` with ``DSparkConfidenceHead``
``= proj(cat([hidden, markov_embed]).float())`` (or ``proj(hidden)`` without the Markov
feature), ``proj`` a ``ReplicatedLinear(d [+ r], 1, bias=True, params_dtype=float32)`` as
``Qwen3DSparkModel`` builds it. The adapter builds that head class from
``vllm/model_executor/models/qwen3_dspark.py`` (loaded without the backbone:
:mod:`.loader`), loads the contract's ``proj.weight [1, d + r]`` / ``proj.bias [1]`` into it
(the same names and layout as vLLM's checkpoint keys ``confidence_head.proj.*``), and calls
vLLM's ``Qwen3DSparkForCausalLM.compute_confidence`` on the rows laid out as the drafter
lays them out. Each position is scored independently, so the runtime block length is
whatever ``hidden`` holds (``checkpoint_gamma`` plays no part).

What vLLM lacks (each raises ``NotImplementedError`` naming it: a skip):

* STS temperatures: vLLM applies ``sigmoid(raw)`` and fits no temperatures, so
  ``confidences`` with ``temperatures`` and ``fit_sts`` are unsupported;
* ``prefix_survival``: vLLM forms the running product inline in its adaptive verification
  budget (``adaptive_verification``: ``cumprod`` over the per-position confidences, then a
  top-k), with no function that returns it.

0.25.0 ships no confidence head (its model file skips the ``confidence_head`` weights, "not
wired into inference yet"): the capability is not offered there.
"""

from __future__ import annotations

import types
from typing import Mapping

import torch

from conformance.adapters.confidence_head import head_weights

from .loader import VLLMModules

__all__ = ["Confidence", "confidence_support"]

_HEAD = "DSparkConfidenceHead"
_MODEL = "Qwen3DSparkForCausalLM"


def confidence_support(modules: VLLMModules) -> str | None:
    """Why the loaded vLLM offers no confidence head, or None when it does."""
    if "dspark_model" not in modules:
        return f"the DSpark model file did not load: {modules.missing.get('dspark_model', 'unknown reason')}"
    model = modules["dspark_model"]
    if not hasattr(model, _HEAD) or not hasattr(getattr(model, _MODEL, None), "compute_confidence"):
        return f"vllm=={modules.version}'s qwen3_dspark has no {_HEAD} / compute_confidence"
    return None


class Confidence:
    """SPEC S7 confidences through vLLM's ``DSparkConfidenceHead`` (see the module note); build
    it only where :func:`confidence_support` is None."""

    def __init__(self, modules: VLLMModules) -> None:
        model = modules["dspark_model"]
        self._head_class = getattr(model, _HEAD)
        self._compute = getattr(model, _MODEL).compute_confidence

    def confidences(self, state_dict: Mapping[str, torch.Tensor], hidden: torch.Tensor,
                    markov_features: torch.Tensor | None, temperatures: torch.Tensor | None, *,
                    checkpoint_gamma: int) -> torch.Tensor:
        """``c [B, gamma]`` float32 on ``hidden``'s device: vLLM's ``compute_confidence``.

        Raises:
            NotImplementedError: ``temperatures`` given (vLLM has no STS).
            ValueError: ``hidden`` not ``[B, gamma, d]``, ``markov_features`` not ``[B, gamma,
                r]``, or ``proj.weight`` / ``proj.bias`` missing or not ``[1, d (+ r)]`` / ``[1]``.
        """
        if temperatures is not None:
            raise NotImplementedError("STS temperatures: vLLM applies sigmoid(raw) and fits no temperatures")
        weight, bias = head_weights(state_dict, hidden, markov_features)
        bs, gamma, d = hidden.shape
        with_markov = markov_features is not None
        head = self._head_class(weight.shape[1], prefix="confidence_head", bias=True, with_markov=with_markov)
        head.load_state_dict({"proj.weight": weight, "proj.bias": bias})
        head = head.to(hidden.device)
        rows = hidden.reshape(bs * gamma, d)
        embeds = markov_features.reshape(bs * gamma, -1) if with_markov else rows[:, :0]
        model = types.SimpleNamespace(model=types.SimpleNamespace(confidence_head=head))
        with torch.no_grad():
            return self._compute(model, rows, embeds).view(bs, gamma)

    def prefix_survival(self, confidences: torch.Tensor) -> torch.Tensor:
        """Raises NotImplementedError: vLLM has no function returning it (module note)."""
        raise NotImplementedError(
            "prefix survival: vLLM forms the running product inline in its adaptive verification "
            "budget (cumprod, then a top-k), with no function that returns it"
        )

    def fit_sts(self, raw: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
        """Raises NotImplementedError: vLLM fits no STS temperatures."""
        raise NotImplementedError("STS: vLLM fits no temperatures for its confidence head")
