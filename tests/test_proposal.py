"""Reference tests for base logits and the eager draft proposal (SPEC S1, with S2/S3).

Hand-computed LM-head products, padding crop, greedy determinism, teacher-forcing
consistency of the proposal, fresh noise per call, and bad inputs. Add a case by adding
a test named ``test_s1_<case>``.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_ref.markov import GatedMarkovHead, RNNMarkovHead, VanillaMarkovHead, apply_block_logits, sample_block
from dspark_ref.proposal import DraftProposal, base_logits, propose_block


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def draft_inputs(rows=3, gamma=4, vocab=20, pad=4, hidden=6, seed=0):
    gen = seeded(seed)
    weight = torch.randn(vocab + pad, hidden, generator=gen)
    weight[vocab:] = 100.0  # padding rows would win every draw if not cropped
    return dict(
        hidden=torch.randn(rows, gamma, hidden, generator=gen),
        lm_head_weight=weight,
        org_vocab_size=vocab,
        anchor=torch.randint(vocab, (rows,), generator=gen),
    )


def test_s1_base_logits_hand_computed_and_cropped():
    hidden = torch.tensor([[[1.0, 2.0], [0.0, -1.0]]])  # [B=1, gamma=2, d=2]
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [9.0, 9.0]])  # V_pad=4, V=3
    got = base_logits(hidden, weight, 3)
    assert got.shape == (1, 2, 3)
    assert torch.equal(got, torch.tensor([[[1.0, 2.0, 3.0], [0.0, -1.0, -1.0]]]))


@settings(max_examples=20, deadline=None)
@given(
    rows=st.integers(1, 3), gamma=st.integers(1, 4), vocab=st.integers(1, 30), pad=st.integers(0, 8),
    d=st.integers(1, 8), seed=st.integers(0, 2**31 - 1), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
def test_s1_base_logits_is_the_cropped_lm_head_product(rows, gamma, vocab, pad, d, seed, dtype):
    gen = seeded(seed)
    hidden = torch.randn(rows, gamma, d, generator=gen).to(dtype)
    weight = torch.randn(vocab + pad, d, generator=gen).to(dtype)
    got = base_logits(hidden, weight, vocab)
    want = torch.einsum("bgd,vd->bgv", hidden.double(), weight[:vocab].double())
    assert got.shape == (rows, gamma, vocab) and got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * d)


@pytest.mark.parametrize("kind", ["vanilla", "gated", "rnn"])
def test_s1_greedy_proposal_is_deterministic_argmax_of_corrected_logits(kind):
    inputs = draft_inputs()
    head = {
        "vanilla": lambda: VanillaMarkovHead(20, 4, scale=0.5, generator=seeded(1)),
        "gated": lambda: GatedMarkovHead(20, 4, 6, scale=0.5, generator=seeded(1)),
        "rnn": lambda: RNNMarkovHead(20, 4, 6, scale=0.5, generator=seeded(1)),
    }[kind]()
    rows = inputs["anchor"].shape[0]
    prop = propose_block(
        head, **inputs, temperatures=torch.ones(rows), greedy_mask=torch.ones(rows, dtype=torch.bool),
        generator=seeded(2),
    )
    assert isinstance(prop, DraftProposal)
    assert prop.tokens.shape == (rows, 4) and prop.tokens.dtype == torch.int64
    assert prop.corrected_logits.shape == (rows, 4, 20) and prop.corrected_logits.dtype == torch.float32
    assert torch.equal(prop.tokens, prop.corrected_logits.argmax(-1))
    u = base_logits(inputs["hidden"], inputs["lm_head_weight"], 20)
    expected = sample_block(head, u, inputs["anchor"], inputs["hidden"], lambda logits, k: logits.argmax(-1))
    assert torch.equal(prop.tokens, expected.tokens)
    assert torch.equal(prop.corrected_logits, expected.corrected_logits)


def test_s1_proposal_corrected_logits_match_teacher_forcing_and_never_use_padding():
    inputs = draft_inputs(rows=4, seed=3)
    head = RNNMarkovHead(20, 4, 6, scale=0.5, generator=seeded(4))
    greedy = torch.tensor([True, False, False, True])
    temps = torch.tensor([0.0, 0.7, 1.5, 1.0])
    prop = propose_block(head, **inputs, temperatures=temps, greedy_mask=greedy, generator=seeded(5))
    u = base_logits(inputs["hidden"], inputs["lm_head_weight"], 20)
    forced = apply_block_logits(
        head, u, torch.cat([inputs["anchor"][:, None], prop.tokens[:, :-1]], 1), inputs["hidden"]
    )
    assert torch.equal(prop.corrected_logits, forced)
    assert bool((prop.tokens < 20).all())
    assert torch.equal(prop.greedy_mask, greedy)
    assert torch.equal(prop.temperatures, torch.tensor([1e-5, 0.7, 1.5, 1.0]))


def test_s1_seeded_proposal_repeats_and_fresh_noise_differs():
    vocab = 4096
    gen = seeded(6)
    inputs = dict(
        hidden=torch.zeros(2, 3, 4), lm_head_weight=torch.randn(vocab, 4, generator=gen),
        org_vocab_size=vocab, anchor=torch.tensor([0, 1]),
    )
    head = VanillaMarkovHead(vocab, 2, scale=0.0)  # flat corrected logits: uniform draws
    sampling = dict(temperatures=torch.ones(2), greedy_mask=torch.zeros(2, dtype=torch.bool))
    a = propose_block(head, **inputs, **sampling, generator=seeded(7))
    b = propose_block(head, **inputs, **sampling, generator=seeded(7))
    assert torch.equal(a.tokens, b.tokens)
    shared = seeded(8)
    c = propose_block(head, **inputs, **sampling, generator=shared)
    d = propose_block(head, **inputs, **sampling, generator=shared)
    # Six uniform draws over 4096 ids all equal: probability 4096**-6.
    assert not torch.equal(c.tokens, d.tokens)


def _propose_args():
    inputs = draft_inputs(rows=2, gamma=3, vocab=10, pad=2, hidden=4)
    return dict(
        head=GatedMarkovHead(10, 2, 4, generator=seeded(0)), **inputs,
        temperatures=torch.ones(2), greedy_mask=torch.zeros(2, dtype=torch.bool), generator=None,
    )


@pytest.mark.parametrize(
    ("override", "error", "match"),
    [
        ({"head": "vanilla"}, TypeError, "head"),
        ({"hidden": torch.zeros(2, 4)}, ValueError, "hidden"),
        ({"hidden": torch.zeros(2, 3, 4, dtype=torch.int64)}, TypeError, "hidden"),
        ({"lm_head_weight": torch.zeros(12, 5)}, ValueError, "lm_head_weight"),
        ({"lm_head_weight": torch.zeros(12, 4, dtype=torch.float64)}, TypeError, "lm_head_weight"),
        ({"lm_head_weight": torch.zeros(8, 4)}, ValueError, "org_vocab_size"),
        ({"org_vocab_size": 9}, ValueError, "org_vocab_size"),
        ({"anchor": torch.tensor([0, 1, 2])}, ValueError, "anchor"),
        ({"anchor": torch.tensor([0, 10])}, ValueError, "anchor"),
        ({"anchor": torch.tensor([0.0, 1.0])}, TypeError, "anchor"),
        ({"temperatures": torch.tensor([1.0, math.nan])}, ValueError, "temperatures"),
        ({"temperatures": torch.tensor([1.0, -0.5])}, ValueError, "temperatures"),
        ({"temperatures": torch.ones(3)}, ValueError, "temperatures"),
        ({"greedy_mask": torch.zeros(2, dtype=torch.int64)}, TypeError, "greedy_mask"),
        ({"generator": 7}, TypeError, "generator"),
    ],
)
def test_s1_propose_block_rejects_bad_inputs(override, error, match):
    with pytest.raises(error, match=match):
        propose_block(**(_propose_args() | override))


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((torch.zeros(1, 2, 3), torch.zeros(4, 3), 0), ValueError, "org_vocab_size"),
        ((torch.zeros(1, 2, 3), torch.zeros(4, 3), 5), ValueError, "org_vocab_size"),
        ((torch.zeros(1, 2, 3), torch.zeros(4, 3), 2.0), TypeError, "org_vocab_size"),
        ((torch.zeros(1, 2, 3), torch.zeros(4), 2), ValueError, "lm_head_weight"),
        ((torch.zeros(2, 3), torch.zeros(4, 3), 2), ValueError, "hidden"),
    ],
)
def test_s1_base_logits_rejects_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        base_logits(*args)
