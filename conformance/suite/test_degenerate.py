"""SPEC S3 and S5 degenerate inputs: what a sampler or verifier does at the edges.

S3 (``StepSampler``, ``NoiseStepSampler``, ``ChainVerifier`` for temperatures):

* a last tile whose valid entries all have zero mass (V = 1025, 8193, 10000, 151936: the
  tail past the last multiple of 1024, or of 8192 above it, is -inf or 1e4 below the rest),
  with noise 0 or 1e-30 on it: the float64 untiled winner, never a tail id;
* endpoint noise: E = 0 on one token (it wins: p / 0 = inf), on every token (any finite
  token), E = 2^-24 (the noise of a uniform at 1 - 2^-24);
* rows containing NaN or all -inf: the declared ``Conventions.degenerate_rows``;
* NaN / negative / +inf temperatures: the declared ``Conventions.bad_temperatures``;
  T = 1e30 draws uniformly from the unmasked support (exact with noise: the smallest E
  wins; and one chi-square); denormal and 0 < T < 1e-5 temperatures race at 1e-5.

S5 (``ChainVerifier`` with explicit uniforms or a generator, ``TruncatedChainVerifier``
for handed-over q, ``GreedyVerifier``):

* ``q_j(x_j) = 0`` drafts: the declared ``Conventions.zero_q_drafts``, no crash, valid ids;
* a handed-over ``q`` of 1 + 2^-7 (a bf16 rounding) read as 1: a draft with p = 1 always passes;
* coins at 0, at 1 - 2^-24 and exactly on a CDF boundary of the correction and bonus
  draws: the accept decision of ``u q < p`` exactly, and never a zero-probability token;
  a bonus drawn at ``u = 1 - 2^-53`` from laws whose float64 CDF may end below it: never
  the masked last token nor ``V``;
* trailing -1 sentinel drafts: verified as a row with fewer drafts, never emitted.

Every expectation is computed here in float64 (``oracles.race_oracle``,
``oracles.verify_oracle``). To add a case: register it with ``case(...)`` next to its test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conformance import stats
from conformance.cases import case, case_id
from conformance.contract import (
    ChainVerifier,
    GreedyVerifier,
    NoiseStepSampler,
    StepSampler,
    TruncatedChainVerifier,
)
from conformance.inputs import NO_TOP_K_CUT
from conformance.inputs.verify_rounds import laws_as_logits
from conformance.oracles import race_oracle as race
from conformance.oracles import verify_oracle as oracle
from conformance.oracles.laws import tempered_softmax64
from conformance.seeds import derive_seed
from conformance.suite.support.chain_verifier import check_committed, verify_explicit

F64 = torch.float64
NEG = -math.inf
U_TOP = 1 - 2.0**-24  # the largest float32 uniform below 1
E_TOP = -math.log1p(-(2.0**-24))  # the Exp(1) noise of that uniform, ~5.96e-8
TAIL_VOCABS = (1025, 8193, 10_000, 151_936)


def _gen(case_seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(case_seed, "inputs"))


def _exp(shape, gen: torch.Generator) -> torch.Tensor:
    return torch.empty(shape).exponential_(generator=gen)


def _to(device, *tensors):
    return tuple(t.to(device) for t in tensors)


def _assert_equal(got: torch.Tensor, expected: torch.Tensor, rows: torch.Tensor, what: str) -> None:
    got = got.cpu()
    wrong = rows & (got != expected)
    assert not bool(wrong.any()), (
        f"{what}: {int(wrong.sum())} of {int(rows.sum())} rows differ, e.g. rows {wrong.nonzero().flatten()[:8].tolist()}: "
        f"got {got[wrong][:8].tolist()}, expected {expected[wrong][:8].tolist()}"
    )


def _assert_live(got: torch.Tensor, logits: torch.Tensor, rows: torch.Tensor, what: str) -> None:
    """Each selected row's id lies in ``[0, V)`` and its logit is not -inf."""
    got = got.cpu()
    vocab = logits.shape[-1]
    bad = rows & ((got < 0) | (got >= vocab))
    assert not bool(bad.any()), f"{what}: ids outside [0, {vocab}) at rows {bad.nonzero().flatten()[:8].tolist()}"
    drawn = logits.gather(1, got.clamp(0, vocab - 1)[:, None])[:, 0]
    dead = rows & (drawn == NEG)
    assert not bool(dead.any()), (
        f"{what}: -inf tokens {got[dead][:8].tolist()} returned at rows {dead.nonzero().flatten()[:8].tolist()}"
    )


# =========================================================================== S3
# --------------------------------------------------------------------------- tail tiles
def _tail(vocab: int) -> int:
    """Columns past the last multiple of 8192 (V > 8192) or of 1024: they hold the last
    partial tile of every power-of-two tile size up to that multiple."""
    return vocab % 8192 if vocab > 8192 else vocab % 1024


def _tail_rows(vocab: int, gen: torch.Generator):
    """Five rows whose tail has zero mass: -inf with noise 0 (r0, r4) or 1e-30 (r2), finite
    but 1e4 below the rest (r1, p underflows to 0 in float32 and float64), a greedy row (r3)."""
    tail = _tail(vocab)
    logits = 2 * torch.randn(5, vocab, generator=gen)
    noise = _exp(logits.shape, gen)
    logits[:, vocab - tail:] = NEG
    logits[1, vocab - tail:] = logits[1, : vocab - tail].min() - 1e4
    noise[[0, 4], vocab - tail:] = 0.0
    noise[[1, 2], vocab - tail:] = 1e-30
    logits[4, vocab - tail - 1] = logits[4].max() + 1  # the mode sits just before the tail
    temps = torch.tensor([1.0, 1.0, 0.5, 0.0, 2.0])
    top_k = torch.tensor([vocab, vocab, vocab, 1, vocab])
    return logits, temps, top_k, race.separate(logits, temps, noise), tail


