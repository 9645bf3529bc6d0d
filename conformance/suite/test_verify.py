"""Conformance tests for SPEC S5: chain verification (speculative sampling) and greedy verify.

Covers, through :class:`~conformance.contract.ChainVerifier` and
:class:`~conformance.contract.GreedyVerifier` only:

* parity: with explicit uniforms, accepted counts and committed tokens equal a float64
  replay of the S5 rule (:mod:`conformance.suite.support.verify_oracle`), row for row;
* hand cases: the residual subtracts the whole ``q``; a zero-probability target token is
  never accepted, even with coin 0; the bonus comes from ``p_{l+1}``; the one-hot fallback;
* cap/trim for every cap ``0..l+1``; greedy verification against an argmax oracle;
* mixed batches, each row under the adapter's declared greedy rule;
* seeded rows: they repeat and follow their (seed, position), and their law is right
  (accept and final streams apart);
* losslessness (statistical): the joint law of (accepted, committed tokens) of one round
  with a Markov draft and a context-dependent target against the exact path oracle; two
  chained rounds against the target's autoregressive law; draft noise and verify noise
  from one generator seed must stay independent;
* edges (exact): a one-token vocabulary (with a -1 sentinel row), the coins from the
  generator (same seed, same result), seeded rows at position 0 (l = 3 and l = 0), and the
  bonus at ``u = 1 - 2^-53`` never the masked last token nor ``V``.

Not expressible through a ChainVerifier: whether the DRAFT tokens are sampled from ``q``
(not ``argmax q``, e.g. ``p = [.5, .3, .2]``, ``q = [.2, .3, .5]``) is a property of the
draft side (S2/S3 samplers, S9 loop); a verifier receives its drafts. The IUT-drafted cases
(MarkovBlock -> ChainVerifier, ``S5/lossless/iut-*``) check the two together; a draft-side
mutant (argmax drafting) fails them but belongs to S2/S3/S9.

To add a case: add an entry ``case(...): params`` to the dict of its family.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from conformance import stats
from conformance.seeds import derive_seed
from conformance.suite.support import verify_oracle as oracle
from conformance.budget import DEFAULT_MIN_TV
from conformance.cases import case, case_id
from conformance.contract import ChainVerifier, GreedyVerifier, MarkovBlock, TruncatedChainVerifier
from conformance.inputs import logit_rows, markov_head_state
from conformance.suite.support.truncation import NEUTRAL, tempered_law, truncated_law

F64 = torch.float64
TOP_K_OFF = 1 << 30  # SGLang's TOP_K_ALL: top-k off, so a row's rule rests on its temperature


# ----------------------------------------------------------------------------- helpers
def _input_generator(case_seed: int) -> torch.Generator:
    """CPU generator for building inputs (conformance.inputs work on CPU)."""
    return torch.Generator().manual_seed(case_seed)


def _logits_of(*laws) -> torch.Tensor:
    """float32 logits ``[n, V]`` whose softmax at T = 1 is each given law (0 -> -inf)."""
    return torch.log(torch.tensor(laws, dtype=F64)).float()


def _declared_greedy(adapter, temperatures: list[float], top_k: list[int]) -> list[bool]:
    """Greedy rows under the adapter's declared rule (SPEC S3), computed here."""
    if adapter.conventions.greedy_rule == "top_k":
        return [k <= 1 for k in top_k]
    return [t < oracle.TEMPERATURE_FLOOR for t in temperatures]


def _verify(iut, feature: str, device, drafts, target, draft_logits, temps, top_k, **kwargs):
    """``iut.verify`` on ``device`` with CPU outputs; an IUT raising NotImplementedError
    for the ``feature`` in use (explicit uniforms, seeded rows, a kernel this device lacks)
    is a skip naming it."""
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    try:
        accepted, tokens = iut.verify(drafts.to(device), target.to(device), draft_logits.to(device),
                                      temps.to(device), top_k.to(device), **kwargs)
    except NotImplementedError as exc:
        pytest.skip(f"ChainVerifier: {feature} not supported by this IUT ({exc})")
    return accepted.cpu(), tokens.cpu()


def _verify_explicit(iut, device, drafts, target, draft_logits, temps, top_k, accept_u, final_u, cap=None):
    return _verify(iut, "explicit uniforms", device, drafts, target, draft_logits, temps, top_k,
                   accept_uniforms=accept_u, final_uniforms=final_u, cap=cap)


def _verify_seeded(iut, device, drafts, target, draft_logits, temps, top_k, seeds, positions):
    return _verify(iut, "seeded rows", device, drafts, target, draft_logits, temps, top_k,
                   seeds=seeds, positions=positions)


