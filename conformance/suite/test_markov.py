"""Conformance tests for SPEC S2: Markov heads, block sampling and teacher forcing.

Covers, through :class:`~conformance.contract.MarkovBlock` only:

* teacher forcing (``apply_block_logits``) against a float64 oracle of each head's formula
  (vanilla, gated, rnn) written below, within a derived float32 error bound;
* ``sample_block`` against the IUT's own teacher forcing (one pass: tokens and logits
  agree): within the SPEC S0 bound of two float32 evaluations of the same block
  (:func:`~conformance.oracles.markov_block.compare_block_logits`; bit identity recorded
  apart), and greedy rows take the argmax of the corrected logits they return;
* the joint law of ``(x_0, x_1)`` of sampled blocks against the exact Markov-chain law
  (float64 enumeration over a small vocabulary), one chi-square per head;
* the whole block against the q it returns (``softmax(corrected / T)``, the law a verifier
  is handed), jointly over the block, at the effect of a drafter that samples from its
  corrected logits rounded to bfloat16 (``support.block_law``);
* edge cases: ``gamma = 0``, gated / rnn heads without hidden states, ``markov_rank <= 0``;
  the smallest valid sizes (``markov_rank = 1``, hidden size 1); base logits with ``-inf``
  columns (masked tokens stay ``-inf`` and are never drawn).

The oracle and the chain law are also the reference of ``test_folded.py`` (SPEC S4).
Heads travel in the reference layout built by ``conformance.inputs.markov_head_state``.

To add a case: add ``case(...): parameters`` to the dict of its family below (each dict maps
a registered :class:`~conformance.cases.Case` to what its test reads).
"""

from __future__ import annotations

import pytest
import torch

from conformance import stats
from conformance.cases import case, case_id
from conformance.contract import MarkovBlock
from conformance.oracles import block_law
from conformance.suite.support.blocks import (
    HEAD_TYPES,
    LAW_TEMPERATURE,
    LAW_VOCAB,
    NO_TOP_K_CUT,
    assert_within_oracle,
    block_law_rows,
    check_block_shapes,
    check_greedy_rows,
    law_setup,
    load_block_law_head,
    load_random_head,
    pair_counts,
    prev_tokens,
    random_block_inputs,
    repeat_rows,
    row_params,
)
from conformance.inputs.seeding import input_generator, sub_seed
from conformance.oracles.markov_block import compare_block_logits, oracle_block_logits

ORACLE_CASES = {
    case("S2/oracle/vanilla", "teacher forcing = W2(W1[prev]) + U in float64, float32 bound",
         ["S2.vanilla", "S2.teacher-forcing"]): ("vanilla", 5, 4, 50, 8, 6, torch.float32, 0.5),
    case("S2/oracle/gated", "teacher forcing = W2(sigmoid(Wg [h; W1[prev]] + bg) * W1[prev]) + U",
         ["S2.gated", "S2.teacher-forcing"]): ("gated", 5, 4, 50, 8, 6, torch.float32, 0.5),
    case("S2/oracle/rnn", "teacher forcing through the rnn cell, state carried, s_0 = 0",
         ["S2.rnn", "S2.teacher-forcing"]): ("rnn", 5, 4, 50, 8, 6, torch.float32, 0.5),
    # Weights near 1/sqrt(fan-in): the worst-case bound grows with the rnn state's
    # Jacobian over the block, so larger weights would make it too loose to mean anything.
    case("S2/oracle/rnn-block7", "rnn head, gamma 7, V 1000, r 32, d 24",
         ["S2.rnn", "S2.teacher-forcing"]): ("rnn", 3, 7, 1000, 32, 24, torch.float32, 0.15),
    case("S2/oracle/gated-bf16-base", "bf16 base logits: bias not rounded away (float32 bound "
         "plus one rounding into the output dtype)",
         ["S2.gated", "S2.teacher-forcing"]): ("gated", 4, 5, 300, 16, 12, torch.bfloat16, 0.5),
}


