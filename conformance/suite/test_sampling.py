"""SPEC S3 step sampling: greedy rows, the declared greedy rule, the temperature clamp, the
law ``softmax(L / T)`` of the exponential race, tiled vocabularies, fresh noise, vocabulary
crop, zero-probability tokens and truncation.

Capabilities: ``StepSampler`` (fresh noise: statistical and exact-greedy cases),
``NoiseStepSampler`` (explicit noise: exact parity with a float64 oracle),
``TruncatedStepSampler`` (top-k / top-p / min-p). The oracles are float64 and share no code
with ``dspark_ref``: the race (:mod:`conformance.oracles.race_oracle`), the tempered law
(:mod:`conformance.oracles.laws`) and truncation (:mod:`conformance.oracles.truncation`).
Exact cases move the oracle's noise away from near-ties
(:func:`~conformance.oracles.race_oracle.separate`), so float32 rounding cannot flip a
winner. Exact edges: a one-token vocabulary, the noise's generator (same seed, same tokens), neutral truncation in
a two-row batch, ``min_p = 1`` keeping the mode.

Statistical cases draw all samples of one assertion by repeating one logits row in a batch
(chunked to ``_call_elements`` floats per call, tokens kept on the device until the last
call), with ``n`` from ``stats.sample_size_for_tv`` at the case's tier effect
(``tier_min_tv``: every statistical case here is in the GPU tier, ``gpu_tier``: TV 0.002
with ``--dspark-device cuda``, ``budget.DEFAULT_MIN_TV`` on CPU) unless the case says
otherwise.

To add a case: register it with ``case(...)`` next to its test (clauses from
``conformance.cases.SPEC_CLAUSES``, ``statistical=`` the number of ``stat_check`` calls it
makes) and add it to that test's parameter list.
"""

from __future__ import annotations

import math

import pytest
import torch

from conformance import stats
from conformance.boundary import deferred_checks
from conformance.budget import DEFAULT_MIN_TV, tier_of
from conformance.cases import case, case_id
from conformance.contract import NoiseStepSampler, StepSampler, TruncatedStepSampler
from conformance.inputs import NO_TOP_K_CUT, logit_rows
from conformance.oracles.laws import tempered_softmax64
from conformance.oracles.race_oracle import expected_tokens, greedy_by_rule, lowest_argmax, separate
from conformance.oracles.truncation import NEUTRAL, truncated_law
from conformance.seeds import derive_seed

TEMPERATURES = (0.3, 0.7, 1.0, 1.5, 2.0)
TILE_EDGE_VOCABS = (1023, 1024, 1025)  # both sides of a 1024-column tile
PRODUCTION_VOCABS = (129_280, 151_936)  # DeepSeek-V4, Qwen3
# A row with distinct probabilities far from every truncation cut-off used below.
EIGHT_PROBS = (0.30, 0.22, 0.16, 0.12, 0.09, 0.06, 0.03, 0.02)


def _inputs_generator(case_seed: int) -> torch.Generator:
    """CPU generator for test inputs, a stream separate from the IUT's ``case_generator``."""
    return torch.Generator().manual_seed(derive_seed(case_seed, "inputs"))


def _exp_noise(shape, generator: torch.Generator) -> torch.Tensor:
    return torch.empty(shape).exponential_(generator=generator)


def _call_elements(device: torch.device) -> int:
    """Logit floats per sampler call in statistical draws (memory of one call)."""
    return 1 << (29 if device.type == "cuda" else 22)


def _assert_ids_below(tokens: torch.Tensor, vocab: int, where: str) -> None:
    """On the tokens' device: one host read, more only to name the offending rows."""
    bad = (tokens < 0) | (tokens >= vocab)
    assert not bool(bad.any()), (
        f"{where}: token ids must lie in [0, {vocab}), got {tokens[bad][:8].tolist()} "
        f"at rows {bad.nonzero().flatten()[:8].tolist()}"
    )


def _assert_tokens(got: torch.Tensor, expected: torch.Tensor, rows: torch.Tensor, what: str) -> None:
    got = got.cpu()
    wrong = rows & (got != expected)
    assert not bool(wrong.any()), (
        f"{what}: {int(wrong.sum())} of {int(rows.sum())} rows differ, e.g. rows "
        f"{wrong.nonzero().flatten()[:8].tolist()}: got {got[wrong][:8].tolist()}, "
        f"expected {expected[wrong][:8].tolist()}"
    )


