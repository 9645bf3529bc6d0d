"""Reference tests for one tensor-parallel round (SPEC S5, ``dspark_ref.tensor_parallel``):
rank 0's plan is taken, the rank's generator is never read, verify lengths cut the chain.
Then the suite's rank processes (``conformance.suite.support.tp_ranks``): a pool's second
case starts no process, and a rank that hangs, dies or raises ends the pool without
poisoning the next case.
Add a case by adding a test named ``test_s5_tp_<case>``."""

from __future__ import annotations

import os

import pytest
import torch

from conformance.inputs import markov_head_state
from conformance.suite.support.tp_ranks import RankFailure, RankPool, run_ranks
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


def rank_payload(seed, rows=3, gamma=2, vocab=8):
    """``run_ranks`` inputs: a vanilla head, random logits and confidences; both ranks'
    generators seeded alike."""
    gen = torch.Generator().manual_seed(seed)
    temps = torch.tensor([0.0, 1.0, 0.7])
    shared = {"head_type": "vanilla", "state_dict": markov_head_state("vanilla", vocab, 2, 3, gen),
              "base_logits": torch.randn(rows, gamma, vocab, generator=gen),
              "first_prev": torch.randint(vocab, (rows,), generator=gen), "hidden": None,
              "target_logits": torch.randn(rows, gamma + 1, vocab, generator=gen), "temperatures": temps,
              "top_k": torch.where(temps == 0, 1, vocab).to(torch.int64),
              "confidences": torch.rand(rows, gamma, generator=gen, dtype=torch.float64),
              "seeds": torch.randint(2**62, (rows,), generator=gen), "positions": torch.arange(rows) + 1}
    return {"shared": shared, "local": [{"generator_seed": seed, "sps": [1.0] * (rows * (gamma + 1))}] * 2}


def assert_ranks_agree(results):
    assert len(results) == 2
    for name in ("draft_tokens", "verify_lengths", "accepted", "tokens"):
        assert torch.equal(results[0][name], results[1][name]), name


def case_dir(tmp_path, name):
    path = tmp_path / name
    path.mkdir()
    return path


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def rank_pool():
    pool = RankPool()
    yield pool
    pool.close()


def test_s5_tp_ranks_pool_reuses_its_processes(rank_pool, tmp_path):
    """The first case starts one process per rank; the second starts none and computes what
    ranks of their own (no pool) compute."""
    first = run_ranks("reference", "gloo", rank_payload(1), case_dir(tmp_path, "one"), pool=rank_pool)
    pids = rank_pool.pids
    assert rank_pool.started == 2 and len(pids) == 2
    second = run_ranks("reference", "gloo", rank_payload(2), case_dir(tmp_path, "two"), pool=rank_pool)
    assert rank_pool.started == 2 and rank_pool.pids == pids
    assert_ranks_agree(first)
    assert_ranks_agree(second)
    alone = run_ranks("reference", "gloo", rank_payload(2), case_dir(tmp_path, "alone"))
    for rank in range(2):
        assert all(torch.equal(second[rank][name], alone[rank][name]) for name in alone[rank]), rank
    rank_pool.close()
    assert rank_pool.pids == [] and not any(_alive(pid) for pid in pids)


#: fault -> (its toy adapter, the failure's kind, a part of its message)
RANK_FAULTS = {
    "hang": ("tests.toy_adapters:tp_rank_hangs", "error", "still running after 5 s"),
    "exit": ("tests.toy_adapters:tp_rank_exits", "error",
             "rank 1 of 2 (gloo): exit code 3, output: toy: rank 1 leaves"),
    "unsupported": ("tests.toy_adapters:tp_unsupported", "unsupported",
                    "NotImplementedError: toy: no tensor parallelism"),
}


def test_s5_tp_ranks_failed_rank_ends_the_pool_not_the_next_case(rank_pool, tmp_path):
    """A rank that hangs (past the group's limit), exits or raises fails its case with the
    reason; the pool's processes are ended and the next case runs on new ones (one test, not
    one per fault: each pool start costs seconds)."""
    run_ranks("reference", "gloo", rank_payload(1), case_dir(tmp_path, "first"), pool=rank_pool)
    for fault, (impl, kind, message) in RANK_FAULTS.items():
        pids = rank_pool.pids
        assert len(pids) == 2, fault
        with pytest.raises(RankFailure) as failure:
            run_ranks(impl, "gloo", rank_payload(2), case_dir(tmp_path, fault), pool=rank_pool, timeout_s=5)
        assert (failure.value.kind, message in str(failure.value)) == (kind, True), (fault, str(failure.value))
        assert rank_pool.pids == [] and not any(_alive(pid) for pid in pids), fault
        after = run_ranks("reference", "gloo", rank_payload(3), case_dir(tmp_path, f"after-{fault}"), pool=rank_pool)
        assert_ranks_agree(after)
        assert not set(rank_pool.pids) & set(pids), fault
    assert rank_pool.started == 2 * (1 + len(RANK_FAULTS))
