"""mlx-dspark's ``DSparkDrafter`` built around the contract's reference-layout Markov weights.

mlx-dspark's block samplers are methods of its drafter (``model.DSparkDrafter``):
``sample_block`` (greedy), ``sample_block_probs`` (sampled, with its draft law q and top-k /
top-p), ``to_target_ids`` / ``widen_to_target`` (reduced vocabularies), ``head_slice`` (the
anchor slot of DFlash-lineage heads). The adapter builds a real drafter from a
``config.DSparkConfig`` whose Markov head is the contract's (``markov_rank = r``, ``vocab_size =
V``, ``draft_vocab_size = V_d`` for a reduced vocabulary, ``logits_start`` 0 or 1) and whose
backbone is empty (``num_hidden_layers = 0``, ``hidden_size = 1``): the suite feeds base logits,
so no attention layer is built or run (mlx-vlm's rope is never reached; :mod:`.loader`).

mlx-dspark ships one Markov head, ``model.VanillaMarkov`` (``step_bias(prev) =
markov_w2(markov_w1[prev])``, the reference's ``W1 [V, r]`` / ``W2 [V_d, r]`` as they are);
gated and rnn heads raise ``NotImplementedError``. ``markov_rank <= 0`` builds a drafter with no
Markov head at all (finding M1).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch

from conformance.adapters.mlx_arrays import to_mx
from conformance.adapters.mlx_engine import MLXEngine

__all__ = ["HEAD_TYPES", "build_drafter", "corrected_step"]

HEAD_TYPES = ("vanilla",)


def build_drafter(engine: MLXEngine, head_type: str, state_dict: Mapping[str, torch.Tensor], vocab_size: int,
                  rank: int, *, draft_vocab_size: int | None = None, d2t: torch.Tensor | None = None,
                  logits_start: int = 0, dtype: torch.dtype = torch.float32):
    """A ``DSparkDrafter`` holding ``W1.weight [V, r]`` / ``W2.weight [V_d, r]`` (in ``dtype``);
    ``d2t [V_d]`` (target ids) goes in as the offsets mlx-dspark's checkpoints store
    (``set_draft_vocab_map``: ``target = draft + offset``), unchecked, as mlx-dspark takes it.

    Raises:
        NotImplementedError: ``head_type`` is not ``"vanilla"``.
        ValueError: ``W1.weight`` / ``W2.weight`` missing or of the wrong shape for a drafter
            that has a Markov head.
    """
    if head_type not in HEAD_TYPES:
        raise NotImplementedError(f"mlx-dspark ships only the vanilla Markov head (model.VanillaMarkov), not "
                                  f"{head_type!r}")
    config = engine["config"].DSparkConfig(
        family="qwen3", hidden_size=1, intermediate_size=1, num_hidden_layers=0, target_layer_ids=[0],
        vocab_size=vocab_size, draft_vocab_size=draft_vocab_size, markov_rank=rank, markov_head_type=head_type,
        logits_start=logits_start, enable_confidence_head=False, final_logit_softcapping=None,
    )
    drafter = engine["model"].DSparkDrafter(config)
    if drafter.markov_head is not None:
        out_vocab = draft_vocab_size or vocab_size
        shapes = {name: tuple(state_dict[name].shape) for name in ("W1.weight", "W2.weight") if name in state_dict}
        if shapes != {"W1.weight": (vocab_size, rank), "W2.weight": (out_vocab, rank)}:
            raise ValueError(f"state_dict: expected W1.weight [{vocab_size}, {rank}] and W2.weight [{out_vocab}, "
                             f"{rank}], got {shapes}")
        mx = engine.mx
        drafter.markov_head.load_weights([("markov_w1.weight", to_mx(mx, state_dict["W1.weight"].to(dtype))),
                                          ("markov_w2.weight", to_mx(mx, state_dict["W2.weight"].to(dtype)))])
    if d2t is not None:
        offsets = d2t.detach().cpu().to(torch.int64) - torch.arange(d2t.numel())
        drafter.set_draft_vocab_map(engine.mx.array(offsets.numpy().astype(np.int32)))
    return drafter


def corrected_step(engine: MLXEngine, drafter, base_row, prev):
    """``base_row [V_d] + step_bias(prev)[0]`` (mx): the corrected logits of one block step, the
    sum ``sample_block`` / ``sample_block_probs`` form (``base_logits[i] +
    markov_head.step_bias(prev)[0]``); ``base_row`` itself without a Markov head."""
    if drafter.markov_head is None:
        return base_row
    return base_row + drafter.markov_head.step_bias(engine.mx.array([prev]))[0]
