"""Conformance tests for SPEC S5: chain verification (speculative sampling) and greedy verify.

Covers, through :class:`~conformance.contract.ChainVerifier` and
:class:`~conformance.contract.GreedyVerifier` only:

* parity: with explicit uniforms, accepted counts and committed tokens equal a float64
  replay of the S5 rule (:mod:`conformance.oracle`), row for row;
* hand cases: the residual subtracts the whole ``q``; a zero-probability target token is
  never accepted, even with coin 0; the bonus comes from ``p_{l+1}``; the one-hot fallback;
* cap/trim for every cap ``0..l+1``; greedy verification against an argmax oracle;
* mixed batches, each row under the adapter's declared greedy rule;
* seeded rows: they repeat and follow their (seed, position).

Losslessness (statistical, SPEC S5), the seeded rows' law among it, is tested in
:mod:`conformance.test_verify_lossless`; helpers both modules use are in
:mod:`conformance.verify_support`.

To add a case: add an entry ``case(...): params`` to the dict of its family.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from conformance import oracle
from conformance.cases import case, case_id
from conformance.contract import ChainVerifier, GreedyVerifier
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
from fixtures.generators import logit_rows


# ----------------------------------------------------------------------------- helpers
def _declared_greedy(adapter, temperatures: list[float], top_k: list[int]) -> list[bool]:
    """Greedy rows under the adapter's declared rule (SPEC S3), computed here."""
    if adapter.conventions.greedy_rule == "top_k":
        return [k <= 1 for k in top_k]
    return [t < oracle.TEMPERATURE_FLOOR for t in temperatures]


def _verify_explicit(iut, device, drafts, target, draft_logits, temps, top_k, accept_u, final_u, cap=None):
    return verify(iut, "explicit uniforms", device, drafts, target, draft_logits, temps, top_k,
                  accept_uniforms=accept_u, final_uniforms=final_u, cap=cap)


def _assert_rows(case_id_: str, what: str, accepted, tokens, expected: list[tuple[int, list[int]]]) -> None:
    """Row-by-row equality with the oracle's ``(accepted, committed tokens)``."""
    for row, (exp_accepted, exp_tokens) in enumerate(expected):
        got = tokens[row, : int(accepted[row]) + 1].tolist()
        if int(accepted[row]) != exp_accepted or got != exp_tokens:
            raise AssertionError(
                f"{case_id_}: {what}: row {row}: expected accepted {exp_accepted}, tokens {exp_tokens}; "
                f"got accepted {int(accepted[row])}, tokens {got}"
            )


def _replay(drafts, target, draft_logits, temps, greedy, accept_u, final_u, cap=None):
    """The float64 oracle on every row."""
    return [
        oracle.replay_round(
            drafts[b].tolist(), target[b].double().numpy(), draft_logits[b].double().numpy(),
            float(temps[b]), greedy[b], accept_u[b].tolist(), float(final_u[b]), cap,
        )
        for b in range(drafts.shape[0])
    ]


# ----------------------------------------------------------------------------- parity
@dataclasses.dataclass(frozen=True)
class ParitySpec:
    """A random explicit-uniform case.

    ``family`` (fixtures.generators.LOGIT_FAMILIES) shapes the draft logits; targets are
    the draft logits plus N(0, s^2) noise, s in {0.2, 1, 3} per row, so rows range from
    near-sure accepts to early rejects. Three quarters of the rows draw their drafts from
    ``q``, the rest uniformly. ``masked`` puts -inf on about a quarter of the target vocab.
    """

    family: str
    vocab: int
    num_drafts: int
    rows: int
    temperatures: tuple[float, ...]
    masked: bool = False
    check_coverage: bool = True


def _parity_inputs(spec: ParitySpec, gen: torch.Generator) -> dict[str, torch.Tensor]:
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
    q = torch.softmax(draft_logits.double() / temps.double()[:, None, None], dim=-1)
    drafts = inverse_cdf_draws(q.reshape(-1, vocab), torch.rand(rows * l, dtype=F64, generator=gen)).reshape(rows, l)
    uniform_rows = torch.rand(rows, generator=gen) < 0.25
    drafts[uniform_rows] = torch.randint(vocab, (int(uniform_rows.sum()), l), generator=gen)
    return {
        "drafts": drafts, "target": target, "draft_logits": draft_logits, "temps": temps,
        "top_k": torch.full((rows,), TOP_K_OFF, dtype=torch.int64),
        "accept_u": torch.rand(rows, l, dtype=F64, generator=gen),
        "final_u": torch.rand(rows, dtype=F64, generator=gen),
    }


