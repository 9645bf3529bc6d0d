"""dspark_ref._rows: row-wise work once per group of bit-identical rows (issue 45), the same
result bit for bit as computing every row."""

from __future__ import annotations

import math

import pytest
import torch

from dspark_ref._rows import MIN_ROWS, distinct_rows, rowwise

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors (tests/conftest.py)


def _softmax_rows(rows, temperatures):
    return torch.softmax(rows / temperatures[:, None], dim=-1)


def _batch(rows_per_group=MIN_ROWS, tail=20, seed=0):
    """Three requests repeated (two share their logits, not their temperature) in a shuffled
    batch, plus ``tail`` distinct rows."""
    gen = torch.Generator().manual_seed(seed)
    requests = torch.randn(2, 8, generator=gen)
    logits = torch.cat([requests[0].expand(rows_per_group, 8), requests[1].expand(2 * rows_per_group, 8),
                        torch.randn(tail, 8, generator=gen)])
    temperatures = torch.cat([torch.full((rows_per_group,), 0.7), torch.full((rows_per_group,), 0.7),
                              torch.full((rows_per_group,), 1.3), torch.rand(tail, generator=gen) + 0.5])
    order = torch.randperm(logits.shape[0], generator=gen)
    return logits[order], temperatures[order]


def test_repeated_rows_are_computed_once_each_with_the_same_result():
    logits, temperatures = _batch()
    first, index = distinct_rows(logits, temperatures)
    assert first.shape[0] == 3 + 20
    assert torch.equal(logits[first][index], logits) and torch.equal(temperatures[first][index], temperatures)
    assert torch.equal(rowwise(_softmax_rows, logits, temperatures), _softmax_rows(logits, temperatures))


def test_rows_that_differ_anywhere_are_never_merged():
    """A row equal to its group in the grouping keys (columns 0 and 7 of 8) but not
    elsewhere, by a value, the sign of a zero or a NaN, keeps its own bits: every row's
    representative is bit-identical to it."""
    logits, temperatures = _batch(tail=0)
    logits[:, 3] = 0.0
    for value in (0.5, -0.0, math.nan):
        changed = logits.clone()
        changed[7, 3] = value
        groups = distinct_rows(changed, temperatures)
        if groups is not None:
            first, index = groups
            assert torch.equal(changed[first][index].view(torch.int32), changed.view(torch.int32)), value
        got = rowwise(_softmax_rows, changed, temperatures)
        assert torch.equal(got.view(torch.int32), _softmax_rows(changed, temperatures).view(torch.int32)), value


def test_small_wide_or_mostly_distinct_batches_are_not_grouped():
    logits, temperatures = _batch()
    assert distinct_rows(logits[:MIN_ROWS - 1], temperatures[:MIN_ROWS - 1]) is None
    assert distinct_rows(logits.repeat(1, 8), temperatures) is None  # 64 elements a row
    distinct = torch.randn(2 * MIN_ROWS, 8, generator=torch.Generator().manual_seed(1))
    assert distinct_rows(distinct) is None
    assert torch.equal(rowwise(lambda rows: rows.softmax(-1), distinct), distinct.softmax(-1))


def test_a_round_of_repeated_requests_is_the_round_of_every_row(monkeypatch):
    """The reference round (drafter laws, race, verifier laws, all with truncation) over three
    requests repeated in one batch is bit for bit the round computed on every row."""
    from dspark_ref import _rows
    from dspark_ref.markov import GatedMarkovHead
    from dspark_ref.sampling import Truncation
    from dspark_ref.speculative_round import draft_and_verify

    gen = torch.Generator().manual_seed(5)
    head = GatedMarkovHead(8, 4, 6, scale=0.6, generator=gen)
    each = MIN_ROWS
    pick = torch.arange(3).repeat_interleave(each)[torch.randperm(3 * each, generator=gen)]
    base, hidden = torch.randn(3, 3, 8, generator=gen)[pick], torch.randn(3, 3, 6, generator=gen)[pick]
    target, anchor = torch.randn(3, 4, 8, generator=gen)[pick], torch.tensor([1, 5, 5])[pick]
    temperatures, greedy = torch.tensor([0.7, 1.2, 1.2])[pick], torch.zeros(3 * each, dtype=torch.bool)
    cut = Truncation(top_k=torch.tensor([0, 3, 0])[pick], top_p=torch.tensor([0.8, 1.0, 1.0])[pick],
                     min_p=torch.tensor([0.0, 0.0, 0.1])[pick])

    def run():
        r = draft_and_verify(head, base, anchor, hidden, target, temperatures, greedy, truncation=cut,
                             generator=torch.Generator().manual_seed(9))
        return r.draft_tokens, r.draft_probs, r.accepted, r.tokens

    calls = []
    grouped = distinct_rows

    def counted(*args):
        calls.append(grouped(*args) is not None)
        return grouped(*args)

    monkeypatch.setattr(_rows, "distinct_rows", counted)
    once = run()
    assert any(calls), "no step grouped its rows"
    monkeypatch.setattr(_rows, "MIN_ROWS", 10**9)
    every_row = run()
    assert all(torch.equal(a, b) for a, b in zip(once, every_row))
