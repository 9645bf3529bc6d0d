"""Reference unit tests: truncation (SPEC S3), chain_verify with a handed-over q and a
truncated target (S5), and one speculative round (S9)."""

from __future__ import annotations

import math

import pytest
import torch

from dspark_ref.markov import VanillaMarkovHead
from dspark_ref.sampling import Truncation, truncate_logits
from dspark_ref.speculative_round import RoundParts, draft_and_verify
from dspark_ref.verify import chain_verify

INF = math.inf


def test_top_k_tie_rules():
    scaled = torch.tensor([[0.0, 1.0, 1.0, 1.0, 2.0]])
    k = torch.tensor([3])
    assert truncate_logits(scaled, k).isfinite().tolist() == [[False, True, True, True, True]]
    assert truncate_logits(scaled, k, top_k_ties="lowest").isfinite().tolist() == [[False, True, True, False, True]]
    with pytest.raises(ValueError, match="top_k_ties"):
        truncate_logits(scaled, k, top_k_ties="highest")


def test_sets_are_taken_on_the_tempered_law():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    # softmax(L) = (.665, .245, .090): min_p 0.2 keeps 2 tokens at T = 1; at T = 0.5 the
    # second token's ratio is exp(-2) = .135 < 0.2, so only the first stays.
    cut = Truncation(min_p=torch.tensor([0.2]))
    assert cut.apply(logits, torch.tensor([1.0])).isfinite().tolist() == [[True, True, False]]
    assert cut.apply(logits, torch.tensor([0.5])).isfinite().tolist() == [[True, False, False]]


def test_truncation_applies_per_row_at_every_position():
    logits = torch.arange(6.0).reshape(1, 2, 3).expand(2, 2, 3)
    out = Truncation(top_k=torch.tensor([1, 3])).apply(logits, torch.ones(2))
    assert out[0].isfinite().sum().item() == 2 and out[1].isfinite().all()


def test_chain_verify_takes_exactly_one_draft_source():
    drafts, target = torch.tensor([[0]]), torch.zeros(1, 2, 3)
    args = (torch.ones(1), torch.tensor([False]))
    with pytest.raises(ValueError, match="exactly one of draft_logits and draft_probs, got neither"):
        chain_verify(drafts, target, None, *args)
    with pytest.raises(ValueError, match="got both"):
        chain_verify(drafts, target, torch.zeros(1, 1, 3), *args, draft_probs=torch.full((1, 1, 3), 1 / 3))
    with pytest.raises(ValueError, match="draft_probs: expected laws"):
        chain_verify(drafts, target, None, *args, draft_probs=torch.full((1, 1, 3), 0.5))


def test_chain_verify_rejects_a_negative_draft_probability():
    with pytest.raises(ValueError, match=r"draft_probs: expected laws .* position \(1, 0\)"):
        chain_verify(torch.tensor([[0], [0]]), torch.zeros(2, 2, 3), None, torch.ones(2),
                     torch.zeros(2, dtype=torch.bool), draft_probs=torch.tensor([[[0.2, 0.3, 0.5]], [[-0.1, 0.6, 0.5]]]))


def test_chain_verify_never_emits_a_truncated_target_token():
    gen = torch.Generator().manual_seed(0)
    n = 2000
    target = torch.tensor([[[3.0, 2.0, 1.0, 0.0]] * 2]).expand(n, 2, 4)
    q = torch.full((n, 1, 4), 0.25)
    drafts = torch.randint(0, 4, (n, 1), generator=gen)
    cut = Truncation(top_k=torch.full((n,), 2))
    out = chain_verify(drafts, target, None, torch.ones(n), torch.zeros(n, dtype=torch.bool), generator=gen,
                       truncation=cut, draft_probs=q)
    assert set(out.tokens[:, 0].tolist()) <= {0, 1}


def _round_inputs(rows=6, gamma=3, vocab=7):
    gen = torch.Generator().manual_seed(3)
    head = VanillaMarkovHead(vocab, 2, generator=gen)
    base = torch.randn(rows, gamma, vocab, generator=gen)
    target = torch.randn(rows, gamma + 1, vocab, generator=gen)
    return head, base, torch.randint(0, vocab, (rows,), generator=gen), target