PARITY_CASES = {
    case("S5/parity/random-V8-l4-T1", "random laws, 512 rows, T = 1",
         ["S5.accept-rule", "S5.residual", "S5.bonus"]):
        ParitySpec("random", 8, 4, 512, (1.0,)),
    case("S5/parity/peaked-V32-l5-T0.6", "peaked laws at T = 0.6: q is softmax(corrected / T)",
         ["S5.accept-rule", "S5.residual", "S5.bonus"]):
        ParitySpec("peaked", 32, 5, 512, (0.6,)),
    case("S5/parity/random-V12-l3-mixed-T", "per-row temperatures 0.5 / 1 / 1.7 in one batch",
         ["S5.accept-rule", "S5.residual", "S5.bonus"]):
        ParitySpec("random", 12, 3, 512, (0.5, 1.0, 1.7)),
    case("S5/parity/masked-V16-l4-T1", "target -inf on a quarter of the vocab: p(x) = 0 never accepted or drawn",
         ["S5.accept-rule", "S5.residual", "S5.bonus"]):
        ParitySpec("random", 16, 4, 512, (1.0,), masked=True),
    case("S5/parity/random-V4096-l5-T0.9", "larger vocabulary, 96 rows",
         ["S5.accept-rule", "S5.residual", "S5.bonus"]):
        ParitySpec("random", 4096, 5, 96, (0.9,), check_coverage=False),
}
PARITY_GPU_CASES = {
    case("S5/parity/production-V129280-l5", "DeepSeek-V4 DSpark shape (V = 129,280, gamma = 5)",
         ["S5.accept-rule", "S5.residual", "S5.bonus"]):
        ParitySpec("random", 129_280, 5, 16, (0.8,), check_coverage=False),
    case("S5/parity/production-V151936-l7", "DeepSpec Qwen3 block7 shape (V = 151,936, gamma = 7)",
         ["S5.accept-rule", "S5.residual", "S5.bonus"]):
        ParitySpec("random", 151_936, 7, 16, (1.0,), check_coverage=False),
}
PARITY_SPECS = {**PARITY_CASES, **PARITY_GPU_CASES}


@pytest.mark.parametrize(
    "case",
    list(PARITY_CASES) + [pytest.param(c, marks=pytest.mark.gpu) for c in PARITY_GPU_CASES],
    ids=case_id,
)
def test_S5_explicit_uniforms_match_float64_oracle(case, require, case_seed, dspark_device):
    iut = require(ChainVerifier)
    spec = PARITY_SPECS[case]
    x = _parity_inputs(spec, input_generator(case_seed))

    accepted, tokens = _verify_explicit(
        iut, dspark_device, x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"],
        x["accept_u"], x["final_u"],
    )

    check_committed(case.id, accepted, tokens, x["drafts"], spec.vocab)
    expected = _replay(x["drafts"], x["target"], x["draft_logits"], x["temps"], [False] * spec.rows,
                       x["accept_u"], x["final_u"])
    if spec.check_coverage:  # the case must exercise rejects and full accepts (test design)
        counts = {acc for acc, _, _ in expected}
        assert {0, spec.num_drafts} <= counts, f"{case.id}: case design: accepted counts {sorted(counts)}"
    _assert_rows(case.id, "explicit uniforms vs the float64 S5 replay", accepted, tokens,
                 [(acc, toks) for acc, toks, _ in expected])


# ----------------------------------------------------------------------------- hand cases
@dataclasses.dataclass(frozen=True)
class HandRow:
    """One row: its drafts, coins, final uniform and the tokens S5 commits (by hand)."""

    drafts: tuple[int, ...]
    coins: tuple[float, ...]
    final: float
    expected: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class HandCase:
    target: tuple[tuple[float, ...], ...]  # p_1..p_{l+1}
    draft: tuple[tuple[float, ...], ...]  # q_1..q_l
    rows: tuple[HandRow, ...]
    temperature: float = 1.0
    top_k: int = TOP_K_OFF


def _grid(n: int) -> list[float]:
    return [(k + 0.5) / n for k in range(n)]


