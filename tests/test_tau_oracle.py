"""The expected-tau oracle of the S9 tau case (``conformance/oracles/tau_oracle.py``)
against a brute force over every whole block, written here the plain way: each block's draft
law from the float64 SPEC S2 oracle on that block alone, the target's laws from one forward
pass over the context and the block, and SPEC S5's accept probability ``min(1, p / q)``
step by step. No tree, no first-order shortcut, no shared prefix arithmetic.

Tolerance: the target's float32 logits along the tree and in the brute force's forward pass
come from batches of other sizes, whose float32 products may round differently (a few ulps,
SPEC S0): laws and survivals agree to ``TOLERANCE``; a misplaced prefix or step moves them
by O(0.01).
"""

import itertools

import pytest
import torch

from conformance import stats
from conformance.inputs.tiny_models import TinyDSparkDraft, TinyTargetLM
from conformance.oracles import tau_oracle
from conformance.oracles.markov_block import oracle_block_logits

VOCAB, HIDDEN, GAMMA, ROWS = 3, 4, 3, 2
TOLERANCE = 1e-6


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (tests/conftest.py)


def _setup(head_type: str, temperature: float):
    gen = torch.Generator().manual_seed(7)
    target = TinyTargetLM(VOCAB, HIDDEN, generator=gen)
    draft = TinyDSparkDraft(target, gamma=GAMMA, markov_head_type=head_type, markov_rank=2, generator=gen)
    contexts = torch.randint(0, VOCAB, (ROWS, 4), generator=gen)
    states = target(contexts).hidden
    tree = tau_oracle.draft_tree(target, draft, head_type, states[:, -1], states[:, -2], contexts[:, -1], GAMMA,
                                 temperature)
    return target, draft, contexts, states, tree


def _brute_force(target, draft, head_type, contexts, states, temperature):
    """``(P(A_k) [ROWS, GAMMA + 1], {block: (q(block) [ROWS], P(A_k | block) [ROWS, GAMMA + 1])})``."""
    anchor = contexts[:, -1]
    block = draft.block(states[:, -2], anchor, GAMMA)
    hidden = None if head_type == "vanilla" else block.hidden
    survival = torch.zeros(ROWS, GAMMA + 1, dtype=torch.float64)
    per_block = {}
    for xs in itertools.product(range(VOCAB), repeat=GAMMA):
        drafts = torch.tensor(xs).expand(ROWS, GAMMA)
        prev = torch.cat([anchor[:, None], drafts[:, :-1]], dim=1)
        corrected, _ = oracle_block_logits(head_type, draft.markov_head.state_dict(), block.base_logits, prev, hidden)
        q = torch.softmax(corrected.double() / temperature, dim=-1).gather(-1, drafts[..., None])[..., 0]
        logits = target(torch.cat([contexts, drafts], dim=1)).logits[:, contexts.shape[1] - 1: -1].double()
        p = torch.softmax(logits / temperature, dim=-1).gather(-1, drafts[..., None])[..., 0]
        accept = torch.cat([torch.ones(ROWS, 1, dtype=torch.float64),
                            torch.cumprod(torch.clamp(p / q, max=1.0), dim=1)], dim=1)
        q_block = q.prod(dim=1)
        survival += q_block[:, None] * accept
        per_block[xs] = (q_block, accept)
    return survival, per_block


@pytest.mark.parametrize("head_type", ["vanilla", "gated", "rnn"])
def test_tree_survival_equals_the_sum_over_every_block(head_type):
    target, draft, contexts, states, tree = _setup(head_type, 0.8)
    brute, per_block = _brute_force(target, draft, head_type, contexts, states, 0.8)
    assert torch.allclose(tau_oracle.acceptance_survival(tree), brute, rtol=0, atol=TOLERANCE)
    shallow = tau_oracle.draft_tree(target, draft, head_type, states[:, -1], states[:, -2], contexts[:, -1], GAMMA,
                                    0.8, depth=1)
    assert torch.equal(tau_oracle.acceptance_survival(shallow), tau_oracle.acceptance_survival(tree)[:, :2])
    blocks = torch.tensor(list(per_block)).reshape(1, -1, GAMMA).expand(ROWS, -1, -1).transpose(0, 1)
    for row in range(ROWS):  # block_survival of every block of one row, as a batch of draws
        got = tau_oracle.block_survival(_row(tree, row), blocks[:, row: row + 1])[:, 0]
        want = torch.stack([accept[row] for _, accept in per_block.values()])
        assert torch.allclose(got, want, rtol=0, atol=TOLERANCE)


def _row(tree, row):
    return tau_oracle.DraftTree(tuple(p[row: row + 1] for p in tree.p), tuple(q[row: row + 1] for q in tree.q))


def test_expected_tau_caps_at_the_verify_length_and_the_remaining_tokens():
    survival = torch.tensor([[1.0, 0.5, 0.25, 0.125]], dtype=torch.float64)
    remaining = torch.tensor([10])
    assert tau_oracle.expected_tau(survival, 3, remaining).item() == 1.875
    assert tau_oracle.expected_tau(survival, torch.tensor([1]), remaining).item() == 1.5
    assert tau_oracle.expected_tau(survival, 3, torch.tensor([2])).item() == 1.5
    assert tau_oracle.expected_tau(survival, torch.tensor([0]), torch.tensor([1])).item() == 1.0


def test_a_draft_whose_law_is_the_target_s_accepts_every_draft():
    tree = _setup("gated", 1.0)[-1]
    perfect = tau_oracle.DraftTree(tree.p, tree.p)
    assert torch.allclose(tau_oracle.acceptance_survival(perfect), torch.ones(ROWS, GAMMA + 1, dtype=torch.float64),
                          rtol=1e-12)


def test_sampled_blocks_follow_the_draft_law():
    target, draft, contexts, states, tree = _setup("rnn", 1.0)
    _, per_block = _brute_force(target, draft, "rnn", contexts, states, 1.0)
    draws = 20_000
    blocks = tau_oracle.sample_blocks(tree, draws, torch.Generator().manual_seed(5))
    codes = (blocks[:, 0] * torch.tensor([VOCAB**2, VOCAB, 1])).sum(dim=-1)
    counts = torch.bincount(codes, minlength=VOCAB**GAMMA)
    probs = [float(q_block[0]) for q_block, _ in per_block.values()]
    assert stats.goodness_of_fit(counts, probs, name="tau-oracle/sample-blocks", min_tv=0.05).passed
