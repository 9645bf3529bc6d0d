"""Conformance tests for SPEC S1: base logits in the anchor-as-first-position layout.

What reaches a DSpark sampler of S1 is the layout, not the projection: engines compute
``U = h @ W_lm.T`` and crop it to ``org_vocab_size`` inside the model forward (with their
tensor-parallel LM head), so the contract takes base logits ``U[B, gamma, V]`` as input
and no capability projects hidden states. These cases check that the base logits of
position ``k`` drive step ``k`` (the anchor is position 0 and every position predicts, no
shift) and reach the corrected logits unchanged, through the eager block sampler
(:class:`~conformance.contract.MarkovBlock`) and the folded sampler
(:class:`~conformance.contract.FoldedDraft`): under a zero Markov head the bias is exactly
0, so ``L_k = U_k`` bit for bit and greedy rows take ``argmax U_k``. No rounding happens in
any order of that arithmetic (every product is 0, ``U + 0 = U``, a bf16 ``U`` is exact in
float32), so the comparison stays exact under SPEC S0.

To add a case: add ``case(...): parameters`` to the dict of its family below.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import case, case_id
from conformance.contract import FoldedDraft, Inconclusive, MarkovBlock
from conformance.suite.support.blocks import (
    check_block_shapes,
    check_greedy_rows,
    input_generator,
    load_random_head,
    random_block_inputs,
    row_params,
    sub_seed,
)

BATCH, GAMMA, VOCAB, RANK, HIDDEN = 4, 5, 97, 4, 6
GREEDY = [True, False, True, False]


def zero_head(iut, head_type, case_seed, device):
    """A head with all weights 0: its bias is exactly 0 at every step (all three types)."""
    head, _ = load_random_head(iut, head_type, vocab=VOCAB, rank=RANK, hidden_size=HIDDEN,
                               seed=sub_seed(case_seed, "head"), device=device, scale=0.0)
    return head


def check_layout(case, tokens, corrected, base):
    check_block_shapes(case, tokens, corrected, BATCH, GAMMA, VOCAB)
    expected = base.to(corrected.dtype)
    shifted = [k for k in range(GAMMA) if not torch.equal(corrected[:, k], expected[:, k])]
    assert not shifted, (
        f"{case.id}: under a zero Markov head the corrected logits of step {shifted[0]} differ "
        f"from the base logits of position {shifted[0]}; step k must read position k (anchor "
        f"first, every position predicts)"
    )
    check_greedy_rows(case, tokens, base.float(), [i for i, g in enumerate(GREEDY) if g], "base logits")


EAGER_CASES = {
    case(f"S1/layout/anchor-first-eager-{head_type}", "eager sample_block: step k reads U_k unshifted",
         ["S1.base-logits"]): head_type
    for head_type in ("vanilla", "rnn")
}


@pytest.mark.parametrize("case", EAGER_CASES, ids=case_id)
def test_S1_eager_block_reads_position_k_at_step_k(case, require, case_seed, case_generator, dspark_device):
    iut = require(MarkovBlock)
    head_type = EAGER_CASES[case]
    head = zero_head(iut, head_type, case_seed, dspark_device)
    base, first_prev, hidden = random_block_inputs(head_type, batch=BATCH, gamma=GAMMA, vocab=VOCAB,
                                                   hidden_size=HIDDEN, generator=input_generator(case_seed),
                                                   device=dspark_device)
    temps, top_k = row_params(GREEDY, 1.0, dspark_device)

    tokens, corrected = iut.sample_block(head, base, first_prev, hidden, temps, top_k, case_generator)

    check_layout(case, tokens, corrected, base)


FOLDED_CASES = {
    case(f"S1/layout/anchor-first-folded-{name}", "folded proposal: corrected_out of step k is U_k",
         ["S1.base-logits"]): dtype
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))
}


@pytest.mark.parametrize("case", FOLDED_CASES, ids=case_id)
def test_S1_folded_block_reads_position_k_at_step_k(case, require, case_seed, dspark_device):
    markov, folded = require(MarkovBlock), require(FoldedDraft)
    lm_dtype = FOLDED_CASES[case]
    head = zero_head(markov, "rnn", case_seed, dspark_device)
    base, first_prev, hidden = random_block_inputs("rnn", batch=BATCH, gamma=GAMMA, vocab=VOCAB, hidden_size=HIDDEN,
                                                   generator=input_generator(case_seed), device=dspark_device)
    base, hidden = base.to(lm_dtype), hidden.to(lm_dtype)
    temps, top_k = row_params(GREEDY, 1.0, dspark_device)
    session = folded.session(head, BATCH, GAMMA, VOCAB, lm_dtype, dspark_device, sub_seed(case_seed, "session"))

    session.load_inputs(base, first_prev, hidden)
    session.stage(BATCH, temps, top_k)
    session.capture()
    tokens, corrected = session.replay()

    if dspark_device.type == "cuda" and session.graph_replays == 0:
        raise Inconclusive(f"{case.id}: the folded session never replayed a captured CUDA graph")
    check_layout(case, tokens, corrected, base)
