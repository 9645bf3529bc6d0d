"""The expected acceptance length tau of one speculative round, exact in float64 (SPEC S9
from S2, S5 and S8), for ``conformance/suite/test_speculative.py``.

One round of one row (SPEC S9): the draft proposes ``x_1..x_gamma`` from its corrected
logits (S2), ``x_j ~ q_j = softmax(L_j / T)``; the target verifies them in order (S5):
``x_j`` is accepted iff ``u_j q_j(x_j) < p_j(x_j)``, ``u_j ~ U[0, 1)``, that is with
probability ``min(1, p_j(x_j) / q_j(x_j))``, and the round stops at the first reject;
``tau = accepted + 1``. Hence, with ``A_k`` the event that the first ``k`` drafts are
accepted,

    ``P(A_k) = sum over x_1..x_k of prod_{j<=k} min(p_j, q_j)(x_j)``

(``q_j(x_j)`` to draw ``x_j`` times ``min(1, p_j / q_j)`` to accept it), ``P(tau > k) =
P(A_k)`` for ``k <= l`` (``l`` drafts verified), and ``E[min(tau, m)] = sum_{k < min(m, l + 1)}
P(A_k)``. ``q_j`` and ``p_j`` depend on the drafts before ``x_j`` (the Markov head's
previous token and rnn state; the target's context), so the sum runs over the draft tree:
every prefix ``x_1..x_k`` (``V ** k`` of them per level, product order, ``x_1``
slowest), with the draft's law of each step from the float64 SPEC S2 formula of
:func:`conformance.oracles.markov_block.oracle_block_logits` and the target's law from its
next-token logits along the path. With the tiny S9 models (``V = 5``, ``gamma <= 4``: at
most 156 nodes a row) this is exact up to float64 rounding, and no loop runs.

With the prefix scheduler (SPEC S8) the verify length ``l`` of a row depends on the
confidences of every row's block, so the round's expectation is not a sum over one row's
tree: :func:`sample_blocks` draws whole blocks from the tree's ``q`` (SPEC S2, S3) for a
Monte Carlo over the schedule, and :func:`block_survival` gives, for a drawn block, the
exact ``P(A_k | block)`` it is then averaged with.

Inputs are the models' own forward passes (the target's ``advance`` /
``next_token_logits``, the draft's backbone ``block``), never the loop: nothing here
imports ``dspark_ref``.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from conformance.oracles.laws import tempered_softmax64
from conformance.oracles.markov_block import oracle_block_logits
from conformance.oracles.prefix_schedule import algorithm_1, oracle_lengths

__all__ = ["DraftTree", "draft_tree", "acceptance_survival", "expected_tau", "sample_blocks", "block_survival",
           "round_expectations"]


@dataclasses.dataclass(frozen=True)
class DraftTree:
    """The laws of one round's drafts at every node of the draft tree, for ``N`` rows.

    Attributes:
        p: ``depth`` tensors, ``p[k]`` of shape ``[N, V ** k, V]`` float64: the target's law of
            ``x_{k+1}`` after row ``n``'s committed tokens and the prefix ``x_1..x_k`` (prefixes
            in product order, ``x_1`` varying slowest), a tempered softmax.
        q: ``gamma`` tensors, the same for the draft's law of ``x_{k+1}`` (its corrected
            logits, SPEC S2).

    Acceptance is known for the first ``depth <= gamma`` drafts: a round that can commit at
    most ``depth + 1`` tokens never reads the target's laws beyond.
    """

    p: tuple[torch.Tensor, ...]
    q: tuple[torch.Tensor, ...]

    @property
    def gamma(self) -> int:
        return len(self.q)

    @property
    def depth(self) -> int:
        return len(self.p)

    @property
    def vocab(self) -> int:
        return self.p[0].shape[-1]


@torch.no_grad()
def draft_tree(target, draft, head_type: str, anchor_state: torch.Tensor, context_state: torch.Tensor,
               anchor: torch.Tensor, gamma: int, temperature: float, depth: int | None = None) -> DraftTree:
    """The :class:`DraftTree` of one round of ``N`` rows (module note).

    The draft's corrected logits are evaluated on every full path ``x_1..x_{gamma-1}`` (rnn
    head) or, for the first-order heads (vanilla, gated: step ``k``'s bias reads ``x_k`` and
    ``h_k`` alone, SPEC S2), on one path per token; the target advances one token per level.

    Args:
        target: a tiny S9 target (``advance(state [M, d], ids [M])``, ``next_token_logits(
            state [M, d]) -> [M, V]``, ``vocab_size``).
        draft: a DSpark draft (``block(context_hidden [N, d], anchor [N], gamma)`` with
            ``.hidden [N, gamma, d]`` and ``.base_logits [N, gamma, V]``; ``markov_head`` whose
            ``state_dict()`` is in the reference layout of ``oracle_block_logits``).
        head_type: the Markov head, ``"vanilla"``, ``"gated"`` or ``"rnn"`` (SPEC S2).
        anchor_state: ``[N, d]`` float32, the target's hidden state after the anchor (the last
            committed token): its next-token logits give ``p_1``.
        context_state: ``[N, d]`` float32, the target's hidden state after the token before
            the anchor (the draft's target-context injection, SPEC S1).
        anchor: ``[N]`` int64, the anchor ``x_0``.
        gamma: drafts per block, ``>= 1``.
        temperature: ``T > 0`` (clamped to ``1e-5``, SPEC S3); greedy rounds are not modelled.
        depth: the drafts whose target laws are computed, ``1..gamma`` (default ``gamma``):
            ``m - 1`` suffices for rows that need at most ``m`` more tokens.
    Returns:
        The tree, on the CPU.
    Raises:
        ValueError: ``gamma < 1``, ``depth`` outside ``[1, gamma]``, ``temperature <= 0``, or
            row counts that disagree.
    """
    if gamma < 1:
        raise ValueError(f"gamma: expected >= 1, got {gamma}")
    depth = gamma if depth is None else depth
    if not 1 <= depth <= gamma:
        raise ValueError(f"depth: expected 1 <= depth <= gamma = {gamma}, got {depth}")
    if not temperature > 0:
        raise ValueError(f"temperature: expected T > 0 (a sampled round), got {temperature}")
    rows = anchor.shape[0]
    if anchor_state.shape[0] != rows or context_state.shape[0] != rows:
        raise ValueError(f"anchor_state, context_state: expected {rows} rows as anchor, got "
                         f"{anchor_state.shape[0]} and {context_state.shape[0]}")
    vocab = target.vocab_size
    block = draft.block(context_state, anchor, gamma)
    if head_type == "rnn":  # the state carries the whole path: every path x_1..x_{gamma-1}
        tails = torch.tensor(list(itertools.product(range(vocab), repeat=gamma - 1)), dtype=torch.int64)
    else:  # first order (SPEC S2): step k reads x_k alone, so one path per last token
        tails = torch.arange(vocab)[:, None].expand(vocab, gamma - 1)
    tails = tails.reshape(-1, gamma - 1)
    count = tails.shape[0]
    prev = torch.cat([anchor.repeat_interleave(count)[:, None], tails.repeat(rows, 1)], dim=1)
    hidden = None if head_type == "vanilla" else block.hidden.repeat_interleave(count, dim=0)
    corrected, _ = oracle_block_logits(head_type, draft.markov_head.state_dict(),
                                       block.base_logits.repeat_interleave(count, dim=0), prev, hidden)
    corrected = corrected.reshape(rows, count, gamma, vocab)
    p, q, state = [], [], anchor_state
    for k in range(gamma):
        if k < depth:
            if k:  # every prefix of length k - 1 followed by each token
                state = target.advance(state.repeat_interleave(vocab, dim=0),
                                       torch.arange(vocab).repeat(state.shape[0]))
            p.append(tempered_softmax64(target.next_token_logits(state), temperature).reshape(rows, vocab**k, vocab))
        if head_type == "rnn":  # the paths through each prefix share its step-k logits: take the first
            on_prefixes = corrected.reshape(rows, vocab**k, vocab ** (gamma - 1 - k), gamma, vocab)[:, :, 0, k]
        else:  # the prefix's last token (the anchor at k = 0) picks the path
            last = torch.arange(vocab**k) % vocab if k else torch.zeros(1, dtype=torch.int64)
            on_prefixes = corrected[:, last, k]
        q.append(tempered_softmax64(on_prefixes, temperature))
    return DraftTree(tuple(p), tuple(q))


def acceptance_survival(tree: DraftTree) -> torch.Tensor:
    """``[N, depth + 1]`` float64: ``P(A_k)``, the probability that a round drafting and
    verifying all ``gamma`` drafts accepts its first ``k`` (``k = 0..depth``; ``P(A_0) = 1``),
    summed over the draft tree (module note)."""
    rows = tree.p[0].shape[0]
    weight = torch.ones(rows, 1, dtype=torch.float64)  # prod of min(p, q) along each prefix
    survival = [weight.sum(dim=1)]
    for p, q in zip(tree.p, tree.q):
        weight = (weight[:, :, None] * torch.minimum(p, q)).reshape(rows, -1)
        survival.append(weight.sum(dim=1))
    return torch.stack(survival, dim=1)


def expected_tau(survival: torch.Tensor, verified: torch.Tensor | int, remaining: torch.Tensor) -> torch.Tensor:
    """``E[min(tau, m)] = sum_{k < min(m, l + 1)} P(A_k)`` per row, float64 ``[...]``.

    Args:
        survival: ``[..., depth + 1]`` float64 ``P(A_k)`` (:func:`acceptance_survival`, or
            :func:`block_survival` for a drawn block), ``depth >= min(m, l + 1) - 1``.
        verified: the drafts ``l`` each row verifies, ``[...]`` int64 or an int (``gamma``
            without a scheduler).
        remaining: ``[...]`` int64 ``m >= 1``, the tokens the row still needs (a round
            commits at most that many; its recorded ``tau`` may be larger, SPEC S9).
    """
    k = torch.arange(survival.shape[-1])
    limit = torch.minimum(torch.as_tensor(verified) + 1, remaining)
    return (survival * (k < limit[..., None])).sum(dim=-1)


def sample_blocks(tree: DraftTree, draws: int, generator: torch.Generator) -> torch.Tensor:
    """``[draws, N, gamma]`` int64 blocks drawn from the tree's ``q`` (SPEC S2, S3):
    ``x_{k+1} ~ q_k( . | x_1..x_k)`` by the inverse CDF of a float64 uniform in index order
    (the smallest token whose running sum exceeds it; token ``V - 1`` at or above the rounded
    total), independent across draws and rows, from ``generator`` (CPU)."""
    rows, vocab = tree.q[0].shape[0], tree.vocab
    blocks = torch.zeros(draws, rows, tree.gamma, dtype=torch.int64)
    prefix = torch.zeros(draws, rows, dtype=torch.int64)  # index of x_1..x_k among the V ** k prefixes
    row_ids = torch.arange(rows)
    for k, q in enumerate(tree.q):
        cdf = q[row_ids, prefix].cumsum(dim=-1)
        u = torch.rand(draws, rows, 1, dtype=torch.float64, generator=generator)
        blocks[:, :, k] = (cdf <= u).sum(dim=-1).clamp(max=vocab - 1)
        prefix = prefix * vocab + blocks[:, :, k]
    return blocks


def block_survival(tree: DraftTree, blocks: torch.Tensor) -> torch.Tensor:
    """``[draws, N, depth + 1]`` float64 ``P(A_k | block) = prod_{j<=k} min(1, p_j(x_j) /
    q_j(x_j))`` of drawn ``blocks [draws, N, gamma]`` (SPEC S5's accept probability)."""
    draws, rows, _ = blocks.shape
    row_ids = torch.arange(rows)
    prefix = torch.zeros(draws, rows, dtype=torch.int64)
    accept = [torch.ones(draws, rows, dtype=torch.float64)]
    for k, (p, q) in enumerate(zip(tree.p, tree.q)):
        token = blocks[:, :, k, None]
        ratio = p[row_ids, prefix].gather(-1, token) / q[row_ids, prefix].gather(-1, token)
        accept.append(accept[-1] * ratio[..., 0].clamp(max=1.0))
        prefix = prefix * tree.vocab + token[..., 0]
    return torch.stack(accept, dim=-1)


@torch.no_grad()
def round_expectations(target, draft, head_type: str, prompt: torch.Tensor, tokens: torch.Tensor,
                       taus: torch.Tensor, gamma: int, temperature: float, *, sps_table: list[float] | None = None,
                       draws: int = 0, generator: torch.Generator | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The SPEC expectation of every round's ``min(tau, m)`` and verify length given the
    contexts the round started from, for a loop's committed ``tokens`` and ``taus``.

    Round ``r`` of a row starts after ``n + 1 + sum of its earlier taus`` committed tokens
    (the prompt, the prefill token, then each round's; SPEC S9); its anchor is the last of
    them and the draft sees the target's hidden state of the one before (SPEC S1). Without a
    scheduler the expectation is exact (:func:`acceptance_survival`, all ``gamma`` drafts
    verified). With one, ``draws`` independent oracle draws of every unfinished row's block
    (:func:`sample_blocks`) are each scheduled by Algorithm 1 (SPEC S8, over the round's
    unfinished rows, on the draft's confidences of the drawn blocks), and the exact expected
    tau given a drawn block and its verify length is averaged over the draws: an unbiased
    estimate, independent of the loop's own draws.

    Args:
        target, draft, head_type, gamma, temperature: as :func:`draft_tree` (the models on
            the CPU; with a scheduler, ``draft.confidences(hidden [N, gamma, d], anchor [N],
            tokens [N, gamma]) -> [N, gamma]``, SPEC S7).
        prompt: ``[B, n]`` int64, ``n >= 1``; tokens: ``[B, max_new]`` int64 the loop's output.
        taus: ``[B, rounds]`` int64, the loop's accept lengths (0 once a row has finished).
        sps_table: ``sps[batch - 1]`` of the prefix scheduler, or None (no scheduler).
        draws: oracle draws per round with a scheduler, ``>= 1``; generator: their CPU stream.
    Returns:
        ``(expected_tau, expected_verify_length, remaining)``, each ``[B, rounds]``:
        float64 expectations (0 on finished rows) and the int64 tokens ``m`` each row still
        needed when the round began.
    Raises:
        ValueError: a scheduler without ``draws >= 1`` and a generator.
    """
    if sps_table is not None and (draws < 1 or generator is None):
        raise ValueError(f"draws, generator: a scheduled loop needs draws >= 1 and a generator, got {draws}, "
                         f"{generator!r}")
    prompt_len = prompt.shape[1]
    full = torch.cat([prompt, tokens], dim=1)
    states = target(full).hidden
    starts = prompt_len + 1 + taus.cumsum(dim=1) - taus  # committed tokens when each round began
    remaining = full.shape[1] - starts
    mean_tau = torch.zeros(taus.shape, dtype=torch.float64)
    mean_length = torch.zeros(taus.shape, dtype=torch.float64)
    for rnd in range(taus.shape[1]):
        live = (taus[:, rnd] > 0).nonzero().flatten()
        start, needed = starts[live, rnd], remaining[live, rnd]
        anchor, context_state = full[live, start - 1], states[live, start - 2]
        depth = max(1, min(gamma, int(needed.max()) - 1))  # a round commits at most what its row needs
        tree = draft_tree(target, draft, head_type, states[live, start - 1], context_state, anchor, gamma,
                          temperature, depth=depth)
        if sps_table is None:
            mean_tau[live, rnd] = expected_tau(acceptance_survival(tree), gamma, needed)
            mean_length[live, rnd] = gamma
            continue
        blocks = sample_blocks(tree, draws, generator)
        hidden = draft.block(context_state, anchor, gamma).hidden
        verified = torch.tensor([_algorithm_1_lengths(draft.confidences(hidden, anchor, block).double().tolist(),
                                                      sps_table) for block in blocks])
        mean_tau[live, rnd] = expected_tau(block_survival(tree, blocks), verified, needed).mean(dim=0)
        mean_length[live, rnd] = verified.double().mean(dim=0)
    return mean_tau, mean_length, remaining


def _algorithm_1_lengths(confidences: list[list[float]], sps_table: list[float]) -> list[int]:
    """Each row's verify length under Algorithm 1 (SPEC S8)."""
    count, _, path, _ = algorithm_1(confidences, sps_table)
    return oracle_lengths(path, count, len(confidences))
