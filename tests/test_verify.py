"""Reference tests for SPEC S5 (``dspark_ref.verify``): chain and greedy verification.

Exact checks on hand-computed laws, grid enumerations of the explicit-uniform path
(exact expectations, no sampling error), hypothesis properties of cap/trim and mixed
batches, seeded repeatability, one statistical losslessness check, and bad inputs.
To add a case: hand-computed values go in a ``test_s5_*`` function with the derivation in
a comment; random shapes go through the ``verify_cases`` strategy.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_ref.verify import (
    ACCEPT_STREAM,
    FINAL_STREAM,
    RESIDUAL_MASS_FLOOR,
    VerifyUniforms,
    _inverse_cdf,
    _splitmix64_words,
    chain_verify,
    draft_distribution,
    greedy_verify,
    residual_distribution,
    seeded_uniforms,
    seeded_verify_uniforms,
    target_distribution,
)

# Per-assertion false-failure rate of the statistical tests in this file (3 assertions).
ALPHA = 1e-6
F64 = torch.float64


def _logits(*rows_of_probs) -> torch.Tensor:
    """float32 logits ``[1, n, V]`` whose softmax at T = 1 is the given laws."""
    return torch.log(torch.tensor([rows_of_probs], dtype=F64)).to(torch.float32)


def _coins(accept, final) -> VerifyUniforms:
    return VerifyUniforms(torch.tensor(accept, dtype=F64), torch.tensor(final, dtype=F64))


def _sampling(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(rows), torch.zeros(rows, dtype=torch.bool)


# --------------------------------------------------------------------------- hand cases
def test_s5_residual_hand_case():
    # max(p - q, 0) = [0.3, 0, 0], normalised -> [1, 0, 0].
    p, q = torch.tensor([0.5, 0.3, 0.2], dtype=F64), torch.tensor([0.2, 0.5, 0.3], dtype=F64)
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0], dtype=F64))
    # p = [.4, .3, .2, .1], q = [.1, .2, .3, .4]: max(p - q, 0) = [.3, .1, 0, 0] -> [.75, .25, 0, 0].
    p, q = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64), torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([0.75, 0.25, 0.0, 0.0], dtype=F64))


def test_s5_residual_falls_back_to_p_at_zero_mass():
    p = torch.tensor([[0.25, 0.75], [0.25, 0.75]], dtype=F64)
    below = RESIDUAL_MASS_FLOOR / 2
    q = torch.tensor([[0.25, 0.75], [0.25 - below, 0.75 + below]], dtype=F64)
    torch.testing.assert_close(residual_distribution(p, q), p)
    above = torch.tensor([[0.25 - 1e-6, 0.75 + 1e-6]], dtype=F64)
    torch.testing.assert_close(residual_distribution(p[:1], above), torch.tensor([[1.0, 0.0]], dtype=F64))


def test_s5_reject_emits_correction_from_residual():
    # Draft x_1 = 1: q(1) = .5, p(1) = .3, accepted iff u < .6.
    target = _logits([0.5, 0.3, 0.2], [0.2, 0.2, 0.6])
    draft = _logits([0.2, 0.5, 0.3])
    temps, greedy = _sampling(1)
    for final in (0.0, 0.5, 1 - 2**-53):  # residual is [1, 0, 0]: always token 0
        rejected = chain_verify(torch.tensor([[1]]), target, draft, temps, greedy, uniforms=_coins([[0.61]], [final]))
        assert rejected.accepted.tolist() == [0] and rejected.tokens.tolist() == [[0, -1]]
    # Accepted at u = .59: bonus from p_2 = [.2, .2, .6] by inverse CDF (cdf .2, .4, 1).
    for final, bonus in ((0.1, 0), (0.3, 1), (0.5, 2)):
        kept = chain_verify(torch.tensor([[1]]), target, draft, temps, greedy, uniforms=_coins([[0.59]], [final]))
        assert kept.accepted.tolist() == [1] and kept.tokens.tolist() == [[1, bonus]]
        assert kept.tau.tolist() == [2] and kept.trimmed.tolist() == [0]


def test_s5_accept_rate_and_committed_law_exact_on_uniform_grid():
    # p = [.4, .3, .2, .1], q = [.1, .2, .3, .4]. Enumerate x ~ q, accept coin on a 12-point
    # midpoint grid, final coin on a 4-point grid: accept thresholds p/q (= 2/3, 1/4 below
    # 1) and residual cdf .75 fall exactly between grid points, so grid averages are exact.
    # Expected: P(accept) = sum min(p, q) = 0.6; committed token law = p.
    p = [0.4, 0.3, 0.2, 0.1]
    q = [0.1, 0.2, 0.3, 0.4]
    accept_grid = [(k + 0.5) / 12 for k in range(12)]
    final_grid = [(k + 0.5) / 4 for k in range(4)]
    cases = [(x, a, f) for x in range(4) for a in accept_grid for f in final_grid]
    rows = len(cases)
    drafts = torch.tensor([[x] for x, _, _ in cases])
    coins = _coins([[a] for _, a, _ in cases], [f for _, _, f in cases])
    target = _logits(p, [0.25] * 4).expand(rows, -1, -1)
    draft = _logits(q).expand(rows, -1, -1)
    result = chain_verify(drafts, target, draft, *_sampling(rows), uniforms=coins)
    weights = torch.tensor([q[x] / (12 * 4) for x, _, _ in cases], dtype=F64)
    accept_rate = float((weights * result.accepted).sum())
    assert accept_rate == pytest.approx(0.6, abs=1e-12)
    law = torch.zeros(4, dtype=F64).index_add_(0, result.tokens[:, 0], weights)
    torch.testing.assert_close(law, torch.tensor(p, dtype=F64), rtol=0, atol=1e-12)


def test_s5_draft_and_target_laws_use_the_row_temperature():
    # At T = 2 both laws are softmax(log(probs) / 2): p(1) = sqrt(.3)/S_p, q(1) = sqrt(.5)/S_q.
    p, q = [0.5, 0.3, 0.2], [0.2, 0.5, 0.3]
    ratio = (math.sqrt(0.3) / sum(map(math.sqrt, p))) / (math.sqrt(0.5) / sum(map(math.sqrt, q)))
    target, draft = _logits(p, [0.2, 0.2, 0.6]), _logits(q)
    temps, greedy = torch.tensor([2.0]), torch.tensor([False])
    for u, accepted in ((ratio - 1e-6, 1), (ratio + 1e-6, 0)):
        result = chain_verify(torch.tensor([[1]]), target, draft, temps, greedy, uniforms=_coins([[u]], [0.5]))
        assert result.accepted.tolist() == [accepted]
    expected_q = torch.tensor([math.sqrt(v) for v in q], dtype=F64)
    torch.testing.assert_close(draft_distribution(draft, temps, greedy)[0, 0], expected_q / expected_q.sum())


def test_s5_zero_temperature_sampling_row_is_clamped_not_nan():
    # T = 0 clamps to 1e-5: the law is the argmax one-hot up to exp(-gap / 1e-5) ~ 0.
    target = torch.tensor([[[0.0, 1.0, 0.5], [2.0, 0.0, 0.0]]])
    laws = target_distribution(target, torch.zeros(1), torch.tensor([False]))
    assert not torch.isnan(laws).any()
    torch.testing.assert_close(laws[0, :, :], torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=F64))


def test_s5_inverse_cdf_never_picks_a_zero_probability_token():
    # Unnormalised total .6 < u = .7: the last positive-probability token (1), not token 2.
    probs = torch.tensor([[0.3, 0.3, 0.0], [0.0, 0.5, 0.5]], dtype=F64)
    assert _inverse_cdf(probs, torch.tensor([0.7, 0.0], dtype=F64)).tolist() == [1, 1]
    # Public path: masked (-inf) tail tokens are never emitted, even at u -> 1.
    target = torch.tensor([[[0.0, 0.0, -math.inf, -math.inf]]])
    bonus_only = chain_verify(
        torch.zeros(1, 0, dtype=torch.int64), target, torch.zeros(1, 0, 4), *_sampling(1),
        uniforms=VerifyUniforms(torch.zeros(1, 0, dtype=F64), torch.tensor([1 - 2**-53], dtype=F64)),
    )
    assert bonus_only.tokens.tolist() == [[1]] and bonus_only.tau.tolist() == [1]


def test_s5_greedy_verify_hand_case_and_ties():
    # Target argmax per position: [2, 0, 1, 3]; position 1 ties 0 and 3 -> lowest index 0.
    target = torch.tensor([[[0, 0, 5, 0], [7, 0, 0, 7], [0, 4, 0, 0], [0, 0, 0, 1.0]]])
    mismatch = greedy_verify(torch.tensor([[2, 0, 3]]), target)
    assert mismatch.accepted.tolist() == [2] and mismatch.tokens.tolist() == [[2, 0, 1, -1]]
    full = greedy_verify(torch.tensor([[2, 0, 1]]), target)
    assert full.tokens.tolist() == [[2, 0, 1, 3]] and full.tau.tolist() == [4]
    tie_loser = greedy_verify(torch.tensor([[2, 3, 1]]), target)
    assert tie_loser.tokens.tolist() == [[2, 0, -1, -1]]


def test_s5_greedy_verify_cap_emits_argmax_at_capped_position():
    target = torch.tensor([[[0, 0, 5, 0], [7, 0, 0, 1], [0, 4, 0, 0], [0, 0, 0, 1.0]]])
    drafts = torch.tensor([[2, 0, 1]])
    expected = {0: [2, -1, -1, -1], 1: [2, -1, -1, -1], 2: [2, 0, -1, -1], 3: [2, 0, 1, -1], 9: [2, 0, 1, 3]}
    for cap, tokens in expected.items():
        result = greedy_verify(drafts, target, cap=cap)
        assert result.tokens.tolist() == [tokens], cap
        assert result.trimmed.tolist() == [3 - result.accepted.item()]


def test_s5_sampling_cap_emits_bonus_from_the_capped_position():
    # Both drafts x = [0, 0] pass coin 0 (p_j(0) >= q_j(0) * 0). Cap 2 keeps one draft; the
    # emitted token is the bonus from p_2 = [.3, .4, .3] at u = .65 (cdf .3, .7, 1): token 1.
    # The other readings differ: x_2 = 0, residual(p_2, q_2) = [0, .6, .4] -> 2, p_3 -> 2.
    target = _logits([0.9, 0.05, 0.05], [0.3, 0.4, 0.3], [0.05, 0.05, 0.9])
    draft = _logits([0.5, 0.25, 0.25], [0.8, 0.1, 0.1])
    coins = _coins([[0.0, 0.0]], [0.65])
    result = chain_verify(torch.tensor([[0, 0]]), target, draft, *_sampling(1), uniforms=coins, cap=2)
    assert result.accepted.tolist() == [1] and result.trimmed.tolist() == [1]
    assert result.tokens.tolist() == [[0, 1, -1]]


# --------------------------------------------------------------------------- properties
@st.composite
def verify_cases(draw, *, max_rows: int = 4, max_drafts: int = 4, max_vocab: int = 6):
    """Random chain-verify inputs with explicit uniforms (a dict of keyword arguments)."""
    rows = draw(st.integers(1, max_rows))
    drafts = draw(st.integers(0, max_drafts))
    vocab = draw(st.integers(2, max_vocab))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = draw(st.sampled_from([0.5, 2.0, 6.0]))
    return dict(
        draft_tokens=torch.randint(vocab, (rows, drafts), generator=gen),
        target_logits=scale * torch.randn(rows, drafts + 1, vocab, generator=gen),
        draft_logits=scale * torch.randn(rows, drafts, vocab, generator=gen),
        temperatures=torch.rand(rows, generator=gen) * 2,
        greedy_mask=torch.rand(rows, generator=gen) < 0.3,
        uniforms=VerifyUniforms(
            torch.rand(rows, drafts, dtype=F64, generator=gen), torch.rand(rows, dtype=F64, generator=gen)
        ),
    )


def _truncated(case: dict, keep: int) -> dict:
    """The same round on only the first ``keep`` drafts."""
    return dict(
        case,
        draft_tokens=case["draft_tokens"][:, :keep],
        target_logits=case["target_logits"][:, : keep + 1],
        draft_logits=case["draft_logits"][:, :keep],
        uniforms=VerifyUniforms(case["uniforms"].accept[:, :keep], case["uniforms"].final),
    )


@settings(max_examples=60, deadline=None)
@given(case=verify_cases(), cap=st.integers(0, 6))
def test_s5_cap_trim_invariants(case, cap):
    raw = chain_verify(**case)
    capped = chain_verify(**case, cap=cap)
    drafts = case["draft_tokens"]
    limit = min(drafts.shape[1], max(cap - 1, 0))
    assert ((capped.accepted >= 0) & (capped.accepted <= limit)).all()
    assert torch.equal(capped.accepted, torch.clamp(raw.accepted, max=limit))
    assert torch.equal(capped.trimmed, raw.accepted - capped.accepted)
    assert torch.equal(capped.tau, capped.accepted + 1)
    for row in range(drafts.shape[0]):
        n = int(capped.accepted[row])
        assert torch.equal(capped.tokens[row, :n], drafts[row, :n])
        assert capped.tokens[row, n] >= 0
        assert (capped.tokens[row, n + 1 :] == -1).all()
    # Reading of "the token the row would emit at the capped position": verify only the
    # first `limit` drafts with the same coins.
    short = chain_verify(**_truncated(case, limit))
    assert torch.equal(capped.accepted, short.accepted)
    assert torch.equal(capped.tokens[:, : limit + 1], short.tokens)


@settings(max_examples=30, deadline=None)
@given(case=verify_cases(), caps=st.lists(st.integers(0, 6), min_size=4, max_size=4))
def test_s5_per_row_cap_tensor_matches_scalar_caps(case, caps):
    rows = case["draft_tokens"].shape[0]
    result = chain_verify(**case, cap=torch.tensor(caps[:rows]))
    for row in range(rows):
        alone = chain_verify(**case, cap=caps[row])
        assert torch.equal(result.tokens[row], alone.tokens[row])
        assert result.trimmed[row] == alone.trimmed[row]


@settings(max_examples=40, deadline=None)
@given(case=verify_cases(), cap=st.one_of(st.none(), st.integers(0, 6)))
def test_s5_greedy_rows_equal_greedy_verify(case, cap):
    case = dict(case, greedy_mask=torch.ones_like(case["greedy_mask"]))
    expected = greedy_verify(case["draft_tokens"], case["target_logits"], cap=cap)
    result = chain_verify(**case, cap=cap)
    for field in ("accepted", "tokens", "tau", "trimmed"):
        assert torch.equal(getattr(result, field), getattr(expected, field)), field


@settings(max_examples=40, deadline=None)
@given(case=verify_cases())
def test_s5_mixed_batch_rows_follow_their_own_rule(case):
    result = chain_verify(**case)
    greedy = greedy_verify(case["draft_tokens"], case["target_logits"])
    for row in range(case["draft_tokens"].shape[0]):
        if case["greedy_mask"][row]:
            assert torch.equal(result.tokens[row], greedy.tokens[row])
        else:
            single = {k: v[row : row + 1] for k, v in case.items() if isinstance(v, torch.Tensor)}
            coins = VerifyUniforms(case["uniforms"].accept[row : row + 1], case["uniforms"].final[row : row + 1])
            assert torch.equal(result.tokens[row], chain_verify(**single, uniforms=coins).tokens[0])


def test_s5_sampling_rows_depend_on_draft_logits_greedy_rows_do_not():
    # Same drafts and coins, draft law q(1) = .5 vs .9: p(1)/q(1) = .6 vs .33 at u = .5.
    target, drafts, coins = _logits([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]), torch.tensor([[1]]), _coins([[0.5]], [0.1])
    sampled = [
        chain_verify(drafts, target, _logits(q), *_sampling(1), uniforms=coins).accepted.item()
        for q in ([0.2, 0.5, 0.3], [0.05, 0.9, 0.05])
    ]
    assert sampled == [1, 0]
    greedy = [
        chain_verify(drafts, target, _logits(q), torch.ones(1), torch.tensor([True]), uniforms=coins).tokens.tolist()
        for q in ([0.2, 0.5, 0.3], [0.05, 0.9, 0.05])
    ]
    assert greedy == [[[0, -1]], [[0, -1]]]


# --------------------------------------------------------------------------- uniform sources
def test_s5_explicit_uniforms_and_generators_are_deterministic():
    gen = torch.Generator().manual_seed(3)
    rows, drafts, vocab = 64, 3, 5
    inputs = (
        torch.randint(vocab, (rows, drafts), generator=gen),
        torch.randn(rows, drafts + 1, vocab, generator=gen),
        torch.randn(rows, drafts, vocab, generator=gen),
        torch.ones(rows),
        torch.zeros(rows, dtype=torch.bool),
    )
    coins = VerifyUniforms(
        torch.rand(rows, drafts, dtype=F64, generator=gen), torch.rand(rows, dtype=F64, generator=gen)
    )
    assert torch.equal(chain_verify(*inputs, uniforms=coins).tokens, chain_verify(*inputs, uniforms=coins).tokens)
    first = chain_verify(*inputs, generator=torch.Generator().manual_seed(11)).tokens
    again = chain_verify(*inputs, generator=torch.Generator().manual_seed(11)).tokens
    other = chain_verify(*inputs, generator=torch.Generator().manual_seed(12)).tokens
    assert torch.equal(first, again) and not torch.equal(first, other)


MASK64 = (1 << 64) - 1


def _splitmix64(value: int) -> int:
    """This test's splitmix64 finaliser on one Python int (Steele, Lea, Flood 2014), written
    apart from the reference's array version."""
    z = (value + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _hash_uniform(seed: int, position: int, stream: int) -> float:
    """This test's ``H(seed, position, stream)`` of SPEC S5's seeded rows, one triple at a
    time: absorb each as a 64-bit word (a negative seed modulo 2**64) with one mix each,
    then the top 53 bits as a float64."""
    state = _splitmix64(seed & MASK64)
    state = _splitmix64(state ^ (position & MASK64))
    state = _splitmix64(state ^ (stream & MASK64))
    return (state >> 11) * 2.0**-53


def test_s5_splitmix64_matches_published_first_output():
    # splitmix64 seeded with state 0 returns 0xE220A8397B1DCDAF first (Vigna's reference
    # generator, splitmix64.c, prng.di.unimi.it), then 0x6E789E6AA1B965F4 from state 1 * gamma.
    for mix in (_splitmix64, lambda z: int(_splitmix64_words(np.array([z], dtype=np.uint64))[0])):
        assert mix(0) == 0xE220A8397B1DCDAF
        assert mix(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4


#: ``seeded_uniforms(tensor([7, -5]), tensor([[0, 1], [10**6, 2**63 - 1]]), FINAL_STREAM)`` by the
#: per-triple Python loop before issue 45 (float reprs round-trip exactly).
PINNED = [[0.9633517225922468, 0.7901067743608727], [0.2355850432055333, 0.3222829976290962]]


def test_s5_seeded_uniforms_are_the_scalar_hash_bit_for_bit():
    """The reference's whole-array hash gives what this test's scalar ``_hash_uniform``
    gives per triple, to the last bit: seeds across int64 (negative ones taken modulo 2**64, both extremes),
    positions up to 2**63 - 1, streams past 2**64, non-contiguous positions, empty shapes.
    The values are pinned too (computed by the scalar hash before the change)."""
    gen = torch.Generator().manual_seed(0)
    seeds = torch.randint(-2**63, 2**63 - 1, (300,), dtype=torch.int64, generator=gen)
    seeds[:6] = torch.tensor([0, -1, 2**63 - 1, -2**63, 1, 7])
    positions = torch.randint(0, 2**62, (300, 5), generator=gen)
    positions[0] = torch.tensor([0, 1, 2**63 - 1, 10**6, 3])
    for stream in (ACCEPT_STREAM, FINAL_STREAM, 2, 2**63 + 5, 2**64 + 3, 2**70):
        expected = torch.tensor([[_hash_uniform(seed, position, stream) for position in row]
                                 for seed, row in zip(seeds.tolist(), positions.tolist())], dtype=F64)
        assert torch.equal(seeded_uniforms(seeds, positions, stream), expected), stream
    strided = torch.arange(6).reshape(3, 2).T
    expected = torch.tensor([[_hash_uniform(s, p, 0) for p in row] for s, row in zip([5, 6], strided.tolist())],
                            dtype=F64)
    assert torch.equal(seeded_uniforms(torch.tensor([5, 6]), strided, 0), expected)
    assert seeded_uniforms(torch.zeros(0, dtype=torch.int64), torch.zeros(0, 3, dtype=torch.int64), 0).shape == (0, 3)
    assert seeded_uniforms(torch.tensor([1, 2]), torch.zeros(2, 0, dtype=torch.int64), 0).shape == (2, 0)
    assert seeded_uniforms(torch.tensor([7, -5]), torch.tensor([[0, 1], [10**6, 2**63 - 1]]), 1).tolist() == PINNED


def test_s5_seeded_uniforms_repeat_and_separate_streams():
    seeds = torch.tensor([0, 1, -5])
    positions = torch.arange(12).reshape(3, 4)
    first = seeded_uniforms(seeds, positions, ACCEPT_STREAM)
    assert first.dtype == F64 and first.shape == (3, 4)
    assert ((first >= 0) & (first < 1)).all()
    assert torch.equal(first, seeded_uniforms(seeds.clone(), positions.clone(), ACCEPT_STREAM))
    final = seeded_uniforms(seeds, positions, FINAL_STREAM)
    assert not torch.isclose(first, final).any()
    shifted = seeded_uniforms(seeds, positions + 1, ACCEPT_STREAM)
    torch.testing.assert_close(shifted[:, :-1], first[:, 1:], rtol=0, atol=0)
    assert not torch.isclose(seeded_uniforms(seeds + 1, positions, ACCEPT_STREAM), first).any()


@pytest.mark.statistical
def test_s5_seeded_uniforms_are_uniform():
    # H0: the hash values are U[0, 1). 20 equal bins, n = 20,000 (1,000 expected per bin).
    positions = torch.arange(20_000).reshape(1, -1)
    values = seeded_uniforms(torch.tensor([2024]), positions, ACCEPT_STREAM)[0]
    counts = torch.histc(values, bins=20, min=0.0, max=1.0)
    assert scipy.stats.chisquare(counts.numpy()).pvalue > ALPHA


def test_s5_seeded_rows_repeat_and_match_their_explicit_uniforms():
    gen = torch.Generator().manual_seed(5)
    rows, drafts, vocab = 32, 4, 6
    inputs = (
        torch.randint(vocab, (rows, drafts), generator=gen),
        torch.randn(rows, drafts + 1, vocab, generator=gen),
        torch.randn(rows, drafts, vocab, generator=gen),
        torch.full((rows,), 0.8),
        torch.zeros(rows, dtype=torch.bool),
    )
    seeds, positions = torch.arange(rows) * 7919, torch.randint(0, 1000, (rows,), generator=gen)
    one = chain_verify(*inputs, seeds=seeds, positions=positions)
    two = chain_verify(*inputs, seeds=seeds, positions=positions)
    explicit = chain_verify(*inputs, uniforms=seeded_verify_uniforms(seeds, positions, drafts))
    assert torch.equal(one.tokens, two.tokens) and torch.equal(one.tokens, explicit.tokens)
    coins = seeded_verify_uniforms(seeds, positions, drafts)
    # Documented layout: coin j at (seed, position + j, stream 0), final at (seed, position, stream 1).
    offsets = positions[:, None] + torch.arange(drafts)
    assert torch.equal(coins.accept, seeded_uniforms(seeds, offsets, ACCEPT_STREAM))
    assert torch.equal(coins.final, seeded_uniforms(seeds, positions[:, None], FINAL_STREAM)[:, 0])
    torch.testing.assert_close(coins.accept[:, 1:], seeded_verify_uniforms(seeds, positions + 1, drafts).accept[:, :-1])
    assert not torch.isclose(coins.final, seeded_verify_uniforms(seeds, positions + 1, drafts).final).any()


# --------------------------------------------------------------------------- losslessness
@pytest.mark.statistical
def test_s5_committed_tokens_follow_the_target_law():
    # H0: the first committed token ~ p_1 and, given x_1 accepted, the second ~ p_2, with
    # drafts drawn from q (far from p: TV(p_1, q_1) = 0.5). n = 20,000 rows, chi-square.
    rows, vocab = 20_000, 5
    gen = torch.Generator().manual_seed(20240501)
    p = torch.tensor([[0.05, 0.1, 0.15, 0.3, 0.4], [0.4, 0.3, 0.1, 0.1, 0.1], [0.2] * 5], dtype=F64)
    q = torch.tensor([[0.4, 0.3, 0.15, 0.1, 0.05], [0.1, 0.1, 0.2, 0.3, 0.3]], dtype=F64)
    drafts = torch.stack([torch.multinomial(q[j], rows, replacement=True, generator=gen) for j in range(2)], dim=1)
    result = chain_verify(
        drafts, torch.log(p).float().expand(rows, -1, -1), torch.log(q).float().expand(rows, -1, -1),
        *_sampling(rows), generator=gen,
    )
    first = torch.bincount(result.tokens[:, 0], minlength=vocab).double()
    assert scipy.stats.chisquare(first.numpy(), (p[0] * rows).numpy()).pvalue > ALPHA
    second_tokens = result.tokens[result.accepted >= 1, 1]
    second = torch.bincount(second_tokens, minlength=vocab).double()
    assert scipy.stats.chisquare(second.numpy(), (p[1] * second_tokens.numel()).numpy()).pvalue > ALPHA


# --------------------------------------------------------------------------- bad inputs
def _good() -> dict:
    return dict(
        draft_tokens=torch.tensor([[1, 2]]),
        target_logits=torch.zeros(1, 3, 4),
        draft_logits=torch.zeros(1, 2, 4),
        temperatures=torch.ones(1),
        greedy_mask=torch.tensor([False]),
    )


@pytest.mark.parametrize(
    "change, error, name",
    [
        (dict(draft_tokens=torch.tensor([1, 2])), ValueError, "draft_tokens"),
        (dict(draft_tokens=torch.tensor([[1.0, 2.0]])), TypeError, "draft_tokens"),
        (dict(draft_tokens=torch.tensor([[1, 4]])), ValueError, "draft_tokens"),
        (dict(target_logits=torch.zeros(1, 2, 4)), ValueError, "target_logits"),
        (dict(target_logits=torch.zeros(1, 3, 4, dtype=torch.int64)), TypeError, "target_logits"),
        (dict(target_logits=torch.full((1, 3, 4), math.nan)), ValueError, "target_logits"),
        (dict(target_logits=torch.full((1, 3, 4), -math.inf)), ValueError, "target_logits"),
        (dict(draft_logits=torch.zeros(1, 2, 5)), ValueError, "draft_logits"),
        (dict(draft_logits=torch.zeros(2, 2, 4)), ValueError, "draft_logits"),
        (dict(temperatures=torch.tensor([math.nan])), ValueError, "temperatures"),
        (dict(temperatures=torch.tensor([-1.0])), ValueError, "temperatures"),
        (dict(temperatures=torch.ones(2)), ValueError, "temperatures"),
        (dict(greedy_mask=torch.tensor([0])), TypeError, "greedy_mask"),
        (dict(uniforms=(torch.zeros(1, 2), torch.zeros(1))), TypeError, "uniforms"),
        (dict(uniforms=VerifyUniforms(torch.zeros(1, 2, dtype=F64), torch.ones(1, dtype=F64))), ValueError,
         "uniforms.final"),
        (dict(uniforms=VerifyUniforms(torch.zeros(1, 3, dtype=F64), torch.zeros(1, dtype=F64))), ValueError,
         "uniforms.accept"),
        (dict(uniforms=VerifyUniforms(torch.zeros(1, 2), torch.zeros(1, dtype=F64))), TypeError, "uniforms.accept"),
        (dict(generator=torch.Generator(), seeds=torch.tensor([1]), positions=torch.tensor([0])), ValueError, "seeds"),
        (dict(generator=1), TypeError, "generator"),
        (dict(seeds=torch.tensor([1])), ValueError, "positions"),
        (dict(positions=torch.tensor([1])), ValueError, "seeds"),
        (dict(seeds=torch.tensor([1]), positions=torch.tensor([-1])), ValueError, "positions"),
        (dict(seeds=torch.tensor([1, 2]), positions=torch.tensor([0, 0])), ValueError, "seeds"),
        (dict(cap=-1), ValueError, "cap"),
        (dict(cap=1.5), TypeError, "cap"),
        (dict(cap=torch.tensor([1, 2])), ValueError, "cap"),
        (dict(draft_tokens=torch.tensor([[-1, 1]])), ValueError, "sentinels only after"),
        (dict(draft_tokens=torch.tensor([[-2, 1]])), ValueError, "draft_tokens"),
        (dict(temperatures=torch.tensor([math.inf])), ValueError, "temperatures"),
    ],
)
def test_s5_chain_verify_rejects_bad_inputs(change, error, name):
    with pytest.raises(error, match=name):
        chain_verify(**{**_good(), **change})


@pytest.mark.parametrize(
    "args, error, name",
    [
        ((torch.tensor([[0]]), torch.zeros(1, 1, 3)), ValueError, "target_logits"),
        ((torch.tensor([[0]]), torch.zeros(1, 2)), ValueError, "target_logits"),
        ((torch.tensor([[3]]), torch.zeros(1, 2, 3)), ValueError, "draft_tokens"),
    ],
)
def test_s5_greedy_verify_rejects_bad_inputs(args, error, name):
    with pytest.raises(error, match=name):
        greedy_verify(*args)


def test_s5_helpers_reject_bad_inputs():
    with pytest.raises(ValueError, match="q"):
        residual_distribution(torch.ones(3) / 3, torch.ones(4) / 4)
    with pytest.raises(ValueError, match="p"):
        residual_distribution(torch.tensor([1.5, -0.5]), torch.tensor([0.5, 0.5]))
    with pytest.raises(TypeError, match="seeds"):
        seeded_uniforms(torch.tensor([1.0]), torch.tensor([[0]]), 0)
    with pytest.raises(ValueError, match="stream"):
        seeded_uniforms(torch.tensor([1]), torch.tensor([[0]]), -1)
    with pytest.raises(ValueError, match="positions"):
        seeded_uniforms(torch.tensor([1]), torch.tensor([[0], [1]]), 0)


# --------------------------------------------------------------------------- degenerate values
def test_s5_sentinel_drafts_verify_as_a_cap_of_the_real_count():
    """SPEC S5: a row with n real drafts and -1 after them is the row under cap n + 1."""
    g = torch.Generator().manual_seed(5)
    rows, l, vocab = 40, 4, 6
    target, draft = torch.randn(rows, l + 1, vocab, generator=g), torch.randn(rows, l, vocab, generator=g)
    drafts = torch.randint(vocab, (rows, l), generator=g)
    real = torch.arange(rows) % (l + 1)
    sentinel = drafts.masked_fill(torch.arange(l) >= real[:, None], -1)
    coins = VerifyUniforms(torch.rand(rows, l, dtype=F64, generator=g), torch.rand(rows, dtype=F64, generator=g))
    temps, greedy = torch.ones(rows), torch.arange(rows) % 3 == 0
    got = chain_verify(sentinel, target, draft, temps, greedy, uniforms=coins)
    want = chain_verify(drafts, target, draft, temps, greedy, uniforms=coins, cap=real + 1)
    assert torch.equal(got.accepted, want.accepted) and torch.equal(got.tokens, want.tokens)
    assert bool((got.trimmed == 0).all()) and bool((got.accepted <= real).all())
    g_got, g_want = greedy_verify(sentinel, target), greedy_verify(drafts, target, cap=real + 1)
    assert torch.equal(g_got.tokens, g_want.tokens)


def test_s5_q_above_one_is_read_as_one():
    """SPEC S5: a handed-over q(x) = 1 + 2^-7 with p(x) = 1 passes for every coin below 1."""
    coins = VerifyUniforms(torch.tensor([[1 - 2**-24]], dtype=F64), torch.zeros(1, dtype=F64))
    q = torch.tensor([[[0.0, 1 + 2**-7, 0.0]]])
    target = _logits((0.0, 1.0, 0.0), (0.5, 0.25, 0.25))
    result = chain_verify(torch.tensor([[1]]), target, None, torch.ones(1), torch.tensor([False]), uniforms=coins,
                          draft_probs=q)
    assert result.accepted.tolist() == [1]


def test_s5_zero_q_draft_passes_iff_p_positive():
    coins = VerifyUniforms(torch.full((2, 1), 1 - 2**-24, dtype=F64), torch.zeros(2, dtype=F64))
    target = _logits((0.5, 0.0, 0.5), (0.0, 1.0, 0.0)).expand(2, -1, -1)
    draft = _logits((0.0, 0.0, 1.0)).expand(2, -1, -1)
    result = chain_verify(torch.tensor([[0], [1]]), target, draft, torch.ones(2), torch.zeros(2, dtype=torch.bool),
                          uniforms=coins)
    assert result.accepted.tolist() == [1, 0] and result.tokens[:, :2].tolist() == [[0, 1], [0, -1]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_s5_finite_checks_take_the_sum_first_and_still_find_every_bad_value(dtype):
    """Issue 45: ``check_finite`` and the logits check return at once when the tensor's sum is
    finite (a NaN or inf term makes it NaN or inf); otherwise the element checks run as
    before. A NaN, a +inf, a -inf where it is refused, and a +inf beside a -inf (their sum
    NaN) are found wherever they sit; finite values whose sum overflows still pass; -inf
    where allowed passes, an all -inf position does not."""
    from dspark_ref._checks import check_finite
    from dspark_ref.sampling import _check_logits as _check_step_logits
    from dspark_ref.verify import _check_logits

    big = torch.full((3, 4, 8), torch.finfo(dtype).max / 2, dtype=dtype)  # the sum overflows to inf
    check_finite("x", big)
    _check_logits("x", big)
    for bad, refused_with_neg_inf in ((math.nan, True), (math.inf, True), (-math.inf, False)):
        for where in ((0, 0, 0), (2, 3, 7), (1, 2, 5)):
            x = torch.randn(3, 4, 8).to(dtype)
            x[where] = bad
            with pytest.raises(ValueError, match=r"x: expected finite values, got .* at index " + re.escape(str(where))):
                check_finite("x", x)
            if refused_with_neg_inf:
                with pytest.raises(ValueError, match="x: expected finite values"):
                    check_finite("x", x, allow_neg_inf=True)
                with pytest.raises(ValueError, match="x: expected finite values"):
                    _check_logits("x", x)
            else:
                check_finite("x", x, allow_neg_inf=True)
                _check_logits("x", x)
    both = torch.randn(3, 4, 8).to(dtype)
    both[0, 1, 2], both[2, 0, 1] = math.inf, -math.inf
    with pytest.raises(ValueError, match=re.escape("got inf at index (0, 1, 2)")):
        _check_logits("x", both)
    dead = torch.randn(3, 4, 8).to(dtype)
    dead[1, 2] = -math.inf
    with pytest.raises(ValueError, match=re.escape("position (1, 2) is all -inf")):
        _check_logits("x", dead)
    # the step sampler's [B, V] logits check (SPEC S3) takes the same first step
    with pytest.raises(ValueError, match=re.escape("row 6 is all -inf")):
        _check_step_logits("x", dead.reshape(12, 8))
    with pytest.raises(ValueError, match=re.escape("got inf at index (0, 10)")):
        _check_step_logits("x", both.reshape(3, 32))
    nan = torch.randn(12, 8).to(dtype)
    nan[11, 7] = math.nan
    with pytest.raises(ValueError, match=re.escape("got nan at index (11, 7)")):
        _check_step_logits("x", nan)
    _check_step_logits("x", big.reshape(12, 8))
