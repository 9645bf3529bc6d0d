"""Reference unit tests of ``dspark_ref.sampling`` (SPEC S3 step sampling).

Exact checks on hand-computed rows (greedy ties, clamp, greedy rules, race keys, the
truncation sets), a float64 Gumbel-max oracle for the race, one chi-square smoke test of
the sampled law, and bad-input checks. The kept set of a truncation is read exactly with
"spike" noise: a tiny ``E_v`` makes token ``v`` win iff its probability is non-zero.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy import stats

from dspark_ref.sampling import (
    GREEDY_RULES,
    TEMPERATURE_FLOOR,
    clamp_temperature,
    exponential_noise,
    exponential_race,
    greedy_argmax,
    greedy_rows,
    sample_step,
    truncate_logits,
)
from dspark_ref.sampling import _min_p_cut, _top_k_cut, _top_p_cut

INF = math.inf
# Log-space slack of the float32 race against the float64 oracle: rounding of L/T
# (|L/T| <= ~200 here) and of p/E stays far below this.
RACE_LOG_TOLERANCE = 1e-4


def _gumbel_scores(logits, temperatures, noise):
    """float64 oracle ``L/T - log E`` (Gumbel-max form), sharing no code with the race."""
    temps = temperatures.double().clamp(min=TEMPERATURE_FLOOR)[:, None]
    return logits.double() / temps - noise.double().log()


def _assert_race_winner(tokens, logits, temperatures, noise):
    """Each token's oracle score is the row maximum, up to float32 rounding near-ties."""
    scores = _gumbel_scores(logits, temperatures, noise)
    chosen = scores.gather(1, tokens[:, None]).squeeze(1)
    best = scores.max(dim=1).values
    assert bool((chosen >= best - RACE_LOG_TOLERANCE).all()), (tokens, scores.argmax(dim=1))


def _support(logits, temperatures, **truncation):
    """Exact set of tokens ``sample_step`` can draw for the single row ``logits[V]``."""
    vocab = logits.shape[0]
    noise = torch.ones(vocab, vocab)
    noise.fill_diagonal_(1e-30)  # row v: token v wins iff its probability is > 0
    tokens = sample_step(
        logits.expand(vocab, vocab),
        torch.full((vocab,), temperatures),
        torch.zeros(vocab, dtype=torch.bool),
        noise=noise,
        **{k: v.expand(vocab) for k, v in truncation.items()},
    )
    return {v for v in range(vocab) if int(tokens[v]) == v}


# A row with probabilities 0.5, 0.2, 0.15, 0.1, 0.05 at T = 1.
FIVE_PROBS = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]).log()


# --- clamp_temperature / greedy_rows -------------------------------------------------


def test_s3_clamp_temperature_floors_at_1e_5():
    out = clamp_temperature(torch.tensor([0.0, 1e-7, 1e-5, 0.5, 2.0], dtype=torch.float64))
    assert out.dtype == torch.float32
    expected = torch.tensor([1e-5, 1e-5, 1e-5, 0.5, 2.0], dtype=torch.float32)
    assert torch.equal(out, expected)


@pytest.mark.parametrize(
    "temperatures, error, match",
    [
        (torch.tensor([1.0, math.nan]), ValueError, "temperatures"),
        (torch.tensor([1.0, -0.1]), ValueError, "temperatures"),
        (torch.tensor([[1.0]]), ValueError, "temperatures"),
        (torch.tensor([1, 2]), TypeError, "temperatures"),
        ([1.0], TypeError, "temperatures"),
    ],
)
def test_s3_clamp_temperature_rejects_bad_input(temperatures, error, match):
    with pytest.raises(error, match=match):
        clamp_temperature(temperatures)


def test_s3_greedy_rows_top_k_rule():
    top_k = torch.tensor([-1, 0, 1, 2, 50])
    mask = greedy_rows(temperatures=torch.ones(5), top_k=top_k, rule="top_k")
    assert mask.tolist() == [True, True, True, False, False]


