"""The derivations behind the block-law cases (``conformance/oracles/block_law.py``):
the handed-over block law, the bfloat16 effect, the shared-noise bound, the premise."""

from __future__ import annotations

import math

import pytest
import torch

from conformance.oracles import block_law as bl


def _step_laws(inputs: bl.BlockLawInputs, head_type: str) -> tuple[torch.Tensor, torch.Tensor]:
    blocks = bl.all_blocks()
    logits = bl.path_logits(head_type, inputs.state, inputs.base, inputs.anchor, inputs.hidden, blocks)
    return blocks, torch.softmax(logits / bl.BLOCK_TEMPERATURE, dim=-1)


def test_handed_over_law_is_the_product_of_the_step_laws_along_the_prefix():
    inputs = bl.block_law_inputs("gated", 11, "test")
    blocks, q = _step_laws(inputs, "gated")
    drawn = torch.multinomial(inputs.law, 30_000, replacement=True, generator=torch.Generator().manual_seed(0))
    law = bl.handed_over_law(blocks[drawn], q[drawn])
    assert torch.allclose(law, inputs.law, rtol=1e-12, atol=0)


def test_a_prefix_nobody_drew_keeps_its_mass_and_spreads_it_uniformly():
    vocab, gamma = 2, 2
    tokens = torch.tensor([[0, 0], [0, 1]])  # no row starts with 1
    q = torch.tensor([[[0.75, 0.25], [0.4, 0.6]]] * 2, dtype=torch.float64)
    law = bl.handed_over_law(tokens, q)
    assert law.tolist() == pytest.approx([0.75 * 0.4, 0.75 * 0.6, 0.25 * 0.5, 0.25 * 0.5], abs=1e-15)


def test_bfloat16_effect_by_hand():
    # bfloat16's grid has spacing 0.25 in [32, 64): 40.2 rounds to 40.25, 40.0 stays.
    logits = torch.tensor([[[40.2, 40.0]]], dtype=torch.float64)
    blocks = torch.tensor([[0], [1]])
    tv = bl.bfloat16_draw_tv(logits.expand(2, 1, 2), blocks, 0.5)
    exact, rounded = 1 / (1 + math.exp(-0.2 / 0.5)), 1 / (1 + math.exp(-0.25 / 0.5))
    assert tv == pytest.approx(abs(rounded - exact), rel=1e-5)


def test_shared_noise_bound_matches_a_monte_carlo_of_the_faulty_drafter():
    inputs = bl.block_law_inputs("vanilla", 5, "test")
    blocks, q = _step_laws(inputs, "vanilla")
    noise = torch.empty(400_000, bl.BLOCK_VOCAB, dtype=torch.float64).exponential_(
        generator=torch.Generator().manual_seed(1))
    first = (q[0, 0] / noise).argmax(dim=1)
    row_of = torch.tensor([int((blocks[:, 0] == a).nonzero()[0, 0]) for a in range(bl.BLOCK_VOCAB)])
    second = (q[row_of[first], 1] / noise).argmax(dim=1)  # the same noise at step 1
    coarse = sum(abs(float(((first == a) & (second == a)).double().mean()) - float(q[0, 0, a] * q[row_of[a], 1, a]))
                 for a in range(bl.BLOCK_VOCAB))
    assert inputs.shared_noise_tv == pytest.approx(coarse, abs=0.01)  # 4 proportions, sd <= 8e-4 each


@pytest.mark.parametrize("head_type", ["vanilla", "gated", "rnn"])
def test_premise_holds_and_the_effect_is_below_the_cpu_tier_without_the_offset(head_type):
    inputs = bl.block_law_inputs(head_type, 3, "test")
    assert min(inputs.bfloat16_tv, inputs.shared_noise_tv) >= bl.MIN_TV
    blocks = bl.all_blocks()
    logits = bl.path_logits(head_type, inputs.state, inputs.base - bl.LOGIT_OFFSET, inputs.anchor, inputs.hidden,
                             blocks)
    assert bl.bfloat16_draw_tv(logits, blocks, bl.BLOCK_TEMPERATURE) < 0.01  # why the offset (issue 42 class 2)
