"""Conformance tests for SPEC S1: base logits, block layouts and draft vocabularies.

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

The other layouts and vocabularies of S1 go through :class:`~conformance.contract.DraftLayouts`
(each case skips unless the adapter declares its layout and vocabulary in ``Conventions``):
the bonus-anchor layout (``sample_from_anchor = False``: the anchor's position cropped from
the base logits and the hidden states, ``gamma = block - 1``), a padded draft vocabulary
(cropped to ``V``, never remapped) and a reduced one with a draft-to-target map ``d2t``
(draws mapped before they are stored and before they condition the next step; the block
lifted to target columns, ``-inf`` elsewhere; ``d2t`` validated), and a one-token vocabulary
(``V = V_d = 1``, valid input: every draw is token 0). Their corrected logits
are checked against the float64 S2 oracle of :mod:`conformance.oracles.markov_block` run on
the IUT's own draws, within its derived float32 bound; ``-inf`` columns and greedy argmaxes
exactly.

To add a case: add ``case(...): parameters`` to the dict of its family below.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import case, case_id
from conformance.contract import DraftLayouts, FoldedDraft, Inconclusive, MarkovBlock
from conformance.suite.support.blocks import (
    assert_within_oracle,
    check_block_shapes,
    check_greedy_rows,
    draft_vocab_head_state,
    load_random_head,
    prev_tokens,
    random_block_inputs,
    row_params,
)
from conformance.inputs.seeding import input_generator, sub_seed
from conformance.oracles.markov_block import oracle_block_logits

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


# ----------------------------------------------------------------------------- layouts and draft vocabularies
PADDED_VOCAB, REDUCED_VOCAB = 128, 40


def require_declared(adapter, case, layout, vocabulary):
    """Skip unless ``adapter`` declares ``layout`` and ``vocabulary`` (``Conventions``)."""
    conventions = adapter.conventions
    if layout not in conventions.layouts:
        pytest.skip(f"{case.id}: {adapter.name} declares layouts {conventions.layouts}, not {layout!r}")
    if vocabulary not in conventions.draft_vocabularies:
        pytest.skip(f"{case.id}: {adapter.name} declares draft vocabularies {conventions.draft_vocabularies}, "
                    f"not {vocabulary!r}")


def layout_inputs(head_type, layout, vocabulary, case_seed, device, scale=0.5):
    """``(state, base[B, Q, V_d], first_prev[B], hidden[B, Q, d] | None, d2t | None)`` for one case.

    Padded columns (``V .. V_d``) carry logits 5 above the largest real one (garbage that wins
    if it is not cropped); a reduced vocabulary maps its ``V_d`` ids to a random subset of
    the target's ``V`` in random order."""
    gen = input_generator(case_seed)
    queries = GAMMA + 1 if layout == "bonus-anchor" else GAMMA
    draft_vocab = {"target": VOCAB, "padded": PADDED_VOCAB, "reduced": REDUCED_VOCAB}[vocabulary]
    state = draft_vocab_head_state(head_type, vocab=VOCAB, draft_vocab=draft_vocab, rank=RANK, hidden_size=HIDDEN,
                                   seed=sub_seed(case_seed, "head"), device=device, scale=scale)
    base = torch.randn(BATCH, queries, draft_vocab, generator=gen)
    if vocabulary == "padded":
        base[..., VOCAB:] = base[..., :VOCAB].max() + 5.0
    first_prev = torch.randint(VOCAB, (BATCH,), generator=gen)
    hidden = None if head_type == "vanilla" else torch.randn(BATCH, queries, HIDDEN, generator=gen)
    d2t = torch.randperm(VOCAB, generator=gen)[:REDUCED_VOCAB] if vocabulary == "reduced" else None
    moved = [None if t is None else t.to(device) for t in (base, first_prev, hidden, d2t)]
    return (state, *moved)


