"""Conformance tests for SPEC S5, exact: the chain-verification rule and greedy verify, row for row.

Every expectation here is exact: the float64 replay of the S5 rule from explicit uniforms
(:mod:`conformance.oracles.verify_oracle`), hand-computed rows, an argmax oracle, or
equalities between calls. Through :class:`~conformance.contract.ChainVerifier` and
:class:`~conformance.contract.GreedyVerifier` only:

* parity: with explicit uniforms, accepted counts and committed tokens equal the float64
  replay of the S5 rule, row for row;
* hand cases: the residual subtracts the whole ``q``; a zero-probability target token is
  never accepted, even with coin 0; the bonus comes from ``p_{l+1}``; the one-hot fallback;
  the inverse-CDF draw at boundaries, past the rounded total and below the mass floor;
* cap/trim for every cap ``0..l+1``; greedy verification against an argmax oracle;
* mixed batches, each row under the adapter's declared greedy rule;
* seeded rows repeat and follow their (seed, position), also at position 0; the coins come
  from the generator passed in (same seed, same result);
* a one-token vocabulary (with a -1 sentinel row).

The law of what a verifier commits (losslessness, independent streams, truncation) is
:mod:`conformance.suite.test_verify_lossless`; degenerate values (zero-q drafts, endpoint
coins, sentinels) are :mod:`conformance.suite.test_degenerate`; batch invariance and per-row
caps :mod:`conformance.suite.test_invariance`. Inputs come from
:mod:`conformance.inputs.verify_rounds` (the raw case seed, as always), the calls and the
result-format check from :mod:`conformance.suite.support.chain_verifier`.

To add a case: add an entry ``case(...): params`` to the dict of its family.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from conformance.cases import case, case_id
from conformance.contract import ChainVerifier, GreedyVerifier
from conformance.inputs import NO_TOP_K_CUT, logit_rows
from conformance.inputs.verify_rounds import (
    GreedySpec,
    ParitySpec,
    greedy_inputs,
    laws_as_logits,
    parity_inputs,
    verify_input_generator,
)
from conformance.oracles import verify_oracle as oracle
from conformance.seeds import derive_seed
from conformance.suite.support.chain_verifier import (
    assert_rows,
    check_committed,
    verify,
    verify_explicit,
    verify_seeded,
)
from conformance.oracles.race_oracle import greedy_by_rule

F64 = torch.float64


# ----------------------------------------------------------------------------- parity
PARITY_CASES = {
    case("S5/parity/random-V8-l4-T1", "random laws, 512 rows, T = 1",
         ["S5.accept-rule", "S5.residual", "S5.bonus", "S5.explicit-uniforms"]):
        ParitySpec("random", 8, 4, 512, (1.0,)),
    case("S5/parity/peaked-V32-l5-T0.6", "peaked laws at T = 0.6: q is softmax(corrected / T)",
         ["S5.accept-rule", "S5.residual", "S5.bonus", "S5.explicit-uniforms"]):
        ParitySpec("peaked", 32, 5, 512, (0.6,)),
    case("S5/parity/random-V12-l3-mixed-T", "per-row temperatures 0.5 / 1 / 1.7 in one batch",
         ["S5.accept-rule", "S5.residual", "S5.bonus", "S5.explicit-uniforms"]):
        ParitySpec("random", 12, 3, 512, (0.5, 1.0, 1.7)),
    case("S5/parity/masked-V16-l4-T1", "target -inf on a quarter of the vocab: p(x) = 0 never accepted or drawn",
         ["S5.accept-rule", "S5.residual", "S5.bonus", "S5.explicit-uniforms"]):
        ParitySpec("random", 16, 4, 512, (1.0,), masked=True),
    case("S5/parity/random-V4096-l5-T0.9", "larger vocabulary, 96 rows",
         ["S5.accept-rule", "S5.residual", "S5.bonus", "S5.explicit-uniforms"]):
        ParitySpec("random", 4096, 5, 96, (0.9,), check_coverage=False),
}
PARITY_GPU_CASES = {
    case("S5/parity/production-V129280-l5", "DeepSeek-V4 DSpark shape (V = 129,280, gamma = 5)",
         ["S5.accept-rule", "S5.residual", "S5.bonus", "S5.explicit-uniforms"]):
        ParitySpec("random", 129_280, 5, 16, (0.8,), check_coverage=False),
    case("S5/parity/production-V151936-l7", "DeepSpec Qwen3 block7 shape (V = 151,936, gamma = 7)",
         ["S5.accept-rule", "S5.residual", "S5.bonus", "S5.explicit-uniforms"]):
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
    x = parity_inputs(spec, verify_input_generator(case_seed))

    accepted, tokens = verify_explicit(
        iut, dspark_device, x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"],
        x["accept_u"], x["final_u"],
    )

    check_committed(case.id, accepted, tokens, x["drafts"], spec.vocab)
    expected = oracle.replay_rows(x["drafts"], x["target"], x["draft_logits"], x["temps"], [False] * spec.rows,
                                  x["accept_u"], x["final_u"])
    if spec.check_coverage:  # the case must exercise rejects and full accepts (test design)
        counts = {acc for acc, _, _ in expected}
        assert {0, spec.num_drafts} <= counts, f"{case.id}: case design: accepted counts {sorted(counts)}"
    assert_rows(case.id, "explicit uniforms vs the float64 S5 replay", accepted, tokens,
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
    top_k: int = NO_TOP_K_CUT
    logits: bool = False  # target and draft hold float32 logits, not laws


ONE_BELOW_ONE = 1.0 - 2.0 ** -53  # the largest float64 uniform in [0, 1)


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
    # SPEC S5 explicit uniforms, on laws whose running sums are exact in float64. x = 0 with
    # coin .9 is rejected (.9 * .5 >= .25): residual [0, 0, .5, .5], C = [0, 0, .5, 1]; with
    # coin .25 accepted: bonus from the uniform p_2, C = [.25, .5, .75, 1]. u on a boundary
    # C_i draws the next token (smallest C_i > u), never the one ending there.
    case("S5/explicit-draw/boundary-coin-draws-next-token", "u exactly on a CDF boundary C_i draws token i + 1: "
         "correction [0, 0, .5, .5] and a uniform bonus", ["S5.explicit-uniforms", "S5.residual", "S5.bonus"]): HandCase(
        target=((0.25,) * 4, (0.25,) * 4),
        draft=((0.5, 0.5, 0.0, 0.0),),
        rows=tuple(HandRow((0,), (0.9,), u, (tok,)) for u, tok in ((0.0, 2), (0.25, 2), (0.5, 3), (0.75, 3)))
        + tuple(HandRow((0,), (0.25,), u, (0, tok)) for u, tok in ((0.0, 0), (0.25, 1), (0.5, 2), (0.75, 3))),
    ),
    # Ten tokens of 0.1: the float64 running sum ends at 1 - 2^-53, so u = 1 - 2^-53 exceeds
    # no C_i and draws the last token with mass (9), as any rounding of the total does.
    case("S5/explicit-draw/coin-past-rounded-total", "u at or above the CDF's rounded total draws the last token "
         "with mass", ["S5.explicit-uniforms", "S5.bonus"]): HandCase(
        target=((0.1,) * 10, (0.1,) * 10),
        draft=((0.1,) * 10,),
        rows=tuple(HandRow((0,), (0.0,), u, (0, tok)) for u, tok in ((ONE_BELOW_ONE, 9), (0.95, 9), (0.05, 0))),
    ),
    # Draft logit 1e-13 above a flat target: q(0) - p(0) ~ 1.9e-14, rejected only by a coin
    # above 1 - 7.5e-14; the residual mass ~1.9e-14 <= 1e-12, so the correction comes from
    # p (uniform: u = .1 draws 0), not from the rounding left on tokens 1..3.
    case("S5/explicit-draw/residual-mass-below-floor", "a reject whose residual mass is ~1.9e-14 (<= 1e-12) draws "
         "the correction from p", ["S5.explicit-uniforms", "S5.residual"]): HandCase(
        target=((0.0,) * 4, (0.0,) * 4),
        draft=((1e-13, 0.0, 0.0, 0.0),),
        rows=(HandRow((0,), (ONE_BELOW_ONE,), 0.1, (0,)), HandRow((0,), (ONE_BELOW_ONE,), 0.3, (1,)),
              HandRow((0,), (0.5,), 0.6, (0, 2))),
        logits=True,
    ),
    # Bonus from softmax([1e-8, 0]) in float64: p = [.5 + 2.5e-9, .5 - 2.5e-9], so u = .5 + 1e-9
    # draws 0 and u = .5 + 4e-9 draws 1; the law rounded to float32 is [.5, .5] (both draw 1).
    case("S5/explicit-draw/float64-law", "the bonus law and its CDF in float64: p(0) = .5 + 2.5e-9 separates "
         "u = .5 + 1e-9 from u = .5 + 4e-9", ["S5.explicit-uniforms", "S5.bonus"]): HandCase(
        target=((0.0, -math.inf), (1e-8, 0.0)),
        draft=((0.0, -math.inf),),
        rows=(HandRow((0,), (0.5,), 0.5 + 1e-9, (0, 0)), HandRow((0,), (0.5,), 0.5 + 4e-9, (0, 1))),
        logits=True,
    ),
}


@pytest.mark.parametrize("case", HAND_CASES, ids=case_id)
def test_S5_hand_cases(case, require, dspark_device):
    iut = require(ChainVerifier)
    spec = HAND_CASES[case]
    rows, l = len(spec.rows), len(spec.draft)
    drafts = torch.tensor([r.drafts for r in spec.rows], dtype=torch.int64)
    as_logits = (lambda *rows_: torch.tensor(rows_, dtype=torch.float32)) if spec.logits else laws_as_logits
    target = as_logits(*spec.target).expand(rows, -1, -1).contiguous()
    draft_logits = as_logits(*spec.draft).expand(rows, -1, -1).contiguous()
    temps = torch.full((rows,), spec.temperature)
    top_k = torch.full((rows,), spec.top_k, dtype=torch.int64)
    coins = torch.tensor([r.coins for r in spec.rows], dtype=F64).reshape(rows, l)
    finals = torch.tensor([r.final for r in spec.rows], dtype=F64)

    accepted, tokens = verify_explicit(iut, dspark_device, drafts, target, draft_logits, temps, top_k, coins, finals)

    check_committed(case.id, accepted, tokens, drafts, len(spec.target[0]))
    assert_rows(case.id, "hand-computed S5 outcome", accepted, tokens,
                [(len(r.expected) - 1, list(r.expected)) for r in spec.rows])


# ----------------------------------------------------------------------------- cap / trim
CAP_CASE = case("S5/cap/chain-all-caps", "caps 0..l+1 with one set of coins: min(raw, max(c-1, 0)), "
                "trim = raw - accepted, emitted token at the capped position",
                ["S5.cap", "S5.bonus", "S5.residual"])


@pytest.mark.parametrize("case", [CAP_CASE], ids=case_id)
def test_S5_cap_trims_chainverify(case, require, case_seed, dspark_device):
    iut = require(ChainVerifier)
    spec = ParitySpec("random", 8, 4, 256, (0.9,))
    x = parity_inputs(spec, verify_input_generator(case_seed))
    args = (x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"], x["accept_u"], x["final_u"])
    raw_accepted, _ = verify_explicit(iut, dspark_device, *args)
    raw = [r for _, _, r in oracle.replay_rows(*args[:4], [False] * spec.rows, *args[5:])]
    assert {0, spec.num_drafts} <= set(raw), f"{case.id}: case design: raw counts {sorted(set(raw))}"
    assert raw_accepted.tolist() == raw, f"{case.id}: uncapped accepted counts differ from the S5 replay"

    for cap in range(spec.num_drafts + 2):
        accepted, tokens = verify_explicit(iut, dspark_device, *args, cap=cap)
        check_committed(f"{case.id} cap={cap}", accepted, tokens, x["drafts"], spec.vocab)
        limit = max(cap - 1, 0)
        trimmed = raw_accepted - accepted
        assert torch.equal(accepted, raw_accepted.clamp(max=limit)), (
            f"{case.id}: cap {cap}: expected accepted = min(raw, {limit}), got {accepted.tolist()} "
            f"for raw {raw_accepted.tolist()}"
        )
        assert bool((trimmed >= 0).all()), f"{case.id}: cap {cap}: negative trim {trimmed.tolist()}"
        expected = oracle.replay_rows(*args[:4], [False] * spec.rows, *args[5:], cap=cap)
        assert_rows(f"{case.id} cap={cap}", "capped round vs the S5 replay", accepted, tokens,
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
        assert_rows(label, f"drafts {list(hand.drafts)}, cap {hand.cap}", accepted, tokens,
                    [(len(hand.expected) - 1, list(hand.expected))])


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
    drafts, target = greedy_inputs(spec, verify_input_generator(case_seed))
    raw_accepted = None
    for cap in [None, *range(spec.num_drafts + 2)]:
        accepted, tokens = iut.verify_greedy(drafts.to(dspark_device), target.to(dspark_device), cap)
        accepted, tokens = accepted.cpu(), tokens.cpu()
        label = f"{case.id} cap={cap}"
        check_committed(label, accepted, tokens, drafts, spec.vocab)
        expected = [oracle.greedy_round(drafts[b].tolist(), target[b].numpy(), cap) for b in range(spec.rows)]
        assert_rows(label, "greedy verify vs the argmax oracle", accepted, tokens,
                    [(acc, toks) for acc, toks, _ in expected])
        if cap is None:
            raw_accepted = accepted
        else:
            assert bool(((raw_accepted - accepted) >= 0).all()), f"{label}: negative trim"


# ----------------------------------------------------------------------------- mixed batches
# Row kinds (temperature, top_k): which are greedy depends on the declared rule. (0.8, 1) is
# greedy under "top_k" but samples at T = 0.8 under "temperature"; (0.0, off) the reverse
# (under "top_k" it samples at the clamped T = 1e-5).
ROW_KINDS = ((0.8, NO_TOP_K_CUT), (0.8, 1), (0.0, NO_TOP_K_CUT), (0.0, 1), (1.3, NO_TOP_K_CUT), (1e-6, NO_TOP_K_CUT))

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
    gen = verify_input_generator(case_seed)
    rows, l, vocab = 120, 4, 10
    drafts, target = greedy_inputs(GreedySpec(vocab, l, rows, ties=True), gen)
    draft_logits = logit_rows("random", rows * l, vocab, gen).reshape(rows, l, vocab)
    same_argmax = torch.rand(rows, generator=gen) < 0.5  # q's argmax = p's: the fallback path
    draft_logits[same_argmax] = target[same_argmax, :l]
    temps = torch.tensor([ROW_KINDS[b % len(ROW_KINDS)][0] for b in range(rows)])
    top_k = torch.tensor([ROW_KINDS[b % len(ROW_KINDS)][1] for b in range(rows)], dtype=torch.int64)
    greedy = greedy_by_rule(dspark_adapter.conventions.greedy_rule, temps, top_k).tolist()

    for coin_set in range(2):
        accept_u = torch.rand(rows, l, dtype=F64, generator=gen)
        final_u = torch.rand(rows, dtype=F64, generator=gen)
        accepted, tokens = verify_explicit(iut, dspark_device, drafts, target, draft_logits, temps, top_k,
                                           accept_u, final_u, cap)
        label = f"{case.id} coins#{coin_set}"
        check_committed(label, accepted, tokens, drafts, vocab)
        replay = oracle.replay_rows(drafts, target, draft_logits, temps, greedy, accept_u, final_u, cap)
        expected = []
        for b in range(rows):
            if greedy[b]:  # independent argmax oracle, no coins involved
                acc, toks, _ = oracle.greedy_round(drafts[b].tolist(), target[b].numpy(), cap)
            else:
                acc, toks, _ = replay[b]
            expected.append((acc, toks))
        rule = dspark_adapter.conventions.greedy_rule
        assert_rows(label, f"each row under its own rule (declared greedy rule {rule!r})", accepted, tokens, expected)


# ----------------------------------------------------------------------------- seeded rows
SEEDED_REPEAT = case("S5/seeded/repeat-and-permute", "same (seed, position) -> same result, whatever the "
                     "row order; another position or seed -> other results", ["S5.seeded"])


@pytest.mark.parametrize("case", [SEEDED_REPEAT], ids=case_id)
def test_S5_seeded_rows_repeat(case, require, case_seed, dspark_device):
    iut = require(ChainVerifier)
    gen = verify_input_generator(case_seed)
    spec = ParitySpec("random", 8, 4, 64, (1.0,))
    x = parity_inputs(spec, gen)
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


# ----------------------------------------------------------------------------- edges
ONE_TOKEN_VERIFY = case("S5/edge/one-token-vocab", "V = 1: every draft (token 0) is accepted and the bonus is 0; a "
                        "row with a -1 sentinel after one draft accepts it and pads with -1", ["S5.accept-rule",
                                                                                            "S5.bonus", "S5.degenerate"])


@pytest.mark.parametrize("case", [ONE_TOKEN_VERIFY], ids=case_id)
def test_S5_one_token_vocabulary(case, require, dspark_device, case_generator):
    """With one token p = q = 1, so ``u q < p`` holds for every ``u < 1``: the chain accepts
    every real draft and the bonus is token 0 (exact for any implementation)."""
    iut = require(ChainVerifier)
    drafts = torch.tensor([[0, 0], [0, -1]])
    target, draft_logits = torch.zeros(2, 3, 1), torch.zeros(2, 2, 1)
    accepted, tokens = verify(iut, "a one-token vocabulary", dspark_device, drafts, target, draft_logits,
                              torch.ones(2), torch.full((2,), NO_TOP_K_CUT), generator=case_generator)
    assert accepted.tolist() == [2, 1] and tokens.tolist() == [[0, 0, 0], [0, 0, -1]], (
        f"{case.id}: expected accepted [2, 1], tokens [[0, 0, 0], [0, 0, -1]]; got {accepted.tolist()}, "
        f"{tokens.tolist()}"
    )


SAME_GENERATOR_VERIFY = case("S5/seeded/same-generator-same-result", "two calls with generators of one seed (the "
                             "global RNG moved in between) accept and emit the same; another seed emits otherwise",
                             ["S5.streams"])


@pytest.mark.parametrize("case", [SAME_GENERATOR_VERIFY], ids=case_id)
def test_S5_coins_come_from_the_generator(case, require, dspark_device, case_seed):
    """The contract: the verifier's coins and its correction / bonus draw come from
    ``generator``. Two batches: random p and q (the accept coins decide), and flat laws with
    q = p (every draft accepted, the bonus uniform on 64 tokens), where two independent calls
    emit the same bonus tokens in all 64 rows with probability ``64^-64``."""
    iut = require(ChainVerifier)
    rows, l, vocab = 64, 3, 64
    gen = torch.Generator().manual_seed(case_seed)
    drafts = torch.randint(vocab, (rows, l), generator=gen)
    batches = {"random p and q": (torch.randn(rows, l + 1, vocab, generator=gen),
                                  torch.randn(rows, l, vocab, generator=gen)),
               "flat, q = p": (torch.zeros(rows, l + 1, vocab), torch.zeros(rows, l, vocab))}

    def call(batch: str, verify_seed: int, global_seed: int):
        torch.manual_seed(global_seed)
        generator = torch.Generator(device=dspark_device).manual_seed(verify_seed)
        return verify(iut, "generator draws", dspark_device, drafts, *batches[batch], torch.ones(rows),
                      torch.full((rows,), NO_TOP_K_CUT), generator=generator)

    seed = derive_seed(case_seed, "verify-generator")
    for batch in batches:
        first, again = call(batch, seed, 1), call(batch, seed, 2)
        for name, a, b in zip(("accepted", "tokens"), first, again):
            assert torch.equal(a, b), (
                f"{case.id}: {batch}: generators of seed {seed} gave different {name} (global RNG draws?)"
            )
    flat = "flat, q = p"
    assert not torch.equal(call(flat, seed, 1)[1], call(flat, seed + 1, 1)[1]), (
        f"{case.id}: seeds {seed} and {seed + 1} emitted the same tokens"
    )


SEEDED_POSITION_ZERO = case("S5/seeded/position-zero", "seeded rows at position 0 (the first verify step), with l = 3 "
                            "and with l = 0 drafts: valid, and they repeat", ["S5.seeded"])


@pytest.mark.parametrize("case", [SEEDED_POSITION_ZERO], ids=case_id)
def test_S5_seeded_rows_at_position_zero(case, require, dspark_device, case_seed):
    iut = require(ChainVerifier)
    gen = torch.Generator().manual_seed(case_seed)
    for l in (3, 0):
        rows, vocab = 4, 16
        drafts = torch.randint(vocab, (rows, l), generator=gen)
        target, draft_logits = torch.randn(rows, l + 1, vocab, generator=gen), torch.randn(rows, l, vocab, generator=gen)
        seeds, positions = torch.arange(3, 3 + rows), torch.zeros(rows, dtype=torch.int64)
        args = (iut, dspark_device, drafts, target, draft_logits, torch.ones(rows), torch.full((rows,), vocab),
                seeds, positions)
        first, again = verify_seeded(*args), verify_seeded(*args)
        check_committed(case.id, *first, drafts, vocab)
        for name, a, b in zip(("accepted", "tokens"), first, again):
            assert torch.equal(a, b), f"{case.id}: l = {l}: seeded rows at position 0 gave different {name}"
