"""Conformance tests for SPEC S5, statistical: what a chain verifier commits follows the target's law.

SPEC S5 "Lossless: whatever q is, committed tokens follow the target's autoregressive law",
and its corollaries, tested by goodness of fit (:mod:`conformance.stats`) against exact laws
(:mod:`conformance.oracles.verify_oracle`, enumerated in fractions), through
:class:`~conformance.contract.ChainVerifier` and
:class:`~conformance.contract.TruncatedChainVerifier`:

* the joint law of (accepted, committed tokens) of one round with a Markov draft and a
  context-dependent target against the exact path oracle; two chained rounds against the
  target's autoregressive law;
* streams: draft noise and verify noise from one generator seed stay independent; seeded
  rows' accept and final streams stay apart (their joint law);
* truncation: under top-k / top-p / min-p the first committed token follows the
  renormalised truncated target law (the declared tie rule's kept set).

Not expressible through a ChainVerifier: whether the DRAFT tokens are sampled from ``q``
(not ``argmax q``, e.g. ``p = [.5, .3, .2]``, ``q = [.2, .3, .5]``) is a property of the
draft side (S2/S3 samplers, S9 loop); a verifier receives its drafts. The IUT-drafted cases
(MarkovBlock -> ChainVerifier, ``S5/lossless/iut-*``) check the two together; a draft-side
mutant (argmax drafting) fails them but belongs to S2/S3/S9.

The exact rule row for row is :mod:`conformance.suite.test_verify_rule`. The tiny models
and drafts come from :mod:`conformance.inputs.verify_rounds` (the raw case seed, as always).

To add a case: add an entry ``case(...): params`` to the dict of its family.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conformance import stats
from conformance.budget import DEFAULT_MIN_TV
from conformance.cases import case, case_id
from conformance.contract import ChainVerifier, TruncatedChainVerifier
from conformance.inputs import NO_TOP_K_CUT
from conformance.inputs.verify_rounds import (
    LawSpec,
    TinyChainModels,
    inverse_cdf_draws,
    laws_as_logits,
    table_drafts,
    verify_input_generator,
)
from conformance.oracles import verify_oracle as oracle
from conformance.oracles.laws import tempered_softmax64
from conformance.oracles.truncation import NEUTRAL, truncated_law
from conformance.suite.support.chain_verifier import check_committed, iut_markov_drafts, verify, verify_seeded

F64 = torch.float64


# ----------------------------------------------------------------------------- one round, two rounds
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
    models = TinyChainModels(spec, verify_input_generator(case_seed))
    laws = oracle.TinyChainLaws(models)
    law = laws.round_law(models.context)
    p_first = laws.target_law(models.context)
    marginal = [sum(w for k, w in law.items() if k[0] == y) for y in range(spec.vocab)]
    assert marginal == p_first, f"{case.id}: oracle self-check: first-token marginal != p_1"
    probs = oracle.law_probs(law)
    rows = stats.sample_size_for_tv(probs)

    history = torch.tensor(models.context, device=dspark_device).expand(rows, 2)
    anchor = history[:, 1].contiguous()
    temps = torch.full((rows,), spec.temperature, device=dspark_device)
    top_k = torch.full((rows,), NO_TOP_K_CUT, dtype=torch.int64, device=dspark_device)
    if spec.draft == "iut-markov":
        drafts, draft_logits = iut_markov_drafts(require, models, rows, anchor, temps, top_k,
                                                 case_generator, dspark_device)
    else:
        drafts = table_drafts(models.draft_law_table(dspark_device), anchor, spec.num_drafts, case_generator)
        draft_logits = models.draft_logits(anchor, drafts)

    accepted, tokens = verify(iut, "generator uniforms", dspark_device, drafts, models.target_logits(history, drafts),
                              draft_logits, temps, top_k, generator=case_generator)

    check_committed(case.id, accepted, tokens, drafts.cpu(), spec.vocab)
    counts = oracle.outcome_counts(law, tokens, spec.vocab)
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
    models = TinyChainModels(spec, verify_input_generator(case_seed))
    laws = oracle.TinyChainLaws(models)
    law = oracle.prefix_law(2, spec.vocab, lambda prefix: laws.target_law(models.context + prefix))
    probs = np.array([float(law.get(k, 0)) for k in np.ndindex(spec.vocab, spec.vocab)])
    rows = stats.sample_size_for_tv(probs / probs.sum())
    q_table = models.draft_law_table(dspark_device)
    temps = torch.full((rows,), spec.temperature, device=dspark_device)
    top_k = torch.full((rows,), NO_TOP_K_CUT, dtype=torch.int64, device=dspark_device)
    row_ids = torch.arange(rows)

    history = torch.tensor(models.context, device=dspark_device).expand(rows, 2)
    committed = []
    for _ in range(2):  # each round drafts after the previous round's commit
        anchor = history[:, 1].contiguous()
        drafts = table_drafts(q_table, anchor, spec.num_drafts, case_generator)
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
    ["S5.accept-rule", "S5.lossless", "S5.streams"], statistical=1,
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
    target = laws_as_logits(p, (0.25,) * 4).to(dspark_device).expand(rows, -1, -1)
    draft_logits = laws_as_logits(q).to(dspark_device).expand(rows, -1, -1)
    temps = torch.ones(rows, device=dspark_device)
    top_k = torch.full((rows,), NO_TOP_K_CUT, dtype=torch.int64, device=dspark_device)

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
    gen = verify_input_generator(case_seed)
    models = TinyChainModels(spec, gen)
    law = oracle.TinyChainLaws(models).round_law(models.context)
    probs = oracle.law_probs(law)
    rows = stats.sample_size_for_tv(probs)
    seeds = torch.randint(0, 2**62, (rows,), generator=gen)
    positions = torch.randint(0, 10**6, (rows,), generator=gen)
    history = torch.tensor(models.context, device=dspark_device).expand(rows, 2)
    anchor = history[:, 1].contiguous()
    drafts = table_drafts(models.draft_law_table(dspark_device), anchor, spec.num_drafts, case_generator)

    accepted, tokens = verify_seeded(
        iut, dspark_device, drafts, models.target_logits(history, drafts), models.draft_logits(anchor, drafts),
        torch.ones(rows), torch.full((rows,), NO_TOP_K_CUT, dtype=torch.int64), seeds, positions,
    )

    check_committed(case.id, accepted, tokens, drafts.cpu(), spec.vocab)
    counts = oracle.outcome_counts(law, tokens, spec.vocab)
    stat_check(stats.goodness_of_fit(counts, probs, name=f"{case.id}/joint"))


# ----------------------------------------------------------------------------- truncation
# case -> (truncation parameter, value, temperature); the draft law q is the full tempered
# softmax of other logits (the drafts are drawn from it, as a drafter that does not truncate
# hands it over), so only the target side truncates.
TRUNCATED_TARGET_CASES = {
    case("S5/truncation/top-k3-T0.8", "top_k = 3 at T = 0.8: the first committed token follows the renormalised "
         "top-3 target law", ["S5.truncation", "S5.lossless"], statistical=1): ("top_k", 3, 0.8),
    case("S5/truncation/top-p0.6-T0.5", "top_p = 0.6 at T = 0.5: the set is taken on the tempered target law",
         ["S5.truncation", "S5.lossless"], statistical=1): ("top_p", 0.6, 0.5),
    case("S5/truncation/min-p0.3-T2.0", "min_p = 0.3 at T = 2.0: the floor is relative to the tempered maximum",
         ["S5.truncation", "S5.lossless"], statistical=1): ("min_p", 0.3, 2.0),
    case("S5/truncation/top-k3-of-12-tied-T0.8", "top_k = 3 with twelve target tokens tied at the 3rd value: "
         "the declared tie rule's kept set, renormalised", ["S5.truncation"], statistical=1):
        ("top_k", 3, 0.8),
}
TRUNCATION_DRAFTS = 2
# Target logits at the first verify position: distinct values far from every cut above,
# and (for the tie case) twelve tokens tied at the 3rd value (a cut in sort or topk order
# keeps neither all of them nor the lowest ids: SGLang F9).
TARGET_ROW = (1.6, 1.1, 0.7, 0.35, 0.0, -0.4, -0.9, -1.5)
TIED_TARGET_ROW = (2.0, 2.0) + (1.0,) * 12 + (0.0, -1.0)


@pytest.mark.statistical
@pytest.mark.parametrize("case", TRUNCATED_TARGET_CASES, ids=case_id)
def test_S5_truncated_target_law(case, require, dspark_adapter, case_seed, case_generator, dspark_device,
                                 stat_check):
    iut = require(TruncatedChainVerifier)
    name, value, temperature = TRUNCATED_TARGET_CASES[case]
    gen = verify_input_generator(case_seed)
    first = torch.tensor(TIED_TARGET_ROW if "tied" in case.id else TARGET_ROW)
    vocab, l = first.numel(), TRUNCATION_DRAFTS
    target_row = torch.cat([first[None], torch.randn(l, vocab, generator=gen)])
    q_row = torch.softmax(torch.randn(l, vocab, generator=gen) / temperature, dim=-1)
    params = NEUTRAL | {name: value}
    ties = dspark_adapter.conventions.top_k_ties
    expected = truncated_law(tempered_softmax64(first, temperature), params["top_k"], params["top_p"], params["min_p"], ties)
    n = stats.sample_size_for_tv(expected)
    drafts = torch.multinomial(q_row, n, replacement=True, generator=gen).T.contiguous()
    dev = dspark_device
    accepted, tokens = iut.verify_truncated(
        drafts.to(dev), target_row.expand(n, -1, -1).contiguous().to(dev), q_row.expand(n, -1, -1).contiguous().to(dev),
        torch.full((n,), temperature, device=dev), torch.full((n,), params["top_k"], dtype=torch.int64, device=dev),
        torch.full((n,), params["top_p"], device=dev), torch.full((n,), params["min_p"], device=dev), case_generator,
    )
    check_committed(case.id, accepted.cpu(), tokens.cpu(), drafts, vocab)
    stat_check(stats.goodness_of_fit(torch.bincount(tokens[:, 0].cpu(), minlength=vocab), expected, name=case.id))