def _draw(sampler, row, temperature: float, top_k: int, vocab: int, n: int, generator, device):
    """``n`` tokens of one ``[V_pad]`` logits row through ``StepSampler`` (chunked calls on
    one set of input buffers), returned on ``device``: no host read until the last call."""
    per_call = min(n, max(1, _call_elements(device) // row.shape[-1]))
    logits = row.to(device).expand(per_call, -1).contiguous()
    temps = torch.full((per_call,), temperature, device=device)
    top_ks = torch.full((per_call,), top_k, dtype=torch.int64, device=device)
    out = []
    for start in range(0, n, per_call):
        rows = min(per_call, n - start)
        out.append(sampler.sample(logits[:rows], temps[:rows], top_ks[:rows], vocab, generator))
    tokens = torch.cat(out)
    _assert_ids_below(tokens, vocab, "StepSampler.sample")
    return tokens


def _probs_row(probs, generator: torch.Generator) -> torch.Tensor:
    """Logits ``log p`` of ``probs`` in a seeded order (the mode is rarely at index 0)."""
    order = torch.randperm(len(probs), generator=generator)
    return torch.tensor(probs, dtype=torch.float64)[order].log().float()


# --------------------------------------------------------------------------- law
LAW_CASES = [
    pytest.param(
        case(f"S3/law/{family}-T{t:g}", f"chi-square of the race vs float64 softmax(L/T), {family} row, T={t:g}",
             ("S3.law", "S3.exponential-race"), statistical=1),
        family, t, id=f"S3/law/{family}-T{t:g}",
    )
    for family in ("flat", "peaked", "near-tie")
    for t in TEMPERATURES
]


@pytest.mark.statistical
@pytest.mark.gpu_tier
@pytest.mark.parametrize("case, family, temperature", LAW_CASES)
def test_S3_law(case, family, temperature, require, dspark_device, case_seed, case_generator, stat_check,
                tier_min_tv):
    sampler = require(StepSampler)
    vocab = 8
    row = logit_rows(family, 1, vocab, _inputs_generator(case_seed))[0]
    probs = tempered_softmax64(row, temperature)
    n = stats.sample_size_for_tv(probs, min_tv=tier_min_tv)
    tokens = _draw(sampler, row, temperature, vocab, vocab, n, case_generator, dspark_device)
    stat_check(stats.goodness_of_fit(torch.bincount(tokens, minlength=vocab).cpu(), probs, name=case.id,
                                     min_tv=tier_min_tv, labels=[f"token {t}" for t in range(vocab)]))


# Noise of too few distinct values (Exp(1) held in bfloat16: about 2,000 values per million
# draws) ties two tokens' race keys; argmax then takes the lowest index (flat rows) or the
# larger probability (near-ties), a shift of TV 7.0e-4 on these rows (exact for the flat
# row: the quantised law summed over every bfloat16 value, any V). The GPU tier's TV 0.002
# cannot see it; FINE_MIN_TV = 5e-4 can, with n = 7.7e7 draws per row (0.6 to 2 s a case on
# an H100, results/calibration/gpu-tier/law-fine-h100.log), so these cases run on CUDA only.
FINE_MIN_TV = 5e-4
FINE_LAW_CASES = [
    pytest.param(
        case(f"S3/law-fine/{family}", f"chi-square of the race vs float64 softmax(L), {family} row of 8 tokens, at "
             f"min TV {FINE_MIN_TV:g}: noise of too few distinct values (bfloat16) ties keys", ("S3.law",
             "S3.exponential-race"), statistical=1),
        family, id=f"S3/law-fine/{family}", marks=pytest.mark.gpu,
    )
    for family in ("flat", "near-tie")
]


@pytest.mark.statistical
@pytest.mark.parametrize("case, family", FINE_LAW_CASES)
def test_S3_law_fine(case, family, require, dspark_device, case_seed, case_generator, stat_check):
    if dspark_device.type != "cuda":
        pytest.skip("gpu tier: a law at TV 5e-4 needs --dspark-device cuda")
    sampler = require(StepSampler)
    vocab = 8
    row = logit_rows(family, 1, vocab, _inputs_generator(case_seed))[0]
    probs = tempered_softmax64(row, 1.0)
    n = stats.sample_size_for_tv(probs, min_tv=FINE_MIN_TV)
    tokens = _draw(sampler, row, 1.0, vocab, vocab, n, case_generator, dspark_device)
    stat_check(stats.goodness_of_fit(torch.bincount(tokens, minlength=vocab).cpu(), probs, name=case.id,
                                     min_tv=FINE_MIN_TV))


RACE_CASES = [
    pytest.param(
        case(f"S3/race-exact/{family}", f"explicit noise: argmax p/E equals the float64 oracle, {family} rows, "
             "all five temperatures", ("S3.exponential-race",)),
        family, id=f"S3/race-exact/{family}",
    )
    for family in ("flat", "peaked", "near-tie", "random")
]


@pytest.mark.parametrize("case, family", RACE_CASES)
def test_S3_race_exact(case, family, require, dspark_device, dspark_adapter, case_seed):
    sampler = require(NoiseStepSampler)
    gen, vocab, per_t = _inputs_generator(case_seed), 16, 32
    logits = logit_rows(family, per_t * len(TEMPERATURES), vocab, gen)
    temps = torch.tensor(TEMPERATURES).repeat_interleave(per_t)
    top_k = torch.full_like(temps, vocab, dtype=torch.int64)
    noise = separate(logits, temps, _exp_noise(logits.shape, gen))
    got = sampler.sample_with_noise(*(x.to(dspark_device) for x in (logits, temps, top_k, noise)))
    expected = expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
    _assert_tokens(got, expected, torch.ones_like(temps, dtype=torch.bool), case.id)


# --------------------------------------------------------------------------- clamp
CLAMP_ARGMAX = case(
    "S3/clamp/zero-temperature-argmax",
    "T=0 and T=1e-7 on rows with top_k=V act as T=1e-5: argmax for logits 0.1 apart (exact)",
    ("S3.temperature-clamp", "S3.greedy"),
)
CLAMP_NOISE = case(
    "S3/clamp/noise-parity",
    "explicit noise, logits 5e-6 apart: T in {0, 1e-7, 1e-6} races at T=1e-5 (or is greedy by the rule)",
    ("S3.temperature-clamp", "S3.exponential-race"),
)


@pytest.mark.parametrize("case", [CLAMP_ARGMAX], ids=case_id)
def test_S3_clamp_argmax(case, require, dspark_device, case_seed, case_generator):
    sampler = require(StepSampler)
    gen, vocab, rows = _inputs_generator(case_seed), 16, 256
    # Values (k - 8) / 10: zero, negatives and positives, so an unclamped L / 0 gives NaN and inf.
    logits = torch.stack([torch.randperm(vocab, generator=gen) for _ in range(rows)]).sub(vocab // 2).float() / 10
    temps = torch.tensor([0.0, 1e-7]).repeat(rows // 2)
    top_k = torch.full((rows,), vocab, dtype=torch.int64)
    got = sampler.sample(logits.to(dspark_device), temps.to(dspark_device), top_k.to(dspark_device), vocab,
                         case_generator)
    _assert_tokens(got, lowest_argmax(logits), torch.ones(rows, dtype=torch.bool), case.id)


@pytest.mark.parametrize("case", [CLAMP_NOISE], ids=case_id)
def test_S3_clamp_noise(case, require, dspark_device, dspark_adapter, case_seed):
    sampler = require(NoiseStepSampler)
    gen, vocab, rows = _inputs_generator(case_seed), 8, 96
    # At T = 1e-5 these logits scale to 0, 0.5, ..., 3.5: the race is far from argmax.
    logits = torch.stack([torch.randperm(vocab, generator=gen) for _ in range(rows)]).float() * 5e-6
    temps = torch.tensor([0.0, 1e-7, 1e-6]).repeat(rows // 3)
    top_k = torch.full((rows,), vocab, dtype=torch.int64)
    noise = separate(logits, temps, _exp_noise(logits.shape, gen))
    got = sampler.sample_with_noise(*(x.to(dspark_device) for x in (logits, temps, top_k, noise)))
    expected = expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
    _assert_tokens(got, expected, torch.ones(rows, dtype=torch.bool), case.id)


# --------------------------------------------------------------------------- greedy
GREEDY_CASES = [
    case(f"S3/greedy/ties-{cap.__name__}", f"{cap.__name__}: greedy rows (top_k=1, T=0) take the lowest index "
         "among tied maxima, V=1025 (ties across the 1024 tile edge)", ("S3.greedy",))
    for cap in (StepSampler, NoiseStepSampler)
]


def _tied_rows(vocab: int, gen: torch.Generator) -> torch.Tensor:
    """``[64, vocab]`` rows whose maximum is tied: at random places, across the tile edge,
    everywhere (a flat row), and among -inf logits."""
    logits = 2 * torch.randn(64, vocab, generator=gen)
    for r in range(48):
        places = torch.randperm(vocab, generator=gen)[: 2 + r % 3]
        logits[r, places] = logits[r].max() + 1
    logits[48:56, 1023:1025] = logits[48:56].max() + 1
    logits[56:60] = 0.5
    logits[60:, :] = -math.inf
    logits[60:, [3, 700, 1024]] = 1.0
    return logits


@pytest.mark.parametrize("case", GREEDY_CASES, ids=case_id)
def test_S3_greedy_ties(case, require, dspark_device, case_seed, case_generator):
    gen, vocab = _inputs_generator(case_seed), 1025
    logits = _tied_rows(vocab, gen)
    rows = logits.shape[0]
    temps, top_k = torch.zeros(rows), torch.ones(rows, dtype=torch.int64)  # greedy under both rules
    args = (logits.to(dspark_device), temps.to(dspark_device), top_k.to(dspark_device))
    if case is GREEDY_CASES[0]:
        got = require(StepSampler).sample(*args, vocab, case_generator)
    else:
        got = require(NoiseStepSampler).sample_with_noise(*args, _exp_noise(logits.shape, gen).to(dspark_device))
    _assert_tokens(got, lowest_argmax(logits), torch.ones(rows, dtype=torch.bool), case.id)


NEAR_TIE_CASES = [
    case(f"S3/greedy/near-tie-hot-{cap.__name__}", f"{cap.__name__}: greedy rows at a large temperature "
         "(T up to 1e3 where the declared rule allows it) take argmax L, not argmax softmax(L/T): "
         "maxima 2^-20 apart must not collapse to the lowest index", ("S3.greedy", "S3.greedy-rule"))
    for cap in (StepSampler, NoiseStepSampler)
]


@pytest.mark.parametrize("case", NEAR_TIE_CASES, ids=case_id)
def test_S3_greedy_near_tie_at_high_temperature(case, require, dspark_adapter, dspark_device, case_seed,
                                               case_generator):
    gen, vocab, rows = _inputs_generator(case_seed), 64, 48
    # The planted pair is the row maximum by construction (background clamped below it), so
    # the premise holds on every base seed.
    logits = torch.randn(rows, vocab, generator=gen).clamp(max=3.0)
    top = torch.randint(1, vocab, (rows,), generator=gen)
    logits[torch.arange(rows), top - 1] = 4.0
    logits[torch.arange(rows), top] = 4.0 + 2.0**-20  # distinct in float32, one ulp-scale apart at T = 1e3
    if dspark_adapter.conventions.greedy_rule == "top_k":
        temps = torch.tensor([10.0, 100.0, 1000.0]).repeat(rows // 3)
    else:
        temps = torch.zeros(rows)
    top_k = torch.ones(rows, dtype=torch.int64)
    args = (logits.to(dspark_device), temps.to(dspark_device), top_k.to(dspark_device))
    if case is NEAR_TIE_CASES[0]:
        got = require(StepSampler).sample(*args, vocab, case_generator)
    else:
        got = require(NoiseStepSampler).sample_with_noise(*args, _exp_noise(logits.shape, gen).to(dspark_device))
    _assert_tokens(got, top, torch.ones(rows, dtype=torch.bool), case.id)


# --------------------------------------------------------------------------- greedy rule
MIXED_STEP = case(
    "S3/greedy-rule/mixed-batch",
    "interleaved rows: (top_k=1, T=1), (top_k=V, T=1e-6) where the rules disagree, (1, 0), (V, 1): "
    "greedy rows of the declared rule exact argmax; chi-square of the T=1 rows and of the "
    "disagreeing rows the rule samples",
    ("S3.greedy-rule", "S3.greedy", "S3.law", "S3.temperature-clamp"), statistical=2,
)
MIXED_NOISE = case(
    "S3/greedy-rule/mixed-batch-noise",
    "explicit noise, the same four row kinds: every row equals the oracle of the declared rule",
    ("S3.greedy-rule", "S3.greedy", "S3.temperature-clamp"),
)
# Row kinds (top_k, T): greedy for SGLang only, greedy for vLLM only, greedy for both, neither.
KINDS = ((1, 1.0), (None, 1e-6), (1, 0.0), (None, 1.0))


def _mixed_batch(vocab: int, per_kind: int):
    """Kinds interleaved row by row; ``None`` top_k means ``vocab`` (no greedy, no cut)."""
    kind = torch.arange(len(KINDS) * per_kind) % len(KINDS)
    top_k = torch.tensor([vocab if k is None else k for k, _ in KINDS])[kind]
    temps = torch.tensor([t for _, t in KINDS])[kind]
    return kind, temps, top_k


def _fine_row(vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Distinct logits 5e-6 apart: near-uniform at T=1, spread (0..3.5) at T=1e-5."""
    return torch.randperm(vocab, generator=gen).float() * 5e-6


@pytest.mark.statistical
@pytest.mark.gpu_tier
@pytest.mark.parametrize("case", [MIXED_STEP], ids=case_id)
def test_S3_greedy_rule_mixed(case, require, dspark_device, dspark_adapter, case_seed, case_generator, stat_check,
                              tier_min_tv):
    sampler = require(StepSampler)
    rule, vocab = dspark_adapter.conventions.greedy_rule, 8
    row = _fine_row(vocab, _inputs_generator(case_seed))
    n = stats.sample_size_for_tv(vocab, min_tv=tier_min_tv)
    kind, temps, top_k = _mixed_batch(vocab, n)
    logits = row.expand(len(kind), -1).contiguous()
    got = sampler.sample(logits.to(dspark_device), temps.to(dspark_device), top_k.to(dspark_device), vocab,
                         case_generator).cpu()
    _assert_ids_below(got, vocab, case.id)
    greedy = greedy_by_rule(rule, temps, top_k)
    _assert_tokens(got, lowest_argmax(logits[:1]).expand(len(kind)), greedy, f"{case.id}: greedy rows ({rule} rule)")
    disagree = 1 if rule == "top_k" else 0  # the kind this rule samples and the other makes greedy
    laws = (("both-sample-T1", 3), ("rule-samples", disagree))
    for detail, k in laws:
        counts = torch.bincount(got[kind == k], minlength=vocab)
        stat_check(stats.goodness_of_fit(counts, tempered_softmax64(row, KINDS[k][1]), name=f"{case.id}/{detail}",
                                         min_tv=tier_min_tv))


@pytest.mark.parametrize("case", [MIXED_NOISE], ids=case_id)
def test_S3_greedy_rule_mixed_noise(case, require, dspark_device, dspark_adapter, case_seed):
    sampler = require(NoiseStepSampler)
    gen, vocab = _inputs_generator(case_seed), 8
    kind, temps, top_k = _mixed_batch(vocab, 32)
    logits = torch.stack([_fine_row(vocab, gen) for _ in kind])
    noise = separate(logits, temps, _exp_noise(logits.shape, gen))
    got = sampler.sample_with_noise(*(x.to(dspark_device) for x in (logits, temps, top_k, noise)))
    expected = expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
    _assert_tokens(got, expected, torch.ones(len(kind), dtype=torch.bool), case.id)


# --------------------------------------------------------------------------- tiles
TILED_CASES = [
    pytest.param(
        case(f"S3/tiled/exact-V{v}", f"explicit noise, V={v}: race and greedy rows equal the float64 untiled "
             "oracle, incl. a row whose best unrescaled tile key sits in another tile than the winner",
             ("S3.tiled", "S3.exponential-race", "S3.greedy")),
        v, id=f"S3/tiled/exact-V{v}",
    )
    for v in TILE_EDGE_VOCABS + PRODUCTION_VOCABS
]


def _tile_rows(vocab: int, gen: torch.Generator):
    """Eight rows of N(0, 2^2) logits with traps for tile-combine faults."""
    logits = 2 * torch.randn(8, vocab, generator=gen)
    noise = _exp_noise(logits.shape, gen)
    temps = torch.tensor([1.0, 0.7, 1.5, 1.0, 0.3, 2.0, 0.0, 1.0])
    top_k = torch.tensor([vocab] * 6 + [1, 1])
    # Row 0: the largest logit (first tile) carries heavy noise, so the winner is elsewhere.
    logits[0, 7] = logits[0].max() + 3
    noise[0, 7] = 50.0
    # Row 3: the last token is very unlikely but has tiny noise: alone in its tile at
    # V = 1025, its key is the largest only if tile keys are compared without the rescale.
    logits[3, -1] = logits[3].min() - 10
    noise[3, -1] = 1e-4
    # Row 4: peaked in the last tile. Rows 6-7: greedy rows tied across a tile edge.
    logits[4, -2] = logits[4].max() + 2
    edge = min(1023, vocab - 2)
    logits[6:, [edge, edge + 1]] = logits[6:].max() + 1
    return logits, temps, top_k, separate(logits, temps, noise)


@pytest.mark.parametrize("case, vocab", TILED_CASES)
def test_S3_tiled_exact(case, vocab, require, dspark_device, dspark_adapter, case_seed):
    sampler = require(NoiseStepSampler)
    logits, temps, top_k, noise = _tile_rows(vocab, _inputs_generator(case_seed))
    got = sampler.sample_with_noise(*(x.to(dspark_device) for x in (logits, temps, top_k, noise)))
    expected = expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
    _assert_tokens(got, expected, torch.ones(len(temps), dtype=torch.bool), case.id)


# Tile-edge laws: four tokens carry the mass, placed at 0, V/2 and the last two columns (one
# of them alone in its tile at V = 1025); every other logit is 30 below the smallest of them.
# A tile fault (a tile dropped, its noise not loaded, keys not rescaled) moves at least the
# mass of one token (>= 0.1), so on CPU min_tv = 0.05 (n ~ 7k rows of V floats) suffices;
# the production vocabularies need CUDA; on CUDA every vocabulary runs at the GPU tier's
# effect (tier_min_tv).
TILE_EDGE_MIN_TV = 0.05
TILE_LAW_CASES = [
    pytest.param(
        case(f"S3/tiled/law-V{v}", f"chi-square of StepSampler at V={v}: law on 4 tokens at 0, V/2, V-2, V-1 "
             f"plus a 'rest' bin (min TV {tv:g})", ("S3.tiled", "S3.law"), statistical=1),
        v, tv, id=f"S3/tiled/law-V{v}", marks=marks,
    )
    for vs, tv, marks in (
        (TILE_EDGE_VOCABS, TILE_EDGE_MIN_TV, ()),
        (PRODUCTION_VOCABS, DEFAULT_MIN_TV, pytest.mark.gpu),
    )
    for v in vs
]


@pytest.mark.statistical
@pytest.mark.gpu_tier
@pytest.mark.parametrize("case, vocab, min_tv", TILE_LAW_CASES)
def test_S3_tiled_law(case, vocab, min_tv, require, dspark_device, case_seed, case_generator, stat_check, request,
                      tier_min_tv):
    if request.node.get_closest_marker("gpu") and dspark_device.type != "cuda":
        pytest.skip("gpu tier: production vocabulary needs --dspark-device cuda")
    if tier_of(dspark_device.type) == "gpu":
        min_tv = tier_min_tv
    sampler = require(StepSampler)
    places = torch.tensor([0, vocab // 2, vocab - 2, vocab - 1])
    mass = _probs_row((0.4, 0.3, 0.2, 0.1), _inputs_generator(case_seed))
    row = torch.full((vocab,), float(mass.min()) - 30)
    row[places] = mass
    probs = tempered_softmax64(row, 1.0)
    binned = torch.cat([probs[places], (1 - probs[places].sum()).reshape(1)])
    n = stats.sample_size_for_tv(len(binned), min_tv=min_tv)
    tokens = _draw(sampler, row, 1.0, vocab, vocab, n, case_generator, dspark_device)
    hits = torch.bincount(tokens, minlength=vocab)[places.to(tokens.device)].cpu()
    counts = torch.cat([hits, (n - hits.sum()).reshape(1)])
    stat_check(stats.goodness_of_fit(counts, binned, name=case.id, min_tv=min_tv))


# --------------------------------------------------------------------------- vocabulary
PADDED_CASES = [
    pytest.param(
        case(f"S3/vocab-crop/padded-V{v}", f"V={v} padded by 64 columns holding the LARGEST logits: ids < V, "
             "greedy rows argmax of the cropped row (exact)", ("S3.vocab-crop", "S3.greedy")),
        v, id=f"S3/vocab-crop/padded-V{v}",
    )
    for v in (8, 1025) + PRODUCTION_VOCABS
]


@pytest.mark.parametrize("case, vocab", PADDED_CASES)
def test_S3_padded_vocab(case, vocab, require, dspark_device, case_seed, case_generator):
    sampler = require(StepSampler)
    rows = 16
    logits = logit_rows("random", rows, vocab + 64, _inputs_generator(case_seed))
    logits[:, vocab:] = logits[:, :vocab].max() + 20
    temps = torch.tensor([1.0, 0.0]).repeat(rows // 2)
    top_k = torch.tensor([vocab, 1]).repeat(rows // 2)  # sampling, greedy (under both rules)
    got = sampler.sample(logits.to(dspark_device), temps.to(dspark_device), top_k.to(dspark_device), vocab,
                         case_generator)
    _assert_ids_below(got, vocab, case.id)
    _assert_tokens(got, lowest_argmax(logits[:, :vocab]), top_k == 1, case.id)


ZERO_CASES = [
    case("S3/vocab-crop/neg-inf-never-drawn", "StepSampler, 12 of 16 logits -inf (incl. both ends), 4096 rows at "
         "T in {0.3, 1, 2, 50} and greedy rows: no -inf token ever returned (exact)", ("S3.vocab-crop", "S3.greedy")),
    case("S3/vocab-crop/neg-inf-zero-noise", "explicit noise exactly 0 (or 1e-30) on the -inf tokens: 0/0 must "
         "not win; every row equals the float64 oracle", ("S3.vocab-crop", "S3.exponential-race")),
]


def _sparse_rows(rows: int, gen: torch.Generator):
    """``[rows, 16]`` logits with 4 finite tokens (random places inside) and -inf elsewhere."""
    logits = torch.full((rows, 16), -math.inf)
    for r in range(rows):
        places = 1 + torch.randperm(14, generator=gen)[:4]
        logits[r, places] = 3 * torch.randn(4, generator=gen)
    temps = torch.tensor([0.3, 1.0, 2.0, 50.0, 0.0]).repeat(rows // 5)
    top_k = torch.tensor([16, 16, 16, 16, 1]).repeat(rows // 5)
    return logits, temps, top_k


@pytest.mark.parametrize("case", ZERO_CASES, ids=case_id)
def test_S3_zero_probability(case, require, dspark_device, dspark_adapter, case_seed, case_generator):
    gen = _inputs_generator(case_seed)
    if case is ZERO_CASES[0]:
        sampler = require(StepSampler)
        logits, temps, top_k = _sparse_rows(4096 // 16 * 5, gen)
        logits = logits.repeat(16, 1)
        temps, top_k = temps.repeat(16), top_k.repeat(16)
        got = sampler.sample(logits.to(dspark_device), temps.to(dspark_device), top_k.to(dspark_device), 16,
                             case_generator).cpu()
        _assert_ids_below(got, 16, case.id)
        drawn = logits.gather(1, got[:, None]).squeeze(1)
        assert bool((drawn > -math.inf).all()), (
            f"{case.id}: -inf tokens drawn at rows {(drawn == -math.inf).nonzero().flatten()[:8].tolist()}"
        )
        greedy = greedy_by_rule(dspark_adapter.conventions.greedy_rule, temps, top_k)
        _assert_tokens(got, lowest_argmax(logits), greedy, f"{case.id}: greedy rows")
        return
    sampler = require(NoiseStepSampler)
    logits, temps, top_k = _sparse_rows(200, gen)
    noise = _exp_noise(logits.shape, gen)
    dead = logits == -math.inf
    noise[dead] = torch.where(torch.rand(int(dead.sum()), generator=gen) < 0.5, 0.0, 1e-30)
    noise = separate(logits, temps, noise)
    got = sampler.sample_with_noise(*(x.to(dspark_device) for x in (logits, temps, top_k, noise)))
    expected = expected_tokens(dspark_adapter.conventions.greedy_rule, logits, temps, top_k, noise)
    _assert_tokens(got, expected, torch.ones(len(temps), dtype=torch.bool), case.id)


# --------------------------------------------------------------------------- fresh noise
FRESH_CASES = [
    case("S3/fresh-noise/row-pairs", "one call, one row repeated: chi-square of (row 2i, row 2i+1) pairs vs "
         "the product law p x p (16 bins); shared noise across rows puts every pair on the diagonal",
         ("S3.fresh-noise",), statistical=1),
    case("S3/fresh-noise/call-pairs", "two successive calls with one generator: chi-square of (call 1, call 2) "
         "pairs per row vs p x p; noise frozen across calls repeats call 1", ("S3.fresh-noise",), statistical=1),
]


@pytest.mark.statistical
@pytest.mark.gpu_tier
@pytest.mark.parametrize("case", FRESH_CASES, ids=case_id)
def test_S3_fresh_noise(case, require, dspark_device, case_seed, case_generator, stat_check, tier_min_tv):
    sampler = require(StepSampler)
    vocab = 4
    row = _probs_row((0.4, 0.3, 0.2, 0.1), _inputs_generator(case_seed))
    probs = tempered_softmax64(row, 1.0)
    joint = torch.outer(probs, probs).flatten()
    n = stats.sample_size_for_tv(joint, min_tv=tier_min_tv)
    if case is FRESH_CASES[0]:
        tokens = _draw(sampler, row, 1.0, vocab, vocab, 2 * n, case_generator, dspark_device)
        first, second = tokens[0::2], tokens[1::2]
    else:
        first, second = (_draw(sampler, row, 1.0, vocab, vocab, n, case_generator, dspark_device) for _ in range(2))
    counts = torch.bincount(first * vocab + second, minlength=vocab * vocab).cpu()
    stat_check(stats.goodness_of_fit(counts, joint, name=case.id, min_tv=tier_min_tv))


# --------------------------------------------------------------------------- truncation
TRUNCATION_CASES = [
    pytest.param(
        case(f"S3/truncation/{name}{suffix}", f"chi-square vs the float64 renormalised truncated softmax, "
             f"{name}={value:g}, T={t:g} (the set taken on the tempered law); truncated tokens never drawn",
             ("S3.truncation",), statistical=1),
        name, value, t, id=f"S3/truncation/{name}{suffix}",
    )
    for name, value, t, suffix in (("top-k", 2, 0.7, ""), ("top-p", 0.7, 1.0, ""), ("min-p", 0.5, 1.0, ""),
                                   ("top-p", 0.6, 0.5, "-T0.5"), ("min-p", 0.3, 2.0, "-T2.0"))
]


def _truncated64(probs: torch.Tensor, name: str, value: float, ties: str = "all") -> torch.Tensor:
    """float64 oracle of the kept set, renormalised (cut-offs of EIGHT_PROBS are far from ties)."""
    params = NEUTRAL | {name.replace("-", "_"): value}
    return truncated_law(probs, params["top_k"], params["top_p"], params["min_p"], ties)


def _draw_truncated(sampler, row, temperature, cut: dict, n: int, generator, device) -> torch.Tensor:
    tokens = sampler.sample_truncated(
        row.to(device).expand(n, -1).contiguous(),
        torch.full((n,), temperature, device=device),
        torch.full((n,), int(cut["top_k"]), dtype=torch.int64, device=device),
        torch.full((n,), float(cut["top_p"]), device=device),
        torch.full((n,), float(cut["min_p"]), device=device),
        generator,
    )
    return tokens


@pytest.mark.statistical
@pytest.mark.gpu_tier
@pytest.mark.parametrize("case, name, value, temperature", TRUNCATION_CASES)
def test_S3_truncation(case, name, value, temperature, require, dspark_device, case_seed, case_generator, stat_check,
                       tier_min_tv):
    sampler = require(TruncatedStepSampler)
    vocab = len(EIGHT_PROBS)
    row = _probs_row(EIGHT_PROBS, _inputs_generator(case_seed))
    expected = _truncated64(tempered_softmax64(row, temperature), name, value)
    n = stats.sample_size_for_tv(expected, min_tv=tier_min_tv)
    cut = NEUTRAL | {"top_k": vocab, name.replace("-", "_"): value}
    tokens = _draw_truncated(sampler, row, temperature, cut, n, case_generator, dspark_device)
    _assert_ids_below(tokens, vocab, case.id)
    stat_check(stats.goodness_of_fit(torch.bincount(tokens, minlength=vocab).cpu(), expected, name=case.id,
                                     min_tv=tier_min_tv))


# Twelve tokens tie with the 3rd probability; the rule keeps all 12 or the lowest 2 of them
# (a cut in sort or topk order keeps others: SGLang F9).
TIED_AT_CUT = (2.0, 2.0) + (1.0,) * 12 + (0.0, -1.0)
TOP_K_TIE = case("S3/top-k-ties/k3-of-12-tied", "top_k = 3 with twelve tokens tied at the 3rd value, T = 0.8: the "
                 "law is the renormalised set the declared tie rule keeps (all tied, or the lowest indices)",
                 ("S3.top-k-ties",), statistical=1)


@pytest.mark.statistical
@pytest.mark.gpu_tier
@pytest.mark.parametrize("case", [TOP_K_TIE], ids=case_id)
def test_S3_top_k_ties_follow_the_declared_rule(case, require, dspark_adapter, dspark_device, case_generator,
                                                stat_check, tier_min_tv):
    sampler = require(TruncatedStepSampler)
    row, temperature = torch.tensor(TIED_AT_CUT), 0.8
    expected = truncated_law(tempered_softmax64(row, temperature), 3, 1.0, 0.0, dspark_adapter.conventions.top_k_ties)
    n = stats.sample_size_for_tv(expected, min_tv=tier_min_tv)
    tokens = _draw_truncated(sampler, row, temperature, NEUTRAL | {"top_k": 3}, n, case_generator, dspark_device)
    _assert_ids_below(tokens, len(TIED_AT_CUT), case.id)
    stat_check(stats.goodness_of_fit(torch.bincount(tokens, minlength=len(TIED_AT_CUT)).cpu(), expected,
                                     name=case.id, min_tv=tier_min_tv))


# --------------------------------------------------------------------------- truncation: per-row parameters (issue 17)
# Every case above draws one (T, cut) for the whole batch. Here the rows of one batch are
# interleaved over three requests, each at a temperature other than 1 (the cut-offs are
# those of the cases above, far from ties): a cut or a temperature taken from one row for
# the whole batch moves the other groups' laws.
MIXED_TRUNCATION_GROUPS = (("top-p", 0.6, 0.5), ("min-p", 0.3, 2.0), ("top-k", 3, 1.6))
MIXED_TRUNCATION = case(
    "S3/truncation/mixed-rows", "rows of one batch interleaved over top-p 0.6 at T = 0.5, min-p 0.3 at T = 2.0 and "
    "top-k 3 at T = 1.6: each group follows its own renormalised truncated softmax", ("S3.truncation",),
    statistical=len(MIXED_TRUNCATION_GROUPS))


@pytest.mark.statistical
@pytest.mark.parametrize("case", [MIXED_TRUNCATION], ids=case_id)
def test_S3_truncation_parameters_differ_by_row_in_one_batch(case, require, dspark_device, case_seed, case_generator,
                                                             stat_check, tier_min_tv):
    sampler = require(TruncatedStepSampler)
    vocab, groups = len(EIGHT_PROBS), len(MIXED_TRUNCATION_GROUPS)
    row = _probs_row(EIGHT_PROBS, _inputs_generator(case_seed))
    laws = [_truncated64(tempered_softmax64(row, t), name, value) for name, value, t in MIXED_TRUNCATION_GROUPS]
    n = max(stats.sample_size_for_tv(law, min_tv=tier_min_tv) for law in laws)
    cuts = [NEUTRAL | {"top_k": vocab, name.replace("-", "_"): value} for name, value, _ in MIXED_TRUNCATION_GROUPS]
    group = torch.arange(n * groups) % groups  # row r belongs to group r % 3

    def per_row(values, dtype):
        return torch.tensor(values, dtype=dtype)[group].to(dspark_device)

    tokens = sampler.sample_truncated(
        row.to(dspark_device).expand(n * groups, -1).contiguous(),
        per_row([t for *_, t in MIXED_TRUNCATION_GROUPS], torch.float32),
        per_row([int(c["top_k"]) for c in cuts], torch.int64),
        per_row([float(c["top_p"]) for c in cuts], torch.float32),
        per_row([float(c["min_p"]) for c in cuts], torch.float32),
        case_generator,
    ).cpu()
    _assert_ids_below(tokens, vocab, case.id)
    for g, ((name, value, t), law) in enumerate(zip(MIXED_TRUNCATION_GROUPS, laws)):
        stat_check(stats.goodness_of_fit(torch.bincount(tokens[g::groups], minlength=vocab), law,
                                         name=f"{case.id}/{name}{value:g}-T{t:g}", min_tv=tier_min_tv))


# --------------------------------------------------------------------------- smallest sizes, generator
ONE_TOKEN_CASES = {
    case(f"S3/edge/one-token-vocab-{cap.__name__}", "a one-token vocabulary (V = 1): greedy and sampling rows "
         "draw token 0 (no error)", ["S3.greedy", "S3.law"]): cap
    for cap in (StepSampler, NoiseStepSampler)
}


@pytest.mark.parametrize("case", ONE_TOKEN_CASES, ids=case_id)
def test_S3_one_token_vocabulary(case, require, dspark_device, case_seed, case_generator):
    capability = ONE_TOKEN_CASES[case]
    sampler = require(capability)
    gen = torch.Generator().manual_seed(case_seed)
    logits = torch.randn(4, 1, generator=gen)
    temps = torch.tensor([0.0, 1.0, 0.7, 2.0])
    top_k = torch.tensor([1, NO_TOP_K_CUT, NO_TOP_K_CUT, NO_TOP_K_CUT])
    args = [t.to(dspark_device) for t in (logits, temps, top_k)]
    if capability is NoiseStepSampler:
        tokens = sampler.sample_with_noise(*args, torch.ones(4, 1, device=dspark_device))
    else:
        tokens = sampler.sample(*args, 1, case_generator)
    assert tokens.cpu().tolist() == [0, 0, 0, 0], f"{case.id}: V = 1 drew {tokens.tolist()}, not token 0"


SEEDED_STEP = case("S3/seeded/same-generator-same-tokens", "two calls with generators of one seed (the global "
                   "RNG moved in between) draw the same tokens; another seed other tokens", ["S3.fresh-noise"])
SEEDED_ROWS, SEEDED_VOCAB = 64, 32


@pytest.mark.parametrize("case", [SEEDED_STEP], ids=case_id)
def test_S3_noise_comes_from_the_generator(case, require, dspark_device, case_seed):
    """The contract: fresh noise from ``generator``. Two independent draws agree on every row
    with probability ``prod_rows sum_x p(x)^2 <= prod_rows max_x p(x)``, required below 1e-9."""
    sampler = require(StepSampler)
    gen = torch.Generator().manual_seed(case_seed)
    logits = torch.randn(SEEDED_ROWS, SEEDED_VOCAB, generator=gen)
    temps, top_k = torch.ones(SEEDED_ROWS), torch.full((SEEDED_ROWS,), NO_TOP_K_CUT)
    seed = derive_seed(case_seed, "step-generator")

    def draw(step_seed: int, global_seed: int) -> torch.Tensor:
        torch.manual_seed(global_seed)
        generator = torch.Generator(device=dspark_device).manual_seed(step_seed)
        args = [t.to(dspark_device) for t in (logits, temps, top_k)]
        return sampler.sample(*args, SEEDED_VOCAB, generator).cpu()

    first, again, other = draw(seed, 1), draw(seed, 2), draw(seed + 1, 1)
    assert torch.equal(first, again), (
        f"{case.id}: generators of seed {seed} drew different tokens in rows {(first != again).nonzero().flatten().tolist()[:8]} "
        "(noise from the global RNG?)"
    )
    coincide = float(tempered_softmax64(logits, 1.0).max(dim=-1).values.prod())
    assert coincide <= 1e-9, f"{case.id}: test design: independent draws coincide with probability {coincide:.3g}"
    assert not torch.equal(first, other), f"{case.id}: seeds {seed} and {seed + 1} drew the same tokens"


# --------------------------------------------------------------------------- truncation: exact edges
FEW_ROWS = case("S3/truncation/few-rows-neutral", "two rows, V = 8, distinct near-flat logits, neutral cuts (top_k "
                "= V, top_p = 1, min_p = 0), 300 calls: every token is drawn in every row (nothing truncated)",
                ["S3.truncation"])
FEW_ROWS_CALLS, FEW_ROWS_VOCAB = 300, 8


@pytest.mark.parametrize("case", [FEW_ROWS], ids=case_id)
def test_S3_neutral_truncation_cuts_nothing_in_a_small_batch(case, require, dspark_device, case_generator):
    """Distinct logits (0 to 0.35), so a cut at any width below V removes tokens. A correct
    sampler misses some (row, token) in every call with probability at most
    ``sum_{rows, x} (1 - p(x))^calls``, computed in float64 and required below 1e-9."""
    sampler = require(TruncatedStepSampler)
    rows, vocab = 2, FEW_ROWS_VOCAB
    logits = torch.linspace(0.0, 0.35, vocab).repeat(rows, 1)
    miss = float(((1 - tempered_softmax64(logits, 1.0)) ** FEW_ROWS_CALLS).sum())
    assert miss <= 1e-9, f"{case.id}: test design: a correct sampler misses a token with probability {miss:.3g}"
    args = [logits, torch.ones(rows), torch.full((rows,), vocab), torch.ones(rows), torch.zeros(rows)]
    args = [t.to(dspark_device) for t in args]
    with deferred_checks():  # the tokens stay on the device, and the boundary's checks are read back in batches
        tokens = torch.stack([sampler.sample_truncated(*args, case_generator) for _ in range(FEW_ROWS_CALLS)]).cpu()
    seen = torch.zeros(rows, vocab, dtype=torch.bool)
    seen[torch.arange(rows).expand_as(tokens), tokens] = True
    missing = (~seen).nonzero().tolist()
    assert not missing, (
        f"{case.id}: (row, token) never drawn in {FEW_ROWS_CALLS} calls with neutral cuts: {missing} (a cut at the "
        f"batch size instead of V?; probability {miss:.3g} for a correct sampler)"
    )


MIN_P_ONE = case("S3/truncation/min-p-1-keeps-the-mode", "min_p = 1: the min-p set is {x : p(x) >= max p}, the mode: "
                 "every draw is the row's argmax", ["S3.truncation"])


@pytest.mark.parametrize("case", [MIN_P_ONE], ids=case_id)
def test_S3_min_p_one_keeps_the_mode(case, require, dspark_device, case_seed, case_generator):
    sampler = require(TruncatedStepSampler)
    gen = torch.Generator().manual_seed(case_seed)
    rows, vocab = 16, 12
    logits = torch.randn(rows, vocab, generator=gen) + 0.5 * torch.arange(vocab).flip(0)[torch.randperm(vocab, generator=gen)]
    args = [logits, torch.ones(rows), torch.full((rows,), vocab), torch.ones(rows), torch.ones(rows)]
    tokens = sampler.sample_truncated(*[t.to(dspark_device) for t in args], case_generator).cpu()
    expected = lowest_argmax(logits)
    assert torch.equal(tokens, expected), (
        f"{case.id}: min_p = 1 must keep only the mode: drew {tokens.tolist()}, argmax {expected.tolist()}"
    )