def check_lifted_block(case, tokens, corrected, expected, bound, d2t):
    """The IUT's block against the oracle's draft-vocabulary logits ``expected [B, gamma, V_d]``:
    crop (no ``d2t``) or lift (``-inf`` off the map, exactly), then the finite columns within
    ``bound``; every token has a finite corrected logit; greedy rows took its argmax."""
    got = corrected.detach().to("cpu", torch.float64)
    if d2t is None:
        columns = torch.arange(VOCAB)
        expected, bound = expected[..., :VOCAB], bound[..., :VOCAB]
    else:
        columns = d2t.cpu().long()
        off_map = torch.ones(VOCAB, dtype=torch.bool)
        off_map[columns] = False
        finite_off = torch.isfinite(got[..., off_map]).nonzero()
        assert finite_off.numel() == 0, (
            f"{case.id}: corrected logits must be -inf outside the d2t columns (the lifted block), got a finite "
            f"value at row {int(finite_off[0, 0])} step {int(finite_off[0, 1])}"
        )
    assert_within_oracle(case, got[..., columns], expected, bound,
                         "corrected logits (in the target columns of the draft vocabulary)")
    drawn = got.gather(-1, tokens.cpu()[..., None])[..., 0]
    assert bool(torch.isfinite(drawn).all()), (
        f"{case.id}: a token whose corrected logit is -inf was returned (a draft id not mapped to its target id?): "
        f"tokens {tokens.tolist()}"
    )
    check_greedy_rows(case, tokens.cpu(), got, [i for i, g in enumerate(GREEDY) if g])


# case -> (head type, layout, draft vocabulary)
DRAFT_LAYOUT_CASES = {
    case("S1/layout/bonus-anchor-gated", "bonus-anchor: step k reads base logits and hidden state of position k + 1 "
         "(gated head, float64 oracle)", ["S1.layouts"]): ("gated", "bonus-anchor", "target"),
    case("S1/layout/bonus-anchor-rnn", "bonus-anchor with the rnn head: the cropped hidden states drive the state",
         ["S1.layouts"]): ("rnn", "bonus-anchor", "target"),
    case("S1/vocab/padded-vanilla", "padded draft vocabulary: logits cropped to V (padding never drawn, never "
         "remapped); greedy rows take the argmax of the cropped block", ["S1.draft-vocab"]):
        ("vanilla", "anchor-first", "padded"),
    case("S1/vocab/padded-bonus-anchor-gated", "padded vocabulary under the bonus-anchor layout",
         ["S1.draft-vocab", "S1.layouts"]): ("gated", "bonus-anchor", "padded"),
    case("S1/vocab/reduced-d2t-vanilla", "reduced vocabulary: draws mapped by d2t before they are stored and before "
         "they condition the next step; block lifted to target columns, -inf elsewhere", ["S1.draft-vocab"]):
        ("vanilla", "anchor-first", "reduced"),
    case("S1/vocab/reduced-d2t-rnn-bonus-anchor", "reduced vocabulary, rnn head, bonus-anchor layout",
         ["S1.draft-vocab", "S1.layouts"]): ("rnn", "bonus-anchor", "reduced"),
}


@pytest.mark.parametrize("case", DRAFT_LAYOUT_CASES, ids=case_id)
def test_S1_draft_layouts_match_the_oracle(case, require, dspark_adapter, case_seed, case_generator, dspark_device):
    iut = require(DraftLayouts)
    head_type, layout, vocabulary = DRAFT_LAYOUT_CASES[case]
    require_declared(dspark_adapter, case, layout, vocabulary)
    state, base, first_prev, hidden, d2t = layout_inputs(head_type, layout, vocabulary, case_seed, dspark_device)
    temps, top_k = row_params(GREEDY, 1.0, dspark_device)

    tokens, corrected = iut.draft_block(head_type, state, base, first_prev, hidden, temps, top_k, case_generator,
                                        layout=layout, vocab_size=VOCAB, d2t=d2t)

    check_block_shapes(case, tokens, corrected, BATCH, GAMMA, VOCAB)
    crop = slice(1, None) if layout == "bonus-anchor" else slice(None)
    expected, bound = oracle_block_logits(head_type, state, base[:, crop], prev_tokens(first_prev, tokens),
                                          None if hidden is None else hidden[:, crop])
    check_lifted_block(case, tokens, corrected, expected, bound, d2t)