TAIL_NOISE_CASES = [
    pytest.param(case(f"S3/degenerate/tail-tile-zero-mass-V{v}", f"explicit noise, V={v}: the last {_tail(v)} "
                      "columns -inf or 1e4 below the rest, noise 0 / 1e-30 there: the float64 untiled winner",
                      ("S3.degenerate", "S3.tiled")), v, id=f"S3/degenerate/tail-tile-zero-mass-V{v}")
    for v in TAIL_VOCABS
]


@pytest.mark.parametrize("case, vocab", TAIL_NOISE_CASES)
def test_S3_tail_tile_zero_mass(case, vocab, require, dspark_adapter, dspark_device, case_seed):
    sampler = require(NoiseStepSampler)
    logits, temps, top_k, noise, tail = _tail_rows(vocab, _gen(case_seed))
    got = sampler.sample_with_noise(*_to(dspark_device, logits, temps, top_k, noise)).cpu()
    assert not bool((got >= vocab - tail).any()), f"{case.id}: a zero-mass tail id was returned: {got.tolist()}"
    expected = race.expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
    _assert_equal(got, expected, torch.ones(len(temps), dtype=torch.bool), case.id)


TAIL_FRESH = case("S3/degenerate/tail-tile-zero-mass-fresh", f"StepSampler, V in {TAIL_VOCABS}, zero-mass tails, "
                  "32 rows each: never a tail id; greedy rows the argmax", ("S3.degenerate",))


@pytest.mark.parametrize("case", [TAIL_FRESH], ids=case_id)
def test_S3_tail_tile_zero_mass_fresh_noise(case, require, dspark_adapter, dspark_device, case_seed, case_generator):
    sampler = require(StepSampler)
    gen = _gen(case_seed)
    for vocab in TAIL_VOCABS:
        logits, temps, top_k, _, tail = _tail_rows(vocab, gen)
        logits, temps, top_k = logits.repeat(7, 1)[:32], temps.repeat(7)[:32], top_k.repeat(7)[:32]
        got = sampler.sample(*_to(dspark_device, logits, temps, top_k), vocab, case_generator).cpu()
        label = f"{case.id} V={vocab}"
        assert not bool((got >= vocab - tail).any()), f"{label}: a zero-mass tail id was returned: {got.tolist()}"
        greedy = race.greedy_by_rule(dspark_adapter.conventions.greedy_rule, temps, top_k)
        _assert_equal(got, race.lowest_argmax(logits), greedy, f"{label}: greedy rows")


# --------------------------------------------------------------------------- endpoint noise
ENDPOINT_NOISE = case("S3/degenerate/endpoint-noise", "explicit noise E = 0 on one finite token (it wins), E = 0 on "
                      "every token (a finite token), E = 2^-24 on one token, greedy rows under E = 0: exact or "
                      "never -inf", ("S3.degenerate", "S3.exponential-race"))


@pytest.mark.parametrize("case", [ENDPOINT_NOISE], ids=case_id)
def test_S3_endpoint_noise(case, require, dspark_adapter, dspark_device, case_seed):
    sampler = require(NoiseStepSampler)
    gen, rows, vocab = _gen(case_seed), 32, 64
    logits = 2 * torch.randn(rows, vocab, generator=gen)
    dead = torch.rand(rows, vocab, generator=gen) < 0.25
    dead[:, 0] = True  # the lowest id is always -inf: a 0/0 or inf - inf winner lands there
    logits = logits.masked_fill(dead, NEG)
    noise = _exp(logits.shape, gen)
    live = [(~dead[r]).nonzero().flatten() for r in range(rows)]
    pick = torch.stack([ids[torch.randint(len(ids), (1,), generator=gen)] for ids in live]).flatten()
    group = torch.arange(rows) // 8  # 0: one E = 0; 1: E = 0 everywhere; 2: one E = 2^-24; 3: greedy, E = 0
    noise[group == 0, pick[group == 0]] = 0.0
    noise[(group == 1) | (group == 3)] = 0.0
    noise[group == 2] = noise[group == 2].masked_fill(dead[group == 2], 0.0)
    noise[group == 2, pick[group == 2]] = E_TOP
    temps = torch.where(group == 3, 0.0, 1.0)
    top_k = torch.where(group == 3, 1, vocab)
    got = sampler.sample_with_noise(*_to(dspark_device, logits, temps, top_k, noise)).cpu()
    _assert_live(got, logits, torch.ones(rows, dtype=torch.bool), case.id)
    expected = race.expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
    _assert_equal(got, pick, group == 0, f"{case.id}: E = 0 on one token (key p / 0 = inf wins)")
    _assert_equal(got, expected, group >= 2, f"{case.id}: E = 2^-24 rows and greedy rows")


