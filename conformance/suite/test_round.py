"""SPEC S9 "one round with the engine's own parts": the IUT's drafter proposes a block from
given base logits and Markov head weights, hands over its draft distribution, and the IUT's
verifier checks the block against given target logits (S3 and S5 truncation included).

Capability: ``SpeculativeRound``. The suite supplies inputs and checks outputs; every draw
is the IUT's own (from ``case_generator`` or its seeded rows). Oracles are float64 and
written from the SPEC (the corrected logits from ``oracles.markov_block``, the truncated
laws from ``oracles.truncation``); none imports ``dspark_ref``.

What a round must do, whatever the draft quality (SPEC S5 "Lossless", with fixed target
logits per verify position): the first committed token follows ``p_1``; given that draft
``x_1`` was accepted, the second follows ``p_2``. With ``q_1`` the law the drafter draws
``x_1`` from (``Conventions.draft_truncates`` says whether it truncates), ``P(x_1 = a
accepted) = min(p_1(a), q_1(a))``, so the joint law of (``x_1`` accepted as ``a``, the
second token ``b``) is ``min(p_1, q_1)(a) p_2(b)``, and "rejected at 1" has the rest. The
accepted count follows ``P(accepted >= j) = sum over x_1..x_j of prod_i min(p_i, q_i)``,
``q_i`` conditioned on the drawn ``x_{i-1}`` through the Markov head (enumerated here).
Faults between components (a q that is not the law the drafts were drawn from, noise
shared by drafter and verifier, greedy rules that differ) move these laws; a q handed over
in another dtype or untruncated fails the handoff check against the float64 law. The other
way round, the drafts themselves must follow the q handed over, jointly over the block, on
the generator path and on seeded rows (``support.block_law``: sized for the effect of draws
from bfloat16-rounded logits and of one noise vector reused at every step of a block).

Statistical cases repeat one input row ``n`` times in a batch, ``n`` from
``stats.sample_size_for_tv`` at the default TV, the row drawn again until every law the case
tests has two or more outcomes (a truncation may keep a single token); exact cases build
inputs whose premise (greedy argmax gaps far above the S0 bound) holds by construction.

To add a case: register it with ``case(...)`` in its family's dict and give the spec.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from conformance import numerics, stats
from conformance.cases import case, case_id
from conformance.contract import SpeculativeRound
from conformance.inputs import markov_head_state
from conformance.inputs.seeding import input_generator, sub_seed
from conformance.oracles import block_law
from conformance.oracles.laws import tempered_softmax64
from conformance.oracles.markov_block import oracle_block_logits
from conformance.oracles.round_oracle import accepted_law, all_paths, draft_law, path_corrected, q_bound, target_law
from conformance.oracles.truncation import NEUTRAL
from conformance.suite.support.blocks import block_law_rows, load_block_law_head

VOCAB, RANK, HIDDEN, GAMMA = 8, 4, 4, 3
HEAD_SCALE = 0.6  # the Markov bias moves q by far more than the detectable TV
TARGET_NOISE = 0.8  # target logits = base logits + this much noise: drafts of middling quality
#: Greedy rows of the exact cases keep their top two corrected / target logits this far
#: apart, far above the S0 bound of a float32 evaluation (~1e-6 here).
GREEDY_GAP = 1e-3
#: Draws of a statistical case's input row before the case is a suite defect: the case most
#: often drawn again, top_p = 0.7 at T = 0.5, keeps a single first token on about 70% of draws
#: (73 of 104 base seeds), so 64 draws all fail with probability below 1e-9.
MAX_ROW_DRAWS = 64


@dataclasses.dataclass(frozen=True)
class RowSpec:
    """One request: head type and dtype, temperature and truncation."""

    head_type: str = "vanilla"
    temperature: float = 1.0
    top_k: int = NEUTRAL["top_k"]
    top_p: float = 1.0
    min_p: float = 0.0
    head_dtype: torch.dtype = torch.float32


# ----------------------------------------------------------------------------- inputs
def _load(iut, head_type, case_seed, device, dtype=torch.float32):
    """A random head in the reference layout loaded into the IUT; the oracle's weights are
    the IUT's after rounding into ``dtype`` (so they are exact inputs of both). An IUT that
    does not ship ``head_type`` (``load_head`` raises ``NotImplementedError``) is a skip naming
    the head."""
    state = markov_head_state(head_type, VOCAB, RANK, HIDDEN, torch.Generator().manual_seed(sub_seed(case_seed, "head")),
                              scale=HEAD_SCALE)
    state = {name: t.to(dtype).to(torch.float32) for name, t in state.items()}
    try:
        handle = iut.load_head(head_type, {k: v.to(device) for k, v in state.items()}, VOCAB, RANK, HIDDEN, device,
                               dtype)
    except NotImplementedError as exc:
        pytest.skip(f"SpeculativeRound: {head_type} head not supported by this IUT ({exc})")
    return handle, state


def _row_inputs(head_type: str, gen: torch.Generator):
    """``(base[1, gamma, V], anchor[1], hidden[1, gamma, d] | None, target[1, gamma + 1, V])``."""
    base = torch.randn(1, GAMMA, VOCAB, generator=gen) * 1.5
    anchor = torch.randint(VOCAB, (1,), generator=gen)
    hidden = torch.randn(1, GAMMA, HIDDEN, generator=gen) if head_type != "vanilla" else None
    target = torch.cat([base, torch.randn(1, 1, VOCAB, generator=gen)], dim=1)
    target = target + TARGET_NOISE * torch.randn(target.shape, generator=gen)
    return base, anchor, hidden, target


def _spread_row(head_type: str, gen: torch.Generator, laws_of, what: str):
    """``(inputs, laws)``: ``_row_inputs`` drawn from ``gen`` until every law of
    ``laws_of(*inputs)`` (float64 vectors) gives two or more outcomes a positive probability
    (the premise, by construction): a one-outcome law has no goodness-of-fit test, and a
    truncation that keeps one token leaves its kept set untested. A first draw that
    qualifies is kept, so those seeds see the inputs they always saw.

    Raises:
        RuntimeError: no draw in ``MAX_ROW_DRAWS`` qualified (a suite defect, naming ``what``).
    """
    for _ in range(MAX_ROW_DRAWS):
        inputs = _row_inputs(head_type, gen)
        laws = laws_of(*inputs)
        if all(int((law > 0).sum()) >= 2 for law in laws):
            return inputs, laws
    raise RuntimeError(f"{what}: test design: no input row in {MAX_ROW_DRAWS} draws gives every tested law two or "
                       "more outcomes")


def _params(specs: list[RowSpec], device):
    """``(temperatures, top_k, top_p, min_p)`` ``[B]`` of the rows' specs, built per run of
    one spec object (a statistical case repeats one spec ~10^5 times)."""
    runs = [list(group) for _, group in itertools.groupby(specs, key=id)]
    counts = torch.tensor([len(run) for run in runs], dtype=torch.int64)

    def column(field: str, dtype: torch.dtype) -> torch.Tensor:
        values = torch.tensor([getattr(run[0], field) for run in runs], dtype=dtype)
        return values.repeat_interleave(counts, output_size=len(specs)).to(device)

    return (column("temperature", torch.float32), column("top_k", torch.int64), column("top_p", torch.float32),
            column("min_p", torch.float32))


def _round(iut, handle, base, anchor, hidden, target, specs, device, **kwargs):
    """One IUT round on ``device``; outputs on the CPU. Seeded rows an IUT cannot take are a
    skip naming the feature."""
    on = (lambda t: None if t is None else t.to(device))
    try:
        out = iut.round(handle, on(base), on(anchor), on(hidden), on(target), *_params(specs, device),
                        **{k: on(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    except NotImplementedError as exc:
        pytest.skip(f"SpeculativeRound: {'seeded rows' if 'seeds' in kwargs else 'this round'} not supported "
                    f"by this IUT ({exc})")
    return tuple(None if t is None else t.cpu() for t in out)


def _repeat(tensor, n):
    return None if tensor is None else tensor.expand(n, *tensor.shape[1:]).contiguous()


# ----------------------------------------------------------------------------- laws
LAW_CASES = {
    case("S9/round/law-vanilla-T1.0", "vanilla head, T = 1: first token ~ p_1; (x_1 accepted, 2nd token) ~ "
         "min(p_1, q_1) x p_2", ["S9.round"], statistical=2): RowSpec(),
    case("S9/round/law-gated-T0.6", "gated head, T = 0.6", ["S9.round"], statistical=2):
        RowSpec("gated", 0.6),
    case("S9/round/law-rnn-bf16-T1.0", "rnn head in bfloat16, T = 1", ["S9.round"], statistical=2):
        RowSpec("rnn", 1.0, head_dtype=torch.bfloat16),
    case("S9/round/law-top-k3-T0.8", "top_k = 3 at T = 0.8: the truncated target law", ["S9.round"],
         statistical=2): RowSpec(temperature=0.8, top_k=3),
    case("S9/round/law-top-p0.7-T0.5", "top_p = 0.7 at T = 0.5: sets taken on the tempered law",
         ["S9.round"], statistical=2): RowSpec(temperature=0.5, top_p=0.7),
    case("S9/round/law-min-p0.2-T1.6", "min_p = 0.2 at T = 1.6", ["S9.round"], statistical=2):
        RowSpec(temperature=1.6, min_p=0.2),
}


@pytest.mark.statistical
@pytest.mark.parametrize("case", LAW_CASES, ids=case_id)
def test_S9_round_commits_the_target_law(case, require, dspark_adapter, case_seed, case_generator, dspark_device,
                                         stat_check):
    iut = require(SpeculativeRound)
    spec = LAW_CASES[case]
    handle, state = _load(iut, spec.head_type, case_seed, dspark_device, spec.head_dtype)
    ties = dspark_adapter.conventions.top_k_ties

    def laws(base, anchor, hidden, target):  # the first token's and the joint law
        p = target_law(target[0], spec, ties)
        first_corrected, _ = oracle_block_logits(spec.head_type, state, base[:, :1], anchor[:, None],
                                                 None if hidden is None else hidden[:, :1])
        q1 = draft_law(first_corrected[0, 0], spec, dspark_adapter.conventions)
        joint = torch.cat([(torch.minimum(p[0], q1)[:, None] * p[1][None]).flatten(), torch.zeros(1)])
        joint[-1] = (1 - joint[:-1].sum()).clamp(min=0)
        return p[0], joint

    (base, anchor, hidden, target), (first, joint) = _spread_row(spec.head_type, input_generator(case_seed), laws,
                                                                 case.id)
    n = max(stats.sample_size_for_tv(first), stats.sample_size_for_tv(joint))
    drafts, accepted, tokens, _ = _round(iut, handle, _repeat(base, n), _repeat(anchor, n), _repeat(hidden, n),
                                         _repeat(target, n), [spec] * n, dspark_device, generator=case_generator)
    stat_check(stats.goodness_of_fit(torch.bincount(tokens[:, 0], minlength=VOCAB), first, name=f"{case.id}/first"))
    cell = torch.where(accepted >= 1, tokens[:, 0] * VOCAB + tokens[:, 1], VOCAB * VOCAB)
    stat_check(stats.goodness_of_fit(torch.bincount(cell, minlength=VOCAB * VOCAB + 1), joint,
                                     name=f"{case.id}/joint"))


# ----------------------------------------------------------------------------- acceptance
ACCEPTANCE_CASES = {
    case("S9/round/acceptance-vanilla-T1.0", "accepted counts 0..gamma follow the law p and the Markov q imply "
         "(enumerated over all V^gamma draft paths)", ["S9.round-acceptance"], statistical=1): RowSpec(),
    case("S9/round/acceptance-gated-top-p0.8-T0.7", "the same with a gated head and top_p = 0.8 at T = 0.7",
         ["S9.round-acceptance"], statistical=1): RowSpec("gated", 0.7, top_p=0.8),
}


@pytest.mark.statistical
@pytest.mark.parametrize("case", ACCEPTANCE_CASES, ids=case_id)
def test_S9_round_acceptance_follows_p_and_q(case, require, dspark_adapter, case_seed, case_generator, dspark_device,
                                              stat_check):
    iut = require(SpeculativeRound)
    spec = ACCEPTANCE_CASES[case]
    handle, state = _load(iut, spec.head_type, case_seed, dspark_device, spec.head_dtype)
    paths = all_paths(VOCAB, GAMMA)

    def laws(base, anchor, hidden, target):  # the accepted count's law
        q_paths = draft_law(path_corrected(spec.head_type, state, base, anchor, hidden, paths), spec,
                            dspark_adapter.conventions)
        return (accepted_law(target_law(target[0], spec, dspark_adapter.conventions.top_k_ties), q_paths, paths),)

    (base, anchor, hidden, target), (law,) = _spread_row(spec.head_type, input_generator(case_seed), laws, case.id)
    n = stats.sample_size_for_tv(law)
    _, accepted, _, _ = _round(iut, handle, _repeat(base, n), _repeat(anchor, n), _repeat(hidden, n),
                               _repeat(target, n), [spec] * n, dspark_device, generator=case_generator)
    stat_check(stats.goodness_of_fit(torch.bincount(accepted, minlength=GAMMA + 1), law, name=case.id,
                                     labels=[f"{k} accepted" for k in range(GAMMA + 1)]))


# ----------------------------------------------------------------------------- greedy and mixed
def _greedy_spec(adapter) -> RowSpec:
    """A row greedy under the declared rule and sampling under the other one (T = 0.8 with
    top_k = 1, or T = 0 with no top-k cut): drafter and verifier must agree on the rule."""
    if adapter.conventions.greedy_rule == "top_k":
        return RowSpec(temperature=0.8, top_k=1)
    return RowSpec(temperature=0.0)


def _gap(logits: torch.Tensor) -> torch.Tensor:
    top2 = logits.topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


def _greedy_rows(head_type, state, rows, gen):
    """Inputs of ``rows`` greedy rows, the oracle's greedy drafts and committed tokens.

    The target follows the greedy path's corrected logits with per-row noise (0, 0.3 or 3),
    so accepted counts cover 0..gamma; a row is redrawn until every argmax it takes (draft
    and target) leads by ``GREEDY_GAP`` (premise by construction).
    """
    out = []
    while len(out) < rows:
        base, anchor, hidden, _ = _row_inputs(head_type, gen)
        path = [int(anchor)]
        corrected = []
        for k in range(GAMMA):  # the greedy chain, one teacher-forced step at a time
            prev = torch.tensor([path + [0] * (GAMMA - len(path))])[:, :GAMMA]
            logits, _ = oracle_block_logits(head_type, state, base, prev, hidden)
            corrected.append(logits[0, k])
            path.append(int(logits[0, k].argmax()))
        corrected = torch.stack(corrected)
        noise = (0.0, 0.3, 3.0)[len(out) % 3]
        target = torch.cat([corrected, torch.randn(1, VOCAB, generator=gen) * 2]) \
            + noise * torch.randn(GAMMA + 1, VOCAB, generator=gen, dtype=torch.float64)
        target = target.to(torch.float32)
        if bool((_gap(corrected) > GREEDY_GAP).all()) and bool((_gap(target.double()) > GREEDY_GAP).all()):
            drafts = torch.tensor(path[1:])
            best = target.double().argmax(dim=-1)
            acc = int((drafts == best[:GAMMA]).long().cumprod(0).sum())
            committed = drafts[:acc].tolist() + [int(best[acc])]
            out.append((base, anchor, hidden, target[None], drafts, acc, committed))
    return out


MIXED = case("S9/round/mixed-greedy-tempered-truncated", "one batch of greedy rows (greedy under the declared rule "
             "only), tempered rows (T = 0.7) and truncated rows (top_p = 0.8, T = 1.3): greedy rows exact (drafts, "
             "accepted, tokens), the others' first token ~ their own target law",
             ["S9.round"], statistical=2)


@pytest.mark.statistical
@pytest.mark.parametrize("case", [MIXED], ids=case_id)
def test_S9_round_mixed_batch(case, require, dspark_adapter, case_seed, case_generator, dspark_device, stat_check):
    iut = require(SpeculativeRound)
    handle, state = _load(iut, "vanilla", case_seed, dspark_device)
    gen = input_generator(case_seed)
    greedy = _greedy_rows("vanilla", state, 24, gen)
    kinds = [RowSpec(temperature=0.7), RowSpec(temperature=1.3, top_p=0.8)]
    (base, anchor, hidden, target), laws = _spread_row(
        "vanilla", gen, lambda *inputs: [target_law(inputs[3][0], spec, dspark_adapter.conventions.top_k_ties)[0]
                                         for spec in kinds], case.id)
    n = max(stats.sample_size_for_tv(law) for law in laws)
    g = len(greedy)
    specs = [_greedy_spec(dspark_adapter)] * g + [kinds[0]] * n + [kinds[1]] * n
    cat = (lambda i, other: torch.cat([row[i] for row in greedy] + [_repeat(other, 2 * n)]))
    drafts, accepted, tokens, _ = _round(iut, handle, cat(0, base), cat(1, anchor), None, cat(3, target), specs,
                                         dspark_device, generator=case_generator)
    for row, (*_, exp_drafts, exp_acc, exp_tokens) in enumerate(greedy):
        got = (drafts[row].tolist(), int(accepted[row]), tokens[row, : int(accepted[row]) + 1].tolist())
        assert got == (exp_drafts.tolist(), exp_acc, exp_tokens), (
            f"{case.id}: greedy row {row} (declared rule {dspark_adapter.conventions.greedy_rule!r}): expected "
            f"drafts {exp_drafts.tolist()}, accepted {exp_acc}, tokens {exp_tokens}; got drafts {got[0]}, "
            f"accepted {got[1]}, tokens {got[2]}"
        )
    for i, (kind, law) in enumerate(zip(("tempered", "top-p"), laws)):
        first = tokens[g + i * n: g + (i + 1) * n, 0]
        stat_check(stats.goodness_of_fit(torch.bincount(first, minlength=VOCAB), law, name=f"{case.id}/{kind}"))


# ----------------------------------------------------------------------------- seeded rows
SEEDED = case("S9/round/seeded-repeat-alone-and-permuted", "seeded rows: the same seeds repeat bit for bit; a row "
              "alone and in a permuted batch gives the same round; other seeds give other drafts", ["S9.round"])


@pytest.mark.parametrize("case", [SEEDED], ids=case_id)
def test_S9_round_seeded_rows(case, require, case_seed, dspark_device):
    iut = require(SpeculativeRound)
    handle, _ = _load(iut, "vanilla", case_seed, dspark_device)
    gen = input_generator(case_seed)
    rows = 8
    inputs = [_row_inputs("vanilla", gen) for _ in range(rows)]
    specs = [RowSpec(temperature=1.5), RowSpec(temperature=1.5, top_p=0.9), RowSpec(temperature=1.2, top_k=5),
             RowSpec(temperature=1.5, min_p=0.05)] * 2
    seeds = torch.randint(0, 2**62, (rows,), generator=gen)
    positions = torch.randint(0, 10**6, (rows,), generator=gen)

    def run(order, seeds_):
        batch = [torch.cat([inputs[i][j] for i in order]) for j in (0, 1, 3)]
        return _round(iut, handle, batch[0], batch[1], None, batch[2], [specs[i] for i in order], dspark_device,
                      seeds=seeds_[order], positions=positions[order])

    order = torch.arange(rows)
    first, again = run(order, seeds), run(order, seeds)
    names = ("draft_tokens", "accepted", "tokens")
    for name, a, b in zip(names, first, again):
        assert torch.equal(a, b), f"{case.id}: {name} differ between two runs with the same seeds"
    permuted = torch.randperm(rows, generator=gen)
    shuffled = run(permuted, seeds)
    for name, a, b in zip(names, first, shuffled):
        assert torch.equal(a[permuted], b), f"{case.id}: {name} of seeded rows change with the batch order"
    for i in range(rows):
        alone = run(torch.tensor([i]), seeds)
        for name, a, b in zip(names, first, alone):
            assert torch.equal(a[i:i + 1], b), f"{case.id}: {name} of seeded row {i} differ alone and in the batch"
    other = run(order, seeds + 1)
    assert not torch.equal(first[0], other[0]), f"{case.id}: other seeds gave the same drafts on every row"


# ----------------------------------------------------------------------------- the block's own law
# case -> seeded rows (each its own seed and position) or the generator path
BLOCK_LAW_CASES = {
    case("S9/round/block-law-generator", "the drafted block x_1..x_3 follows the draft_probs handed to the verifier "
         "(product of the per-step q along the drawn prefix), draws from the generator; sized for TV "
         f"{block_law.MIN_TV} (bfloat16-rounded draws at |L| ~ {block_law.LOGIT_OFFSET:g})", ["S9.round-handoff"],
         statistical=1): False,
    case("S9/round/block-law-seeded", "the same on seeded rows, each with its own seed and position: sized for TV "
         f"{block_law.MIN_TV} (bfloat16-rounded draws, one noise vector for every step of a block)",
         ["S9.round-handoff"], statistical=1): True,
}


@pytest.mark.statistical
@pytest.mark.parametrize("case", BLOCK_LAW_CASES, ids=case_id)
def test_S9_round_block_follows_the_q_it_hands_over(case, require, case_seed, case_generator, dspark_device,
                                                   stat_check):
    iut = require(SpeculativeRound)
    head_type = "vanilla"
    inputs = block_law.block_law_inputs(head_type, case_seed, case.id)
    handle = load_block_law_head("SpeculativeRound", iut, inputs, head_type, dspark_device, torch.float32)
    n = stats.sample_size_for_tv(inputs.law, min_tv=block_law.MIN_TV)
    gen = torch.Generator().manual_seed(sub_seed(case_seed, "requests"))
    target = torch.cat([inputs.base, inputs.base[:, -1:]], dim=1)
    target = target + TARGET_NOISE * torch.randn(target.shape, generator=gen)
    randomness = {"generator": case_generator}
    if BLOCK_LAW_CASES[case]:
        randomness = {"seeds": torch.randint(0, 2**62, (n,), generator=gen),
                      "positions": torch.randint(0, 10**6, (n,), generator=gen)}

    drafts, _, _, q = _round(iut, handle, *block_law_rows(inputs, n, "cpu"), _repeat(target, n),
                             [RowSpec(head_type, block_law.BLOCK_TEMPERATURE)] * n, dspark_device, **randomness)

    if q is None:
        pytest.skip("SpeculativeRound: this IUT does not expose the draft distribution it hands over")
    stat_check(block_law.block_law_check(case.id, drafts, q))


# ----------------------------------------------------------------------------- handoff
HANDOFF_CASES = {
    case("S9/round/handoff-q-is-the-draw-law", "draft_probs = the law each draft was drawn from (float64 "
         "teacher-forced oracle, truncated if the drafter truncates, one-hot on greedy rows) within the S0 bound",
         ["S9.round-handoff", "S0.numerically-equal"]): None,
}


#: Handoff rows keep every truncation decision this far (in probability) from its cut, so a
#: float32 evaluation within the S0 bound keeps the oracle's set.
CUT_MARGIN = 1e-4


def _cut_is_clear(law: torch.Tensor, spec: RowSpec) -> bool:
    """Whether every top-k / top-p / min-p decision on ``law [V]`` (float64, tempered) is
    at least ``CUT_MARGIN`` from its threshold."""
    ranked = law.sort(descending=True).values
    if 1 <= spec.top_k < VOCAB and float(ranked[spec.top_k - 1] - ranked[spec.top_k]) < CUT_MARGIN:
        return False
    if spec.top_p < 1.0 and float(((ranked.cumsum(0) - ranked) - spec.top_p).abs().min()) < CUT_MARGIN:
        return False
    return not (spec.min_p > 0.0 and float((law / law.max() - spec.min_p).abs().min()) < CUT_MARGIN)


def _handoff_row(state, spec: RowSpec, gen: torch.Generator):
    """Gated-head inputs whose truncation cuts are clear at every step after every possible
    previous token (a gated step depends on the previous token only), redrawn until so."""
    while True:
        row = _row_inputs("gated", gen)
        base, _, hidden, _ = row
        every_prev = torch.arange(VOCAB)[:, None].expand(VOCAB, GAMMA)
        logits, _ = oracle_block_logits("gated", state, _repeat(base, VOCAB), every_prev, _repeat(hidden, VOCAB))
        laws = tempered_softmax64(logits.reshape(-1, VOCAB), spec.temperature)
        if all(_cut_is_clear(law, spec) for law in laws):
            return row


@pytest.mark.parametrize("case", HANDOFF_CASES, ids=case_id)
def test_S9_round_hands_over_the_draw_law(case, require, dspark_adapter, case_seed, case_generator, dspark_device,
                                          numeric_check):
    iut = require(SpeculativeRound)
    handle, state = _load(iut, "gated", case_seed, dspark_device)
    gen = input_generator(case_seed)
    specs = [RowSpec("gated", 1.0), RowSpec("gated", 0.6, top_k=3), RowSpec("gated", 0.5, top_p=0.7),
             RowSpec("gated", 1.6, min_p=0.2), _greedy_spec(dspark_adapter)] * 4
    inputs = [_handoff_row(state, spec, gen) for spec in specs]
    batch = [torch.cat([row[j] for row in inputs]) for j in range(4)]
    drafts, _, _, q = _round(iut, handle, *batch, specs, dspark_device, generator=case_generator)
    if q is None:
        pytest.skip("SpeculativeRound: this IUT does not expose the draft distribution it hands over")
    prev = torch.cat([batch[1][:, None], drafts[:, :-1]], dim=1)
    exact, bound = oracle_block_logits("gated", state, batch[0], prev, batch[2])
    expected = torch.stack([draft_law(exact[i], spec, dspark_adapter.conventions) for i, spec in enumerate(specs)])
    greedy = torch.tensor([spec == _greedy_spec(dspark_adapter) for spec in specs])
    expected[greedy] = torch.nn.functional.one_hot(drafts[greedy], VOCAB).to(torch.float64)
    bounds = torch.stack([q_bound(exact[i], bound[i], spec.temperature, expected[i]) for i, spec in enumerate(specs)])
    bounds[greedy] = 0.0
    numeric_check(numerics.compare(f"{case.id}: draft_probs vs the draw law", q, expected, bounds))
