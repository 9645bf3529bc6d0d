"""Block layouts and draft vocabularies (SPEC S1).

Layouts: in ``anchor-first`` (the default) the backbone runs over the anchor plus
``gamma - 1`` mask tokens and all ``gamma`` positions predict; in ``bonus-anchor``
(``sample_from_anchor = False``) it runs over the anchor plus ``gamma`` queries and the
anchor's position is cropped, so ``gamma = block - 1``.

Draft vocabularies: the draft's logits may be wider than the target's ``V`` (padding, e.g.
after a tensor-parallel gather): they are cropped to ``V``, never remapped. Or the draft
may have a reduced vocabulary ``V_d < V`` with a draft-to-target map ``d2t[V_d]`` (target
id of each draft id, injective): sampled draft ids are mapped to target ids before they
are stored and before they condition the next Markov step, and the corrected block is
lifted to the target's columns, ``-inf`` elsewhere. (vLLM stores ``d2t`` as offsets,
``target = j + d2t[j]``; here it is the target id itself.)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dspark_ref._checks import FLOAT_DTYPES, INT_DTYPES, check_choice, check_int, check_tensor

__all__ = ["LAYOUTS", "block_positions", "check_d2t", "lift_to_target"]

LAYOUTS = ("anchor-first", "bonus-anchor")


def block_positions(values: Tensor, layout: str) -> Tensor:
    """The positions of a backbone output that predict the block's drafts (SPEC S1).

    Args:
        values: ``[B, Q, ...]`` per-position values (hidden states or base logits).
        layout: ``"anchor-first"`` (all ``Q = gamma`` positions) or ``"bonus-anchor"``
            (``Q = gamma + 1``; position 0, the anchor's, is cropped).
    Returns:
        ``[B, gamma, ...]``, a view of ``values``.
    Raises:
        TypeError: ``values`` not a tensor.
        ValueError: unknown ``layout``; rank below 2; a bonus-anchor block with ``Q = 0``.

    Example:
        >>> block_positions(torch.arange(6.0).reshape(1, 3, 2), "bonus-anchor").tolist()
        [[[2.0, 3.0], [4.0, 5.0]]]
    """
    check_choice("layout", layout, LAYOUTS)
    check_tensor("values", values)
    if values.dim() < 2:
        raise ValueError(f"values: expected [B, Q, ...], got shape {tuple(values.shape)}")
    if layout == "anchor-first":
        return values
    if values.shape[1] == 0:
        raise ValueError("values: a bonus-anchor block has the anchor plus gamma queries (Q >= 1), got Q = 0")
    return values[:, 1:]


def check_d2t(d2t: Tensor, draft_vocab_size: int, vocab_size: int) -> None:
    """Validate a draft-to-target map (SPEC S1).

    Args:
        d2t: ``[V_d]`` int64 / int32, the target id of each draft id.
        draft_vocab_size: ``V_d >= 1``, the draft logits' width.
        vocab_size: the target's ``V >= V_d``.
    Raises:
        TypeError: ``d2t`` not an integer tensor.
        ValueError: length not ``V_d``, ``V_d > V``, a value outside ``[0, V)``, or two
            draft ids mapped to one target id (each message names ``d2t``).
    """
    check_int("draft_vocab_size", draft_vocab_size, minimum=1)
    check_int("vocab_size", vocab_size, minimum=draft_vocab_size)
    check_tensor("d2t", d2t, shape=(draft_vocab_size,), dtypes=INT_DTYPES)
    low, high = int(d2t.min()), int(d2t.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"d2t: expected target ids in [0, {vocab_size}), got values in [{low}, {high}]")
    unique = torch.unique(d2t)
    if unique.numel() != d2t.numel():
        counts = torch.bincount(d2t.long(), minlength=vocab_size)
        target = int(torch.argmax(counts))
        raise ValueError(f"d2t: expected distinct target ids, got {int(counts[target])} draft ids mapped to "
                         f"target id {target}")


def lift_to_target(logits: Tensor, d2t: Tensor, vocab_size: int) -> Tensor:
    """Lift draft-vocabulary logits to the target's columns, ``-inf`` elsewhere (SPEC S1).

    Args:
        logits: ``[..., V_d]`` float logits over the draft vocabulary.
        d2t: ``[V_d]`` a valid draft-to-target map (see :func:`check_d2t`).
        vocab_size: the target's ``V``.
    Returns:
        ``[..., V]`` in the dtype of ``logits``: ``out[..., d2t[j]] = logits[..., j]``.
    Raises:
        TypeError / ValueError: as :func:`check_d2t`; ``logits`` not float or not ``V_d`` wide.

    Example:
        >>> lift_to_target(torch.tensor([1.0, 2.0]), torch.tensor([3, 0]), 4).tolist()
        [2.0, -inf, -inf, 1.0]
    """
    check_tensor("logits", logits, dtypes=FLOAT_DTYPES)
    if logits.dim() < 1:
        raise ValueError("logits: expected [..., V_d], got a 0-D tensor")
    check_d2t(d2t, logits.shape[-1], vocab_size)
    out = logits.new_full((*logits.shape[:-1], vocab_size), -math.inf)
    out[..., d2t.long().to(logits.device)] = logits
    return out
