"""Seeded inputs of chain-verify rounds (SPEC S5): logits, drafts and uniforms of random rounds,
and the tiny models of the S5 law cases.

The S5 cases draw these from a CPU generator seeded with the raw case seed
(:func:`verify_input_generator`), as they always have, so their inputs stay bit for bit;
the other sections derive an ``"inputs"`` sub-seed (``conformance.inputs.seeding.input_generator``).
The draft samplers (:func:`inverse_cdf_draws`, :func:`table_drafts`) run on the device of
their arguments: the S5 law cases draw drafts from the IUT's ``case_generator``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from .logits import NO_TOP_K_CUT, logit_rows
from .markov_heads import markov_head_state

__all__ = [
    "verify_input_generator", "laws_as_logits", "inverse_cdf_draws", "ParitySpec", "parity_inputs",
    "GreedySpec", "greedy_inputs", "LawSpec", "TinyChainModels", "table_drafts",
]

F64 = torch.float64


def verify_input_generator(case_seed: int) -> torch.Generator:
    """CPU generator of an S5 case's inputs, seeded with the raw ``case_seed`` (int)."""
    return torch.Generator().manual_seed(case_seed)


def laws_as_logits(*laws) -> torch.Tensor:
    """float32 logits ``[n, V]`` whose softmax at T = 1 is each given law (sequences of
    probabilities, ``n`` of length ``V``; 0 -> -inf)."""
    return torch.log(torch.tensor(laws, dtype=F64)).float()


