"""The drafted block's own law (SPEC S2, S3, S5 "q", S9 handoff): the tokens a drafter emits
follow the q it hands over, jointly over the block.

A drafter hands over, with each block, the law each draft was drawn from (SPEC S5: ``q_k =
softmax(L_k / T)`` of the corrected logits it returns, or the ``draft_probs`` of a round).
With every row of a case on the same input, the law of the whole block ``x_0 .. x_{gamma-1}``
that q implies is the product of the per-step conditional laws along the drawn prefix,
``P(b) = prod_k q_k(b_k | b_<k)`` over all ``V^gamma`` blocks (:func:`handed_over_law`); the
case tests the drawn blocks against it with one chi-square. A drafter whose draws are not the
q it hands over fails, even where each step alone looks right.

Faults this must see (issue 42, class 2), and the effect each has on a case's input, derived
here exactly in float64 from the SPEC S2 oracle (``oracles.markov_block``):

* sampling from the corrected logits rounded to bfloat16 while handing over the float32 q:
  :func:`bfloat16_draw_tv`, the TV between the block law of the rounded logits and that of
  the exact ones. It grows with ``|L|`` (bfloat16 spacing 2^-7 |L|); at the logits of the
  other law cases (|L| ~ 2) it is ~1e-3, below the suite's TV 0.01, so the inputs here sit
  at ``LOGIT_OFFSET`` (|L| ~ 80, spacing 0.5), where it is ~0.08 (median over seeds);
* one noise vector reused at every step of a block (a seeded row's noise offset not
  advanced): :func:`shared_noise_tv_bound`, a lower bound on the TV by the law of ``(x_0,
  [x_1 == x_0])``, exact in closed form. Each step's marginal stays right; the block does not.

Inputs: :func:`block_law_inputs` draws a head and one row until both effects reach
``MIN_TV`` and every prefix of ``gamma - 1`` tokens has probability >= ``MIN_PREFIX_PROB``
(premise by construction; so ``n`` rows see every prefix, with its q, at overwhelming
probability); cases size ``n`` with ``stats.sample_size_for_tv(law, min_tv=MIN_TV)`` (power
>= 0.999 at the default alpha against every alternative at that TV, the faults' included).
The IUT's side of a case (its head loaded, the rows repeated on its device) is the suite's
harness (``conformance/suite/support/blocks.py``). It shares no code with ``dspark_ref``.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from conformance import stats
from conformance.inputs import markov_head_state
from conformance.inputs.seeding import input_generator, sub_seed
from conformance.oracles.markov_block import oracle_block_logits

#: Block of the law cases: ``V^gamma = 64`` enumerable outcomes.
BLOCK_VOCAB, BLOCK_GAMMA, BLOCK_RANK, BLOCK_HIDDEN = 4, 3, 4, 4
#: Sampling temperature of the law cases.
BLOCK_TEMPERATURE = 1.0
#: Base logits ``LOGIT_OFFSET + BASE_SCALE * N(0, 1)``: the offset leaves every law alone
#: (softmax is shift-invariant) and puts the logits where bfloat16's spacing is 0.5, so
#: rounding moves a logit by up to 0.25.
LOGIT_OFFSET, BASE_SCALE = 80.0, 0.5
#: Weight scale of the heads: the Markov bias moves each step's law, not so far that a
#: prefix becomes rare.
BLOCK_HEAD_SCALE = 0.5
#: The effect the block-law cases are sized for: each class-2 fault moves the block law by at
#: least this TV on every input the cases use (premise of :func:`block_law_inputs`).
MIN_TV = 0.06
#: Smallest probability of a ``gamma - 1`` prefix on the cases' inputs: at the n of ``MIN_TV``
#: (9,290 rows over 64 blocks) every prefix is expected >= 32 times, unseen with probability
#: < 1e-13.
MIN_PREFIX_PROB = 3.5e-3
#: Draws of a head and row before the premise counts as a suite defect: 4% (gated), 11%
#: (vanilla) and 33% (rnn) of first draws fail it (100 seeds each), so 64 all fail with
#: probability < 1e-30.
MAX_DRAWS = 64


@dataclasses.dataclass(frozen=True)
class BlockLawInputs:
    """One row of a block-law case and the effects the class-2 faults have on it.

    ``state``: the head's reference-layout weights (float32, CPU); ``base [1, gamma, V]``
    float32; ``anchor [1]`` int64; ``hidden [1, gamma, d]`` float32 or None (vanilla);
    ``law [V^gamma]`` float64, the exact block law (index ``sum_k b_k V^(gamma-1-k)``);
    ``bfloat16_tv`` and ``shared_noise_tv``: the TVs of :func:`bfloat16_draw_tv` and
    :func:`shared_noise_tv_bound`.
    """

    state: dict
    base: torch.Tensor
    anchor: torch.Tensor
    hidden: torch.Tensor | None
    law: torch.Tensor
    bfloat16_tv: float
    shared_noise_tv: float


def all_blocks(vocab: int = BLOCK_VOCAB, gamma: int = BLOCK_GAMMA) -> torch.Tensor:
    """Every block ``[V^gamma, gamma]`` int64, in the order of :func:`block_index`."""
    return torch.tensor(list(itertools.product(range(vocab), repeat=gamma)), dtype=torch.int64)


def block_index(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[n]`` index ``sum_k x_k V^(gamma-1-k)`` of each block ``tokens [n, gamma]`` (on the CPU)."""
    weights = vocab ** torch.arange(tokens.shape[1] - 1, -1, -1)
    return (tokens.cpu() * weights).sum(dim=1)