# case -> (draft vocabulary, target V, draft V_d): the one-token edges of S1's draft vocabularies
ONE_TOKEN_DRAFT_CASES = {
    case("S1/vocab/reduced-one-token", "a reduced draft vocabulary of one token (V = 8, V_d = 1, d2t = [5]): every "
         "draw is target id 5, the block is -inf off column 5 and the oracle's on it", ["S1.draft-vocab"]):
        ("reduced", 8, 1),
    case("S1/vocab/padded-one-token-target", "a padded draft vocabulary (V_d = 4) over a one-token target (V = 1): "
         "every draw is 0, the block cropped to column 0 (the padding, 5 above it, never wins)", ["S1.draft-vocab"]):
        ("padded", 1, 4),
}
ONE_TOKEN_ID = 5  # the target id of the reduced one-token vocabulary


@pytest.mark.parametrize("case", ONE_TOKEN_DRAFT_CASES, ids=case_id)
def test_S1_one_token_draft_vocabularies(case, require, dspark_adapter, case_seed, case_generator, dspark_device):
    iut = require(DraftLayouts)
    vocabulary, vocab, draft_vocab = ONE_TOKEN_DRAFT_CASES[case]
    require_declared(dspark_adapter, case, "anchor-first", vocabulary)
    gen = input_generator(case_seed)
    state = draft_vocab_head_state("vanilla", vocab=vocab, draft_vocab=draft_vocab, rank=RANK, hidden_size=HIDDEN,
                                   seed=sub_seed(case_seed, "head"), device=dspark_device)
    base = torch.randn(BATCH, GAMMA, draft_vocab, generator=gen)
    if vocabulary == "padded":
        base[..., vocab:] = base[..., :vocab].max() + 5.0
    first_prev = torch.randint(vocab, (BATCH,), generator=gen)
    d2t = torch.tensor([ONE_TOKEN_ID]) if vocabulary == "reduced" else None
    base, first_prev = base.to(dspark_device), first_prev.to(dspark_device)
    temps, top_k = row_params(GREEDY, 1.0, dspark_device)

    tokens, corrected = iut.draft_block("vanilla", state, base, first_prev, None, temps, top_k, case_generator,
                                        layout="anchor-first", vocab_size=vocab,
                                        d2t=None if d2t is None else d2t.to(dspark_device))

    check_block_shapes(case, tokens, corrected, BATCH, GAMMA, vocab)
    column = ONE_TOKEN_ID if vocabulary == "reduced" else 0
    assert bool((tokens.cpu() == column).all()), f"{case.id}: every draw must be target id {column}, got {tokens.tolist()}"
    got = corrected.detach().to("cpu", torch.float64)
    off = torch.arange(vocab) != column
    assert bool((got[..., off] == float("-inf")).all()), f"{case.id}: the block must be -inf off column {column}"
    expected, bound = oracle_block_logits("vanilla", state, base, prev_tokens(first_prev, tokens), None)
    assert_within_oracle(case, got[..., column:column + 1], expected[..., :1], bound[..., :1],
                         f"corrected logits of column {column}")


ONE_TOKEN = case("S1/vocab/one-token", "a one-token vocabulary, V = V_d = 1 (anchor-first, vanilla head): every "
                 "draw is token 0, greedy or sampled, and the corrected logits are the S2 oracle's (no error)",
                 ["S1.draft-vocab"])