HAND_CASES = {
    # max(p - q, 0) = [.3, 0, 0] -> the correction is token 0 whatever the final uniform.
    # x = 1: .95 * .5 > .3 and x = 2: .95 * .3 > .2 reject. (Drawing from p, or subtracting
    # q only at the drafted token, gives [.5, 0, .2] / .7 or [.5, .3, 0] / .8: other tokens.)
    # x = 0 is always accepted (p > q); the bonus from p_2 = [.2, .2, .6] by inverse CDF.
    case("S5/residual/whole-q-subtracted", "p = [.5, .3, .2], q = [.2, .5, .3]: residual [1, 0, 0]",
         ["S5.residual", "S5.accept-rule", "S5.bonus"]): HandCase(
        target=((0.5, 0.3, 0.2), (0.2, 0.2, 0.6)),
        draft=((0.2, 0.5, 0.3),),
        rows=tuple(HandRow((x,), (0.95,), u, (0,)) for x in (1, 2) for u in _grid(10))
        + tuple(HandRow((0,), (0.95,), u, (0, tok)) for u, tok in ((0.1, 0), (0.3, 1), (0.5, 2), (0.9, 2))),
    ),
    # All drafts accepted (p_j(x_j) > q_j(x_j)); p_3 is one-hot on token 2, so the bonus is 2
    # for every final uniform; a bonus from p_2 = [.2, .6, .2] would vary with it.
    case("S5/bonus/drawn-from-p-l-plus-1", "full accept: bonus from p_{l+1}, not p_l",
         ["S5.bonus"]): HandCase(
        target=((0.6, 0.2, 0.2), (0.2, 0.6, 0.2), (0.0, 0.0, 1.0)),
        draft=((0.2, 0.4, 0.4), (0.2, 0.2, 0.6)),
        rows=tuple(HandRow((0, 1), (0.99, 0.99), u, (0, 1, 2)) for u in _grid(8)),
    ),
    # p = [.5, 0, .5] (token 1 forbidden), q uniform. x = 1 with coin 0: 0 * 1/3 < 0 is
    # false, so reject even at u = 0 (u <= p / q would accept); residual [1/6, 0, 1/6] ->
    # [.5, 0, .5]. x = 0 with coin 0 or .999: accepted (.999 / 3 < .5); bonus p_2 = [0, 1, 0].
    case("S5/accept-rule/zero-coin-forbidden-token", "coin u = 0 never accepts a p(x) = 0 draft",
         ["S5.accept-rule", "S5.residual"]): HandCase(
        target=((0.5, 0.0, 0.5), (0.0, 1.0, 0.0)),
        draft=((1 / 3, 1 / 3, 1 / 3),),
        rows=(
            HandRow((1,), (0.0,), 0.25, (0,)), HandRow((1,), (0.0,), 0.75, (2,)),
            HandRow((0,), (0.0,), 0.5, (0, 1)), HandRow((0,), (0.999,), 0.5, (0, 1)),
        ),
    ),
    # Greedy row (T = 0 and top_k = 1: greedy under either declared rule). Target and draft
    # argmax are both token 2: a drafted 0 is rejected and max(onehot_p - onehot_q, 0) has
    # no mass, so the row falls back to p and emits the argmax 2; a drafted 2 is accepted.
    case("S5/residual/one-hot-fallback", "greedy row, equal argmax: zero residual mass falls back to p",
         ["S5.residual", "S5.greedy-verify"]): HandCase(
        target=((0.2, 0.3, 0.5), (0.6, 0.3, 0.1)),
        draft=((0.1, 0.2, 0.7),),
        rows=(HandRow((0,), (0.3,), 0.9, (2,)), HandRow((0,), (0.0,), 0.1, (2,)),
              HandRow((2,), (0.9,), 0.9, (2, 0))),
        temperature=0.0, top_k=1,
    ),
}


@pytest.mark.parametrize("case", HAND_CASES, ids=case_id)
def test_S5_hand_cases(case, require, dspark_device):
    iut = require(ChainVerifier)
    spec = HAND_CASES[case]
    rows, l = len(spec.rows), len(spec.draft)
    drafts = torch.tensor([r.drafts for r in spec.rows], dtype=torch.int64)
    target = logits_of(*spec.target).expand(rows, -1, -1).contiguous()
    draft_logits = logits_of(*spec.draft).expand(rows, -1, -1).contiguous()
    temps = torch.full((rows,), spec.temperature)
    top_k = torch.full((rows,), spec.top_k, dtype=torch.int64)
    coins = torch.tensor([r.coins for r in spec.rows], dtype=F64).reshape(rows, l)
    finals = torch.tensor([r.final for r in spec.rows], dtype=F64)

    accepted, tokens = _verify_explicit(iut, dspark_device, drafts, target, draft_logits, temps, top_k, coins, finals)

    check_committed(case.id, accepted, tokens, drafts, len(spec.target[0]))
    _assert_rows(case.id, "hand-computed S5 outcome", accepted, tokens,
                 [(len(r.expected) - 1, list(r.expected)) for r in spec.rows])