def _check_committed(case_id_: str, accepted, tokens, drafts, vocab: int) -> None:
    """Result format (SPEC S5): ``accepted[B]`` int64 in [0, l]; ``tokens[B, l+1]`` int64:
    the accepted draft prefix, one emitted token id < V, then -1."""
    rows, num_drafts = drafts.shape
    assert accepted.dtype == torch.int64 and tokens.dtype == torch.int64, (
        f"{case_id_}: expected int64 accepted and tokens, got {accepted.dtype} and {tokens.dtype}"
    )
    assert tuple(accepted.shape) == (rows,) and tuple(tokens.shape) == (rows, num_drafts + 1), (
        f"{case_id_}: expected accepted [{rows}] and tokens [{rows}, {num_drafts + 1}], got "
        f"{tuple(accepted.shape)} and {tuple(tokens.shape)}"
    )
    bad = (accepted < 0) | (accepted > num_drafts)
    assert not bool(bad.any()), (
        f"{case_id_}: accepted outside [0, {num_drafts}] at row {int(bad.nonzero()[0])}: {accepted[bad][0].item()}"
    )
    slots = torch.arange(num_drafts + 1)
    padded = torch.cat([drafts.cpu(), torch.full((rows, 1), -1)], dim=1)
    emitted = tokens.gather(1, accepted[:, None])[:, 0]
    wrong = (
        ((slots < accepted[:, None]) & (tokens != padded)).any(dim=1)
        | ((slots > accepted[:, None]) & (tokens != -1)).any(dim=1)
        | (emitted < 0) | (emitted >= vocab)
    )
    if bool(wrong.any()):
        row = int(wrong.nonzero()[0])
        raise AssertionError(
            f"{case_id_}: row {row} is not '<accepted drafts>, <one token < {vocab}>, -1...': drafts "
            f"{drafts[row].tolist()}, accepted {int(accepted[row])}, tokens {tokens[row].tolist()}"
        )


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