def test_round_hands_over_the_laws_it_drew_from():
    head, base, anchor, target = _round_inputs()
    rows = base.shape[0]
    greedy = torch.tensor([True, False, False, True, False, False])
    cut = Truncation(top_k=torch.tensor([7, 2, 7, 7, 3, 7]))
    r = draft_and_verify(head, base, anchor, None, target, torch.ones(rows), greedy, truncation=cut,
                          generator=torch.Generator().manual_seed(1))
    drawn = r.draft_probs.gather(-1, r.draft_tokens[..., None])[..., 0]
    assert bool((drawn > 0).all()), "a draft outside the law it was drawn from"
    assert torch.equal(r.draft_probs[greedy].amax(-1), torch.ones(2, 3))
    assert int((r.draft_probs[1] > 0).sum(-1).max()) == 2  # the top-2 row's laws are truncated


def test_greedy_and_sampling_rows_draw_as_in_a_batch_of_their_kind():
    """Each row's round is its own whatever the other rows' kind (the drafter runs the race
    on the sampling rows and the argmax on the greedy rows only, issue 45): a mixed batch
    gives every row what a batch of all-greedy or all-sampling rows gives it, noise and
    coins being drawn for every row either way."""
    head, base, anchor, target = _round_inputs(rows=8)
    rows = base.shape[0]
    temps, greedy = torch.full((rows,), 0.9), torch.tensor([True, False, False, True, False, True, False, False])
    cut = Truncation(top_p=torch.full((rows,), 0.9))

    def run(mask):
        r = draft_and_verify(head, base, anchor, None, target, temps, mask, truncation=cut,
                             generator=torch.Generator().manual_seed(4))
        return torch.cat([r.draft_tokens, r.tokens, r.accepted[:, None]], dim=1), r.draft_probs

    mixed, q = run(greedy)
    sampled, q_sampled = run(torch.zeros(rows, dtype=torch.bool))
    argmax, _ = run(torch.ones(rows, dtype=torch.bool))
    assert torch.equal(mixed[~greedy], sampled[~greedy]) and torch.equal(q[~greedy], q_sampled[~greedy])
    assert torch.equal(mixed[greedy], argmax[greedy])
    assert not torch.equal(sampled[greedy], argmax[greedy]), "the greedy rows drew their argmax by chance"


def test_seeded_rounds_repeat_and_ignore_the_batch():
    head, base, anchor, target = _round_inputs()
    rows = base.shape[0]
    kw = dict(seeds=torch.arange(rows) * 11, positions=torch.arange(rows) + 5)
    args = (torch.full((rows,), 1.3), torch.zeros(rows, dtype=torch.bool))
    a = draft_and_verify(head, base, anchor, None, target, *args, **kw)
    b = draft_and_verify(head, base, anchor, None, target, *args, **kw)
    alone = draft_and_verify(head, base[2:3], anchor[2:3], None, target[2:3], args[0][2:3], args[1][2:3],
                              seeds=kw["seeds"][2:3], positions=kw["positions"][2:3])
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.draft_tokens, b.draft_tokens)
    assert torch.equal(a.tokens[2:3], alone.tokens) and torch.equal(a.draft_tokens[2:3], alone.draft_tokens)


def test_round_rejects_bad_input():
    head, base, anchor, target = _round_inputs()
    rows = base.shape[0]
    args = (torch.ones(rows), torch.zeros(rows, dtype=torch.bool))
    with pytest.raises(ValueError, match="gamma >= 1"):
        draft_and_verify(head, base[:, :0], anchor, None, target[:, :1], *args)
    with pytest.raises(ValueError, match="target_logits"):
        draft_and_verify(head, base, anchor, None, target[:, :-1], *args)
    with pytest.raises(ValueError, match="seeds and positions together"):
        draft_and_verify(head, base, anchor, None, target, *args, seeds=torch.arange(rows))
    with pytest.raises(TypeError, match="parts: expected a RoundParts"):
        draft_and_verify(head, base, anchor, None, target, *args, parts=object())
    assert isinstance(RoundParts(), RoundParts)