# ----------------------------------------------------------------------------- cap / trim
CAP_CASE = case("S5/cap/chain-all-caps", "caps 0..l+1 with one set of coins: min(raw, max(c-1, 0)), "
                "trim = raw - accepted, emitted token at the capped position",
                ["S5.cap", "S5.bonus", "S5.residual"])


@pytest.mark.parametrize("case", [CAP_CASE], ids=case_id)
def test_S5_cap_trims_chain_verify(case, require, case_seed, dspark_device):
    iut = require(ChainVerifier)
    spec = ParitySpec("random", 8, 4, 256, (0.9,))
    x = _parity_inputs(spec, input_generator(case_seed))
    args = (x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"], x["accept_u"], x["final_u"])
    raw_accepted, _ = _verify_explicit(iut, dspark_device, *args)
    raw = [r for _, _, r in _replay(*args[:4], [False] * spec.rows, *args[5:])]
    assert {0, spec.num_drafts} <= set(raw), f"{case.id}: case design: raw counts {sorted(set(raw))}"
    assert raw_accepted.tolist() == raw, f"{case.id}: uncapped accepted counts differ from the S5 replay"

    for cap in range(spec.num_drafts + 2):
        accepted, tokens = _verify_explicit(iut, dspark_device, *args, cap=cap)
        check_committed(f"{case.id} cap={cap}", accepted, tokens, x["drafts"], spec.vocab)
        limit = max(cap - 1, 0)
        trimmed = raw_accepted - accepted
        assert torch.equal(accepted, raw_accepted.clamp(max=limit)), (
            f"{case.id}: cap {cap}: expected accepted = min(raw, {limit}), got {accepted.tolist()} "
            f"for raw {raw_accepted.tolist()}"
        )
        assert bool((trimmed >= 0).all()), f"{case.id}: cap {cap}: negative trim {trimmed.tolist()}"
        expected = _replay(*args[:4], [False] * spec.rows, *args[5:], cap=cap)
        _assert_rows(f"{case.id} cap={cap}", "capped round vs the S5 replay", accepted, tokens,
                     [(acc, toks) for acc, toks, _ in expected])


# ----------------------------------------------------------------------------- greedy verify
@dataclasses.dataclass(frozen=True)
class GreedyHand:
    target: tuple[tuple[float, ...], ...]  # logits at the l + 1 verify positions
    drafts: tuple[int, ...]
    cap: int | None
    expected: tuple[int, ...]


NEG = -math.inf
GREEDY_HAND = {
    case("S5/greedy/hand-cases", "full accept, first mismatch, ties to the lowest id, -inf, l = 0, caps",
         ["S5.greedy-verify", "S5.cap"]): (
        GreedyHand(((0, 5, 1), (7, 1, 1), (0, 0, 3)), (1, 0), None, (1, 0, 2)),  # all accepted + bonus
        GreedyHand(((0, 5, 1), (7, 1, 1), (0, 0, 3)), (2, 0), None, (1,)),  # mismatch at x_1
        GreedyHand(((0, 5, 1), (7, 1, 1), (0, 0, 3)), (1, 2), None, (1, 0)),  # mismatch at x_2
        GreedyHand(((3, 3, 1), (2, 2, 2)), (1,), None, (0,)),  # tie: argmax is the lowest id 0
        GreedyHand(((3, 3, 1), (2, 2, 2)), (0,), None, (0, 0)),
        GreedyHand(((NEG, -9.0, NEG), (NEG, NEG, -1.0)), (1,), None, (1, 2)),  # -inf logits
        GreedyHand(((0, 5, 1),), (), None, (1,)),  # no drafts: the bonus only
        GreedyHand(((0, 5, 1), (7, 1, 1), (0, 0, 3)), (1, 0), 0, (1,)),  # cap 0: nothing verified
        GreedyHand(((0, 5, 1), (7, 1, 1), (0, 0, 3)), (1, 0), 1, (1,)),  # cap 1: same
        GreedyHand(((0, 5, 1), (7, 1, 1), (0, 0, 3)), (1, 0), 2, (1, 0)),  # cap 2: one draft, argmax p_2
        GreedyHand(((0, 5, 1), (7, 1, 1), (0, 0, 3)), (1, 0), 3, (1, 0, 2)),
    ),
}


@pytest.mark.parametrize("case", GREEDY_HAND, ids=case_id)
def test_S5_greedy_verify_hand_cases(case, require, dspark_device):
    iut = require(GreedyVerifier)
    for i, hand in enumerate(GREEDY_HAND[case]):
        drafts = torch.tensor([hand.drafts], dtype=torch.int64).reshape(1, len(hand.drafts))
        target = torch.tensor([hand.target], dtype=torch.float32)
        accepted, tokens = iut.verify_greedy(drafts.to(dspark_device), target.to(dspark_device), hand.cap)
        accepted, tokens = accepted.cpu(), tokens.cpu()
        label = f"{case.id}[{i}]"
        check_committed(label, accepted, tokens, drafts, target.shape[-1])
        _assert_rows(label, f"drafts {list(hand.drafts)}, cap {hand.cap}", accepted, tokens,
                     [(len(hand.expected) - 1, list(hand.expected))])


@dataclasses.dataclass(frozen=True)
class GreedySpec:
    """Random greedy case: ``ties`` draws integer logits in [0, 3) (many ties); drafts
    follow the target argmax for a random number of steps, then break."""

    vocab: int
    num_drafts: int
    rows: int
    ties: bool


def _greedy_inputs(spec: GreedySpec, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
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


GREEDY_RANDOM_CASES = {
    case("S5/greedy/random-ties-V16-l6", "integer logits (ties), all caps vs an argmax oracle",
         ["S5.greedy-verify", "S5.cap"]): GreedySpec(16, 6, 512, ties=True),
    case("S5/greedy/random-V1000-l5", "random float logits, all caps vs an argmax oracle",
         ["S5.greedy-verify", "S5.cap"]): GreedySpec(1000, 5, 256, ties=False),
}
GREEDY_GPU_CASES = {
    case("S5/greedy/production-V151936-l7", "production vocabulary (V = 151,936, gamma = 7)",
         ["S5.greedy-verify", "S5.cap"]): GreedySpec(151_936, 7, 16, ties=False),
}
GREEDY_SPECS = {**GREEDY_RANDOM_CASES, **GREEDY_GPU_CASES}


@pytest.mark.parametrize(
    "case",
    list(GREEDY_RANDOM_CASES) + [pytest.param(c, marks=pytest.mark.gpu) for c in GREEDY_GPU_CASES],
    ids=case_id,
)
def test_S5_greedy_verify_matches_argmax_oracle(case, require, case_seed, dspark_device):
    iut = require(GreedyVerifier)
    spec = GREEDY_SPECS[case]
    drafts, target = _greedy_inputs(spec, input_generator(case_seed))
    raw_accepted = None
    for cap in [None, *range(spec.num_drafts + 2)]:
        accepted, tokens = iut.verify_greedy(drafts.to(dspark_device), target.to(dspark_device), cap)
        accepted, tokens = accepted.cpu(), tokens.cpu()
        label = f"{case.id} cap={cap}"
        check_committed(label, accepted, tokens, drafts, spec.vocab)
        expected = [oracle.greedy_round(drafts[b].tolist(), target[b].numpy(), cap) for b in range(spec.rows)]
        _assert_rows(label, "greedy verify vs the argmax oracle", accepted, tokens,
                     [(acc, toks) for acc, toks, _ in expected])
        if cap is None:
            raw_accepted = accepted
        else:
            assert bool(((raw_accepted - accepted) >= 0).all()), f"{label}: negative trim"


# ----------------------------------------------------------------------------- mixed batches
# Row kinds (temperature, top_k): which are greedy depends on the declared rule. (0.8, 1) is
# greedy under "top_k" but samples at T = 0.8 under "temperature"; (0.0, off) the reverse
# (under "top_k" it samples at the clamped T = 1e-5).
ROW_KINDS = ((0.8, TOP_K_OFF), (0.8, 1), (0.0, TOP_K_OFF), (0.0, 1), (1.3, TOP_K_OFF), (1e-6, TOP_K_OFF))

MIXED_CASES = {
    case("S5/mixed/rule-split-rows", "greedy and sampling rows in one batch, two sets of coins",
         ["S5.mixed", "S5.greedy-verify", "S5.accept-rule", "S5.residual"]): None,
    case("S5/mixed/rule-split-rows-cap2", "the same under cap 2",
         ["S5.mixed", "S5.cap", "S5.greedy-verify"]): 2,
}


@pytest.mark.parametrize("case", MIXED_CASES, ids=case_id)
def test_S5_mixed_batch_rows_follow_their_rule(case, require, dspark_adapter, case_seed, dspark_device):
    iut = require(ChainVerifier)
    cap = MIXED_CASES[case]
    gen = input_generator(case_seed)
    rows, l, vocab = 120, 4, 10
    drafts, target = _greedy_inputs(GreedySpec(vocab, l, rows, ties=True), gen)
    draft_logits = logit_rows("random", rows * l, vocab, gen).reshape(rows, l, vocab)
    same_argmax = torch.rand(rows, generator=gen) < 0.5  # q's argmax = p's: the fallback path
    draft_logits[same_argmax] = target[same_argmax, :l]
    temps = torch.tensor([ROW_KINDS[b % len(ROW_KINDS)][0] for b in range(rows)])
    top_k = torch.tensor([ROW_KINDS[b % len(ROW_KINDS)][1] for b in range(rows)], dtype=torch.int64)
    greedy = _declared_greedy(dspark_adapter, temps.tolist(), top_k.tolist())

    for coin_set in range(2):
        accept_u = torch.rand(rows, l, dtype=F64, generator=gen)
        final_u = torch.rand(rows, dtype=F64, generator=gen)
        accepted, tokens = _verify_explicit(iut, dspark_device, drafts, target, draft_logits, temps, top_k,
                                            accept_u, final_u, cap)
        label = f"{case.id} coins#{coin_set}"
        check_committed(label, accepted, tokens, drafts, vocab)
        replay = _replay(drafts, target, draft_logits, temps, greedy, accept_u, final_u, cap)
        expected = []
        for b in range(rows):
            if greedy[b]:  # independent argmax oracle, no coins involved
                acc, toks, _ = oracle.greedy_round(drafts[b].tolist(), target[b].numpy(), cap)
            else:
                acc, toks, _ = replay[b]
            expected.append((acc, toks))
        rule = dspark_adapter.conventions.greedy_rule
        _assert_rows(label, f"each row under its own rule (declared greedy rule {rule!r})", accepted, tokens, expected)


# ----------------------------------------------------------------------------- seeded rows
SEEDED_REPEAT = case("S5/seeded/repeat-and-permute", "same (seed, position) -> same result, whatever the "
                     "row order; another position or seed -> other results", ["S5.seeded"])


@pytest.mark.parametrize("case", [SEEDED_REPEAT], ids=case_id)
def test_S5_seeded_rows_repeat(case, require, case_seed, dspark_device):
    iut = require(ChainVerifier)
    gen = input_generator(case_seed)
    spec = ParitySpec("random", 8, 4, 64, (1.0,))
    x = _parity_inputs(spec, gen)
    seeds = torch.randint(0, 2**62, (spec.rows,), generator=gen)
    positions = torch.randint(0, 10**6, (spec.rows,), generator=gen)
    inputs = (x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"])

    first = verify_seeded(iut, dspark_device, *inputs, seeds, positions)
    again = verify_seeded(iut, dspark_device, *inputs, seeds, positions)
    perm = torch.randperm(spec.rows, generator=gen)
    permuted = verify_seeded(iut, dspark_device, *(t[perm] for t in inputs), seeds[perm], positions[perm])
    shifted = verify_seeded(iut, dspark_device, *inputs, seeds, positions + 1)
    reseeded = verify_seeded(iut, dspark_device, *inputs, seeds + 1, positions)

    check_committed(case.id, *first, x["drafts"], spec.vocab)
    assert torch.equal(first[1], again[1]) and torch.equal(first[0], again[0]), (
        f"{case.id}: the same seeds and positions gave different results on a second call"
    )
    assert torch.equal(permuted[1], first[1][perm]), (
        f"{case.id}: permuting the rows changed their results: seeded uniforms must depend on "
        f"(seed, position, stream), not on the row index or call order"
    )
    assert not torch.equal(shifted[1], first[1]), f"{case.id}: positions + 1 left all {spec.rows} rows unchanged"
    assert not torch.equal(reseeded[1], first[1]), f"{case.id}: seeds + 1 left all {spec.rows} rows unchanged"
