"""Markov-block harness of the S1, S2, S4 and S9-round tests: random heads in the reference
layout (:func:`conformance.inputs.markov_head_state`) loaded into the IUT, block inputs, row
parameters, shape and greedy checks, the assertion against the float64 SPEC S2 oracle
(:mod:`conformance.oracles.markov_block`), the law cases' setup and the block-law cases'
head and rows (:mod:`conformance.oracles.block_law`). It shares no code with ``dspark_ref``.
"""

from __future__ import annotations

import pytest
import torch

from conformance.inputs import MARKOV_HEAD_TYPES as HEAD_TYPES
from conformance.inputs import NO_TOP_K_CUT, markov_head_state
from conformance.inputs.seeding import input_generator, sub_seed
from conformance.oracles import block_law
from conformance.oracles.markov_block import UNIT_ROUNDOFF, joint_law



# ----------------------------------------------------------------------------- helpers
def load_random_head(iut, head_type, *, vocab, rank, hidden_size, seed, device, scale=0.5):
    """A random head in the reference layout, loaded into the IUT: ``(handle, state_dict)``.
    An IUT that does not ship ``head_type`` (``load_head`` raises ``NotImplementedError``)
    is a skip naming the head."""
    weights = torch.Generator().manual_seed(seed)
    state = markov_head_state(head_type, vocab, rank, hidden_size, weights, scale=scale)
    state = {name: tensor.to(device) for name, tensor in state.items()}
    try:
        return iut.load_head(head_type, state, vocab, rank, hidden_size, device), state
    except NotImplementedError as exc:
        pytest.skip(f"MarkovBlock: {head_type} head not supported by this IUT ({exc})")


def draft_vocab_head_state(head_type, *, vocab, draft_vocab, rank, hidden_size, seed, device, scale=0.5):
    """Reference-layout weights of a head for a draft vocabulary (SPEC S1): ``W1.weight
    [vocab, r]`` (conditioned on target ids), ``W2.weight [draft_vocab, r]`` (the bias over
    the draft vocabulary), the gate / cell as :func:`load_random_head`'s; all ``N(0, scale)``."""
    weights = torch.Generator().manual_seed(seed)
    state = markov_head_state(head_type, vocab, rank, hidden_size, weights, scale=scale)
    state["W2.weight"] = scale * torch.randn(draft_vocab, rank, generator=weights)
    return {name: tensor.to(device) for name, tensor in state.items()}


def random_block_inputs(head_type, *, batch, gamma, vocab, hidden_size, generator, device, scale=1.0):
    """``(base_logits[B, gamma, V] f32, first_prev[B] i64, hidden[B, gamma, d] | None)``."""
    base = scale * torch.randn(batch, gamma, vocab, generator=generator)
    first_prev = torch.randint(vocab, (batch,), generator=generator)
    hidden = torch.randn(batch, gamma, hidden_size, generator=generator) if head_type != "vanilla" else None
    return base.to(device), first_prev.to(device), None if hidden is None else hidden.to(device)