def test_s3_greedy_rows_temperature_rule_ignores_top_k():
    temperatures = torch.tensor([0.0, 9.9e-6, 1e-5, 0.7])
    mask = greedy_rows(temperatures=temperatures, top_k=torch.tensor([1, 1, 1, 1]), rule="temperature")
    assert mask.tolist() == [True, True, False, False]
    assert GREEDY_RULES == ("top_k", "temperature")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(rule="top_p"), ValueError, "rule"),
        (dict(rule="top_k"), ValueError, "top_k"),
        (dict(rule="top_k", top_k=torch.tensor([1.0, 2.0])), TypeError, "top_k"),
        (dict(rule="top_k", top_k=torch.tensor([1])), ValueError, "top_k"),
        (dict(rule="temperature", temperatures=torch.tensor([math.nan, 1.0])), ValueError, "temperatures"),
    ],
)
def test_s3_greedy_rows_rejects_bad_input(kwargs, error, match):
    kwargs.setdefault("temperatures", torch.ones(2))
    with pytest.raises(error, match=match):
        greedy_rows(**kwargs)


# --- greedy_argmax -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_s3_greedy_argmax_ties_to_lowest_index(dtype):
    logits = torch.tensor([[1.0, 3.0, 3.0], [-INF, 2.0, 2.0], [5.0, 5.0, 5.0], [0.0, -INF, 1.0]], dtype=dtype)
    assert greedy_argmax(logits).tolist() == [1, 1, 0, 2]


@pytest.mark.parametrize("vocab", [255, 256, 32767, 32768, 70000])
def test_s3_greedy_argmax_past_every_narrow_index_width(vocab):
    """The argmax's positions are kept in the narrowest integer type holding ``V``: ids past
    255 and 32767 come out whole, ties still to the lowest."""
    logits = torch.zeros(3, vocab)
    logits[0, vocab - 1] = 1.0
    logits[1, [vocab - 2, vocab - 1]] = 1.0
    logits[2, [300 % vocab, vocab - 1]] = 1.0
    assert greedy_argmax(logits).tolist() == [vocab - 1, vocab - 2, min(300 % vocab, vocab - 1)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(-3, 3), min_size=1, max_size=12), min_size=1, max_size=5).filter(
    lambda rows: len({len(r) for r in rows}) == 1
))
def test_s3_greedy_argmax_matches_first_maximum(rows):
    expected = [row.index(max(row)) for row in rows]  # list.index: the first occurrence
    assert greedy_argmax(torch.tensor(rows, dtype=torch.float32)).tolist() == expected


@pytest.mark.parametrize(
    "logits, error",
    [
        (torch.zeros(3), ValueError),
        (torch.zeros(2, 0), ValueError),
        (torch.zeros(2, 3, dtype=torch.int64), TypeError),
        (torch.tensor([[0.0, math.nan]]), ValueError),
        (torch.tensor([[0.0, INF]]), ValueError),
        (torch.tensor([[0.0, 1.0], [-INF, -INF]]), ValueError),
    ],
)
def test_s3_greedy_argmax_rejects_bad_logits(logits, error):
    with pytest.raises(error, match="logits"):
        greedy_argmax(logits)


# --- exponential_noise ---------------------------------------------------------------


def test_s3_exponential_noise_is_seeded_fresh_float32():
    first = exponential_noise((4, 100), generator=torch.Generator().manual_seed(7))
    again = exponential_noise((4, 100), generator=torch.Generator().manual_seed(7))
    generator = torch.Generator().manual_seed(7)
    exponential_noise((4, 100), generator=generator)
    second_draw = exponential_noise((4, 100), generator=generator)
    assert first.dtype == torch.float32 and first.shape == (4, 100)
    assert bool((first > 0).all())
    assert torch.equal(first, again)
    assert not torch.equal(first, second_draw)


def test_s3_exponential_noise_rejects_generator_on_another_device():
    with pytest.raises(ValueError, match="generator"):
        exponential_noise((2, 3), generator=torch.Generator(), device="meta")


def test_s3_exponential_noise_rejects_bad_shape():
    with pytest.raises(ValueError, match=r"shape\[1\]"):
        exponential_noise((2, -1))
    with pytest.raises(TypeError, match=r"shape\[0\]"):
        exponential_noise((2.0, 3))