# --------------------------------------------------------------------------- NaN / all -inf rows
def _degenerate_rows(kind: str, gen: torch.Generator):
    """Rows 0-1 ordinary (sampling, greedy); rows 2-3 (sampling, greedy) contain NaN among
    finite and -inf logits (``kind="nan"``) or are all -inf (``kind="dead"``)."""
    vocab = 48
    logits = 2 * torch.randn(4, vocab, generator=gen)
    logits = logits.masked_fill(torch.rand(4, vocab, generator=gen) < 0.3, NEG)
    logits[:, 0] = NEG
    if kind == "nan":
        logits[2:, 5] = math.nan
    else:
        logits[2:] = NEG
    temps = torch.tensor([1.0, 0.0, 1.0, 0.0])
    top_k = torch.tensor([vocab, 1, vocab, 1])
    return logits, temps, top_k, race.separate(logits, temps, _exp(logits.shape, gen))


DEGENERATE_ROW_CASES = {
    case(f"S3/degenerate/{kind}-rows-{cap.__name__}", f"{cap.__name__}: rows {what} next to ordinary rows: the "
         "declared degenerate_rows rule (error, or ids in [0, V), never a -inf token); ordinary rows unchanged",
         ("S3.degenerate",)): (kind, cap)
    for kind, what in (("nan", "containing NaN"), ("dead", "all -inf"))
    for cap in (NoiseStepSampler, StepSampler)
}


@pytest.mark.parametrize("case", DEGENERATE_ROW_CASES, ids=case_id)
def test_S3_nan_and_dead_rows(case, require, dspark_adapter, dspark_device, case_seed, case_generator):
    kind, capability = DEGENERATE_ROW_CASES[case]
    sampler = require(capability)
    logits, temps, top_k, noise = _degenerate_rows(kind, _gen(case_seed))

    def call(rows=slice(None)):
        inputs = [t[rows] for t in (logits, temps, top_k, noise)]
        if capability is NoiseStepSampler:
            return sampler.sample_with_noise(*_to(dspark_device, *inputs)).cpu()
        return sampler.sample(*_to(dspark_device, *inputs[:3]), logits.shape[1], case_generator).cpu()

    rule = dspark_adapter.conventions.degenerate_rows
    if rule == "error":
        for rows in (slice(None), slice(1, 3)):  # two bad rows, then exactly one
            with pytest.raises(ValueError):
                call(rows)
        return
    got = call()
    ordinary = torch.tensor([True, True, False, False])
    _assert_live(got, logits, ordinary | torch.tensor([False, False, kind == "nan", kind == "nan"]), case.id)
    bad = (got < 0) | (got >= logits.shape[1])
    assert not bool(bad.any()), f"{case.id}: ids outside [0, {logits.shape[1]}): {got.tolist()}"
    greedy = race.greedy_by_rule(dspark_adapter.conventions.greedy_rule, temps, top_k)
    _assert_equal(got, race.lowest_argmax(logits), ordinary & greedy, f"{case.id}: the ordinary greedy row")
    if capability is NoiseStepSampler:
        expected = race.expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
        _assert_equal(got, expected, ordinary, f"{case.id}: the ordinary rows")


# --------------------------------------------------------------------------- temperatures
BAD_TEMPERATURES = {"nan": math.nan, "negative": -0.5, "inf": math.inf}
BAD_T_CASES = {
    case(f"S3/degenerate/temperature-{name}", f"explicit noise, T = {value} on half the rows: the declared "
         "bad_temperatures rule (error, or those rows greedy); the other rows unchanged",
         ("S3.degenerate", "S3.temperature-clamp")): value
    for name, value in BAD_TEMPERATURES.items()
}


