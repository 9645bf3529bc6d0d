"""Reference tests for SPEC S9 (``dspark_ref.tiny_models``, ``dspark_ref.speculative``).

Exact checks: the tiny models (causality, context dependence, shared tensors, the float64
oracle), greedy speculative decoding equal to greedy autoregressive decoding token for
token (every head type, gamma 1..5, hypothesis-drawn cases), ``tau = gamma + 1`` for a
perfect draft, the exact stop. Statistical checks: the law of the first three generated
tokens against ``exact_sequence_law``, with and without the prefix scheduler, and the power
of that check against three known faults (each must be rejected). Then bad inputs.
To add a case: a new draft goes into ``_drafts``; a new fault into ``FAULTS``.
"""

from __future__ import annotations

import itertools

import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dspark_ref.speculative as speculative
from dspark_ref.markov import BlockSample, sample_block
from dspark_ref.speculative import SpecResult, autoregressive_generate, speculative_generate
from dspark_ref.tiny_models import (
    OracleDraft,
    TinyDSparkDraft,
    TinyTargetLM,
    exact_next_token_law,
    exact_sequence_law,
)

HEAD_TYPES = ("vanilla", "gated", "rnn")
VOCAB, HIDDEN = 5, 8
# Per-assertion false-failure rate of the law checks (4 assertions in this file; the 3
# fault checks assert p < ALPHA and cannot fail falsely that way).
ALPHA = 1e-6
# Sample sizes: with ~90 pooled bins, N_LAW rows give power >= 0.999 at ALPHA against any
# chi-square divergence sum((q - p)^2 / p) >= DIVERGENCE_LAW, i.e. any total-variation
# shift >= 0.045 (divergence >= 4 TV^2); checked by test_S9_law_check_sample_size_has_power.
N_LAW, DIVERGENCE_LAW = 20_000, 0.008
PROMPT = torch.tensor([1, 2, 3])
LAW_TOKENS = 3


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (tests/conftest.py)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _target(seed: int = 5) -> TinyTargetLM:
    return TinyTargetLM(VOCAB, HIDDEN, generator=_gen(seed))


def _draft(target, gamma, head="vanilla", seed=1, with_confidence=False) -> TinyDSparkDraft:
    return TinyDSparkDraft(target, gamma=gamma, markov_head_type=head, markov_rank=4, generator=_gen(seed),
                           with_confidence=with_confidence)


def _near_perfect(target, gamma) -> OracleDraft:
    return OracleDraft(target, gamma=gamma, logit_noise=1.0, generator=_gen(1))


def _prompts(rows: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, length), generator=_gen(seed))


# --------------------------------------------------------------------------- tiny models
def test_S9_target_is_causal_bit_for_bit():
    target = _target()
    ids = _prompts(4, 6, seed=0)
    full = target(ids)
    short = target(ids[:, :3])
    assert torch.equal(full.logits[:, :3], short.logits)
    assert torch.equal(full.hidden[:, :3], short.hidden)


def test_S9_target_law_depends_on_more_than_the_last_token():
    # The law after [a, b, 2] must vary with a and b: a Markov-order bug is visible.
    target = _target()
    laws = torch.stack([exact_next_token_law(target, torch.tensor([a, b, 2]), 1.0)
                        for a in range(VOCAB) for b in range(VOCAB)])
    total_variation = (laws[:, None] - laws[None]).abs().sum(-1).max() / 2
    assert total_variation > 0.3


def test_S9_target_incremental_steps_reproduce_forward():
    target = _target()
    ids = _prompts(3, 5, seed=1)
    out = target(ids)
    state = target.initial_state(3)
    for t in range(5):
        state = target.advance(state, ids[:, t])
        assert torch.equal(state, out.hidden[:, t])
        assert torch.equal(target.next_token_logits(state), out.logits[:, t])


def test_S9_models_are_deterministic_in_the_seed():
    a, b, c = _target(3), _target(3), _target(4)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.lm_head_weight, c.lm_head_weight)
    d1, d2 = _draft(a, 3, "rnn"), _draft(a, 3, "rnn")
    assert all(torch.equal(x, y) for x, y in zip(d1.parameters(), d2.parameters()))