def inverse_cdf_draws(laws: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """int64 ``[B]``: the token of each row of ``laws [B, V]`` (float64) at ``uniforms [B]``
    (float64 in [0, 1)) by the inverse CDF in index order; a uniform past the rounded total
    draws the last token."""
    cdf = laws.cumsum(-1)
    return torch.searchsorted(cdf, uniforms[:, None].contiguous(), right=True)[:, 0].clamp(max=laws.shape[-1] - 1)


# ----------------------------------------------------------------------------- random rounds
@dataclasses.dataclass(frozen=True)
class ParitySpec:
    """A random explicit-uniform round.

    ``family`` (:data:`conformance.inputs.LOGIT_FAMILIES`) shapes the draft logits; targets are
    the draft logits plus N(0, s^2) noise, s in {0.2, 1, 3} per row, so rows range from
    near-sure accepts to early rejects. Three quarters of the rows draw their drafts from
    ``q``, the rest uniformly. ``masked`` puts -inf on about a quarter of the target vocab.
    ``check_coverage``: the case asserts that its rows reach both 0 and ``l`` accepts.
    """

    family: str
    vocab: int
    num_drafts: int
    rows: int
    temperatures: tuple[float, ...]
    masked: bool = False
    check_coverage: bool = True


def parity_inputs(spec: ParitySpec, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """One round of ``spec`` from the CPU ``gen``: ``drafts [B, l]`` int64, ``target [B, l+1, V]``
    and ``draft_logits [B, l, V]`` float32, ``temps [B]`` float32 (cycling
    ``spec.temperatures``), ``top_k [B]`` int64 (:data:`NO_TOP_K_CUT`), ``accept_u [B, l]`` and
    ``final_u [B]`` float64 uniforms."""
    rows, l, vocab = spec.rows, spec.num_drafts, spec.vocab
    draft_logits = logit_rows(spec.family, rows * l, vocab, gen).reshape(rows, l, vocab)
    noise_scale = torch.tensor([0.2, 1.0, 3.0])[torch.randint(3, (rows,), generator=gen)]
    target = torch.empty(rows, l + 1, vocab)
    target[:, :l] = draft_logits + noise_scale[:, None, None] * torch.randn(rows, l, vocab, generator=gen)
    target[:, l] = logit_rows(spec.family, rows, vocab, gen)
    if spec.masked:
        masked = torch.rand(rows, l + 1, vocab, generator=gen) < 0.25
        keep = torch.randint(vocab, (rows, l + 1, 1), generator=gen)
        masked.scatter_(-1, keep, False)
        target = target.masked_fill(masked, -math.inf)
    temps = torch.tensor([spec.temperatures[b % len(spec.temperatures)] for b in range(rows)])
    # torch.softmax, not oracles.laws: the oracles import the inputs, so that import would close a package cycle.
    q = torch.softmax(draft_logits.double() / temps.double()[:, None, None], dim=-1)
    drafts = inverse_cdf_draws(q.reshape(-1, vocab), torch.rand(rows * l, dtype=F64, generator=gen)).reshape(rows, l)
    uniform_rows = torch.rand(rows, generator=gen) < 0.25
    drafts[uniform_rows] = torch.randint(vocab, (int(uniform_rows.sum()), l), generator=gen)
    return {
        "drafts": drafts, "target": target, "draft_logits": draft_logits, "temps": temps,
        "top_k": torch.full((rows,), NO_TOP_K_CUT, dtype=torch.int64),
        "accept_u": torch.rand(rows, l, dtype=F64, generator=gen),
        "final_u": torch.rand(rows, dtype=F64, generator=gen),
    }


@dataclasses.dataclass(frozen=True)
class GreedySpec:
    """A random greedy round: ``ties`` draws integer logits in [0, 3) (many ties); drafts
    follow the target argmax for a random number of steps, then break."""

    vocab: int
    num_drafts: int
    rows: int
    ties: bool


def greedy_inputs(spec: GreedySpec, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(drafts [B, l] int64, target [B, l+1, V] float32)`` of ``spec`` from the CPU ``gen``."""
    rows, l, vocab = spec.rows, spec.num_drafts, spec.vocab
    if spec.ties:
        target = torch.randint(0, 3, (rows, l + 1, vocab), generator=gen).float()
    else:
        target = logit_rows("random", rows * (l + 1), vocab, gen).reshape(rows, l + 1, vocab)
    best = torch.stack([torch.tensor([int(np.argmax(r)) for r in target[b].numpy()]) for b in range(rows)])
    breaks = torch.randint(0, l + 1, (rows,), generator=gen)
    other = (best[:, :l] + torch.randint(1, vocab, (rows, l), generator=gen)) % vocab
    drafts = torch.where(torch.arange(l) < breaks[:, None], best[:, :l], other)
    return drafts, target


# ----------------------------------------------------------------------------- tiny models
@dataclasses.dataclass(frozen=True)
class LawSpec:
    """A statistical case on tiny vocabularies.

    Target: a second-order model, ``p(. | y_{t-2}, y_{t-1})`` from a logit table
    ``[V, V, V]``, so ``p_j`` depends on the drafted prefix. Draft: a first-order Markov
    table ``q(. | prev)`` ``[V, V]`` (``q_1`` reads the anchor), drafted by inverse CDF
    (``draft="table"``), or base logits plus a vanilla Markov head drafted by the IUT's
    MarkovBlock (``draft="iut-markov"``). ``fixed`` gives context-free ``(p, q)`` instead.
    """

    vocab: int
    num_drafts: int
    temperature: float
    draft: str = "table"
    fixed: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    first_token: bool = False


class TinyChainModels:
    """The logit tables of one :class:`LawSpec`, drawn from the CPU ``gen`` in this order:
    target ``[V, V, V]``, draft ``[V, V]`` (or the ``fixed`` laws' logits), the two-token
    ``context``, then for ``draft="iut-markov"`` the base logits ``[l, V]`` and a vanilla
    head of rank :attr:`MARKOV_RANK` (reference layout, scale 0.8; a zero head over ``q``'s
    own logits when ``fixed``)."""

    MARKOV_RANK, HIDDEN_SIZE = 3, 4

    def __init__(self, spec: LawSpec, gen: torch.Generator) -> None:
        v, self.spec = spec.vocab, spec
        if spec.fixed is None:
            self.target = 1.5 * torch.randn(v, v, v, generator=gen)
            self.draft = 1.5 * torch.randn(v, v, generator=gen)
        else:
            self.target = laws_as_logits(spec.fixed[0]).reshape(1, 1, v).expand(v, v, v).contiguous()
            self.draft = laws_as_logits(spec.fixed[1]).expand(v, v).contiguous()
        self.context = tuple(int(t) for t in torch.randint(v, (2,), generator=gen))
        self.head_state = None
        if spec.draft == "iut-markov":
            self.base = 1.5 * torch.randn(spec.num_drafts, v, generator=gen)
            scale = 0.8
            if spec.fixed is not None:  # q is the base law itself: a zero head
                self.base, scale = self.draft[0].expand(spec.num_drafts, v).contiguous(), 0.0
            self.head_state = markov_head_state("vanilla", v, self.MARKOV_RANK, self.HIDDEN_SIZE, gen, scale=scale)

    def draft_law_table(self, device) -> torch.Tensor:
        """``[V, V]`` float64 ``q(. | prev)`` of the table draft, on ``device``."""
        # torch.softmax, not oracles.laws: the oracles import the inputs, so that import would close a package cycle.
        q = torch.softmax(self.draft.double() / self.spec.temperature, dim=-1)
        return q.to(device)

    def target_logits(self, history: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """``[B, l+1, V]``: position j reads the last two tokens of ``history [B, 2]`` + ``drafts[:, :j]``."""
        seq = torch.cat([history, drafts], dim=1)
        table = self.target.to(drafts.device)
        return torch.stack([table[seq[:, j], seq[:, j + 1]] for j in range(drafts.shape[1] + 1)], dim=1)

    def draft_logits(self, anchor: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """``[B, l, V]`` table-draft logits after ``anchor [B]`` and ``drafts [B, l]``."""
        prev = torch.cat([anchor[:, None], drafts[:, :-1]], dim=1)
        return self.draft.to(drafts.device)[prev]


def table_drafts(q_table: torch.Tensor, anchor: torch.Tensor, num_drafts: int, generator) -> torch.Tensor:
    """int64 ``[B, num_drafts]`` drafts from the Markov table ``q(. | prev) [V, V]`` after
    ``anchor [B]``, by inverse CDF one step at a time, with float64 uniforms of ``generator``
    (on the device of ``anchor``)."""
    prev, out = anchor, []
    for _ in range(num_drafts):
        u = torch.rand(anchor.shape[0], dtype=F64, generator=generator, device=anchor.device)
        prev = inverse_cdf_draws(q_table[prev], u)
        out.append(prev)
    return torch.stack(out, dim=1) if out else anchor.new_zeros(anchor.shape[0], 0)