def block_counts(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[V^gamma]`` counts of the blocks ``tokens [n, gamma]``."""
    return torch.bincount(block_index(tokens, vocab), minlength=vocab ** tokens.shape[1])


def block_labels(vocab: int = BLOCK_VOCAB, gamma: int = BLOCK_GAMMA) -> list[str]:
    """A failure's name for each outcome of :func:`block_counts`: ``"block (1, 0, 3)"``."""
    return [f"block {tuple(block)}" for block in all_blocks(vocab, gamma).tolist()]


def q_of_corrected(corrected: torch.Tensor) -> torch.Tensor:
    """The q a block sampler hands over with its corrected logits ``[n, gamma, V]`` (SPEC S5):
    ``softmax(L / BLOCK_TEMPERATURE)`` in float64 on the CPU."""
    # torch.softmax, not laws.tempered_softmax64: that would move the last bits of 70% of rows, and the p-values with
    # them.
    return torch.softmax(corrected.detach().to("cpu", torch.float64) / BLOCK_TEMPERATURE, dim=-1)


def block_law_check(name: str, tokens: torch.Tensor, q: torch.Tensor) -> stats.StatResult:
    """Chi-square of the drawn blocks ``tokens [n, gamma]`` against :func:`handed_over_law` of
    ``q [n, gamma, V]``, at ``MIN_TV`` (H0: the blocks follow the q handed over with them)."""
    return stats.goodness_of_fit(block_counts(tokens, BLOCK_VOCAB), handed_over_law(tokens, q), name=name,
                                 min_tv=MIN_TV, labels=block_labels())


def path_logits(head_type, state, base, anchor, hidden, blocks):
    """SPEC S2 corrected logits ``[P, gamma, V]`` float64 along each block of ``blocks [P, gamma]``
    (the float64 oracle of ``oracles.markov_block``), from one row ``base [1, gamma, V]``, ``anchor
    [1]``, ``hidden [1, gamma, d]`` or None."""
    rows = blocks.shape[0]
    prev = torch.cat([anchor.expand(rows)[:, None], blocks[:, :-1]], dim=1)
    hidden = None if hidden is None else hidden.expand(rows, -1, -1)
    logits, _ = oracle_block_logits(head_type, state, base.expand(rows, -1, -1), prev, hidden)
    return logits


def _law_of(logits: torch.Tensor, blocks: torch.Tensor, temperature: float) -> torch.Tensor:
    # torch.softmax, not laws.tempered_softmax64: that would move the last bits of 60% of rows, and the p-values with
    # them.
    q = torch.softmax(logits / temperature, dim=-1)
    return q.gather(-1, blocks[..., None])[..., 0].prod(dim=1)


def bfloat16_draw_tv(logits: torch.Tensor, blocks: torch.Tensor, temperature: float) -> float:
    """TV between the block laws of ``softmax(L / T)`` and ``softmax(bf16(L) / T)`` (a drafter
    that rounds its float32 corrected logits to bfloat16 before it samples).

    Args: ``logits [V^gamma, gamma, V]`` float64 along every block ``blocks [V^gamma, gamma]``.
    """
    rounded = logits.to(torch.float32).to(torch.bfloat16).to(torch.float64)
    return 0.5 * float((_law_of(logits, blocks, temperature) - _law_of(rounded, blocks, temperature)).abs().sum())


def shared_noise_tv_bound(logits: torch.Tensor, blocks: torch.Tensor, temperature: float) -> float:
    """Lower bound on the TV between the block law and that of a drafter racing every step
    with one noise vector ``E`` (``x_k = argmax_v q_k(v) / E_v``, the same ``E`` for each k).

    The TV of a coarsening is at most the TV: here ``(x_0, [x_1 == x_0])``, whose ``x_0`` is
    ``q_0`` either way. With Gumbel ``G = -log E`` and ``l_k = log q_k``, ``x_0 = x_1 = a``
    iff ``G_v < G_a + m_v`` for all ``v != a``, ``m_v = min(l_0(a) - l_0(v), l_1(a | a) -
    l_1(v | a))``, of probability ``1 / (1 + sum_{v != a} exp(-m_v))`` (integrate the Gumbel
    density of ``G_a`` against the CDFs); independent noise gives ``q_0(a) q_1(a | a)``. The
    bound is ``sum_a`` of their absolute differences.
    """
    vocab = logits.shape[-1]
    # log_softmax, not laws.tempered_softmax64: this bound needs log q, which laws.py does not give.
    log_q = torch.log_softmax(logits / temperature, dim=-1)
    total = 0.0
    for a in range(vocab):
        row = int((blocks[:, 0] == a).nonzero()[0, 0])  # any block starting with a: step 1 conditions on a
        l0, l1 = log_q[row, 0], log_q[row, 1]
        margins = torch.minimum(l0[a] - l0, l1[a] - l1)
        others = torch.arange(vocab) != a
        shared = 1.0 / (1.0 + float(torch.exp(-margins[others]).sum()))
        total += abs(shared - float(torch.exp(l0[a] + l1[a])))
    return total


def block_law_inputs(head_type: str, case_seed: int, what: str) -> BlockLawInputs:
    """A head and one row for a block-law case, drawn from the case seed until both class-2
    effects reach ``MIN_TV`` and every ``gamma - 1`` prefix has probability >=
    ``MIN_PREFIX_PROB``; a first draw that qualifies is kept.

    Raises:
        RuntimeError: no draw in ``MAX_DRAWS`` qualified (a suite defect, naming ``what``).
    """
    weights, gen = torch.Generator().manual_seed(sub_seed(case_seed, "head")), input_generator(case_seed)
    blocks = all_blocks()
    for _ in range(MAX_DRAWS):
        state = markov_head_state(head_type, BLOCK_VOCAB, BLOCK_RANK, BLOCK_HIDDEN, weights, scale=BLOCK_HEAD_SCALE)
        base = LOGIT_OFFSET + BASE_SCALE * torch.randn(1, BLOCK_GAMMA, BLOCK_VOCAB, generator=gen)
        anchor = torch.randint(BLOCK_VOCAB, (1,), generator=gen)
        hidden = torch.randn(1, BLOCK_GAMMA, BLOCK_HIDDEN, generator=gen) if head_type != "vanilla" else None
        logits = path_logits(head_type, state, base, anchor, hidden, blocks)
        law = _law_of(logits, blocks, BLOCK_TEMPERATURE)
        prefixes = law.reshape(-1, BLOCK_VOCAB).sum(dim=1)
        found = BlockLawInputs(state, base, anchor, hidden, law, bfloat16_draw_tv(logits, blocks, BLOCK_TEMPERATURE),
                               shared_noise_tv_bound(logits, blocks, BLOCK_TEMPERATURE))
        if min(found.bfloat16_tv, found.shared_noise_tv) >= MIN_TV and float(prefixes.min()) >= MIN_PREFIX_PROB:
            return found
    raise RuntimeError(f"{what}: test design: no head and row in {MAX_DRAWS} draws gives both class-2 faults a TV "
                       f">= {MIN_TV} with every prefix of probability >= {MIN_PREFIX_PROB}")


def handed_over_law(tokens: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The block law ``[V^gamma]`` float64 that the handed-over q implies, from rows drawn on one
    input: ``P(b) = prod_k q_k(b_k | b_<k)``, ``q_k(. | prefix)`` the mean of ``q[:, k]`` over
    the rows whose first ``k`` tokens are that prefix (a correct drafter hands the same law to
    each). A prefix no row drew (improbable by the premise of :func:`block_law_inputs`) gets a
    uniform next step: its blocks keep the mass its parent's q gives them, and the chi-square
    sees that mass unobserved.

    Args:
        tokens: ``[n, gamma]`` int64 drawn blocks; q: ``[n, gamma, V]`` laws (rows sum to 1),
            any float dtype and device.
    Returns:
        ``[V^gamma]`` float64 on the CPU, indexed as :func:`block_index`.
    """
    tokens, q = tokens.cpu(), q.detach().to("cpu", torch.float64)
    rows, gamma, vocab = q.shape
    blocks = all_blocks(vocab, gamma)
    law = torch.ones(blocks.shape[0], dtype=torch.float64)
    for k in range(gamma):
        prefix = block_index(tokens[:, :k], vocab) if k else torch.zeros(rows, dtype=torch.int64)
        sums = torch.zeros(vocab ** k, vocab, dtype=torch.float64).index_add_(0, prefix, q[:, k])
        seen = torch.bincount(prefix, minlength=vocab ** k)
        step = torch.where(seen[:, None] > 0, sums / seen.clamp(min=1)[:, None], 1.0 / vocab)
        block_prefix = block_index(blocks[:, :k], vocab) if k else torch.zeros(blocks.shape[0], dtype=torch.int64)
        law *= step[block_prefix, blocks[:, k]]
    return law / law.sum()