def test_S9_exact_sequence_law_is_the_product_of_next_token_laws():
    target = _target()
    law = exact_sequence_law(target, PROMPT, 2, 0.7)
    assert len(law) == VOCAB**2
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    first = exact_next_token_law(target, PROMPT, 0.7)
    for a, b in [(0, 0), (1, 4), (3, 2)]:
        second = exact_next_token_law(target, torch.cat([PROMPT, torch.tensor([a])]), 0.7)
        # float32 target: a batch of V rows and a single row may round logits differently.
        assert law[(a, b)] == pytest.approx(float(first[a] * second[b]), rel=1e-5)
    # By hand: softmax(logits / T) of the last position in float64.
    logits = target.logits(PROMPT[None])[0, -1].double()
    expected = torch.exp(logits / 0.7) / torch.exp(logits / 0.7).sum()
    torch.testing.assert_close(first, expected, rtol=1e-12, atol=0)


def test_S9_draft_shares_frozen_embedding_and_lm_head():
    target = _target()
    draft = _draft(target, 3, "gated", with_confidence=True)
    assert draft.embedding is target.embedding
    assert draft.lm_head_weight is target.lm_head_weight
    assert not any(p.requires_grad for p in draft.parameters())
    out = target(PROMPT[None])
    block = draft.block(out.hidden[:, -1], torch.tensor([4]))
    assert block.hidden.shape == (1, 3, HIDDEN) and block.base_logits.shape == (1, 3, VOCAB)
    torch.testing.assert_close(block.base_logits, block.hidden @ target.lm_head_weight.T)
    confidences = draft.confidences(block.hidden, torch.tensor([4]), torch.tensor([[0, 1, 2]]))
    assert confidences.shape == (1, 3) and bool(((confidences > 0) & (confidences < 1)).all())


def test_S9_draft_block_reads_anchor_and_target_context():
    target = _target()
    draft = _draft(target, 3)
    context = target(_prompts(2, 4, seed=2)).hidden[:, -1]
    anchor = torch.tensor([1, 1])
    base = draft.block(context, anchor).base_logits
    assert not torch.equal(base, draft.block(context, torch.tensor([2, 2])).base_logits)
    assert not torch.equal(base, draft.block(context.flip(0), anchor).base_logits)
    # Anchor-as-first-position: a shorter block is the same backbone on fewer positions.
    assert draft.block(context, anchor, 1).base_logits.shape == (2, 1, VOCAB)


def test_S9_perfect_draft_corrected_logits_are_the_targets():
    target = _target()
    draft = OracleDraft(target, gamma=3)
    ids = _prompts(4, 7, seed=3)
    out = target(ids)
    block = draft.block(out.hidden[:, 2], ids[:, 3])
    tokens = ids[:, 4:7]

    def replay(step_logits, k):
        return tokens[:, k]

    drawn = sample_block(draft.markov_head, block.base_logits, ids[:, 3], block.hidden, replay)
    assert torch.equal(drawn.corrected_logits, out.logits[:, 3:6])


