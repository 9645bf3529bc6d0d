"""Reference tests for SPEC S1 layouts and draft vocabularies (``dspark_ref.layouts``,
``dspark_ref.proposal.draft_block``): hand-checked crops and lifts, the d2t map applied
before a draw is stored and before it conditions the next step, and bad inputs. Add a case
by adding a test named ``test_s1_<case>``."""

from __future__ import annotations

import math

import pytest
import torch

from dspark_ref.layouts import block_positions, check_d2t, lift_to_target
from dspark_ref.markov import VanillaMarkovHead, apply_block_logits, build_markov_head
from dspark_ref.proposal import draft_block


def argmax_sampler(logits, k):
    return logits.argmax(-1)


def test_s1_bonus_anchor_crops_position_zero():
    values = torch.arange(12.0).reshape(1, 4, 3)
    assert torch.equal(block_positions(values, "bonus-anchor"), values[:, 1:])
    assert block_positions(values, "anchor-first") is values
    with pytest.raises(ValueError, match="layout"):
        block_positions(values, "next-token")


def test_s1_d2t_validation_names_d2t():
    check_d2t(torch.tensor([4, 0, 2]), 3, 5)
    for bad, match in ((torch.tensor([4, 0]), "d2t"), (torch.tensor([4, 0, 5]), r"\[0, 5\)"),
                       (torch.tensor([4, 0, -1]), r"\[0, 5\)"), (torch.tensor([4, 0, 4]), "distinct")):
        with pytest.raises(ValueError, match=match):
            check_d2t(bad, 3, 5)
    with pytest.raises(TypeError, match="d2t"):
        check_d2t(torch.tensor([4.0, 0.0, 2.0]), 3, 5)


def test_s1_lift_puts_draft_columns_at_their_target_ids():
    lifted = lift_to_target(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([4, 0, 2]), 5)
    assert lifted.tolist() == [[2.0, -math.inf, 3.0, -math.inf, 1.0]]


def test_s1_reduced_vocab_conditions_on_target_ids():
    gen = torch.Generator().manual_seed(0)
    head = build_markov_head({"markov_rank": 3, "vocab_size": 9, "draft_vocab_size": 4}, scale=0.7, generator=gen)
    d2t = torch.tensor([7, 2, 5, 0])
    base, anchor = torch.randn(2, 3, 4, generator=gen), torch.tensor([8, 1])

    block = draft_block(head, base, anchor, None, argmax_sampler, vocab_size=9, d2t=d2t)

    prev = torch.cat([anchor[:, None], block.tokens[:, :-1]], dim=1)  # target ids condition the steps
    forced = apply_block_logits(head, base, prev, None)
    assert torch.equal(block.corrected_logits, lift_to_target(forced, d2t, 9))
    assert torch.equal(block.tokens, d2t[forced.argmax(-1)])


def test_s1_padded_vocab_is_cropped_before_sampling():
    gen = torch.Generator().manual_seed(1)
    head = VanillaMarkovHead(8, 2, prev_vocab_size=6, generator=gen)
    base = torch.randn(3, 4, 8, generator=gen)
    base[..., 6:] = 50.0

    block = draft_block(head, base, torch.tensor([0, 5, 2]), None, argmax_sampler, vocab_size=6)

    assert block.corrected_logits.shape == (3, 4, 6)
    assert torch.equal(block.tokens, block.corrected_logits.argmax(-1))


def test_s1_draft_block_bad_inputs():
    head = VanillaMarkovHead(4, 2, prev_vocab_size=9, generator=torch.Generator().manual_seed(2))
    base = torch.zeros(1, 2, 4)
    with pytest.raises(ValueError, match="d2t"):
        draft_block(head, base, torch.tensor([0]), None, argmax_sampler, vocab_size=9)
    with pytest.raises(ValueError, match="prev_vocab_size"):
        draft_block(head, base, torch.tensor([0]), None, argmax_sampler, vocab_size=4)
    with pytest.raises(ValueError, match="hidden"):
        draft_block(head, base, torch.tensor([0]), torch.zeros(1, 3, 2), argmax_sampler, vocab_size=9,
                    d2t=torch.tensor([0, 1, 2, 3]))
