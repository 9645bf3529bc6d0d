"""Reference-layout Markov head weights -> SGLang's Markov head modules (SPEC S2).

SGLang builds its heads with its own factory, ``sglang.srt.models.dspark.build_markov_head``
(``VanillaMarkov``, ``GatedMarkovHead``, ``RNNHead``; the same parameter names in every
0.5.x release). The layouts agree up to names: the gate input is ``[h ; W1[prev]]`` and
the rnn input ``[s ; W1[prev] ; h]`` split into (gate, candidate, output) in both.

=====================  ========================
reference (dspark_ref)  SGLang
=====================  ========================
``W1.weight [V, r]``    ``markov_w1.weight``
``W2.weight [V, r]``    ``markov_w2.weight``
``Wg.weight/bias``      ``gate_proj.weight/bias``
``Wz.weight/bias``      ``joint_proj.weight/bias``
=====================  ========================
"""

from __future__ import annotations

import dataclasses
import types
from typing import Mapping

import torch

from conformance.checks import check_choice, check_int

__all__ = ["HEAD_TYPES", "REFERENCE_TO_SGLANG", "SGLangHead", "load_head"]

HEAD_TYPES = ("vanilla", "gated", "rnn")

REFERENCE_TO_SGLANG = {
    "W1.weight": "markov_w1.weight",
    "W2.weight": "markov_w2.weight",
    "Wg.weight": "gate_proj.weight",
    "Wg.bias": "gate_proj.bias",
    "Wz.weight": "joint_proj.weight",
    "Wz.bias": "joint_proj.bias",
}


@dataclasses.dataclass(frozen=True)
class SGLangHead:
    """The handle ``MarkovBlock.load_head`` returns: SGLang's module and what it reads.

    Attributes:
        module: SGLang's head (``VanillaMarkov`` / ``GatedMarkovHead`` / ``RNNHead``).
        head_type: ``"vanilla"``, ``"gated"`` or ``"rnn"``.
        hidden_size: ``d`` of the step hidden states (gated / rnn), else None.
    """

    module: torch.nn.Module
    head_type: str
    hidden_size: int | None

    @property
    def needs_hidden(self) -> bool:
        return self.head_type != "vanilla"


def load_head(
    heads_module: types.ModuleType,
    head_type: str,
    state_dict: Mapping[str, torch.Tensor],
    vocab_size: int,
    rank: int,
    hidden_size: int | None,
    device: torch.device,
) -> SGLangHead:
    """Build SGLang's head of ``head_type`` and load reference-layout weights into it.

    Args:
        heads_module: ``sglang.srt.models.dspark`` as loaded by the loader.
        head_type: ``"vanilla"``, ``"gated"`` or ``"rnn"``.
        state_dict: reference layout (see the module table); the dtype of ``W1.weight``
            becomes the head's dtype.
        vocab_size, rank, hidden_size: ``V``, ``r``, ``d`` (``d`` unused by vanilla).
        device: where the head lives.
    Returns:
        :class:`SGLangHead` around SGLang's module (eval mode, on ``device``).
    Raises:
        ValueError: unknown ``head_type``, ``rank <= 0`` (SGLang's own error), or keys
            that do not match the head (names the missing / unexpected keys).
    """
    check_choice("head_type", head_type, HEAD_TYPES)
    check_int("vocab_size", vocab_size, minimum=1)
    if hidden_size is not None:
        check_int("hidden_size", hidden_size, minimum=0)
    config = types.SimpleNamespace(
        markov_rank=rank, markov_head_type=head_type, vocab_size=vocab_size, hidden_size=hidden_size or 0
    )
    head = heads_module.build_markov_head(config)
    translated = {}
    for key, tensor in state_dict.items():
        if key not in REFERENCE_TO_SGLANG:
            raise ValueError(
                f"state_dict: unexpected key {key!r} for a {head_type} head; expected "
                f"reference keys among {sorted(REFERENCE_TO_SGLANG)}"
            )
        translated[REFERENCE_TO_SGLANG[key]] = tensor
    expected = set(head.state_dict())
    if set(translated) != expected:
        raise ValueError(
            f"state_dict: SGLang's {type(head).__name__} takes {sorted(expected)}, got (translated) "
            f"{sorted(translated)}"
        )
    dtype = state_dict["W1.weight"].dtype
    head = head.to(device=device, dtype=dtype)
    head.load_state_dict(translated, strict=True)
    return SGLangHead(head.eval(), head_type, hidden_size if head_type != "vanilla" else None)