# --------------------------------------------------------------------------- greedy: exact
@pytest.mark.parametrize("head", HEAD_TYPES)
@pytest.mark.parametrize("gamma", [1, 2, 3, 4, 5])
def test_S9_greedy_speculative_equals_greedy_autoregressive(head, gamma):
    target = _target(3)
    prompts = _prompts(12, 4, seed=gamma)
    expected = autoregressive_generate(target, prompts, 14, greedy=True)
    result = speculative_generate(target, _draft(target, gamma, head), prompts, 14, greedy=True,
                                  generator=_gen(0))
    assert torch.equal(result.tokens, expected)
    assert len({tuple(row) for row in expected.tolist()}) > 3  # the case is not degenerate
    assert bool((result.accept_lengths[result.accept_lengths > 0] <= gamma).any())  # rejects seen


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_S9_greedy_equality_with_a_near_perfect_draft(gamma):
    # Most drafts pass here, so long accepted runs and the bonus path are exercised.
    target = _target(3)
    prompts = _prompts(12, 3, seed=10 + gamma)
    expected = autoregressive_generate(target, prompts, 17, greedy=True)
    result = speculative_generate(target, _near_perfect(target, gamma), prompts, 17, greedy=True)
    assert torch.equal(result.tokens, expected)
    assert bool((result.accept_lengths == gamma + 1).any())


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    head=st.sampled_from(HEAD_TYPES),
    gamma=st.integers(1, 5),
    rows=st.integers(1, 4),
    prompt_len=st.integers(1, 5),
    max_new=st.integers(1, 12),
)
def test_S9_greedy_equality_property(seed, head, gamma, rows, prompt_len, max_new):
    target = _target(seed)
    prompts = _prompts(rows, prompt_len, seed)
    draft = _draft(target, gamma, head, seed=seed + 1)
    result = speculative_generate(target, draft, prompts, max_new, greedy=True, generator=_gen(seed))
    assert torch.equal(result.tokens, autoregressive_generate(target, prompts, max_new, greedy=True))
    _check_accounting(result, max_new, gamma)


def _check_accounting(result: SpecResult, max_new: int, gamma: int) -> None:
    """Prefill gives 1 token; rounds add tau each, the last round possibly truncated."""
    taus = result.accept_lengths
    assert taus.shape == (result.tokens.shape[0], result.rounds)
    active = taus > 0
    assert bool((taus[active] <= result.verify_lengths[active] + 1).all())
    assert bool((result.verify_lengths <= gamma).all())
    assert bool((active[:, 1:] <= active[:, :-1]).all())  # a finished row stays finished
    for row_taus in taus.tolist():
        done = [t for t in row_taus if t > 0]
        assert sum(done[:-1]) < max_new - 1 <= sum(done) if done else max_new == 1


def test_S9_one_new_token_is_prefill_only():
    target = _target()
    result = speculative_generate(target, _draft(target, 2), PROMPT, 1, greedy=True)
    assert result.rounds == 0 and result.accept_lengths.shape == (1, 0)
    assert torch.equal(result.tokens, autoregressive_generate(target, PROMPT, 1, greedy=True))


# --------------------------------------------------------------------------- tau
@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_S9_perfect_draft_gives_tau_gamma_plus_one(gamma, greedy):
    # tau counts slot 0: a perfect draft with block 2 commits 2 accepted + 1 bonus = 3.
    target = _target()
    max_new = 1 + 3 * (gamma + 1) + 1  # three full rounds, then one truncated round
    result = speculative_generate(target, OracleDraft(target, gamma=gamma), _prompts(64, 3, seed=4), max_new,
                                  greedy=greedy, generator=_gen(gamma))
    assert result.rounds == 4
    assert bool((result.accept_lengths == gamma + 1).all())
    _check_accounting(result, max_new, gamma)


def test_S9_stop_truncates_the_last_round_exactly():
    target = _target()
    prompts = _prompts(5, 3, seed=6)
    result = speculative_generate(target, OracleDraft(target, gamma=4), prompts, 7, greedy=True)
    # 1 prefill token + 5 (first round) = 6; the second round verifies 5 but commits 1.
    assert result.tokens.shape == (5, 7) and result.rounds == 2
    assert torch.equal(result.tokens, autoregressive_generate(target, prompts, 7, greedy=True))


def test_S9_same_seed_same_result_and_fresh_noise_per_seed():
    target = _target()
    draft = _draft(target, 3, "rnn")
    prompts = PROMPT.repeat(64, 1)
    first = speculative_generate(target, draft, prompts, 8, temperature=1.0, generator=_gen(11))
    again = speculative_generate(target, draft, prompts, 8, temperature=1.0, generator=_gen(11))
    other = speculative_generate(target, draft, prompts, 8, temperature=1.0, generator=_gen(12))
    assert torch.equal(first.tokens, again.tokens)
    assert torch.equal(first.accept_lengths, again.accept_lengths)
    assert not torch.equal(first.tokens, other.tokens)
    assert len({tuple(row) for row in first.tokens.tolist()}) > 10  # rows draw independently