# --- exponential_race ----------------------------------------------------------------


def test_s3_exponential_race_hand_computed_keys():
    # p = (1/3, 2/3): keys with E = (1, 1) are (1/3, 2/3); with E = (1/4, 1): (4/3, 2/3).
    logits = torch.tensor([[0.0, math.log(2.0)], [0.0, math.log(2.0)]])
    noise = torch.tensor([[1.0, 1.0], [0.25, 1.0]])
    assert exponential_race(logits, torch.ones(2), noise).tolist() == [1, 0]


def test_s3_exponential_race_temperature_sharpens():
    # At T = 0.1 the gap 1.0 becomes 10 nats: E_0 = 1e-3 no longer compensates.
    logits = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    noise = torch.tensor([[1.0, 1e-3], [1.0, 1e-3]])
    assert exponential_race(logits, torch.tensor([1.0, 0.1]), noise).tolist() == [1, 0]


def test_s3_exponential_race_zero_temperature_is_clamped_not_nan():
    logits = torch.tensor([[0.0, 1e-4, -INF]])
    # At T = 1e-5 the gap is 10 nats (p ratio e^10); the noise ratio 1e3 does not flip it.
    assert exponential_race(logits, torch.zeros(1), torch.tensor([[1e-3, 1.0, 1.0]])).tolist() == [1]


def test_s3_exponential_race_zero_probability_never_wins_even_with_zero_noise():
    logits = torch.tensor([[-INF, 0.0, 0.0, -INF], [0.0, -200.0, 0.0, 0.0]])
    noise = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0]])
    tokens = exponential_race(logits, torch.tensor([1.0, 0.5]), noise)
    # Row 0: -inf tokens with E = 0 lose; ties between keys go to the lowest index.
    # Row 1: p = e^-400 underflows to 0 in float32, so E = 0 does not make it win.
    assert tokens.tolist() == [1, 0]


def test_s3_exponential_race_exact_ties_go_to_lowest_index():
    logits = torch.zeros(2, 5)
    noise = torch.tensor([[2.0, 1.0, 1.0, 1.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    assert exponential_race(logits, torch.ones(2), noise).tolist() == [1, 0]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 4),
    vocab=st.integers(1, 64),
    scale=st.sampled_from([0.1, 1.0, 8.0]),
    masked_fraction=st.sampled_from([0.0, 0.5]),
)
def test_s3_exponential_race_is_gumbel_max(seed, rows, vocab, scale, masked_fraction):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=generator) * scale
    logits[torch.rand(rows, vocab, generator=generator) < masked_fraction] = -INF
    logits[:, 0] = logits[:, 0].clamp(min=-1.0)  # keep one finite logit per row
    temperatures = torch.rand(rows, generator=generator) * 2 + 0.05
    noise = exponential_noise((rows, vocab), generator=generator)
    _assert_race_winner(exponential_race(logits, temperatures, noise), logits, temperatures, noise)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(noise=torch.ones(2, 4)), ValueError, "noise"),
        (dict(noise=torch.ones(2, 3, dtype=torch.float64)), TypeError, "noise"),
        (dict(noise=torch.tensor([[1.0, -1.0, 1.0], [1.0, 1.0, 1.0]])), ValueError, "noise"),
        (dict(noise=torch.tensor([[1.0, math.nan, 1.0], [1.0, 1.0, 1.0]])), ValueError, "noise"),
        (dict(temperatures=torch.ones(3)), ValueError, "temperatures"),
        (dict(temperatures=torch.tensor([1.0, math.nan])), ValueError, "temperatures"),
        (dict(logits=torch.tensor([[0.0, 0.0, 0.0], [-INF, -INF, -INF]])), ValueError, "logits"),
    ],
)
def test_s3_exponential_race_rejects_bad_input(kwargs, error, match):
    args = dict(logits=torch.zeros(2, 3), temperatures=torch.ones(2), noise=torch.ones(2, 3))
    args.update(kwargs)
    with pytest.raises(error, match=match):
        exponential_race(**args)