@pytest.mark.parametrize("case", ORACLE_CASES, ids=case_id)
def test_S2_teacher_forcing_matches_float64_oracle(case, require, case_seed, dspark_device):
    iut = require(MarkovBlock)
    head_type, batch, gamma, vocab, rank, d, dtype, scale = ORACLE_CASES[case]
    gen = input_generator(case_seed)
    head, state = load_random_head(iut, head_type, vocab=vocab, rank=rank, hidden_size=d,
                                   seed=sub_seed(case_seed, "head"), device=dspark_device, scale=scale)
    base, _, hidden = random_block_inputs(head_type, batch=batch, gamma=gamma, vocab=vocab, hidden_size=d,
                                          generator=gen, device=dspark_device, scale=2.0)
    base = base.to(dtype)
    prev = torch.randint(vocab, (batch, gamma), generator=gen).to(dspark_device)

    got = iut.apply_block_logits(head, base, prev, hidden)

    assert tuple(got.shape) == (batch, gamma, vocab), (
        f"{case.id}: expected corrected logits [{batch}, {gamma}, {vocab}], got {tuple(got.shape)}"
    )
    expected, bound = oracle_block_logits(head_type, state, base, prev, hidden)
    assert_within_oracle(case, got, expected, bound, "teacher-forced corrected logits")


# ----------------------------------------------------------------------------- teacher forcing
# case -> (head type, base dtype)
TEACHER_CASES = {
    case("S2/teacher-forcing/vanilla-mixed", "sample_block = apply_block_logits of its tokens, "
         "greedy rows take the argmax",
         ["S2.vanilla", "S2.sample-block", "S2.teacher-forcing", "S0.numerically-equal"]): ("vanilla", torch.float32),
    case("S2/teacher-forcing/gated-mixed", "as vanilla-mixed, gated head",
         ["S2.gated", "S2.sample-block", "S2.teacher-forcing", "S0.numerically-equal"]): ("gated", torch.float32),
    case("S2/teacher-forcing/rnn-mixed", "as vanilla-mixed, rnn head (state carried)",
         ["S2.rnn", "S2.sample-block", "S2.teacher-forcing", "S0.numerically-equal"]): ("rnn", torch.float32),
    case("S2/teacher-forcing/rnn-bf16-base", "bf16 base logits: the two paths still agree (SPEC S0 bound)",
         ["S2.rnn", "S2.sample-block", "S2.teacher-forcing", "S0.numerically-equal"]): ("rnn", torch.bfloat16),
}


@pytest.mark.parametrize("case", TEACHER_CASES, ids=case_id)
def test_S2_sample_block_equals_teacher_forcing(case, require, case_seed, case_generator, dspark_device,
                                                numeric_check):
    iut = require(MarkovBlock)
    head_type, dtype = TEACHER_CASES[case]
    batch, gamma, vocab, rank, d = 6, 5, 64, 8, 6
    greedy = [True, False, True, False, False, True]
    head, state = load_random_head(iut, head_type, vocab=vocab, rank=rank, hidden_size=d,
                               seed=sub_seed(case_seed, "head"), device=dspark_device)
    base, first_prev, hidden = random_block_inputs(
        head_type, batch=batch, gamma=gamma, vocab=vocab, hidden_size=d,
        generator=input_generator(case_seed), device=dspark_device,
    )
    base = base.to(dtype)
    temps, top_k = row_params(greedy, 0.9, dspark_device)

    tokens, corrected = iut.sample_block(head, base, first_prev, hidden, temps, top_k, case_generator)

    check_block_shapes(case, tokens, corrected, batch, gamma, vocab)
    prev = prev_tokens(first_prev, tokens)
    forced = iut.apply_block_logits(head, base, prev, hidden).detach()
    assert forced.dtype == corrected.dtype, (
        f"{case.id}: apply_block_logits returns {forced.dtype}, sample_block's corrected logits {corrected.dtype}"
    )
    numeric_check(compare_block_logits(
        case, "apply_block_logits of the drawn tokens against sample_block's corrected logits (do the tokens "
        "and the logits come from one pass with prev_k = x_(k-1)?)", forced, corrected, head_type, state, base,
        prev, hidden,
    ))
    check_greedy_rows(case, tokens, corrected, [i for i, g in enumerate(greedy) if g])