# --------------------------------------------------------------------------- law (statistical)
def _law_pvalue(tokens: torch.Tensor, law: dict[tuple[int, ...], float]) -> float:
    """Chi-square goodness of fit of the first LAW_TOKENS tokens; bins with expected < 5
    pooled into one."""
    rows = tokens.shape[0]
    codes = sum(tokens[:, i] * VOCAB ** (LAW_TOKENS - 1 - i) for i in range(LAW_TOKENS))
    observed = torch.bincount(codes, minlength=VOCAB**LAW_TOKENS).double()
    keys = itertools.product(range(VOCAB), repeat=LAW_TOKENS)  # same order as the codes
    expected = torch.tensor([law[k] for k in keys], dtype=torch.float64) * rows
    big = expected >= 5
    f_obs = torch.cat([observed[big], observed[~big].sum()[None]])
    f_exp = torch.cat([expected[big], expected[~big].sum()[None]])
    return float(scipy.stats.chisquare(f_obs.numpy(), f_exp.numpy()).pvalue)


def _drafts(target, gamma, with_confidence=False):
    return {
        "random-vanilla": _draft(target, gamma, "vanilla", with_confidence=with_confidence),
        "random-rnn": _draft(target, gamma, "rnn", with_confidence=with_confidence),
        "near-perfect": _near_perfect(target, gamma),
    }


def test_S9_law_check_sample_size_has_power():
    # Design check of N_LAW: power >= 0.999 at ALPHA for divergence DIVERGENCE_LAW.
    target = _target()
    law = torch.tensor(list(exact_sequence_law(target, PROMPT, LAW_TOKENS, 1.0).values()))
    df = int((law * N_LAW >= 5).sum())  # big bins + 1 pooled bin - 1
    critical = scipy.stats.chi2.isf(ALPHA, df)
    power = scipy.stats.ncx2.sf(critical, df, N_LAW * DIVERGENCE_LAW)
    assert power >= 0.999, (df, power)


@pytest.mark.statistical
@pytest.mark.parametrize("draft_name", ["random-vanilla", "random-rnn", "near-perfect"])
def test_S9_sampled_sequences_follow_the_target_law(draft_name):
    # H0: the first 3 generated tokens follow exact_sequence_law; chi-square, alpha 1e-6.
    target = _target()
    draft = _drafts(target, 2)[draft_name]
    result = speculative_generate(target, draft, PROMPT.repeat(N_LAW, 1), LAW_TOKENS, temperature=1.0,
                                  generator=_gen(7))
    pvalue = _law_pvalue(result.tokens, exact_sequence_law(target, PROMPT, LAW_TOKENS, 1.0))
    assert pvalue > ALPHA, f"{draft_name}: p = {pvalue:.3g}"


def _accept_every_draft(draft_tokens, target_logits, draft_logits, *args, **kwargs):
    # Fault: verification against p = q on the draft slots accepts everything.
    rigged = target_logits.clone()
    rigged[:, : draft_logits.shape[1]] = draft_logits
    return FAULTS_REAL["chain_verify"](draft_tokens, rigged, draft_logits, *args, **kwargs)


def _q_from_base_logits(head, base_logits, first_prev, hidden, sampler):
    # Fault: the verifier gets the base logits, not the corrected logits that drew the block.
    block = FAULTS_REAL["sample_block"](head, base_logits, first_prev, hidden, sampler)
    return BlockSample(block.tokens, base_logits.float())


def _duplicate_sample_block(head, base_logits, first_prev, hidden, sampler):
    # Fault (SPEC S4.4): tokens from one pass, corrected logits from a second one.
    first = FAULTS_REAL["sample_block"](head, base_logits, first_prev, hidden, sampler)
    second = FAULTS_REAL["sample_block"](head, base_logits, first_prev, hidden, sampler)
    return BlockSample(first.tokens, second.corrected_logits)