# --- sample_step ---------------------------------------------------------------------


def test_s3_sample_step_mixes_greedy_rows_and_race_rows():
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 40, generator=generator)
    temperatures = torch.tensor([0.5, 1.0, 0.0, 2.0, 1.0, 0.7])
    greedy = torch.tensor([True, False, True, False, True, False])
    noise = exponential_noise((6, 40), generator=generator)
    tokens = sample_step(logits, temperatures, greedy, noise=noise)
    expected = torch.where(greedy, greedy_argmax(logits), exponential_race(logits, temperatures, noise))
    assert torch.equal(tokens, expected)
    assert tokens.dtype == torch.int64


def test_s3_sample_step_clamps_zero_temperature_of_sampling_rows():
    # At T = 1e-5 the gaps are 1e5 nats: the top token wins whatever the noise.
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    noise = torch.tensor([[1e-3, 10.0, 1e-3]])
    tokens = sample_step(logits, torch.zeros(1), torch.zeros(1, dtype=torch.bool), noise=noise)
    assert tokens.tolist() == [1]


def test_s3_sample_step_vocab_crop_never_emits_padding_ids():
    rows, vocab, padded = 4000, 7, 16
    logits = torch.zeros(rows, padded)
    logits[:, vocab:] = 50.0  # padding columns would win every draw if not cropped
    greedy = torch.arange(rows) % 4 == 0
    tokens = sample_step(
        logits, torch.ones(rows), greedy, vocab_size=vocab, generator=torch.Generator().manual_seed(0)
    )
    assert int(tokens.max()) < vocab
    assert bool((tokens[greedy] == 0).all())
    assert len(set(tokens[~greedy].tolist())) == vocab  # every real id is drawn


def test_s3_sample_step_accepts_noise_of_unpadded_width():
    logits = torch.tensor([[0.0, 0.0, 0.0, 9.0]])
    noise = torch.tensor([[1.0, 0.1, 1.0]])
    tokens = sample_step(logits, torch.ones(1), torch.zeros(1, dtype=torch.bool), noise=noise, vocab_size=3)
    assert tokens.tolist() == [1]


def test_s3_sample_step_never_draws_minus_inf_tokens():
    rows = 5000
    logits = torch.tensor([-INF, 0.0, -INF, 3.0, -INF, -1.0]).expand(rows, 6)
    tokens = sample_step(
        logits, torch.full((rows,), 5.0), torch.zeros(rows, dtype=torch.bool),
        generator=torch.Generator().manual_seed(11),
    )
    assert set(tokens.tolist()) == {1, 3, 5}


def test_s3_sample_step_fresh_noise_every_call():
    generator = torch.Generator().manual_seed(5)
    logits = torch.zeros(8, 1000)
    args = (logits, torch.ones(8), torch.zeros(8, dtype=torch.bool))
    first = sample_step(*args, generator=generator)
    second = sample_step(*args, generator=generator)
    replay = sample_step(*args, generator=torch.Generator().manual_seed(5))
    assert not torch.equal(first, second)
    assert torch.equal(first, replay)


@pytest.mark.parametrize(
    "truncation, kept",
    [
        ({}, {0, 1, 2, 3, 4}),
        (dict(top_k=torch.tensor([2])), {0, 1}),
        (dict(top_k=torch.tensor([1])), {0}),
        (dict(top_k=torch.tensor([0])), {0, 1, 2, 3, 4}),
        (dict(top_k=torch.tensor([-1])), {0, 1, 2, 3, 4}),
        (dict(top_k=torch.tensor([9])), {0, 1, 2, 3, 4}),
        (dict(top_p=torch.tensor([0.6])), {0, 1}),
        (dict(top_p=torch.tensor([0.86])), {0, 1, 2, 3}),
        (dict(top_p=torch.tensor([1.0])), {0, 1, 2, 3, 4}),
        (dict(min_p=torch.tensor([0.35])), {0, 1}),
        (dict(min_p=torch.tensor([0.25])), {0, 1, 2}),
        (dict(min_p=torch.tensor([0.0])), {0, 1, 2, 3, 4}),
        # top-p runs on the renormalised top-4 law (0.526, 0.211, 0.158, 0.105): the mass
        # before token 2 is 0.737 >= 0.72; on the raw law it would be 0.70 and keep token 2.
        (dict(top_k=torch.tensor([4]), top_p=torch.tensor([0.72])), {0, 1}),
        (dict(top_k=torch.tensor([3]), min_p=torch.tensor([0.35])), {0, 1}),
    ],
)
def test_s3_truncation_kept_sets(truncation, kept):
    assert _support(FIVE_PROBS, 1.0, **truncation) == kept