def repeat_rows(tensor: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """``n`` copies of a one-row tensor ``[1, ...]`` as ``[n, ...]`` (None stays None)."""
    return None if tensor is None else tensor.expand(n, *tensor.shape[1:]).contiguous()


def prev_tokens(first_prev: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Teacher-forcing inputs ``[x0, x_0 .. x_{gamma-2}]`` of a drawn block ``tokens[B, gamma]``."""
    return torch.cat([first_prev[:, None], tokens[:, :-1]], dim=1)


def row_params(greedy: list[bool], temperature: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(temperatures[B] f32, top_k[B] i64)``: greedy rows (T = 0, top_k = 1), the others
    sampling at ``temperature`` with no top-k cut (the same rows under either greedy rule)."""
    greedy_t = torch.tensor(greedy)
    temps = torch.where(greedy_t, 0.0, temperature).to(torch.float32)
    top_k = torch.where(greedy_t, 1, NO_TOP_K_CUT).to(torch.int64)
    return temps.to(device), top_k.to(device)


def check_block_shapes(case, tokens, corrected, batch, gamma, vocab):
    assert tokens.dtype == torch.int64 and tuple(tokens.shape) == (batch, gamma), (
        f"{case.id}: expected tokens int64 [{batch}, {gamma}], got {tokens.dtype} {tuple(tokens.shape)}"
    )
    assert tuple(corrected.shape) == (batch, gamma, vocab), (
        f"{case.id}: expected corrected logits [{batch}, {gamma}, {vocab}], got {tuple(corrected.shape)}"
    )
    assert bool(((tokens >= 0) & (tokens < vocab)).all()), f"{case.id}: token ids outside [0, {vocab})"


def check_greedy_rows(case, tokens, logits, rows, what="corrected logits"):
    """Greedy rows took the argmax (lowest index on ties) of ``logits`` at every step."""
    argmax = logits[rows].argmax(dim=-1)
    bad = (tokens[rows] != argmax).nonzero()
    assert bad.numel() == 0, (
        f"{case.id}: greedy row {rows[int(bad[0, 0])]} step {int(bad[0, 1])} drew token "
        f"{int(tokens[rows][tuple(bad[0])])}, but the argmax of its {what} is {int(argmax[tuple(bad[0])])}"
    )


def assert_within_oracle(case, got, expected, bound, what):
    """``|got - expected| <= bound + u_out |expected|`` (``u_out``: rounding into got's dtype)."""
    got = got.detach().to("cpu", torch.float64)
    if got.dtype != torch.float32:
        bound = bound + UNIT_ROUNDOFF.get(got.dtype, 0.0) * expected.abs()
    error = (got - expected).abs()
    worst = int(torch.argmax(error - bound))
    assert bool((error <= bound).all()), (
        f"{case.id}: {what} differ from the float64 SPEC S2 formula beyond the float32 error "
        f"bound at flat index {worst}: got {got.flatten()[worst].item()!r}, expected "
        f"{expected.flatten()[worst].item()!r} (bound {bound.flatten()[worst].item():.3g})"
    )


# ----------------------------------------------------------------------------- block law
LAW_VOCAB, LAW_RANK, LAW_HIDDEN, LAW_TEMPERATURE = 8, 4, 4, 0.8
#: Weight scale of the law cases' heads: large enough that the bias moves the law by far
#: more than the detectable TV (a constant bias or a frozen rnn state is then visible).
LAW_HEAD_SCALE = 0.8


def law_setup(iut, head_type, case_seed, device):
    """One row's inputs for the law cases and the exact law of its ``(x_0, x_1)``."""
    head, state = load_random_head(iut, head_type, vocab=LAW_VOCAB, rank=LAW_RANK, hidden_size=LAW_HIDDEN,
                                   seed=sub_seed(case_seed, "head"), device=device, scale=LAW_HEAD_SCALE)
    base, anchor, hidden = random_block_inputs(head_type, batch=1, gamma=2, vocab=LAW_VOCAB,
                                               hidden_size=LAW_HIDDEN, generator=input_generator(case_seed),
                                               device=device)
    law = joint_law(head_type, state, base, int(anchor), hidden, LAW_TEMPERATURE)
    return head, base, anchor, hidden, law


def pair_counts(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """Counts of ``x_0 * V + x_1`` over the rows of ``tokens[n, >= 2]``."""
    return torch.bincount((tokens[:, 0] * vocab + tokens[:, 1]).cpu(), minlength=vocab * vocab)


# ----------------------------------------------------------------------------- block-law cases
def load_block_law_head(capability: str, iut, inputs: block_law.BlockLawInputs, head_type: str, device, *args):
    """``inputs.state`` loaded through ``iut.load_head(head_type, state, V, r, d, device,
    *args)`` (a :class:`~conformance.contract.MarkovBlock` or, with the dtype in ``args``, a
    :class:`~conformance.contract.SpeculativeRound`); a head the IUT does not ship is a skip
    naming ``capability`` and the head."""
    state = {name: tensor.to(device) for name, tensor in inputs.state.items()}
    try:
        return iut.load_head(head_type, state, block_law.BLOCK_VOCAB, block_law.BLOCK_RANK, block_law.BLOCK_HIDDEN,
                             device, *args)
    except NotImplementedError as exc:
        pytest.skip(f"{capability}: {head_type} head not supported by this IUT ({exc})")


def block_law_rows(inputs: block_law.BlockLawInputs, n: int, device) -> list:
    """``[base [n, gamma, V], anchor [n], hidden [n, gamma, d] | None]``: ``n`` copies of the
    row on ``device``."""
    return [repeat_rows(None if t is None else t.to(device), n) for t in (inputs.base, inputs.anchor, inputs.hidden)]