@pytest.mark.parametrize("case", BAD_T_CASES, ids=case_id)
def test_S3_bad_temperatures(case, require, dspark_adapter, dspark_device, case_seed):
    sampler = require(NoiseStepSampler)
    gen, rows, vocab = _gen(case_seed), 16, 40
    logits = (2 * torch.randn(rows, vocab, generator=gen)).masked_fill(torch.rand(rows, vocab, generator=gen) < 0.3, NEG)
    logits[:, 0] = NEG
    bad = torch.arange(rows) % 2 == 0
    temps = torch.where(bad, BAD_T_CASES[case], torch.tensor([1.0, 0.0]).repeat(rows // 2))
    top_k = torch.where(bad | (temps == 1.0), vocab, 1)
    noise = race.separate(logits, torch.where(bad, 1.0, temps), _exp(logits.shape, gen))
    def call(rows=slice(None)):
        return sampler.sample_with_noise(*_to(dspark_device, logits[rows], temps[rows], top_k[rows],
                                              noise[rows])).cpu()

    if dspark_adapter.conventions.bad_temperatures == "error":
        for rows in (slice(None), slice(0, 2)):  # every other row bad, then exactly one
            with pytest.raises(ValueError):
                call(rows)
        return
    got = call()
    _assert_live(got, logits, torch.ones(rows, dtype=torch.bool), case.id)
    _assert_equal(got, race.lowest_argmax(logits), bad, f"{case.id}: rows with T = {BAD_T_CASES[case]} (declared greedy)")
    good_temps = torch.where(bad, 1.0, temps)
    expected = race.expected_tokens(dspark_adapter.conventions.greedy_rule, logits, good_temps, top_k, noise)
    _assert_equal(got, expected, ~bad, f"{case.id}: the other rows")


BAD_T_VERIFY = case("S5/degenerate/temperature-nan-negative-inf", "ChainVerifier, rows at T = NaN, -0.5, +inf among "
                    "greedy rows: the declared bad_temperatures rule (error, or greedy verification)",
                    ("S5.degenerate",))


@pytest.mark.parametrize("case", [BAD_T_VERIFY], ids=case_id)
def test_S5_bad_temperatures_verify(case, require, dspark_adapter, dspark_device, case_seed, case_generator):
    iut = require(ChainVerifier)
    gen, rows, l, vocab = _gen(case_seed), 12, 3, 10
    target = torch.randint(0, 4, (rows, l + 1, vocab), generator=gen).float()
    best = torch.tensor([[int(np.argmax(p)) for p in target[b].numpy()] for b in range(rows)])
    drafts = torch.where(torch.rand(rows, l, generator=gen) < 0.7, best[:, :l], torch.randint(vocab, (rows, l), generator=gen))
    draft_logits = 2 * torch.randn(rows, l, vocab, generator=gen)
    bad = torch.arange(rows) % 2 == 0
    temps = torch.where(bad, torch.tensor(list(BAD_TEMPERATURES.values())).repeat(rows // 3)[:rows], 0.0)
    top_k = torch.where(bad, NO_TOP_K_CUT, 1)
    def call():
        return iut.verify(*_to(dspark_device, drafts, target, draft_logits, temps, top_k), generator=case_generator)

    if dspark_adapter.conventions.bad_temperatures == "error":
        with pytest.raises(ValueError):
            call()
        return
    accepted, tokens = (t.cpu() for t in call())
    for b in range(rows):
        exp_acc, exp_tokens, _ = oracle.greedy_round(drafts[b].tolist(), target[b].numpy())
        got = tokens[b, : int(accepted[b]) + 1].tolist()
        assert (int(accepted[b]), got) == (exp_acc, exp_tokens), (
            f"{case.id}: row {b} (T = {float(temps[b])}): expected greedy verification {exp_acc}, {exp_tokens}; "
            f"got {int(accepted[b])}, {got}"
        )


HUGE_T_NOISE = case("S3/degenerate/huge-temperature-noise", "explicit noise, T = 1e30: p is uniform on the unmasked "
                    "support, so the smallest noise among live tokens wins (exact)", ("S3.degenerate",))


@pytest.mark.parametrize("case", [HUGE_T_NOISE], ids=case_id)
def test_S3_huge_temperature_noise(case, require, dspark_adapter, dspark_device, case_seed):
    sampler = require(NoiseStepSampler)
    gen, rows, vocab = _gen(case_seed), 64, 32
    logits = (10 * torch.randn(rows, vocab, generator=gen)).masked_fill(torch.rand(rows, vocab, generator=gen) < 0.25, NEG)
    logits[:, 0] = NEG
    temps = torch.full((rows,), 1e30)
    top_k = torch.full((rows,), vocab)
    noise = race.separate(logits, temps, _exp(logits.shape, gen))
    got = sampler.sample_with_noise(*_to(dspark_device, logits, temps, top_k, noise)).cpu()
    expected = noise.masked_fill(logits == NEG, math.inf).argmin(dim=-1)
    _assert_equal(got, expected, ~race.greedy_by_rule(dspark_adapter.conventions.greedy_rule, temps, top_k), case.id)


HUGE_T_LAW = case("S3/degenerate/huge-temperature-uniform", "StepSampler, T = 1e30 on logits 10 x N(0, 1) with 8 of "
                  "32 masked: chi-square against the uniform law on the 24 live tokens (masked hits fail at once)",
                  ("S3.degenerate", "S3.law"), statistical=1)


@pytest.mark.statistical
@pytest.mark.parametrize("case", [HUGE_T_LAW], ids=case_id)
def test_S3_huge_temperature_uniform(case, require, dspark_device, case_seed, case_generator, stat_check):
    """H0: at T = 1e30 the draws are uniform on the 24 unmasked tokens. Chi-square over 24
    bins plus a probability-0 bin for the masked ones, alpha = PER_ASSERTION_ALPHA, min TV
    0.01, n from sample_size_for_tv for power 0.999. At T = 1 the same row is far from
    uniform (TV > 0.5): an IUT that drops a huge T falls far outside."""
    sampler = require(StepSampler)
    gen, vocab = _gen(case_seed), 32
    row = 10 * torch.randn(vocab, generator=gen)
    masked = torch.randperm(vocab, generator=gen)[:8]
    row[masked] = NEG
    live = (row > NEG).nonzero().flatten()
    probs = np.append(np.full(len(live), 1 / len(live)), 0.0)
    n = stats.sample_size_for_tv(probs)
    tokens = sampler.sample(row.expand(n, -1).contiguous().to(dspark_device), torch.full((n,), 1e30, device=dspark_device),
                            torch.full((n,), vocab, device=dspark_device), vocab, case_generator).cpu()
    hits = torch.bincount(tokens, minlength=vocab)
    counts = np.append(hits[live].numpy(), int(n - hits[live].sum()))
    stat_check(stats.goodness_of_fit(counts, probs, name=case.id))


TINY_T = case("S3/degenerate/tiny-temperatures-clamped", "explicit noise, T in {1e-40 (denormal), 1.4e-45, 5e-6, "
              "9.99e-6} on logits 5e-6 apart: they race at T = 1e-5 (or are greedy by the declared rule)",
              ("S3.degenerate", "S3.temperature-clamp"))


@pytest.mark.parametrize("case", [TINY_T], ids=case_id)
def test_S3_tiny_temperatures_clamped(case, require, dspark_adapter, dspark_device, case_seed):
    sampler = require(NoiseStepSampler)
    gen, vocab, rows = _gen(case_seed), 8, 96
    logits = torch.stack([torch.randperm(vocab, generator=gen) for _ in range(rows)]).float() * 5e-6
    temps = torch.tensor([1e-40, 1.4e-45, 5e-6, 9.99e-6], dtype=torch.float32).repeat(rows // 4)
    assert float(temps[0]) > 0 and float(temps[1]) > 0, "case design: the denormal temperatures must stay > 0"
    top_k = torch.full((rows,), vocab)
    noise = race.separate(logits, temps, _exp(logits.shape, gen))
    got = sampler.sample_with_noise(*_to(dspark_device, logits, temps, top_k, noise))
    expected = race.expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
    _assert_equal(got, expected, torch.ones(rows, dtype=torch.bool), case.id)


# =========================================================================== S5
def _emitted(accepted: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return tokens.gather(1, accepted[:, None])[:, 0]


def _assert_in_support(what: str, emitted: torch.Tensor, laws: torch.Tensor) -> None:
    """Each row's emitted id lies in ``[0, V)`` with positive mass under its law ``[B, V]``."""
    vocab = laws.shape[-1]
    out = (emitted < 0) | (emitted >= vocab)
    mass = laws.gather(1, emitted.clamp(0, vocab - 1)[:, None])[:, 0]
    bad = out | (mass <= 0)
    assert not bool(bad.any()), (
        f"{what}: zero-probability or invalid tokens {emitted[bad][:8].tolist()} emitted at rows "
        f"{bad.nonzero().flatten()[:8].tolist()}"
    )


# --------------------------------------------------------------------------- q(x) = 0 drafts
ZERO_Q_EXPLICIT = case("S5/degenerate/zero-q-draft-explicit", "explicit uniforms, q_1(x_1) = 0 with p_1(x_1) > 0 "
                       "or = 0, coins 0 / 0.5 / 1 - 2^-24: the declared zero_q_drafts choice, exact",
                       ("S5.degenerate", "S5.accept-rule"))


@pytest.mark.parametrize("case", [ZERO_Q_EXPLICIT], ids=case_id)
def test_S5_zero_q_draft_explicit(case, require, dspark_adapter, dspark_device, case_seed):
    iut = require(ChainVerifier)
    gen, vocab, l = _gen(case_seed), 6, 2
    grid = [(x, c, u) for x in (0, 1) for c in (0.0, 0.5, U_TOP) for u in (0.0, 0.3, 0.7, U_TOP)]
    rows = len(grid)
    drafts = torch.tensor([[x, 2] for x, _, _ in grid])
    target = laws_as_logits((0.3, 0.0, 0.2, 0.1, 0.25, 0.15), (0.1, 0.2, 0.3, 0.1, 0.2, 0.1), (0.5, 0.1, 0.1, 0.1, 0.1, 0.1))
    target = target.expand(rows, -1, -1).contiguous()
    draft_logits = 2 * torch.randn(rows, l, vocab, generator=gen)
    draft_logits[:, 0, :2] = NEG  # q_1(0) = q_1(1) = 0: both drafts at slot 1 have zero draft mass
    coins = torch.tensor([[c, 0.4] for _, c, _ in grid], dtype=F64)
    finals = torch.tensor([u for _, _, u in grid], dtype=F64)
    temps, top_k = torch.ones(rows), torch.full((rows,), NO_TOP_K_CUT)
    accepted, tokens = verify_explicit(iut, dspark_device, drafts, target, draft_logits, temps, top_k, coins, finals)
    rule = dspark_adapter.conventions.zero_q_drafts
    for b, (x, c, u) in enumerate(grid):
        replay = oracle.replay_round(drafts[b].tolist(), target[b].double().numpy(), draft_logits[b].double().numpy(),
                                     1.0, False, coins[b].tolist(), float(u))
        exp_acc, exp_tokens = replay[0], replay[1]
        if rule == "reject":  # rejected at slot 1: the correction from normalize(max(p_1 - q_1, 0))
            p1 = oracle.step_law(target[b, 0].double().numpy(), 1.0, False)
            q1 = oracle.step_law(draft_logits[b, 0].double().numpy(), 1.0, False)
            exp_acc, exp_tokens = 0, [oracle.inverse_cdf(oracle.residual_law(p1, q1), float(u))]
        got = tokens[b, : int(accepted[b]) + 1].tolist()
        assert (int(accepted[b]), got) == (exp_acc, exp_tokens), (
            f"{case.id}: row {b} (x_1 = {x}, p_1(x_1) = {'0' if x == 1 else '> 0'}, coin {c}, final {u}, declared "
            f"{rule!r}): expected accepted {exp_acc}, tokens {exp_tokens}; got {int(accepted[b])}, {got}"
        )


ZERO_Q_HANDED = case("S5/degenerate/zero-q-draft-handed-over", "TruncatedChainVerifier (neutral truncation), handed-"
                     "over q with q(x) = 0 at the draft, p(x) > 0 or = 0: the declared choice, emitted ids in the "
                     "support of their law", ("S5.degenerate",))


@pytest.mark.parametrize("case", [ZERO_Q_HANDED], ids=case_id)
def test_S5_zero_q_draft_handed_over(case, require, dspark_adapter, dspark_device, case_seed, case_generator):
    iut = require(TruncatedChainVerifier)
    rows, vocab = 256, 6
    drafts = torch.tensor([0, 3]).repeat(rows // 2)[:, None]  # q(0) = q(3) = 0; p_1(0) = 0.2, p_1(3) = 0
    target = laws_as_logits((0.2, 0.2, 0.2, 0.0, 0.2, 0.2), (0.1, 0.0, 0.3, 0.2, 0.0, 0.4)).expand(rows, -1, -1).contiguous()
    q = torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0, 0.0]).expand(rows, 1, -1).contiguous()
    dev = dspark_device
    accepted, tokens = (t.cpu() for t in iut.verify_truncated(
        *_to(dev, drafts, target, q, torch.ones(rows), torch.full((rows,), vocab)), torch.ones(rows, device=dev),
        torch.zeros(rows, device=dev), case_generator))
    rule = dspark_adapter.conventions.zero_q_drafts
    expect_accept = (drafts[:, 0] == 0) & (rule == "accept")
    assert torch.equal(accepted, expect_accept.long()), (
        f"{case.id}: declared {rule!r}: expected accepted {expect_accept.long()[:4].tolist()}... (1 iff q(x) = 0 and "
        f"p(x) > 0 under 'accept'), got {accepted[:8].tolist()} (rows 0..7)"
    )
    p = tempered_softmax64(target[0], 1.0)
    laws = torch.where(expect_accept[:, None], p[1], oracle.residual_laws(p[:1], q[0].double())[0])
    _assert_in_support(case.id, _emitted(accepted, tokens), laws)


# --------------------------------------------------------------------------- q above 1
Q_ABOVE_ONE = case("S5/degenerate/q-above-one", "TruncatedChainVerifier, handed-over q(x) = 1 + 2^-7 (a bf16 rounding) "
                   "and p(x) = 1: read as 1, u q < p holds for every u < 1, so every row accepts (exact, 2048 rows)",
                   ("S5.degenerate",))


@pytest.mark.parametrize("case", [Q_ABOVE_ONE], ids=case_id)
def test_S5_q_above_one_read_as_one(case, require, dspark_device, case_seed, case_generator):
    """Unclamped, a coin u >= 1 / (1 + 2^-7) rejects: 2048 rows miss that with probability
    (1 - 2^-7 / (1 + 2^-7))^2048 < 2e-7."""
    iut = require(TruncatedChainVerifier)
    gen, rows, vocab = _gen(case_seed), 2048, 8
    drafts = torch.randint(vocab, (rows, 1), generator=gen)
    one_hot = torch.nn.functional.one_hot(drafts[:, 0], vocab).float()
    q = (one_hot * (1 + 2.0**-7))[:, None, :]
    target = torch.stack([torch.log(one_hot), 2 * torch.randn(rows, vocab, generator=gen)], dim=1)
    dev = dspark_device
    accepted, tokens = (t.cpu() for t in iut.verify_truncated(
        *_to(dev, drafts, target, q, torch.ones(rows), torch.full((rows,), vocab)), torch.ones(rows, device=dev),
        torch.zeros(rows, device=dev), case_generator))
    rejected = accepted != 1
    assert not bool(rejected.any()), (
        f"{case.id}: {int(rejected.sum())} of {rows} rows rejected a draft with p(x) = 1 and q(x) = 1 + 2^-7 "
        f"(q not read as 1), e.g. rows {rejected.nonzero().flatten()[:8].tolist()}"
    )
    assert torch.equal(tokens[:, 0], drafts[:, 0]), f"{case.id}: the accepted draft is not the committed token"
    _assert_in_support(case.id, tokens[:, 1], tempered_softmax64(target[:, 1], 1.0))


# --------------------------------------------------------------------------- coins
COINS_BOUNDARY = case("S5/degenerate/coins-endpoints-and-boundaries", "explicit uniforms, laws of exact quarters: "
                      "coins 0 / 0.25 / 0.5 (= p/q, rejects) / 1 - 2^-24, final uniforms 0, 0.25, 0.5, 0.75, "
                      "1 - 2^-24 (CDF boundaries): accept decisions exact, never a zero-probability token",
                      ("S5.degenerate", "S5.accept-rule", "S5.residual", "S5.bonus"))


@pytest.mark.parametrize("case", [COINS_BOUNDARY], ids=case_id)
def test_S5_coins_at_endpoints_and_boundaries(case, require, dspark_device):
    """p_1 = p_2 uniform on {1, 3, 5, 7} of 9 tokens, q_1 uniform on {1, 3}; x_1 = 1. Accept
    iff u / 2 < 1/4, i.e. u < 0.5 (u = 0.5 sits on the boundary and rejects). The residual
    is uniform on {5, 7}. Every CDF value is a multiple of 1/4, exact in any float
    arithmetic, so the final uniforms sit exactly on CDF boundaries; zero-mass tokens lead
    (0), sit between (2, 4, 6) and trail (8)."""
    iut = require(ChainVerifier)
    p = (0, 0.25, 0, 0.25, 0, 0.25, 0, 0.25, 0)
    grid = [(c, u) for c in (0.0, 0.25, 0.5, U_TOP) for u in (0.0, 0.25, 0.5, 0.75, U_TOP)]
    rows = len(grid)
    target = laws_as_logits(p, p).expand(rows, -1, -1).contiguous()
    draft_logits = laws_as_logits((0, 0.5, 0, 0.5, 0, 0, 0, 0, 0)).expand(rows, -1, -1).contiguous()
    drafts = torch.ones(rows, 1, dtype=torch.int64)
    coins = torch.tensor([[c] for c, _ in grid], dtype=F64)
    finals = torch.tensor([u for _, u in grid], dtype=F64)
    accepted, tokens = verify_explicit(iut, dspark_device, drafts, target, draft_logits, torch.ones(rows),
                                       torch.full((rows,), NO_TOP_K_CUT), coins, finals)
    expected = torch.tensor([int(c < 0.5) for c, _ in grid])
    assert torch.equal(accepted, expected), (
        f"{case.id}: accept iff u * q < p (u < 0.5 here, 0.5 rejects): expected {expected.tolist()}, got "
        f"{accepted.tolist()} for coins {[c for c, _ in grid]}"
    )
    residual = torch.tensor([0, 0, 0, 0, 0, 0.5, 0, 0.5, 0], dtype=F64)
    laws = torch.where(expected[:, None] == 1, torch.tensor(p, dtype=F64), residual)
    _assert_in_support(f"{case.id} (coins, finals {grid})", _emitted(accepted, tokens), laws)


COINS_WIDE = case("S5/degenerate/final-uniform-endpoints-V4096", "explicit uniforms, V = 4096 with 64 leading and 64 "
                  "trailing -inf tokens, final uniforms 0, 0.5, 1 - 2^-24 for the bonus and the correction: never a "
                  "zero-probability token, never an id >= V", ("S5.degenerate", "S5.residual", "S5.bonus"))


@pytest.mark.parametrize("case", [COINS_WIDE], ids=case_id)
def test_S5_final_uniform_endpoints_wide_vocab(case, require, dspark_device, case_seed):
    """A float32 CDF over 3968 tokens may total below 1 - 2^-24; the draw must still land on
    a live token. Rows 0-2 accept (coin 0) and draw the bonus; rows 3-5 reject (q(x) = e^5
    times p(x), coin 1 - 2^-24) and draw the correction (every live token but x)."""
    iut = require(ChainVerifier)
    gen, vocab, rows = _gen(case_seed), 4096, 6
    live = torch.zeros(vocab, dtype=torch.bool)
    live[64:-64] = True
    base = (0.1 * torch.randn(2, vocab, generator=gen)).masked_fill(~live, NEG)
    target = base.expand(rows, -1, -1).contiguous()
    x = 100
    draft_logits = base[:1].clone()
    draft_logits[0, x] += 5.0
    draft_logits = draft_logits.expand(rows, -1, -1).contiguous()
    drafts = torch.full((rows, 1), x)
    coins = torch.tensor([[0.0]] * 3 + [[U_TOP]] * 3, dtype=F64)
    finals = torch.tensor([0.0, 0.5, U_TOP] * 2, dtype=F64)
    accepted, tokens = verify_explicit(iut, dspark_device, drafts, target, draft_logits, torch.ones(rows),
                                       torch.full((rows,), NO_TOP_K_CUT), coins, finals)
    assert accepted.tolist() == [1, 1, 1, 0, 0, 0], f"{case.id}: expected accepted [1, 1, 1, 0, 0, 0], got {accepted.tolist()}"
    p, q = tempered_softmax64(base, 1.0), tempered_softmax64(draft_logits[0, 0], 1.0)
    laws = torch.stack([p[1]] * 3 + [oracle.residual_laws(p[:1], q[None])[0]] * 3)
    _assert_in_support(case.id, _emitted(accepted, tokens), laws)


# --------------------------------------------------------------------------- sentinels
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
    accepted, tokens = verify_explicit(iut, dspark_device, drafts, target, draft_logits, torch.ones(rows),
                                       torch.full((rows,), vocab), accept_u, final_u)
    check_committed(case.id, accepted, tokens, drafts, vocab)
    bonus = tokens[:, 1]
    assert bool((accepted == 1).all()), f"{case.id}: u = 0 must accept every draft, got accepted {accepted.tolist()}"
    assert bool((bonus < vocab - 1).all()), (
        f"{case.id}: the bonus at u = 1 - 2^-53 must be a token of positive probability (not {vocab - 1}, logit "
        f"-inf, nor {vocab}): got {bonus.tolist()}"
    )


def _sentinel_rows(rows: int, l: int) -> torch.Tensor:
    """``[rows]`` real-draft counts ``0..l`` (each at least once)."""
    return torch.arange(rows) % (l + 1)


SENTINEL_EXPLICIT = case("S5/degenerate/sentinel-drafts-explicit", "explicit uniforms, rows with 0..l real drafts and "
                         "-1 after them, uncapped and cap 2: each row equals the S5 replay of its real drafts",
                         ("S5.degenerate", "S5.cap"))


@pytest.mark.parametrize("case", [SENTINEL_EXPLICIT], ids=case_id)
def test_S5_sentinel_drafts_explicit(case, require, dspark_device, case_seed):
    iut = require(ChainVerifier)
    gen, rows, l, vocab = _gen(case_seed), 200, 4, 8
    draft_logits = 2 * torch.randn(rows, l, vocab, generator=gen)
    target = torch.cat([draft_logits + torch.randn(rows, l, vocab, generator=gen),
                        2 * torch.randn(rows, 1, vocab, generator=gen)], dim=1)
    drafts = torch.multinomial(torch.softmax(draft_logits.reshape(-1, vocab), -1), 1, generator=gen).reshape(rows, l)
    real = _sentinel_rows(rows, l)
    drafts = drafts.masked_fill(torch.arange(l) >= real[:, None], -1)
    coins = torch.rand(rows, l, dtype=F64, generator=gen)
    finals = torch.rand(rows, dtype=F64, generator=gen)
    temps, top_k = torch.ones(rows), torch.full((rows,), NO_TOP_K_CUT)
    for cap in (None, 2):
        accepted, tokens = verify_explicit(iut, dspark_device, drafts, target, draft_logits, temps, top_k,
                                           coins, finals, cap=cap)
        for b in range(rows):
            n = int(real[b])
            exp_acc, exp_tokens, _ = oracle.replay_round(
                drafts[b, :n].tolist(), target[b, : n + 1].double().numpy(), draft_logits[b, :n].double().numpy(),
                1.0, False, coins[b, :n].tolist(), float(finals[b]), cap)
            got = tokens[b].tolist()
            assert (int(accepted[b]), got[: int(accepted[b]) + 1]) == (exp_acc, exp_tokens) and \
                got[exp_acc + 1:] == [-1] * (l - exp_acc), (
                f"{case.id} cap={cap}: row {b} with {n} real drafts {drafts[b].tolist()}: expected accepted {exp_acc}, "
                f"tokens {exp_tokens} then -1; got {int(accepted[b])}, {got}"
            )


SENTINEL_GREEDY = case("S5/degenerate/sentinel-drafts-greedy", "GreedyVerifier, rows with 0..l real drafts that "
                       "match the argmax, -1 after them (a -1 must not match anything): the argmax oracle of the real "
                       "drafts", ("S5.degenerate", "S5.greedy-verify"))


@pytest.mark.parametrize("case", [SENTINEL_GREEDY], ids=case_id)
def test_S5_sentinel_drafts_greedy(case, require, dspark_device, case_seed):
    iut = require(GreedyVerifier)
    gen, rows, l, vocab = _gen(case_seed), 100, 5, 12
    target = torch.randint(0, 3, (rows, l + 1, vocab), generator=gen).float()
    target[:, :, vocab - 1] = 9.0  # argmax V - 1 everywhere: a sentinel read as index -1 would match it
    real = _sentinel_rows(rows, l)
    drafts = torch.full((rows, l), vocab - 1).masked_fill(torch.arange(l) >= real[:, None], -1)
    for cap in (None, 3):
        accepted, tokens = (t.cpu() for t in iut.verify_greedy(drafts.to(dspark_device), target.to(dspark_device), cap))
        for b in range(rows):
            n = int(real[b])
            exp_acc, exp_tokens, _ = oracle.greedy_round(drafts[b, :n].tolist(), target[b, : n + 1].numpy(), cap)
            got = tokens[b].tolist()
            assert (int(accepted[b]), got[: exp_acc + 1]) == (exp_acc, exp_tokens) and got[exp_acc + 1:] == \
                [-1] * (l - exp_acc), (
                f"{case.id} cap={cap}: row {b} with {n} real drafts: expected accepted {exp_acc}, tokens {exp_tokens} "
                f"then -1; got {int(accepted[b])}, {got}"
            )


SENTINEL_GENERATOR = case("S5/degenerate/sentinel-drafts-generator", "ChainVerifier with a generator, rows with 0..l "
                          "real drafts (p > q at each), -1 after them: every real draft accepted, no sentinel "
                          "accepted or emitted, the bonus from the position after the real drafts", ("S5.degenerate",))


@pytest.mark.parametrize("case", [SENTINEL_GENERATOR], ids=case_id)
def test_S5_sentinel_drafts_generator(case, require, dspark_device, case_seed, case_generator):
    """Target logits equal the draft logits plus 1 at the drafted token, so p(x) > q(x) and
    ``u q(x) < p(x)`` for every u: the accepted count is the real-draft count whatever the
    coins. The bonus position masks a third of its vocabulary (-inf), the support check."""
    iut = require(ChainVerifier)
    gen, rows, l, vocab = _gen(case_seed), 250, 4, 8
    draft_logits = 2 * torch.randn(rows, l, vocab, generator=gen)
    drafts = torch.multinomial(torch.softmax(draft_logits.reshape(-1, vocab), -1), 1, generator=gen).reshape(rows, l)
    target = torch.cat([draft_logits, 2 * torch.randn(rows, 1, vocab, generator=gen)], dim=1)
    target[:, :l] += torch.nn.functional.one_hot(drafts, vocab).float()
    real = _sentinel_rows(rows, l)
    row_ids = torch.arange(rows)
    bonus = target[row_ids, real].clone()  # the position after the real drafts
    masked = torch.rand(rows, vocab, generator=gen) < 0.33
    masked[row_ids, bonus.argmax(-1)] = False
    target[row_ids, real] = bonus.masked_fill(masked, NEG)
    drafts = drafts.masked_fill(torch.arange(l) >= real[:, None], -1)
    accepted, tokens = (t.cpu() for t in iut.verify(
        *_to(dspark_device, drafts, target, draft_logits, torch.ones(rows), torch.full((rows,), NO_TOP_K_CUT)),
        generator=case_generator))
    assert torch.equal(accepted, real), (
        f"{case.id}: expected accepted = real-draft count {real[:10].tolist()}..., got {accepted[:10].tolist()}..."
    )
    slots = torch.arange(l + 1)
    prefix_ok = torch.where(slots[None, :l] < real[:, None], tokens[:, :l] == drafts, True).all(dim=1)
    pad_ok = torch.where(slots[None] > real[:, None], tokens == -1, True).all(dim=1)
    bad = ~(prefix_ok & pad_ok)
    assert not bool(bad.any()), f"{case.id}: rows {bad.nonzero().flatten()[:8].tolist()} are not '<real drafts>, " \
        f"<bonus>, -1...': e.g. {tokens[bad][:2].tolist()}"
    _assert_in_support(case.id, _emitted(accepted, tokens), tempered_softmax64(target[row_ids, real], 1.0))