def test_s3_truncation_keeps_ties_at_the_cut():
    logits = torch.tensor([0.4, 0.2, 0.2, 0.2]).log()
    assert _support(logits, 1.0, top_k=torch.tensor([2])) == {0, 1, 2, 3}
    assert _support(logits, 1.0, top_p=torch.tensor([0.5])) == {0, 1, 2, 3}


def test_s3_truncation_uses_tempered_probabilities():
    # At T = 0.5 the law is (0.5^2, 0.2^2, ...) / 0.325: token 0 alone holds 0.769 >= 0.65.
    assert _support(FIVE_PROBS, 0.5, top_p=torch.tensor([0.65])) == {0}
    assert _support(FIVE_PROBS, 1.0, top_p=torch.tensor([0.65])) == {0, 1}


def test_s3_truncation_is_per_row_and_greedy_rows_ignore_it():
    logits = FIVE_PROBS.expand(3, 5)
    noise = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1e-30]] * 3)
    tokens = sample_step(
        logits, torch.ones(3), torch.tensor([False, False, True]), noise=noise,
        top_k=torch.tensor([0, 4, 2]), min_p=torch.tensor([0.0, 0.0, 0.9]),
    )
    assert tokens.tolist() == [4, 0, 0]  # row 1 cut token 4, the spike falls back to 0


def _every_row_cut(scaled, top_k, top_p, min_p, ties):
    """The three cuts of ``truncate_logits`` computed on every row, none left out."""
    width = scaled.shape[-1]
    k = top_k.clamp(min=0)
    k = torch.where((k == 0) | (k >= width), width, k)
    return _min_p_cut(_top_p_cut(_top_k_cut(scaled, k, ties), top_p), min_p)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ties", ["all", "lowest"])
def test_s3_truncation_leaves_out_only_rows_it_would_not_change(dtype, ties):
    """Rows whose parameters keep every token skip the cuts' sorts and softmaxes (issue 45),
    bit for bit as if cut: a top_p = 1 row whose smallest probabilities sit within the
    cumulative sum's rounding of 0 (spans of tempered logits up to 60 here) loses them as
    the full computation makes it, whether its batch is uniform or mixed."""
    gen = torch.Generator().manual_seed(11)
    rows, vocab = 3000, 8
    spans = torch.linspace(0.0, 60.0, rows, dtype=torch.float64)[:, None]
    scaled = (torch.rand(rows, vocab, generator=gen, dtype=torch.float64) * spans).to(dtype)
    scaled[::7, 3] = -INF
    ones, zeros = torch.ones(rows, dtype=dtype), torch.zeros(rows, dtype=dtype)
    neutral_k = torch.zeros(rows, dtype=torch.int64)
    every_row = _every_row_cut(scaled, neutral_k, ones, zeros, ties)
    assert int((every_row == -INF).sum()) > int((scaled == -INF).sum()), "no row lost a token at top_p = 1"
    assert torch.equal(truncate_logits(scaled, neutral_k, ones, zeros, top_k_ties=ties), every_row)
    mixed = (torch.randint(-1, vocab + 2, (rows,), generator=gen),
             torch.where(torch.rand(rows, generator=gen) < 0.5, 1.0, torch.rand(rows, generator=gen)).to(dtype),
             torch.where(torch.rand(rows, generator=gen) < 0.5, 0.0, torch.rand(rows, generator=gen) * 0.3).to(dtype))
    assert torch.equal(truncate_logits(scaled, *mixed, top_k_ties=ties), _every_row_cut(scaled, *mixed, ties))