FAULTS_REAL = {"chain_verify": speculative.chain_verify, "sample_block": speculative.sample_block}
FAULTS = {
    "accept-every-draft": ("chain_verify", _accept_every_draft),
    "q-from-base-logits": ("sample_block", _q_from_base_logits),
    "duplicate-sample-block": ("sample_block", _duplicate_sample_block),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_S9_law_check_rejects_known_faults(fault, monkeypatch):
    name, replacement = FAULTS[fault]
    monkeypatch.setattr(speculative, name, replacement)
    target = _target()
    result = speculative_generate(target, _near_perfect(target, 2), PROMPT.repeat(N_LAW, 1), LAW_TOKENS,
                                  temperature=1.0, generator=_gen(7))
    pvalue = _law_pvalue(result.tokens, exact_sequence_law(target, PROMPT, LAW_TOKENS, 1.0))
    assert pvalue < ALPHA, f"{fault}: p = {pvalue:.3g}"


def _trimming_sps(rows: int):
    # SPS(B) = 1 / (R / 2 + B): each admission costs about as much throughput as a draft
    # position with survival ~0.5 brings, so the scheduler keeps some drafts and trims others.
    return lambda batch: 1.0 / (rows / 2 + batch)


@pytest.mark.statistical
def test_S9_scheduler_trims_and_stays_lossless():
    target = _target()
    draft = _draft(target, 3, "gated", seed=2, with_confidence=True)
    result = speculative_generate(target, draft, PROMPT.repeat(N_LAW, 1), LAW_TOKENS, temperature=1.0,
                                  scheduler=_trimming_sps(N_LAW), generator=_gen(8))
    lengths_used = torch.bincount(result.verify_lengths[result.accept_lengths > 0], minlength=4)
    assert bool((lengths_used > 1000).all()), lengths_used  # every length 0..gamma is exercised
    _check_accounting(result, LAW_TOKENS, 3)
    pvalue = _law_pvalue(result.tokens, exact_sequence_law(target, PROMPT, LAW_TOKENS, 1.0))
    assert pvalue > ALPHA, f"p = {pvalue:.3g}"


def test_S9_scheduler_greedy_still_equals_autoregressive():
    target = _target(3)
    prompts = _prompts(16, 4, seed=9)
    draft = _draft(target, 4, "rnn", with_confidence=True)
    result = speculative_generate(target, draft, prompts, 12, greedy=True, scheduler=_trimming_sps(16))
    assert torch.equal(result.tokens, autoregressive_generate(target, prompts, 12, greedy=True))
    assert bool((result.verify_lengths[:, 0] < 4).any())


# --------------------------------------------------------------------------- bad inputs
@pytest.fixture(scope="module")
def models():
    target = _target()
    return target, _draft(target, 3, with_confidence=True)


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"prompt": PROMPT.float()}, TypeError, "prompt"),
        ({"prompt": PROMPT[None, None]}, ValueError, "prompt"),
        ({"prompt": torch.zeros(2, 0, dtype=torch.int64)}, ValueError, "prompt"),
        ({"prompt": torch.tensor([1, VOCAB])}, ValueError, "prompt"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
        ({"max_new_tokens": 2.0}, TypeError, "max_new_tokens"),
        ({"temperature": float("nan")}, ValueError, "temperature"),
        ({"temperature": -0.5}, ValueError, "temperature"),
        ({"temperature": float("inf")}, ValueError, "temperature"),
        ({"greedy": 1}, TypeError, "greedy"),
        ({"gamma": 0}, ValueError, "gamma"),
        ({"gamma": 4}, ValueError, "gamma"),
        ({"scheduler": "fast"}, TypeError, "scheduler"),
        ({"generator": 3}, TypeError, "generator"),
    ],
)
def test_S9_speculative_rejects_bad_arguments(models, kwargs, error, name):
    target, draft = models
    call = {"prompt": PROMPT, "max_new_tokens": 4, **kwargs}
    with pytest.raises(error, match=name):
        speculative_generate(target, draft, call.pop("prompt"), call.pop("max_new_tokens"), **call)


