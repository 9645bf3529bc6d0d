"""Base logits and the eager draft proposal (SPEC S1, with S2 and S3).

The draft backbone runs once over a block (anchor-as-first-position layout) and yields
hidden states ``h[B, gamma, d]``; the target's frozen LM head turns them into base logits
``U[B, gamma, V]``; the Markov head then draws the block left to right with the step
sampler. ``propose_block`` is that whole eager path; ``folded.py`` is its CUDA-graph form.
``draft_block`` is the block draw under the other layouts and draft vocabularies of SPEC S1
(:mod:`dspark_ref.layouts`): bonus-anchor blocks, padded and reduced draft vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F

from dspark_ref._checks import (
    FLOAT_DTYPES,
    INT_DTYPES,
    check_int,
    check_same_device,
    check_tensor,
    check_token_ids,
)
from dspark_ref.layouts import block_positions, check_d2t, lift_to_target
from dspark_ref.markov import BlockSample, MarkovHead, StepSampler, sample_block
from dspark_ref.sampling import clamp_temperature, sample_step

__all__ = ["DraftProposal", "base_logits", "propose_block", "draft_block"]


@dataclass(frozen=True)
class DraftProposal:
    """An eagerly drafted block, everything verification needs (SPEC S5 inputs).

    Attributes:
        tokens: ``[B, gamma]`` int64 draft tokens ``x_0 .. x_{gamma-1}``.
        corrected_logits: ``[B, gamma, V]`` float32, the logits the tokens were drawn from.
        greedy_mask: ``[B]`` bool, rows drawn by argmax.
        temperatures: ``[B]`` float32, clamped to ``>= 1e-5``, used by the sampling rows.
    """

    tokens: Tensor
    corrected_logits: Tensor
    greedy_mask: Tensor
    temperatures: Tensor


def base_logits(hidden: Tensor, lm_head_weight: Tensor, org_vocab_size: int) -> Tensor:
    """Base logits ``U = h @ W_lm.T`` cropped to the unpadded vocabulary (SPEC S1).

    Args:
        hidden: ``[B, gamma, d]`` float hidden states of the draft backbone.
        lm_head_weight: ``[V_pad, d]`` the target's LM head, same dtype as ``hidden``;
            rows ``>= org_vocab_size`` are padding (e.g. after a tensor-parallel gather).
        org_vocab_size: ``V``, ``1 <= V <= V_pad``.
    Returns:
        ``[B, gamma, V]`` in the dtype of ``hidden`` (a view of the padded product).
    Raises:
        TypeError: non-float tensors, dtypes differ, ``org_vocab_size`` not an int.
        ValueError: wrong ranks, hidden sizes differ, ``org_vocab_size`` out of range,
            devices differ.

    Example:
        >>> base_logits(torch.ones(1, 2, 3), torch.eye(4, 3), 2)
        tensor([[[1., 1.],
                 [1., 1.]]])
    """
    _check_base_logits(hidden, lm_head_weight, org_vocab_size)
    return F.linear(hidden, lm_head_weight)[..., :org_vocab_size]


@torch.no_grad()
def propose_block(
    head: MarkovHead,
    hidden: Tensor,
    lm_head_weight: Tensor,
    org_vocab_size: int,
    anchor: Tensor,
    temperatures: Tensor,
    greedy_mask: Tensor,
    *,
    generator: torch.Generator | None = None,
) -> DraftProposal:
    """Draft one block eagerly: base logits, then one ``sample_block`` pass (SPEC S1-S3).

    Every step draws fresh exponential-race noise from ``generator`` (greedy rows take
    the argmax, lowest index among ties).

    Args:
        head: the Markov head (``head.vocab_size == org_vocab_size``).
        hidden, lm_head_weight, org_vocab_size: as ``base_logits``.
        anchor: ``x0[B]`` int64 / int32, the last committed token.
        temperatures: ``[B]`` float, values ``>= 0`` (clamped to ``1e-5``).
        greedy_mask: ``[B]`` bool, True for greedy rows.
        generator: optional ``torch.Generator`` on the tensors' device.
    Returns:
        ``DraftProposal`` with ``tokens[B, gamma]`` and ``corrected_logits[B, gamma, V]``.
    Raises:
        TypeError / ValueError: as ``base_logits`` and ``sample_block``; also naming
            ``anchor``, ``temperatures`` (NaN, negative), ``greedy_mask`` or
            ``org_vocab_size`` (not ``head.vocab_size``) on bad input.
    """
    _check_propose(head, hidden, org_vocab_size, anchor, temperatures, greedy_mask, generator)
    temps = clamp_temperature(temperatures)
    logits = base_logits(hidden, lm_head_weight, org_vocab_size)

    def sampler(step_logits: Tensor, k: int) -> Tensor:
        return sample_step(step_logits, temps, greedy_mask, generator=generator)

    block = sample_block(head, logits, anchor, hidden, sampler)
    return DraftProposal(block.tokens, block.corrected_logits, greedy_mask, temps)


@torch.no_grad()
def draft_block(
    head: MarkovHead,
    base_logits: Tensor,
    first_prev: Tensor,
    hidden: Tensor | None,
    sampler: StepSampler,
    *,
    layout: str = "anchor-first",
    vocab_size: int | None = None,
    d2t: Tensor | None = None,
) -> BlockSample:
    """Draw a block under any SPEC S1 layout and draft vocabulary.

    1. Layout: the positions that predict (:func:`dspark_ref.layouts.block_positions`): all
       ``Q = gamma`` of them (anchor-first) or ``Q = gamma + 1`` with the anchor's cropped,
       from the base logits and the hidden states alike (bonus-anchor).
    2. Vocabulary, with ``V_d`` the base logits' width and ``V = vocab_size``: ``V_d == V``
       as is; ``V_d > V`` without ``d2t``: padding, every step's logits cropped to ``V``
       before the sampler sees them; ``d2t [V_d]``: a reduced vocabulary, each drawn draft
       id mapped to its target id before it is stored and before it conditions the next
       step (:func:`dspark_ref.markov.sample_block`), the corrected block lifted to the
       target's ``V`` columns with ``-inf`` elsewhere.

    Args:
        head: a ``MarkovHead`` with ``head.vocab_size == V_d`` and ``head.prev_vocab_size == V``.
        base_logits: ``[B, Q, V_d]`` float base logits of the backbone's positions.
        first_prev: ``x0[B]`` int64 / int32 target ids.
        hidden: ``[B, Q, d]`` hidden states (gated / rnn heads) or None.
        sampler: ``StepSampler`` over the step's (cropped) logits.
        layout: ``"anchor-first"`` or ``"bonus-anchor"``.
        vocab_size: the target's ``V`` (default ``V_d``).
        d2t: optional ``[V_d]`` int64 draft-to-target map (:func:`dspark_ref.layouts.check_d2t`).
    Returns:
        ``BlockSample(tokens[B, gamma] int64 target ids, corrected_logits[B, gamma, V] float32)``.
    Raises:
        TypeError / ValueError: as :func:`dspark_ref.markov.sample_block`; an unknown
            ``layout``; ``V_d < V`` without ``d2t``; a ``d2t`` that fails validation;
            ``head.prev_vocab_size != V``; ``hidden`` with another number of positions.
    """
    _check_draft_block(head, base_logits, hidden, vocab_size, d2t)
    vocab = base_logits.shape[-1] if vocab_size is None else vocab_size
    logits = block_positions(base_logits, layout)
    states = None if hidden is None else block_positions(hidden, layout)
    padded = d2t is None and base_logits.shape[-1] > vocab

    def cropped(step_logits: Tensor, k: int) -> Tensor:
        return sampler(step_logits[:, :vocab] if padded else step_logits, k)

    block = sample_block(head, logits, first_prev, states, cropped, d2t=d2t)
    corrected = block.corrected_logits
    if padded:
        corrected = corrected[..., :vocab]
    elif d2t is not None:
        corrected = lift_to_target(corrected, d2t, vocab)
    return BlockSample(block.tokens, corrected)


def _check_draft_block(head, base_logits, hidden, vocab_size, d2t) -> None:
    if not isinstance(head, MarkovHead):
        raise TypeError(f"head: expected a MarkovHead, got {type(head).__name__}")
    check_tensor("base_logits", base_logits, ndim=3, dtypes=FLOAT_DTYPES)
    rows, queries, draft_vocab = base_logits.shape
    vocab = draft_vocab if vocab_size is None else check_int("vocab_size", vocab_size, minimum=1)
    if hidden is not None and tuple(hidden.shape[:2]) != (rows, queries):
        raise ValueError(f"hidden: expected [B, Q, d] with [B, Q] = [{rows}, {queries}] (the base logits' "
                         f"positions), got shape {tuple(hidden.shape)}")
    if d2t is not None:
        check_d2t(d2t, draft_vocab, vocab)
    elif draft_vocab < vocab:
        raise ValueError(f"d2t: a draft vocabulary of {draft_vocab} < vocab_size {vocab} needs a draft-to-target "
                         "map, got None")
    if head.prev_vocab_size != vocab:
        raise ValueError(f"head: expected W1 over the target vocabulary (prev_vocab_size = {vocab}), got "
                         f"{head.prev_vocab_size}")


def _check_base_logits(hidden, lm_head_weight, org_vocab_size) -> None:
    check_tensor("hidden", hidden, ndim=3, dtypes=FLOAT_DTYPES)
    check_tensor("lm_head_weight", lm_head_weight, shape=(None, hidden.shape[-1]), dtypes=(hidden.dtype,))
    check_int("org_vocab_size", org_vocab_size, minimum=1, maximum=lm_head_weight.shape[0])
    check_same_device(hidden=hidden, lm_head_weight=lm_head_weight)


def _check_propose(head, hidden, org_vocab_size, anchor, temperatures, greedy_mask, generator) -> None:
    if not isinstance(head, MarkovHead):
        raise TypeError(f"head: expected a MarkovHead, got {type(head).__name__}")
    if org_vocab_size != head.vocab_size:
        raise ValueError(f"org_vocab_size: expected head.vocab_size = {head.vocab_size}, got {org_vocab_size!r}")
    check_tensor("hidden", hidden, ndim=3, dtypes=FLOAT_DTYPES)
    rows = hidden.shape[0]
    check_tensor("anchor", anchor, shape=(rows,), dtypes=INT_DTYPES)
    check_tensor("temperatures", temperatures, shape=(rows,), dtypes=FLOAT_DTYPES)
    check_tensor("greedy_mask", greedy_mask, shape=(rows,), dtypes=(torch.bool,))
    check_same_device(hidden=hidden, anchor=anchor, temperatures=temperatures, greedy_mask=greedy_mask)
    check_token_ids("anchor", anchor, head.vocab_size)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