# ----------------------------------------------------------------------------- block law
# case -> head type
LAW_CASES = {
    case(f"S2/block-law/{head_type}-T0.8",
         f"joint law of (x_0, x_1) from sample_block equals the exact Markov chain ({head_type})",
         ["S2.sample-block", f"S2.{head_type}"], statistical=1): head_type
    for head_type in HEAD_TYPES
}
@pytest.mark.statistical
@pytest.mark.parametrize("case", LAW_CASES, ids=case_id)
def test_S2_block_law_matches_markov_chain(case, require, case_seed, case_generator, dspark_device, stat_check):
    iut = require(MarkovBlock)
    head_type = LAW_CASES[case]
    head, base, anchor, hidden, law = law_setup(iut, head_type, case_seed, dspark_device)
    n = stats.sample_size_for_tv(law)
    temps = torch.full((n,), LAW_TEMPERATURE, device=dspark_device)
    top_k = torch.full((n,), NO_TOP_K_CUT, dtype=torch.int64, device=dspark_device)
    rows = [repeat_rows(t, n) for t in (base, anchor, hidden)]

    tokens, _ = iut.sample_block(head, *rows, temps, top_k, case_generator)

    stat_check(stats.goodness_of_fit(pair_counts(tokens, LAW_VOCAB), law, name=case.id))


# ----------------------------------------------------------------------------- block law: handed-over q
# case -> head type
HANDED_OVER_LAW_CASES = {
    case("S2/block-law/handed-over-q-rnn", "the block x_0..x_2 sample_block draws follows the q of the corrected "
         "logits it returns (product of the per-step q along the drawn prefix), sized for TV "
         f"{block_law.MIN_TV} (bfloat16-rounded draws at |L| ~ {block_law.LOGIT_OFFSET:g})",
         ["S2.sample-block", "S2.rnn"], statistical=1): "rnn",
}


@pytest.mark.statistical
@pytest.mark.parametrize("case", HANDED_OVER_LAW_CASES, ids=case_id)
def test_S2_block_follows_the_q_it_returns(case, require, case_seed, case_generator, dspark_device, stat_check):
    iut = require(MarkovBlock)
    head_type = HANDED_OVER_LAW_CASES[case]
    inputs = block_law.block_law_inputs(head_type, case_seed, case.id)
    head = load_block_law_head("MarkovBlock", iut, inputs, head_type, dspark_device)
    n = stats.sample_size_for_tv(inputs.law, min_tv=block_law.MIN_TV)
    temps = torch.full((n,), block_law.BLOCK_TEMPERATURE, device=dspark_device)
    top_k = torch.full((n,), NO_TOP_K_CUT, dtype=torch.int64, device=dspark_device)

    tokens, corrected = iut.sample_block(head, *block_law_rows(inputs, n, dspark_device), temps, top_k,
                                         case_generator)

    stat_check(block_law.block_law_check(case.id, tokens, block_law.q_of_corrected(corrected)))


# ----------------------------------------------------------------------------- edge cases
EDGE_GAMMA_ZERO = {
    case(f"S2/edge/gamma-zero-{head_type}", "gamma = 0: empty tokens, the input logits unchanged",
         ["S2.edge"]): head_type
    for head_type in ("vanilla", "rnn")
}


@pytest.mark.parametrize("case", EDGE_GAMMA_ZERO, ids=case_id)
def test_S2_gamma_zero_returns_empty_block(case, require, case_seed, case_generator, dspark_device):
    iut = require(MarkovBlock)
    head_type = EDGE_GAMMA_ZERO[case]
    batch, vocab, d = 3, 16, 4
    head, _ = load_random_head(iut, head_type, vocab=vocab, rank=4, hidden_size=d,
                               seed=sub_seed(case_seed, "head"), device=dspark_device)
    base, first_prev, hidden = random_block_inputs(head_type, batch=batch, gamma=0, vocab=vocab, hidden_size=d,
                                                   generator=input_generator(case_seed), device=dspark_device)
    temps, top_k = row_params([False] * batch, 1.0, dspark_device)

    tokens, corrected = iut.sample_block(head, base, first_prev, hidden, temps, top_k, case_generator)
    forced = iut.apply_block_logits(head, base, first_prev.new_empty((batch, 0)), hidden)

    assert tuple(tokens.shape) == (batch, 0), f"{case.id}: expected tokens [{batch}, 0], got {tuple(tokens.shape)}"
    for what, logits in (("sample_block", corrected), ("apply_block_logits", forced)):
        assert tuple(logits.shape) == (batch, 0, vocab), (
            f"{case.id}: {what} expected logits [{batch}, 0, {vocab}] (the input), got {tuple(logits.shape)}"
        )


