"""Conformance tests for SPEC S5 losslessness (statistical): verified rounds commit tokens
that follow the target's law.

Covers, through :class:`~conformance.contract.ChainVerifier` (and
:class:`~conformance.contract.MarkovBlock` for the IUT-drafted cases) only:

* losslessness (statistical): the joint law of (accepted, committed tokens) of one round
  with a Markov draft and a context-dependent target against the exact path oracle; two
  chained rounds against the target's autoregressive law; draft noise and verify noise
  from one generator seed must stay independent;
* seeded rows: their law is right (accept and final streams apart).

Not expressible through a ChainVerifier: whether the DRAFT tokens are sampled from ``q``
(not ``argmax q``, e.g. ``p = [.5, .3, .2]``, ``q = [.2, .3, .5]``) is a property of the
draft side (S2/S3 samplers, S9 loop); a verifier receives its drafts. The IUT-drafted cases
(MarkovBlock -> ChainVerifier, ``S5/lossless/iut-*``) check the two together; a draft-side
mutant (argmax drafting) fails them but belongs to S2/S3/S9.

The exact S5 tests (parity, hand cases, cap, greedy, mixed batches, seeded repeats) are in
:mod:`conformance.test_verify`; shared helpers in :mod:`conformance.verify_support`.

To add a case: add an entry ``case(...): params`` to the dict of its family.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from conformance import oracle, stats
from conformance.budget import DEFAULT_MIN_TV
from conformance.cases import case, case_id
from conformance.contract import ChainVerifier, MarkovBlock
from conformance.verify_support import (
    F64,
    TOP_K_OFF,
    check_committed,
    input_generator,
    inverse_cdf_draws,
    logits_of,
    verify,
    verify_seeded,
)
from fixtures.generators import markov_head_state


# ----------------------------------------------------------------------------- losslessness
@dataclasses.dataclass(frozen=True)
class LawSpec:
    """A statistical case on tiny vocabularies.

    Target: a second-order model, ``p(. | y_{t-2}, y_{t-1})`` from a logit table
    ``[V, V, V]``, so ``p_j`` depends on the drafted prefix. Draft: a first-order Markov
    table ``q(. | prev)`` ``[V, V]`` (``q_1`` reads the anchor), drafted here by inverse CDF
    (``draft="table"``), or base logits plus a vanilla Markov head drafted by the IUT's
    MarkovBlock (``draft="iut-markov"``). ``fixed`` gives context-free ``(p, q)`` instead.
    """

    vocab: int
    num_drafts: int
    temperature: float
    draft: str = "table"
    fixed: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    first_token: bool = False


MARKOV_RANK, HIDDEN_SIZE = 3, 4


class _TinyModels:
    """Logit tables of one LawSpec and their exact laws (memoised Fractions)."""

    def __init__(self, spec: LawSpec, gen: torch.Generator) -> None:
        v, self.spec = spec.vocab, spec
        if spec.fixed is None:
            self.target = 1.5 * torch.randn(v, v, v, generator=gen)
            self.draft = 1.5 * torch.randn(v, v, generator=gen)
        else:
            self.target = logits_of(spec.fixed[0]).reshape(1, 1, v).expand(v, v, v).contiguous()
            self.draft = logits_of(spec.fixed[1]).expand(v, v).contiguous()
        self.context = tuple(int(t) for t in torch.randint(v, (2,), generator=gen))
        self.head_state = None
        if spec.draft == "iut-markov":
            self.base = 1.5 * torch.randn(spec.num_drafts, v, generator=gen)
            scale = 0.8
            if spec.fixed is not None:  # q is the base law itself: a zero head
                self.base, scale = self.draft[0].expand(spec.num_drafts, v).contiguous(), 0.0
            self.head_state = markov_head_state("vanilla", v, MARKOV_RANK, HIDDEN_SIZE, gen, scale=scale)
            w1, w2 = self.head_state["W1.weight"].double(), self.head_state["W2.weight"].double()
            self.bias = w1 @ w2.T  # bias[prev] = W2(W1[prev]), SPEC S2 vanilla
        self._memo: dict = {}

    def _law(self, key, logits) -> list:
        if key not in self._memo:
            self._memo[key] = oracle.exact_law(oracle.step_law(logits, self.spec.temperature, False))
        return self._memo[key]

    def target_law(self, history: tuple[int, ...]) -> list:
        """p(. | history) with history = context + tokens so far (reads the last two)."""
        a, b = history[-2:]
        return self._law(("p", a, b), self.target[a, b].double().numpy())

    def draft_law(self, step: int, prev: int) -> list:
        if self.spec.draft == "iut-markov":
            return self._law(("q", step, prev), (self.base[step].double() + self.bias[prev]).numpy())
        return self._law(("q", prev), self.draft[prev].double().numpy())

    def round_law(self, history: tuple[int, ...]) -> dict:
        """Exact law of one round's committed tokens after ``history`` (anchor = last token)."""
        return oracle.round_law(
            self.spec.num_drafts,
            lambda prefix: self.target_law(history + prefix),
            lambda prefix: self.draft_law(len(prefix), (history + prefix)[-1]),
        )

    # -- tensors for the IUT
    def draft_law_table(self, device) -> torch.Tensor:
        """``[V, V]`` float64 ``q(. | prev)`` of the table draft (the test's draft sampler)."""
        q = torch.softmax(self.draft.double() / self.spec.temperature, dim=-1)
        return q.to(device)

    def target_logits(self, history: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """``[B, l+1, V]``: position j reads the last two tokens of history + drafts[:j]."""
        seq = torch.cat([history, drafts], dim=1)
        table = self.target.to(drafts.device)
        return torch.stack([table[seq[:, j], seq[:, j + 1]] for j in range(drafts.shape[1] + 1)], dim=1)

    def draft_logits(self, anchor: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        prev = torch.cat([anchor[:, None], drafts[:, :-1]], dim=1)
        return self.draft.to(drafts.device)[prev]


def _table_drafts(q_table: torch.Tensor, anchor: torch.Tensor, num_drafts: int, generator) -> torch.Tensor:
    """Drafts from the Markov table ``q(. | prev)`` by inverse CDF, one step at a time."""
    prev, out = anchor, []
    for _ in range(num_drafts):
        u = torch.rand(anchor.shape[0], dtype=F64, generator=generator, device=anchor.device)
        prev = inverse_cdf_draws(q_table[prev], u)
        out.append(prev)
    return torch.stack(out, dim=1) if out else anchor.new_zeros(anchor.shape[0], 0)


def _code(tokens, vocab: int) -> int:
    return sum((int(t) + 1) * (vocab + 1) ** i for i, t in enumerate(tokens))


def _law_probs(law: dict) -> np.ndarray:
    """The oracle's outcome probabilities in key order, plus a probability-0 bin for
    anything outside its support."""
    probs = np.array([float(w) for w in law.values()] + [0.0])
    return probs / probs.sum()


def _counts_against(law: dict, committed: torch.Tensor, vocab: int) -> np.ndarray:
    """Counts of the IUT's committed tuples ``[B, l+1]`` over the bins of :func:`_law_probs`."""
    index = {_code(k, vocab): i for i, k in enumerate(law)}
    weights = (vocab + 1) ** torch.arange(committed.shape[1], dtype=torch.int64)
    codes, counts_ = np.unique(((committed.cpu() + 1) * weights).sum(dim=1).numpy(), return_counts=True)
    counts = np.zeros(len(law) + 1, dtype=np.int64)
    for code, count in zip(codes.tolist(), counts_.tolist()):
        counts[index.get(code, len(law))] += count
    return counts


def _iut_markov_drafts(require, models: _TinyModels, rows: int, anchor, temps, top_k, generator, device):
    block = require(MarkovBlock)
    spec = models.spec
    head = block.load_head("vanilla", {k: v.to(device) for k, v in models.head_state.items()},
                           spec.vocab, MARKOV_RANK, HIDDEN_SIZE, device)
    base = models.base.to(device).expand(rows, -1, -1).contiguous()
    return block.sample_block(head, base, anchor, None, temps, top_k, generator)


LAW_CASES = {
    case("S5/lossless/known-shape-l1", "p = [.5, .3, .2], q = [.2, .5, .3]: joint (accepted, tokens) law",
         ["S5.lossless", "S5.residual", "S5.bonus"], statistical=1):
        LawSpec(3, 1, 1.0, fixed=((0.5, 0.3, 0.2), (0.2, 0.5, 0.3))),
    case("S5/lossless/markov-V3-l2-T1", "Markov draft, context-dependent target: joint law and first token",
         ["S5.lossless", "S5.accept-rule", "S5.residual", "S5.bonus"], statistical=2):
        LawSpec(3, 2, 1.0, first_token=True),
    case("S5/lossless/markov-V3-l2-T0.6", "the same at T = 0.6 (q = softmax(corrected / T))",
         ["S5.lossless", "S5.accept-rule", "S5.residual"], statistical=1):
        LawSpec(3, 2, 0.6),
    case("S5/lossless/iut-markov-V3-l2-T0.8", "drafted by the IUT's MarkovBlock, verified with its corrected logits",
         ["S5.lossless", "S5.accept-rule", "S5.residual"], statistical=1):
        LawSpec(3, 2, 0.8, draft="iut-markov"),
    # Drafting argmax q (always token 2) instead of sampling q would commit 2 with probability
    # .4 and otherwise the correction 0: first-token law [.6, 0, .4] instead of p.
    case("S5/lossless/iut-draft-known-shape-l1", "p = [.5, .3, .2], q = [.2, .3, .5] drafted by the IUT's "
         "MarkovBlock (a draft-side property: drafts sampled from q, not argmax q)",
         ["S5.lossless"], statistical=1):
        LawSpec(3, 1, 1.0, draft="iut-markov", fixed=((0.5, 0.3, 0.2), (0.2, 0.3, 0.5))),
}


@pytest.mark.statistical
@pytest.mark.parametrize("case", LAW_CASES, ids=case_id)
def test_S5_round_law_matches_path_oracle(case, require, stat_check, case_seed, case_generator, dspark_device):
    """H0: the committed tuple (accepted drafts, emitted token) of one round, with drafts
    drawn from q, follows the exact law enumerated over draft paths. Chi-square over all
    outcomes (sparse ones pooled, impossible ones fail at once), alpha = PER_ASSERTION_ALPHA,
    min TV 0.01, n from sample_size_for_tv for power 0.999."""
    iut = require(ChainVerifier)
    spec = LAW_CASES[case]
    models = _TinyModels(spec, input_generator(case_seed))
    law = models.round_law(models.context)
    p_first = models.target_law(models.context)
    marginal = [sum(w for k, w in law.items() if k[0] == y) for y in range(spec.vocab)]
    assert marginal == p_first, f"{case.id}: oracle self-check: first-token marginal != p_1"
    probs = _law_probs(law)
    rows = stats.sample_size_for_tv(probs)

    history = torch.tensor(models.context, device=dspark_device).expand(rows, 2)
    anchor = history[:, 1].contiguous()
    temps = torch.full((rows,), spec.temperature, device=dspark_device)
    top_k = torch.full((rows,), TOP_K_OFF, dtype=torch.int64, device=dspark_device)
    if spec.draft == "iut-markov":
        drafts, draft_logits = _iut_markov_drafts(require, models, rows, anchor, temps, top_k,
                                                  case_generator, dspark_device)
    else:
        drafts = _table_drafts(models.draft_law_table(dspark_device), anchor, spec.num_drafts, case_generator)
        draft_logits = models.draft_logits(anchor, drafts)

    accepted, tokens = verify(iut, "generator uniforms", dspark_device, drafts, models.target_logits(history, drafts),
                              draft_logits, temps, top_k, generator=case_generator)

    check_committed(case.id, accepted, tokens, drafts.cpu(), spec.vocab)
    counts = _counts_against(law, tokens, spec.vocab)
    stat_check(stats.goodness_of_fit(counts, probs, name=f"{case.id}/joint"))
    if spec.first_token:
        first = np.bincount(tokens[:, 0].numpy(), minlength=spec.vocab)
        stat_check(stats.goodness_of_fit(first, [float(w) for w in p_first], name=f"{case.id}/first-token"))


TWO_ROUNDS = case("S5/lossless/two-rounds-V4-l1-T0.8", "round 2 drafts after round 1's commit: the "
                  "committed 2-token prefix follows p(y1) p(y2 | y1)", ["S5.lossless"], statistical=1)


@pytest.mark.statistical
@pytest.mark.parametrize("case", [TWO_ROUNDS], ids=case_id)
def test_S5_two_rounds_follow_target_law(case, require, stat_check, case_seed, case_generator, dspark_device):
    """H0: the first two committed tokens over two chained rounds follow the target's
    autoregressive law exactly. Chi-square on V^2 bins, alpha = PER_ASSERTION_ALPHA,
    min TV 0.01, power 0.999."""
    iut = require(ChainVerifier)
    spec = LawSpec(4, 1, 0.8)
    models = _TinyModels(spec, input_generator(case_seed))
    law = oracle.prefix_law(2, spec.vocab, lambda prefix: models.target_law(models.context + prefix))
    probs = np.array([float(law.get(k, 0)) for k in np.ndindex(spec.vocab, spec.vocab)])
    rows = stats.sample_size_for_tv(probs / probs.sum())
    q_table = models.draft_law_table(dspark_device)
    temps = torch.full((rows,), spec.temperature, device=dspark_device)
    top_k = torch.full((rows,), TOP_K_OFF, dtype=torch.int64, device=dspark_device)
    row_ids = torch.arange(rows)

    history = torch.tensor(models.context, device=dspark_device).expand(rows, 2)
    committed = []
    for _ in range(2):  # each round drafts after the previous round's commit
        anchor = history[:, 1].contiguous()
        drafts = _table_drafts(q_table, anchor, spec.num_drafts, case_generator)
        accepted, tokens = verify(iut, "generator uniforms", dspark_device, drafts,
                                  models.target_logits(history, drafts), models.draft_logits(anchor, drafts),
                                  temps, top_k, generator=case_generator)
        check_committed(case.id, accepted, tokens, drafts.cpu(), spec.vocab)
        committed.append((accepted, tokens))
        full = torch.cat([history.cpu(), tokens], dim=1)  # the last two committed tokens become the history
        history = torch.stack([full[row_ids, accepted + 1], full[row_ids, accepted + 2]], dim=1).to(dspark_device)

    (acc1, tok1), (_, tok2) = committed
    second = torch.where(acc1 >= 1, tok1[:, 1], tok2[:, 0])
    pairs = (tok1[:, 0] * spec.vocab + second).numpy()
    counts = np.bincount(pairs, minlength=spec.vocab**2)
    stat_check(stats.goodness_of_fit(counts, probs / probs.sum(), name=f"{case.id}/prefix2"))


SHARED_SEED = case(
    "S5/streams/shared-seed-accept-rate",
    "p = [.4, .3, .2, .1], q = [.1, .2, .3, .4]; drafts from the generator's first draws, verify from "
    "the same generator: accept rate = sum min(p, q) = 0.6",
    ["S5.accept-rule", "S5.lossless"], statistical=1,
)


@pytest.mark.statistical
@pytest.mark.parametrize("case", [SHARED_SEED], ids=case_id)
def test_S5_draft_and_verify_noise_independent(case, require, stat_check, case_generator, dspark_device):
    """H0: accepted ~ Bin(n, sum_v min(p_v, q_v) = 0.6); exact binomial test,
    alpha = PER_ASSERTION_ALPHA, min effect 0.01, n from sample_size_for_proportion.

    The drafts use the generator's first ``[n, 1]`` float64 uniforms ``v``, mapped to tokens
    by the inverse CDF of ``q`` in descending token order (a valid sampler from q). A
    verifier whose coins replay ``v`` (e.g. it re-seeds its stream from the same seed)
    accepts x = 3 iff v < .25 and x = 2 iff v < 2/3: rate 0.817. (The ascending-order
    inverse CDF happens to keep 0.6 for these p, q; the descending one does not.)
    """
    iut = require(ChainVerifier)
    p, q = (0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4)
    rows, vocab = stats.sample_size_for_proportion(0.6, DEFAULT_MIN_TV), len(p)
    draft_noise = torch.rand(rows, 1, dtype=F64, generator=case_generator, device=dspark_device)
    q_desc = torch.tensor(q[::-1], dtype=F64, device=dspark_device).expand(rows, -1)
    drafts = (vocab - 1) - inverse_cdf_draws(q_desc, draft_noise[:, 0])[:, None]
    target = logits_of(p, (0.25,) * 4).to(dspark_device).expand(rows, -1, -1)
    draft_logits = logits_of(q).to(dspark_device).expand(rows, -1, -1)
    temps = torch.ones(rows, device=dspark_device)
    top_k = torch.full((rows,), TOP_K_OFF, dtype=torch.int64, device=dspark_device)

    accepted, tokens = verify(iut, "generator uniforms", dspark_device, drafts, target, draft_logits, temps, top_k,
                              generator=case_generator)

    check_committed(case.id, accepted, tokens, drafts.cpu(), vocab)
    stat_check(stats.binomial(int(accepted.sum()), rows, 0.6, name=f"{case.id}/accept-rate",
                              min_effect=DEFAULT_MIN_TV))


SEEDED_LAW = case(
    "S5/seeded/law-streams-apart",
    "seeded rows (random seeds and positions), p = [.4, .3, .2, .1], q = [.1, .2, .3, .4]: joint law; "
    "an emitted-token draw sharing the accept stream skews the correction",
    ["S5.seeded", "S5.lossless", "S5.residual"], statistical=1,
)


@pytest.mark.statistical
@pytest.mark.parametrize("case", [SEEDED_LAW], ids=case_id)
def test_S5_seeded_rows_follow_the_law(case, require, stat_check, case_seed, case_generator, dspark_device):
    """H0: over rows with distinct random seeds, (accepted, tokens) follows the exact round
    law. Chi-square, alpha = PER_ASSERTION_ALPHA, min TV 0.01, power 0.999. If the final
    uniform reuses the accept coin, a reject at x = 3 (coin >= .25) draws the correction
    from the upper part of [0, 1): P(token 0) drops from .75 to .67, x = 2 from .75 to .25.
    """
    iut = require(ChainVerifier)
    spec = LawSpec(4, 1, 1.0, fixed=((0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4)))
    gen = input_generator(case_seed)
    models = _TinyModels(spec, gen)
    law = models.round_law(models.context)
    probs = _law_probs(law)
    rows = stats.sample_size_for_tv(probs)
    seeds = torch.randint(0, 2**62, (rows,), generator=gen)
    positions = torch.randint(0, 10**6, (rows,), generator=gen)
    history = torch.tensor(models.context, device=dspark_device).expand(rows, 2)
    anchor = history[:, 1].contiguous()
    drafts = _table_drafts(models.draft_law_table(dspark_device), anchor, spec.num_drafts, case_generator)

    accepted, tokens = verify_seeded(
        iut, dspark_device, drafts, models.target_logits(history, drafts), models.draft_logits(anchor, drafts),
        torch.ones(rows), torch.full((rows,), TOP_K_OFF, dtype=torch.int64), seeds, positions,
    )

    check_committed(case.id, accepted, tokens, drafts.cpu(), spec.vocab)
    counts = _counts_against(law, tokens, spec.vocab)
    stat_check(stats.goodness_of_fit(counts, probs, name=f"{case.id}/joint"))