def test_S9_speculative_rejects_mismatched_models(models):
    target, draft = models
    with pytest.raises(ValueError, match="scheduler"):
        speculative_generate(target, _draft(target, 2), PROMPT, 4, scheduler=[1.0] * 8)
    with pytest.raises(ValueError, match="draft"):
        speculative_generate(TinyTargetLM(6, HIDDEN, generator=_gen(0)), draft, PROMPT, 4)
    with pytest.raises(TypeError, match="draft"):
        speculative_generate(target, object(), PROMPT, 4)
    with pytest.raises(TypeError, match="target"):
        speculative_generate(object(), draft, PROMPT, 4)
    with pytest.raises(ValueError, match="sps"):  # a table too short, reported by the scheduler
        speculative_generate(target, draft, PROMPT, 4, scheduler=[1.0])


def test_S9_autoregressive_rejects_bad_arguments(models):
    target, _ = models
    with pytest.raises(ValueError, match="max_new_tokens"):
        autoregressive_generate(target, PROMPT, 0)
    with pytest.raises(ValueError, match="temperature"):
        autoregressive_generate(target, PROMPT, 2, temperature=float("nan"))
    with pytest.raises(TypeError, match="prompt"):
        autoregressive_generate(target, [1, 2], 2)


def test_S9_tiny_models_reject_bad_arguments(models):
    target, draft = models
    with pytest.raises(ValueError, match="vocab_size"):
        TinyTargetLM(1, HIDDEN, generator=_gen(0))
    with pytest.raises(TypeError, match="generator"):
        TinyTargetLM(VOCAB, HIDDEN, generator=None)
    with pytest.raises(ValueError, match="target"):
        TinyDSparkDraft(TinyTargetLM(VOCAB, 7, generator=_gen(0)), gamma=2, generator=_gen(0))
    with pytest.raises(ValueError, match="markov_head_type"):
        TinyDSparkDraft(target, gamma=2, markov_head_type="lstm", generator=_gen(0))
    with pytest.raises(ValueError, match="markov_rank"):
        TinyDSparkDraft(target, gamma=2, markov_rank=0, generator=_gen(0))
    with pytest.raises(ValueError, match="gamma"):
        TinyDSparkDraft(target, gamma=0, generator=_gen(0))
    with pytest.raises(ValueError, match="logit_noise"):
        OracleDraft(target, gamma=2, logit_noise=float("nan"))
    with pytest.raises(TypeError, match="context_ids"):
        target(PROMPT[None].float())
    with pytest.raises(ValueError, match="context_ids"):
        target(PROMPT)
    context = target(PROMPT[None]).hidden[:, -1]
    with pytest.raises(ValueError, match="gamma"):
        draft.block(context, torch.tensor([0]), 4)
    with pytest.raises(ValueError, match="anchor"):
        draft.block(context, torch.tensor([VOCAB]))
    with pytest.raises(ValueError, match="context_hidden"):
        draft.block(context[:, :4], torch.tensor([0]))
    with pytest.raises(ValueError, match="confidence_head"):
        _draft(target, 2).confidences(torch.zeros(1, 2, HIDDEN), torch.tensor([0]), torch.tensor([[0, 1]]))


def test_S9_oracles_reject_bad_arguments(models):
    target, _ = models
    with pytest.raises(ValueError, match="temperature"):
        exact_next_token_law(target, PROMPT, 0.0)
    with pytest.raises(ValueError, match="temperature"):
        exact_sequence_law(target, PROMPT, 2, float("nan"))
    with pytest.raises(ValueError, match="n_tokens"):
        exact_sequence_law(target, PROMPT, 40, 1.0)
    with pytest.raises(ValueError, match="context"):
        exact_next_token_law(target, PROMPT[None], 1.0)
    with pytest.raises(ValueError, match="prompt"):
        exact_sequence_law(target, torch.tensor([0, VOCAB]), 2, 1.0)