def _inverse_cdf_draws(laws: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The test's own draft sampler: token per row of ``laws [B, V]`` at ``uniforms [B]``."""
    cdf = laws.cumsum(-1)
    return torch.searchsorted(cdf, uniforms[:, None].contiguous(), right=True)[:, 0].clamp(max=laws.shape[-1] - 1)


# ----------------------------------------------------------------------------- parity
@dataclasses.dataclass(frozen=True)
class ParitySpec:
    """A random explicit-uniform case.

    ``family`` (conformance.inputs.LOGIT_FAMILIES) shapes the draft logits; targets are
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
    drafts = _inverse_cdf_draws(q.reshape(-1, vocab), torch.rand(rows * l, dtype=F64, generator=gen)).reshape(rows, l)
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
    x = _parity_inputs(spec, _input_generator(case_seed))

    accepted, tokens = _verify_explicit(
        iut, dspark_device, x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"],
        x["accept_u"], x["final_u"],
    )

    _check_committed(case.id, accepted, tokens, x["drafts"], spec.vocab)
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
    as_logits = (lambda *rows_: torch.tensor(rows_, dtype=torch.float32)) if spec.logits else _logits_of
    target = as_logits(*spec.target).expand(rows, -1, -1).contiguous()
    draft_logits = as_logits(*spec.draft).expand(rows, -1, -1).contiguous()
    temps = torch.full((rows,), spec.temperature)
    top_k = torch.full((rows,), spec.top_k, dtype=torch.int64)
    coins = torch.tensor([r.coins for r in spec.rows], dtype=F64).reshape(rows, l)
    finals = torch.tensor([r.final for r in spec.rows], dtype=F64)

    accepted, tokens = _verify_explicit(iut, dspark_device, drafts, target, draft_logits, temps, top_k, coins, finals)

    _check_committed(case.id, accepted, tokens, drafts, len(spec.target[0]))
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
    x = _parity_inputs(spec, _input_generator(case_seed))
    args = (x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"], x["accept_u"], x["final_u"])
    raw_accepted, _ = _verify_explicit(iut, dspark_device, *args)
    raw = [r for _, _, r in _replay(*args[:4], [False] * spec.rows, *args[5:])]
    assert {0, spec.num_drafts} <= set(raw), f"{case.id}: case design: raw counts {sorted(set(raw))}"
    assert raw_accepted.tolist() == raw, f"{case.id}: uncapped accepted counts differ from the S5 replay"

    for cap in range(spec.num_drafts + 2):
        accepted, tokens = _verify_explicit(iut, dspark_device, *args, cap=cap)
        _check_committed(f"{case.id} cap={cap}", accepted, tokens, x["drafts"], spec.vocab)
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
        _check_committed(label, accepted, tokens, drafts, target.shape[-1])
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
    drafts, target = _greedy_inputs(spec, _input_generator(case_seed))
    raw_accepted = None
    for cap in [None, *range(spec.num_drafts + 2)]:
        accepted, tokens = iut.verify_greedy(drafts.to(dspark_device), target.to(dspark_device), cap)
        accepted, tokens = accepted.cpu(), tokens.cpu()
        label = f"{case.id} cap={cap}"
        _check_committed(label, accepted, tokens, drafts, spec.vocab)
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
    gen = _input_generator(case_seed)
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
        _check_committed(label, accepted, tokens, drafts, vocab)
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
    gen = _input_generator(case_seed)
    spec = ParitySpec("random", 8, 4, 64, (1.0,))
    x = _parity_inputs(spec, gen)
    seeds = torch.randint(0, 2**62, (spec.rows,), generator=gen)
    positions = torch.randint(0, 10**6, (spec.rows,), generator=gen)
    inputs = (x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"])

    first = _verify_seeded(iut, dspark_device, *inputs, seeds, positions)
    again = _verify_seeded(iut, dspark_device, *inputs, seeds, positions)
    perm = torch.randperm(spec.rows, generator=gen)
    permuted = _verify_seeded(iut, dspark_device, *(t[perm] for t in inputs), seeds[perm], positions[perm])
    shifted = _verify_seeded(iut, dspark_device, *inputs, seeds, positions + 1)
    reseeded = _verify_seeded(iut, dspark_device, *inputs, seeds + 1, positions)

    _check_committed(case.id, *first, x["drafts"], spec.vocab)
    assert torch.equal(first[1], again[1]) and torch.equal(first[0], again[0]), (
        f"{case.id}: the same seeds and positions gave different results on a second call"
    )
    assert torch.equal(permuted[1], first[1][perm]), (
        f"{case.id}: permuting the rows changed their results: seeded uniforms must depend on "
        f"(seed, position, stream), not on the row index or call order"
    )
    assert not torch.equal(shifted[1], first[1]), f"{case.id}: positions + 1 left all {spec.rows} rows unchanged"
    assert not torch.equal(reseeded[1], first[1]), f"{case.id}: seeds + 1 left all {spec.rows} rows unchanged"


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
            self.target = _logits_of(spec.fixed[0]).reshape(1, 1, v).expand(v, v, v).contiguous()
            self.draft = _logits_of(spec.fixed[1]).expand(v, v).contiguous()
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
        prev = _inverse_cdf_draws(q_table[prev], u)
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
    models = _TinyModels(spec, _input_generator(case_seed))
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

    accepted, tokens = _verify(iut, "generator uniforms", dspark_device, drafts, models.target_logits(history, drafts),
                               draft_logits, temps, top_k, generator=case_generator)

    _check_committed(case.id, accepted, tokens, drafts.cpu(), spec.vocab)
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
    models = _TinyModels(spec, _input_generator(case_seed))
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
        accepted, tokens = _verify(iut, "generator uniforms", dspark_device, drafts,
                                   models.target_logits(history, drafts), models.draft_logits(anchor, drafts),
                                   temps, top_k, generator=case_generator)
        _check_committed(case.id, accepted, tokens, drafts.cpu(), spec.vocab)
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
    drafts = (vocab - 1) - _inverse_cdf_draws(q_desc, draft_noise[:, 0])[:, None]
    target = _logits_of(p, (0.25,) * 4).to(dspark_device).expand(rows, -1, -1)
    draft_logits = _logits_of(q).to(dspark_device).expand(rows, -1, -1)
    temps = torch.ones(rows, device=dspark_device)
    top_k = torch.full((rows,), TOP_K_OFF, dtype=torch.int64, device=dspark_device)

    accepted, tokens = _verify(iut, "generator uniforms", dspark_device, drafts, target, draft_logits, temps, top_k,
                               generator=case_generator)

    _check_committed(case.id, accepted, tokens, drafts.cpu(), vocab)
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
    gen = _input_generator(case_seed)
    models = _TinyModels(spec, gen)
    law = models.round_law(models.context)
    probs = _law_probs(law)
    rows = stats.sample_size_for_tv(probs)
    seeds = torch.randint(0, 2**62, (rows,), generator=gen)
    positions = torch.randint(0, 10**6, (rows,), generator=gen)
    history = torch.tensor(models.context, device=dspark_device).expand(rows, 2)
    anchor = history[:, 1].contiguous()
    drafts = _table_drafts(models.draft_law_table(dspark_device), anchor, spec.num_drafts, case_generator)

    accepted, tokens = _verify_seeded(
        iut, dspark_device, drafts, models.target_logits(history, drafts), models.draft_logits(anchor, drafts),
        torch.ones(rows), torch.full((rows,), TOP_K_OFF, dtype=torch.int64), seeds, positions,
    )

    _check_committed(case.id, accepted, tokens, drafts.cpu(), spec.vocab)
    counts = _counts_against(law, tokens, spec.vocab)
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
    gen = _input_generator(case_seed)
    first = torch.tensor(TIED_TARGET_ROW if "tied" in case.id else TARGET_ROW)
    vocab, l = first.numel(), TRUNCATION_DRAFTS
    target_row = torch.cat([first[None], torch.randn(l, vocab, generator=gen)])
    q_row = torch.softmax(torch.randn(l, vocab, generator=gen) / temperature, dim=-1)
    params = NEUTRAL | {name: value}
    ties = dspark_adapter.conventions.top_k_ties
    expected = truncated_law(tempered_law(first, temperature), params["top_k"], params["top_p"], params["min_p"], ties)
    n = stats.sample_size_for_tv(expected)
    drafts = torch.multinomial(q_row, n, replacement=True, generator=gen).T.contiguous()
    dev = dspark_device
    accepted, tokens = iut.verify_truncated(
        drafts.to(dev), target_row.expand(n, -1, -1).contiguous().to(dev), q_row.expand(n, -1, -1).contiguous().to(dev),
        torch.full((n,), temperature, device=dev), torch.full((n,), params["top_k"], dtype=torch.int64, device=dev),
        torch.full((n,), params["top_p"], device=dev), torch.full((n,), params["min_p"], device=dev), case_generator,
    )
    _check_committed(case.id, accepted.cpu(), tokens.cpu(), drafts, vocab)
    stat_check(stats.goodness_of_fit(torch.bincount(tokens[:, 0].cpu(), minlength=vocab), expected, name=case.id))


# ----------------------------------------------------------------------------- edges from mutation gaps
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
    accepted, tokens = _verify(iut, "a one-token vocabulary", dspark_device, drafts, target, draft_logits,
                               torch.ones(2), torch.full((2,), TOP_K_OFF), generator=case_generator)
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
        return _verify(iut, "generator draws", dspark_device, drafts, *batches[batch], torch.ones(rows),
                       torch.full((rows,), TOP_K_OFF), generator=generator)

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
        first, again = _verify_seeded(*args), _verify_seeded(*args)
        _check_committed(case.id, *first, drafts, vocab)
        for name, a, b in zip(("accepted", "tokens"), first, again):
            assert torch.equal(a, b), f"{case.id}: l = {l}: seeded rows at position 0 gave different {name}"


FINAL_COIN_NEAR_ONE = case("S5/degenerate/final-coin-near-one", "explicit uniforms: every draft accepted (u = 0), the "
                           "bonus drawn at u = 1 - 2^-53 from laws whose last token has logit -inf: an id in [0, V) "
                           "with p > 0, never V and never the masked last token", ["S5.degenerate", "S5.bonus"])


@pytest.mark.parametrize("case", [FINAL_COIN_NEAR_ONE], ids=case_id)
def test_S5_final_coin_near_one_picks_a_live_token(case, require, dspark_device, case_seed):
    """The float64 CDF of a bonus law may end just below ``1 - 2^-53``; an inverse CDF must
    still return a token of positive probability (32 random laws: some end below it)."""
    iut = require(ChainVerifier)
    rows, vocab = 32, 6
    gen = torch.Generator().manual_seed(case_seed)
    target = torch.randn(rows, 2, vocab, generator=gen, dtype=torch.float64).float()
    target[:, 1, -1] = float("-inf")
    drafts = target[:, 0].argmax(dim=-1, keepdim=True)  # p(x_1) > 0: accepted at u = 0
    draft_logits = target[:, :1].clone()
    accept_u = torch.zeros(rows, 1, dtype=torch.float64)
    final_u = torch.full((rows,), 1.0 - 2.0 ** -53, dtype=torch.float64)
    accepted, tokens = _verify_explicit(iut, dspark_device, drafts, target, draft_logits, torch.ones(rows),
                                        torch.full((rows,), vocab), accept_u, final_u)
    _check_committed(case.id, accepted, tokens, drafts, vocab)
    bonus = tokens[:, 1]
    assert bool((accepted == 1).all()), f"{case.id}: u = 0 must accept every draft, got accepted {accepted.tolist()}"
    assert bool((bonus < vocab - 1).all()), (
        f"{case.id}: the bonus at u = 1 - 2^-53 must be a token of positive probability (not {vocab - 1}, logit "
        f"-inf, nor {vocab}): got {bonus.tolist()}"
    )
