"""dspark-mlx's Markov head built from the contract's reference-layout weights.

dspark-mlx ships one Markov head, ``model.heads.DSparkMarkovHead``: the vanilla first-order
head (SPEC S2), ``bias(prev) = markov_w2(markov_w1[prev])`` with ``markov_w1`` an
``nn.Embedding(V, r)`` and ``markov_w2`` an ``nn.Linear(r, V)``, the reference's ``W1 [V, r]``
and ``W2 [V, r]`` as they are. It has no gated or rnn head: those raise
``NotImplementedError`` (a skip naming the head).

``draft_block_decode`` also scores every step with a confidence head; the Markov capabilities
ignore that score, so the handle carries a zero ``DSparkConfidenceHead`` over the Markov
embedding alone (``conf_hidden`` of width 0).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch

from conformance.adapters.mlx_arrays import to_mx
from conformance.adapters.mlx_engine import MLXEngine

__all__ = ["HEAD_TYPES", "MarkovHandle", "load_markov_head"]

HEAD_TYPES = ("vanilla",)


@dataclasses.dataclass(frozen=True)
class MarkovHandle:
    """A loaded head: ``markov`` (``DSparkMarkovHead``), ``confidence`` (the zero
    ``DSparkConfidenceHead`` ``draft_block_decode`` needs), ``rank`` and ``vocab_size``."""

    markov: Any
    confidence: Any
    rank: int
    vocab_size: int


def load_markov_head(engine: MLXEngine, head_type: str, state_dict: Mapping[str, torch.Tensor], vocab_size: int,
                     rank: int, dtype: torch.dtype = torch.float32) -> MarkovHandle:
    """dspark-mlx's ``DSparkMarkovHead`` holding ``W1.weight [V, r]`` / ``W2.weight [V, r]`` in
    ``dtype`` (float32 or bfloat16).

    The head is built before the weights are checked, so a bad ``vocab_size`` or ``rank``
    meets dspark-mlx's own handling (MLX's layer initialisers), not the adapter's.

    Raises:
        NotImplementedError: ``head_type`` is not ``"vanilla"`` (dspark-mlx ships no other).
        ValueError: ``W1.weight`` / ``W2.weight`` missing or not ``[vocab_size, rank]``.
    """
    if head_type not in HEAD_TYPES:
        raise NotImplementedError(f"dspark-mlx ships only the vanilla Markov head (model/heads.py), not {head_type!r}")
    mx, heads = engine.mx, engine["heads"]
    markov = heads.DSparkMarkovHead(vocab_size, rank)  # first: the engine's own checks of V and r (finding D1)
    shapes = {name: tuple(state_dict[name].shape) for name in ("W1.weight", "W2.weight") if name in state_dict}
    if shapes != {"W1.weight": (vocab_size, rank), "W2.weight": (vocab_size, rank)}:
        raise ValueError(f"state_dict: expected W1.weight and W2.weight of shape [{vocab_size}, {rank}], got {shapes}")
    markov.load_weights([("markov_w1.weight", to_mx(mx, state_dict["W1.weight"].to(dtype))),
                         ("markov_w2.weight", to_mx(mx, state_dict["W2.weight"].to(dtype)))])
    confidence = heads.DSparkConfidenceHead(rank)
    confidence.load_weights([("proj.weight", mx.zeros((1, rank)))])
    return MarkovHandle(markov, confidence, rank, vocab_size)
