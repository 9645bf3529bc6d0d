"""Reference tests for one tensor-parallel round (SPEC S5, ``dspark_ref.tensor_parallel``):
rank 0's plan is taken, the rank's generator is never read, verify lengths cut the chain.
Add a case by adding a test named ``test_s5_tp_<case>``."""

from __future__ import annotations

import pytest
import torch

from dspark_ref.markov import VanillaMarkovHead
from dspark_ref.tensor_parallel import tp_round


class FakeGroup:
    """Rank ``rank`` of a group whose rank 0 planned ``rank0_lengths``."""

    def __init__(self, rank, rank0_lengths):
        self.rank, self.world_size, self.rank0_lengths = rank, 2, rank0_lengths

    def broadcast(self, tensor, src=0):
        assert src == 0
        tensor.copy_(self.rank0_lengths)


def inputs(seed=0, rows=4, gamma=3, vocab=10):
    gen = torch.Generator().manual_seed(seed)
    head = VanillaMarkovHead(vocab, 3, scale=0.5, generator=gen)
    return dict(head=head, base_logits=torch.randn(rows, gamma, vocab, generator=gen),
                first_prev=torch.randint(vocab, (rows,), generator=gen), hidden=None,
                target_logits=torch.randn(rows, gamma + 1, vocab, generator=gen),
                temperatures=torch.tensor([1.0, 0.0, 0.7, 1.0]), greedy_mask=torch.tensor([False, True, False, False]),
                confidences=torch.rand(rows, gamma, generator=gen, dtype=torch.float64),
                sps=[1.0] * (rows * (gamma + 1)), seeds=torch.arange(rows) + 3, positions=torch.arange(rows) * 5)


@pytest.mark.parametrize("rank", [0, 1])
def test_s5_tp_takes_rank0_plan_and_ignores_the_rank_generator(rank):
    planned = torch.tensor([0, 3, 1, 2])
    one = tp_round(FakeGroup(rank, planned), **inputs(), generator=torch.Generator().manual_seed(rank))
    two = tp_round(FakeGroup(1 - rank, planned), **inputs(), generator=torch.Generator().manual_seed(99))
    assert torch.equal(one.verify_lengths, planned)
    for name in ("draft_tokens", "verify_lengths", "accepted", "tokens"):
        assert torch.equal(getattr(one, name), getattr(two, name)), name
    assert bool((one.accepted <= planned).all())
    assert bool(((one.tokens >= 0).sum(-1) == one.accepted + 1).all())


def test_s5_tp_bad_group_is_a_type_error():
    with pytest.raises(TypeError, match="group"):
        tp_round(object(), **inputs(), generator=None)