EDGE_NO_HIDDEN = {
    case(f"S2/edge/no-hidden-{head_type}", f"a {head_type} head without hidden states is a clear error",
         ["S2.edge"]): head_type
    for head_type in ("gated", "rnn")
}


@pytest.mark.parametrize("case", EDGE_NO_HIDDEN, ids=case_id)
def test_S2_hidden_states_required(case, require, case_seed, case_generator, dspark_device):
    iut = require(MarkovBlock)
    head_type = EDGE_NO_HIDDEN[case]
    batch, gamma, vocab, d = 2, 3, 16, 4
    head, _ = load_random_head(iut, head_type, vocab=vocab, rank=4, hidden_size=d,
                               seed=sub_seed(case_seed, "head"), device=dspark_device)
    base, first_prev, _ = random_block_inputs(head_type, batch=batch, gamma=gamma, vocab=vocab, hidden_size=d,
                                              generator=input_generator(case_seed), device=dspark_device)
    temps, top_k = row_params([False] * batch, 1.0, dspark_device)

    with pytest.raises((ValueError, TypeError)):
        iut.sample_block(head, base, first_prev, None, temps, top_k, case_generator)
    with pytest.raises((ValueError, TypeError)):
        iut.apply_block_logits(head, base, prev_tokens(first_prev, base.argmax(-1)), None)


EDGE_RANK = {
    case("S2/edge/rank-nonpositive", "markov_rank 0 or -1 is a configuration error (ValueError)",
         ["S2.edge"]): (0, -1),
}


@pytest.mark.parametrize("case", EDGE_RANK, ids=case_id)
def test_S2_nonpositive_rank_is_a_configuration_error(case, require, dspark_device):
    iut = require(MarkovBlock)
    vocab = 16
    empty = {"W1.weight": torch.zeros(vocab, 0, device=dspark_device),
             "W2.weight": torch.zeros(vocab, 0, device=dspark_device)}
    for rank in EDGE_RANK[case]:
        with pytest.raises(ValueError):
            iut.load_head("vanilla", empty, vocab, rank, 4, dspark_device)


# ----------------------------------------------------------------------------- smallest sizes
# case -> (head type, rank r, hidden size d): sizes at their lower bound (r >= 1, d >= 1) are
# valid heads like any other.
EDGE_SMALLEST = {
    **{case(f"S2/edge/rank-one-{head_type}", f"a {head_type} head of markov_rank 1: teacher forcing = the float64 "
            "oracle, sample_block = its own teacher forcing", ["S2.edge", "S2.teacher-forcing", f"S2.{head_type}"]):
       (head_type, 1, 4) for head_type in HEAD_TYPES},
    **{case(f"S2/edge/hidden-one-{head_type}", f"a {head_type} head over hidden states of size d = 1: teacher "
            "forcing = the float64 oracle, sample_block = its own teacher forcing",
            ["S2.edge", "S2.teacher-forcing", f"S2.{head_type}"]): (head_type, 4, 1) for head_type in ("gated", "rnn")},
}