@pytest.mark.parametrize("case", [ONE_TOKEN], ids=case_id)
def test_S1_one_token_vocabulary(case, require, dspark_adapter, case_seed, case_generator, dspark_device):
    iut = require(DraftLayouts)
    conventions = dspark_adapter.conventions
    if "anchor-first" not in conventions.layouts or "target" not in conventions.draft_vocabularies:
        pytest.skip(f"{case.id}: {dspark_adapter.name} declares no anchor-first layout over the target vocabulary")
    batch, gamma = 4, 3
    state = draft_vocab_head_state("vanilla", vocab=1, draft_vocab=1, rank=2, hidden_size=None,
                                   seed=sub_seed(case_seed, "head"), device=dspark_device)
    base = torch.randn(batch, gamma, 1, generator=input_generator(case_seed)).to(dspark_device)
    first_prev = torch.zeros(batch, dtype=torch.int64, device=dspark_device)
    temps, top_k = row_params([True, False, True, False], 1.0, dspark_device)

    tokens, corrected = iut.draft_block("vanilla", state, base, first_prev, None, temps, top_k, case_generator,
                                        layout="anchor-first", vocab_size=1, d2t=None)

    check_block_shapes(case, tokens, corrected, batch, gamma, 1)
    assert tokens.cpu().tolist() == [[0] * gamma] * batch, f"{case.id}: expected every token 0, got {tokens.tolist()}"
    expected, bound = oracle_block_logits("vanilla", state, base, prev_tokens(first_prev, tokens), None)
    assert_within_oracle(case, corrected.detach().to("cpu", torch.float64), expected, bound, "corrected logits")


BONUS_ANCHOR_ZERO = case("S1/layout/bonus-anchor-zero-head", "bonus-anchor, zero Markov head: the corrected logits "
                         "of step k are the base logits of position k + 1, bit for bit; gamma = block - 1",
                         ["S1.layouts", "S1.base-logits"])


@pytest.mark.parametrize("case", [BONUS_ANCHOR_ZERO], ids=case_id)
def test_S1_bonus_anchor_crops_the_anchor_position(case, require, dspark_adapter, case_seed, case_generator,
                                                   dspark_device):
    iut = require(DraftLayouts)
    require_declared(dspark_adapter, case, "bonus-anchor", "target")
    state, base, first_prev, hidden, _ = layout_inputs("rnn", "bonus-anchor", "target", case_seed, dspark_device,
                                                       scale=0.0)
    temps, top_k = row_params(GREEDY, 1.0, dspark_device)

    tokens, corrected = iut.draft_block("rnn", state, base, first_prev, hidden, temps, top_k, case_generator,
                                        layout="bonus-anchor", vocab_size=VOCAB, d2t=None)

    check_layout(case, tokens, corrected, base[:, 1:])


# what is wrong -> the bad d2t made from a valid one
D2T_ERRORS = {
    "short": lambda d2t: d2t[:-1],
    "out-of-range": lambda d2t: torch.cat([d2t[:-1], d2t.new_tensor([VOCAB])]),
    "negative": lambda d2t: torch.cat([d2t[:-1], d2t.new_tensor([-1])]),
    "duplicate": lambda d2t: torch.cat([d2t[:-1], d2t[:1]]),
}
D2T_VALIDATION = case("S1/vocab/d2t-validated", "a d2t of the wrong length, with an id outside [0, V) or with a "
                      "duplicate target id is a ValueError", ["S1.draft-vocab"])


@pytest.mark.parametrize("case", [D2T_VALIDATION], ids=case_id)
def test_S1_d2t_is_validated(case, require, dspark_adapter, case_seed, case_generator, dspark_device):
    iut = require(DraftLayouts)
    require_declared(dspark_adapter, case, "anchor-first", "reduced")
    state, base, first_prev, hidden, d2t = layout_inputs("vanilla", "anchor-first", "reduced", case_seed,
                                                         dspark_device)
    temps, top_k = row_params(GREEDY, 1.0, dspark_device)
    for what, corrupt in D2T_ERRORS.items():
        try:
            iut.draft_block("vanilla", state, base, first_prev, hidden, temps, top_k, case_generator,
                            layout="anchor-first", vocab_size=VOCAB, d2t=corrupt(d2t))
        except ValueError:
            continue
        pytest.fail(f"{case.id}: a {what} d2t was accepted; expected a ValueError naming d2t")