def test_s3_finite_values_whose_sum_overflows_are_finite():
    """The finiteness check's one-reduction shortcut falls back to the element scan when the
    sum overflows: float32 logits near the largest finite value pass."""
    logits = torch.tensor([[3e38, 3e38, -1.0], [1.0, 3e38, 3e38]])
    tokens = sample_step(logits, torch.ones(2), torch.tensor([False, True]), noise=torch.ones(2, 3))
    assert tokens.tolist() == [0, 1]


@pytest.mark.statistical
@pytest.mark.parametrize("top_k", [None, 3])
def test_s3_sample_step_chi_square_smoke(top_k):
    """H0: draws follow softmax(L / T) (renormalised over the top 3 for top_k=3).

    Pearson chi-square, alpha 1e-6 (a smoke test; conformance/ holds the powered tests),
    n = 20,000 draws in one batch; every expected count is >= 600.
    """
    n, temperature = 20_000, 0.7
    logits = torch.tensor([0.3, -0.2, 0.9, 0.0, -0.5, 0.4])
    probs = torch.softmax(logits.double() / temperature, dim=0)
    truncation = {}
    if top_k is not None:
        probs[probs < probs.topk(top_k).values[-1]] = 0.0
        probs /= probs.sum()
        truncation = dict(top_k=torch.full((n,), top_k))
    tokens = sample_step(
        logits.expand(n, 6), torch.full((n,), temperature), torch.zeros(n, dtype=torch.bool),
        generator=torch.Generator().manual_seed(20_260_101), **truncation,
    )
    counts = torch.bincount(tokens, minlength=6).double()
    support = probs > 0
    assert counts[~support].sum() == 0
    result = stats.chisquare(counts[support].numpy(), (n * probs[support]).numpy())
    assert result.pvalue > 1e-6, f"chi-square p = {result.pvalue:.3g}, counts {counts.tolist()}"


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(logits=torch.zeros(4)), ValueError, "logits"),
        (dict(logits=torch.zeros(2, 4, dtype=torch.int32)), TypeError, "logits"),
        (dict(logits=torch.tensor([[-INF, -INF, 1.0, 1.0]] * 2), vocab_size=2), ValueError, "logits"),
        (dict(greedy_mask=torch.zeros(2, dtype=torch.int64)), TypeError, "greedy_mask"),
        (dict(greedy_mask=torch.zeros(3, dtype=torch.bool)), ValueError, "greedy_mask"),
        (dict(temperatures=torch.tensor([1.0, math.nan])), ValueError, "temperatures"),
        (dict(vocab_size=0), ValueError, "vocab_size"),
        (dict(vocab_size=5), ValueError, "vocab_size"),
        (dict(vocab_size=2.0), TypeError, "vocab_size"),
        (dict(noise=torch.ones(2, 3)), ValueError, "noise"),
        (dict(noise=torch.ones(2, 4), generator=torch.Generator()), ValueError, "generator"),
        (dict(top_k=torch.tensor([1.0, 2.0])), TypeError, "top_k"),
        (dict(top_k=torch.tensor([1, 2, 3])), ValueError, "top_k"),
        (dict(top_p=torch.tensor([0.0, 0.5])), ValueError, "top_p"),
        (dict(top_p=torch.tensor([math.nan, 0.5])), ValueError, "top_p"),
        (dict(min_p=torch.tensor([1.5, 0.5])), ValueError, "min_p"),
        (dict(min_p=torch.tensor([-0.1, 0.5])), ValueError, "min_p"),
    ],
)
def test_s3_sample_step_rejects_bad_input(kwargs, error, match):
    args = dict(
        logits=torch.zeros(2, 4), temperatures=torch.ones(2), greedy_mask=torch.zeros(2, dtype=torch.bool)
    )
    args.update(kwargs)
    logits, temperatures, greedy_mask = args.pop("logits"), args.pop("temperatures"), args.pop("greedy_mask")
    with pytest.raises(error, match=match):
        sample_step(logits, temperatures, greedy_mask, **args)