@pytest.mark.parametrize("case", EDGE_SMALLEST, ids=case_id)
def test_S2_smallest_rank_and_hidden_size_are_valid(case, require, case_seed, case_generator, dspark_device,
                                                     numeric_check):
    iut = require(MarkovBlock)
    head_type, rank, d = EDGE_SMALLEST[case]
    batch, gamma, vocab = 4, 4, 32
    head, state = load_random_head(iut, head_type, vocab=vocab, rank=rank, hidden_size=d,
                                   seed=sub_seed(case_seed, "head"), device=dspark_device)
    base, first_prev, hidden = random_block_inputs(head_type, batch=batch, gamma=gamma, vocab=vocab, hidden_size=d,
                                                   generator=input_generator(case_seed), device=dspark_device)
    greedy = [True, False, True, False]
    temps, top_k = row_params(greedy, 1.0, dspark_device)

    tokens, corrected = iut.sample_block(head, base, first_prev, hidden, temps, top_k, case_generator)

    check_block_shapes(case, tokens, corrected, batch, gamma, vocab)
    prev = prev_tokens(first_prev, tokens)
    forced = iut.apply_block_logits(head, base, prev, hidden)
    expected, bound = oracle_block_logits(head_type, state, base, prev, hidden)
    assert_within_oracle(case, forced, expected, bound, "teacher-forced corrected logits")
    numeric_check(compare_block_logits(case, "sample_block's corrected logits against its teacher forcing",
                                       forced, corrected, head_type, state, base, prev, hidden))
    check_greedy_rows(case, tokens, corrected, [i for i, g in enumerate(greedy) if g])


# ----------------------------------------------------------------------------- masked base logits
EDGE_NEG_INF = {
    case(f"S2/edge/neg-inf-base-{head_type}", f"{head_type} head, base logits -inf on a third of the vocabulary "
         "(masked tokens): -inf stays -inf in sample_block and apply_block_logits, no masked token is drawn, "
         "the finite columns match the float64 oracle", ["S2.edge", "S2.sample-block", "S2.teacher-forcing"]):
    head_type
    for head_type in ("vanilla", "gated")
}


@pytest.mark.parametrize("case", EDGE_NEG_INF, ids=case_id)
def test_S2_neg_inf_base_logits_stay_masked(case, require, case_seed, case_generator, dspark_device):
    """The MarkovBlock contract: corrected logits have no NaN or +inf where the base logits
    have none, and -inf stays -inf. The head's bias depends on the previous tokens and the
    hidden states only, so the oracle of the finite columns is the oracle of the same block
    with the masked columns set to 0."""
    iut = require(MarkovBlock)
    head_type = EDGE_NEG_INF[case]
    batch, gamma, vocab, d = 6, 4, 30, 6
    head, state = load_random_head(iut, head_type, vocab=vocab, rank=4, hidden_size=d,
                                   seed=sub_seed(case_seed, "head"), device=dspark_device)
    base, first_prev, hidden = random_block_inputs(head_type, batch=batch, gamma=gamma, vocab=vocab, hidden_size=d,
                                                   generator=input_generator(case_seed), device=dspark_device)
    masked = torch.arange(vocab) % 3 == 1
    base[..., masked.to(dspark_device)] = float("-inf")
    first_prev = torch.where(masked.to(dspark_device)[first_prev], first_prev - 1, first_prev)  # anchors unmasked
    greedy = [True, False, False, True, False, False]
    temps, top_k = row_params(greedy, 1.0, dspark_device)

    tokens, corrected = iut.sample_block(head, base, first_prev, hidden, temps, top_k, case_generator)
    check_block_shapes(case, tokens, corrected, batch, gamma, vocab)
    prev = prev_tokens(first_prev, tokens)
    forced = iut.apply_block_logits(head, base, prev, hidden)

    drawn = masked[tokens.cpu()]
    assert not bool(drawn.any()), (
        f"{case.id}: drew tokens whose base logit is -inf at (row, step) {drawn.nonzero().tolist()[:8]}"
    )
    expected, bound = oracle_block_logits(head_type, state, base.masked_fill(torch.isinf(base), 0.0), prev, hidden)
    for what, got in (("sample_block's corrected logits", corrected), ("apply_block_logits", forced)):
        got = got.detach().to("cpu", torch.float64)
        kept = got[..., masked]
        assert bool((kept == float("-inf")).all()), (
            f"{case.id}: {what}: a -inf base logit became {kept[kept != float('-inf')][:4].tolist()}"
        )
        assert_within_oracle(case, got[..., ~masked], expected[..., ~masked], bound[..., ~masked],
                             f"{what}, finite columns")
