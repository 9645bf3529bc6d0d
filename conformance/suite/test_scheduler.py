"""Conformance tests for SPEC S8: the hardware-aware prefix scheduler (paper Algorithm 1).

Covers: the IUT's lengths against an oracle of Algorithm 1 in plain Python from the paper's
text (:mod:`conformance.oracles.prefix_schedule`), on generated cases (R in 1..8,
gamma in 1..7, confidences with ties and zeros, SPS tables decaying smoothly or jagged);
ties admitted in prefix order; a tie in Theta is not an improvement; the early stop; and
losslessness on the paper's Appendix A construction, exactly (enumeration with fractions)
and by sampling the process through the IUT. Everything reaches the implementation through
:class:`~conformance.contract.PrefixScheduler`.

The production variant (SPEC S8's last paragraph, :class:`~conformance.contract.ProductionScheduler`)
is checked against the exact oracle of :mod:`conformance.oracles.production_schedule`:
the budget is a brute-force argmax of ``(R + admitted stale survivals) / cost(B)``, filled with
the highest stale survivals, prefixes only, within per-request minimum and maximum lengths
(the current block's confidences passed equal to the stale ones there, so a scheduler that
ranks by either is judged on its budget and fill alone); and non-anticipation: changing the
current block's confidences, those beyond each admitted cut, or another request's, moves no
admitted prefix.

Exactness: generated confidences are multiples of 1/16 (1/2 for the Theta-tie family) and
SPS entries multiples of 1/4096, so every survival, tau and Theta below is exact in float64
(under 50 significant bits) whatever order an implementation sums in; the Theta-tie family
is exact in float32 too. SPEC S8 orders ties only within a request (``(r, j-1)`` before
``(r, j)``), so the check accepts any order of tied candidates across requests: the IUT must
admit as many draft tokens as Algorithm 1, forming a top set of the candidates. Edges: an
empty batch (R = 0) schedules nothing; an SPS table as long as the admission path can reach
(``R + #{a > 0}``) is enough.

To add a case: add ``case(...): builder`` to the dict of its family, where ``builder(rng)``
returns one instance ``(confidences as lists, SPS table)`` from a ``random.Random``.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch

from conformance import stats
from conformance.boundary import deferred_checks
from conformance.cases import case, case_id
from conformance.contract import PrefixScheduler, ProductionScheduler
from conformance.oracles import production_schedule as production
from conformance.oracles.prefix_schedule import algorithm_1, candidate_path, check_against_oracle, survival

INSTANCES = 200
SPS_QUANTUM = 4096
SIXTEENTHS = [k / 16 for k in range(17)] + [0.0, 1.0] * 3  # extra zeros and ones: ties
POSITIVE_SIXTEENTHS = [k / 16 for k in range(1, 17)]
HALVES = [0.0, 0.5, 1.0, 1.0]
APPENDIX_A_SPS = [1.0, 0.5, 0.45]


# ----------------------------------------------------------------------------- generated instances
def _quantized(value: float) -> float:
    return max(1, round(value * SPS_QUANTUM)) / SPS_QUANTUM


def _smooth_sps(rng: random.Random, size: int) -> list[float]:
    """Smoothly decaying SPS: exponential decay or a roofline knee ``min(1, b0 / B)^p``."""
    if rng.random() < 0.5:
        rate = rng.uniform(0.01, 0.4)
        return [_quantized(math.exp(-rate * b)) for b in range(size)]
    knee, power = rng.uniform(1.0, size), rng.choice([0.5, 1.0, 1.5])
    return [_quantized(min(1.0, knee / (b + 1)) ** power) for b in range(size)]


def _jagged_sps(rng: random.Random, size: int) -> list[float]:
    """Jagged SPS: plateaus, cliffs (x0.5..0.9) and bumps (x1..1.25), capped at 2."""
    value, table = 1.0, []
    for _ in range(size):
        table.append(_quantized(value))
        u = rng.random()
        step = rng.uniform(0.5, 0.9) if u < 0.25 else rng.uniform(1.0, 1.25) if u < 0.4 else rng.uniform(0.97, 1.0)
        value = min(2.0, value * step)
    return table


def _confidences(rng: random.Random, rows: int, gamma: int, values: list[float]) -> list[list[float]]:
    return [[rng.choice(values) for _ in range(gamma)] for _ in range(rows)]


def _taus(conf) -> tuple[list[tuple[int, int]], list[float]]:
    """The admission path and ``tau`` after admitting 0, 1, ... of its candidates."""
    a = survival(conf)
    path = candidate_path(a)
    taus = [float(len(conf))]
    for r, j in path:
        taus.append(taus[-1] + a[r][j])
    return path, taus


def _generic(values, sps_shape):
    def build(rng: random.Random):
        rows, gamma = rng.randint(1, 8), rng.randint(1, 7)
        return _confidences(rng, rows, gamma, values), sps_shape(rng, rows * (gamma + 1))

    return build


def _mixed_sps(rng: random.Random, size: int) -> list[float]:
    return (_smooth_sps if rng.random() < 0.5 else _jagged_sps)(rng, size)


def _theta_tie(rng: random.Random):
    """Theta rises for m - 1 admissions, then admission m gives exactly the same Theta.

    With ``SPS(B) = tau_m / 64`` for ``B < R + m`` and ``SPS(R + m) = tau_{m-1} / 64``:
    ``Theta_{m-1} = tau_{m-1} tau_m / 64 = Theta_m`` (exact in float32 and float64).
    """
    while True:
        rows, gamma = rng.randint(1, 4), rng.randint(1, 4)
        conf = _confidences(rng, rows, gamma, HALVES)
        path, taus = _taus(conf)
        if path:
            break
    m = rng.randint(1, min(3, len(path)))
    size = rows * (gamma + 1)
    sps = [taus[m] / 64] * (rows + m - 1) + [taus[m - 1] / 64]
    sps += [_quantized(rng.uniform(0.5, 2.0)) for _ in range(size - len(sps))]
    return conf, sps


def _cut_in_tie_groups(rng: random.Random):
    """Rows of many c = 1 (equal survival along the row); SPS flat, then a cliff that cuts the
    path after a random count, often inside a group of ties."""
    while True:
        rows, gamma = rng.randint(1, 8), rng.randint(2, 7)
        conf = [[rng.choice(POSITIVE_SIXTEENTHS)]
                + [1.0 if rng.random() < 0.6 else rng.choice(SIXTEENTHS) for _ in range(gamma - 1)]
                for _ in range(rows)]
        path = candidate_path(survival(conf))
        if len(path) >= 2:
            break
    size, cut = rows * (gamma + 1), rng.randint(1, len(path) - 1)
    sps = [1.0] * (rows + cut) + [1 / SPS_QUANTUM]
    return conf, sps + _jagged_sps(rng, size - len(sps))


def _dip_then_recovery(rng: random.Random):
    """Theta rises for m - 1 admissions, dips at m, then rises above its best again: the
    causal scheduler stops at m - 1; a search without the early stop goes to the end."""
    rows, gamma = rng.randint(1, 8), rng.randint(2, 7)
    conf = _confidences(rng, rows, gamma, POSITIVE_SIXTEENTHS)
    path, taus = _taus(conf)
    m = rng.randint(1, len(path) - 1)
    plateau = _quantized(rng.uniform(0.5, 1.0))
    dip = math.floor(plateau * taus[m - 1] / taus[m] * rng.uniform(0.5, 0.95) * SPS_QUANTUM) / SPS_QUANTUM
    sps = [plateau] * (rows + m - 1) + [dip] + [plateau] * (len(path) - m)
    count, _, _, thetas = algorithm_1(conf, sps)
    recovered = taus[m + 1] * sps[rows + m]  # Theta after m + 1 admissions
    assert count == m - 1 and recovered > thetas[count], "generator: no dip-then-recovery"
    return conf, sps


def _run_instances(case, builder, iut, case_seed: int, device: torch.device) -> None:
    rng = random.Random(case_seed)
    for index in range(INSTANCES):
        conf, sps = builder(rng)
        lengths = iut.schedule(torch.tensor(conf, dtype=torch.float64, device=device), sps)
        check_against_oracle(f"{case.id} instance {index}", conf, sps, lengths)


# ----------------------------------------------------------------------------- Algorithm 1
ALGORITHM_1_CASES = {
    case("S8/algorithm-1/smooth-sps", "k/16 confidences, smoothly decaying SPS",
         ["S8.algorithm-1"]): _generic(SIXTEENTHS, _smooth_sps),
    case("S8/algorithm-1/jagged-sps", "k/16 confidences, jagged SPS (cliffs, plateaus, bumps)",
         ["S8.algorithm-1"]): _generic(SIXTEENTHS, _jagged_sps),
    case("S8/algorithm-1/ties-and-zeros", "confidences in {0, 1/2, 1}: many ties and zero survival",
         ["S8.algorithm-1"]): _generic(HALVES, _mixed_sps),
}


@pytest.mark.parametrize("case", ALGORITHM_1_CASES, ids=case_id)
def test_S8_matches_algorithm_1(case, require, case_seed, dspark_device):
    _run_instances(case, ALGORITHM_1_CASES[case], require(PrefixScheduler), case_seed, dspark_device)


STRICT_CASES = {
    case("S8/strict-improvement/theta-ties", "an admission that leaves Theta equal stops the walk",
         ["S8.algorithm-1"]): _theta_tie,
}


@pytest.mark.parametrize("case", STRICT_CASES, ids=case_id)
def test_S8_equal_theta_is_not_an_improvement(case, require, case_seed, dspark_device):
    _run_instances(case, STRICT_CASES[case], require(PrefixScheduler), case_seed, dspark_device)


TIE_ORDER_CASES = {
    case("S8/tie-order/cut-in-tie-groups", "ties along a row admitted in prefix order (r, j-1) first",
         ["S8.algorithm-1"]): _cut_in_tie_groups,
}


@pytest.mark.parametrize("case", TIE_ORDER_CASES, ids=case_id)
def test_S8_ties_are_admitted_in_prefix_order(case, require, case_seed, dspark_device):
    _run_instances(case, TIE_ORDER_CASES[case], require(PrefixScheduler), case_seed, dspark_device)


EARLY_STOP_CASES = {
    case("S8/early-stop/dip-then-recovery", "Theta dips then exceeds its best: stop at the dip",
         ["S8.algorithm-1", "S8.lossless"]): _dip_then_recovery,
}


@pytest.mark.parametrize("case", EARLY_STOP_CASES, ids=case_id)
def test_S8_stops_at_first_non_improvement(case, require, case_seed, dspark_device):
    _run_instances(case, EARLY_STOP_CASES[case], require(PrefixScheduler), case_seed, dspark_device)


EMPTY_BATCH = case("S8/edge/empty-batch", "R = 0 requests: an empty [0, gamma] confidence tensor and an empty "
                   "SPS table schedule to an empty int64 length vector (no error)", ["S8.algorithm-1"])


@pytest.mark.parametrize("case", [EMPTY_BATCH], ids=case_id)
def test_S8_empty_batch_schedules_nothing(case, require, dspark_device):
    iut = require(PrefixScheduler)
    lengths = iut.schedule(torch.zeros(0, 3, dtype=torch.float64, device=dspark_device), [])
    assert tuple(lengths.shape) == (0,) and lengths.dtype == torch.int64, (
        f"{case.id}: expected an empty int64 [0] tensor, got {lengths.dtype} {tuple(lengths.shape)}"
    )


SHORT_TABLE = case("S8/sps-table/path-length", "an SPS table exactly as long as the admission path can reach, "
                   "R + #{a > 0} (zero survivals do not count), is enough; flat SPS admits every a > 0",
                   ["S8.algorithm-1"])


@pytest.mark.parametrize("case", [SHORT_TABLE], ids=case_id)
def test_S8_table_covering_the_path_is_enough(case, require, dspark_device):
    iut = require(PrefixScheduler)
    # survivals: row 0 (0.5, 0, 0), row 1 (1, 0.5, 0): 3 candidates, so batch sizes 1..5;
    # with a flat SPS every admission raises Theta = tau * 1, so all three are kept.
    conf = torch.tensor([[0.5, 0.0, 0.0], [1.0, 0.5, 0.0]], dtype=torch.float64, device=dspark_device)
    lengths = iut.schedule(conf, [1.0] * 5).cpu().tolist()
    assert lengths == [1, 2], f"{case.id}: expected lengths [1, 2] (every a > 0 admitted), got {lengths}"


# ----------------------------------------------------------------------------- Appendix A
def _first_token_law(iut, target, draft, c1: float, c2_after, sps, device) -> dict:
    """Exact law of the first output token of one request with gamma = 2 (paper Appendix A).

    For each draft token ``x1`` (probability ``draft[x1]``) the IUT schedules
    ``[[c1, c2_after[x1]]]``; an admitted ``x1`` is accepted with ``min(1, target/draft)``,
    else the output comes from ``normalize(max(target - draft, 0))``; with ``l = 0`` the
    target draws a fresh token from ``target``. Sums are exact fractions.
    """
    law = {v: Fraction(0) for v in target}
    residual = {v: max(target[v] - draft[v], Fraction(0)) for v in target}
    mass = sum(residual.values())
    for x1, p_draw in draft.items():
        if p_draw == 0:
            continue
        lengths = iut.schedule(
            torch.tensor([[c1, c2_after[x1]]], dtype=torch.float64, device=device), sps
        )
        assert lengths.dtype == torch.int64 and tuple(lengths.shape) == (1,), (
            f"expected int64 lengths of shape (1,), got {lengths.dtype} {tuple(lengths.shape)}"
        )
        if int(lengths[0]) == 0:
            for v in law:
                law[v] += p_draw * target[v]
            continue
        accept = min(Fraction(1), target[x1] / p_draw)
        law[x1] += p_draw * accept
        if accept < 1:
            for v in law:
                law[v] += p_draw * (1 - accept) * residual[v] / mass
    return law


def _fractions(weights: list[int]) -> dict[int, Fraction]:
    total = sum(weights)
    return {v: Fraction(w, total) for v, w in enumerate(weights)}


def _paper_instance(rng: random.Random):
    """Appendix A: p_t = (0.7, 0.3), p_d = (0.5, 0.5), c1 = 0.8, c2 = 0.9 after A, 0 after B."""
    return _fractions([7, 3]), _fractions([5, 5]), 0.8, {0: 0.9, 1: 0.0}, APPENDIX_A_SPS


def _random_instance(rng: random.Random):
    """Appendix-A-like instance: V in 2..4, c2 depending on x1, SPS(1..3) often making
    Theta_1 <= Theta_0 (where a search without the stop looks at c2)."""
    vocab = rng.randint(2, 4)
    target = _fractions([rng.randint(1, 9) for _ in range(vocab)])
    draft = _fractions([rng.randint(1, 9) for _ in range(vocab)])
    c1 = float(sum(min(target[v], draft[v]) for v in target))  # the true acceptance rate
    c2_after = {v: rng.choice([0.0, 0.25, 0.5, 0.9, 1.0]) for v in target}
    high = 1.0 / (1.0 + c1) if rng.random() < 0.7 else 1.2
    return target, draft, c1, c2_after, [1.0, _quantized(rng.uniform(0.3, high)), _quantized(rng.uniform(0.2, 0.9))]


APPENDIX_A_CASES = {
    case("S8/appendix-a/paper-exact", "the paper's counterexample: output law exactly (0.7, 0.3)",
         ["S8.lossless"]): (_paper_instance, 1),
    case("S8/appendix-a/random-variants-exact", "Appendix-A-like instances: output law exactly p_t",
         ["S8.lossless"]): (_random_instance, INSTANCES),
}


@pytest.mark.parametrize("case", APPENDIX_A_CASES, ids=case_id)
def test_S8_appendix_a_law_is_exactly_the_target(case, require, case_seed, dspark_device):
    iut = require(PrefixScheduler)
    builder, count = APPENDIX_A_CASES[case]
    rng = random.Random(case_seed)
    for index in range(count):
        target, draft, c1, c2_after, sps = builder(rng)
        law = _first_token_law(iut, target, draft, c1, c2_after, sps, dspark_device)
        assert law == target, (
            f"{case.id} instance {index}: the scheduler leaks x1 into its own admission: first-token "
            f"law {[str(law[v]) for v in law]} != target {[str(target[v]) for v in target]} "
            f"(draft {[str(draft[v]) for v in draft]}, c1 {c1}, c2 after x1 {c2_after}, SPS {sps})"
        )


SAMPLED_CASE = case(
    "S8/appendix-a/sampled",
    "Appendix A sampled through the IUT: first-token counts fit (0.7, 0.3)",
    ["S8.lossless"],
    statistical=1,
)


@pytest.mark.statistical
@pytest.mark.latency_bound  # 146,499 serial schedule calls (443 s inside a 4-worker H200 run, session 24)
@pytest.mark.parametrize("case", [SAMPLED_CASE], ids=case_id)
def test_S8_appendix_a_sampled_law(case, require, case_generator, dspark_device, stat_check):
    """H0: first output tokens ~ (0.7, 0.3). Chi-square goodness of fit at
    ``PER_ASSERTION_ALPHA`` (5e-6), n = ``sample_size_for_tv`` = 146,499 for power
    ``TARGET_POWER`` (0.999) at TV ``DEFAULT_MIN_TV`` (0.01); a scheduler without the stop
    sits at TV 0.15. The IUT schedules every sample in turn, as a server would round after
    round, so a scheduler that keeps state across calls is sampled as it runs.
    """
    iut = require(PrefixScheduler)
    target = torch.tensor([0.7, 0.3], dtype=torch.float64, device=dspark_device)
    draft = torch.tensor([0.5, 0.5], dtype=torch.float64, device=dspark_device)
    n = stats.sample_size_for_tv(target.tolist())
    confidences_after = [  # c2 depends on the sampled x1 (0 = A, 1 = B)
        torch.tensor([[0.8, 0.9]], dtype=torch.float64, device=dspark_device),
        torch.tensor([[0.8, 0.0]], dtype=torch.float64, device=dspark_device),
    ]
    x1 = torch.multinomial(draft, n, replacement=True, generator=case_generator)
    # The lengths stay on the device until all are scheduled, and the boundary reads its checks
    # of the calls back in batches: the suite waits on the device only where the IUT does.
    with deferred_checks():
        lengths = torch.cat([iut.schedule(confidences_after[token], APPENDIX_A_SPS) for token in x1.tolist()])
    admitted = lengths >= 1
    u = torch.rand(n, dtype=torch.float64, generator=case_generator, device=dspark_device)
    accepted = u < (target[x1] / draft[x1]).clamp(max=1.0)
    residual = (target - draft).clamp(min=0.0)
    correction = torch.multinomial(residual / residual.sum(), n, replacement=True, generator=case_generator)
    fresh = torch.multinomial(target, n, replacement=True, generator=case_generator)
    output = torch.where(admitted, torch.where(accepted, x1, correction), fresh)

    stat_check(stats.goodness_of_fit(torch.bincount(output, minlength=2), target.tolist(), name=case.id))


# ----------------------------------------------------------------------------- production variant
PRODUCTION_INSTANCES = 150


def _production_lengths(iut, inst, current, device) -> list[int]:
    """The IUT's lengths for ``inst`` with the current block's confidences ``current``; bounds
    an IUT cannot take (``NotImplementedError``) are a skip naming them."""
    def tensor(values, dtype):  # staged on the host: the copy does not wait for the device
        return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

    stale = tensor(inst.stale, torch.float64)
    try:
        lengths = iut.schedule_production(
            stale, tensor(current, torch.float64).reshape(stale.shape), inst.cost,
            tensor(inst.min_lengths, torch.int64), tensor(inst.max_lengths, torch.int64),
        )
    except NotImplementedError as exc:
        pytest.skip(f"ProductionScheduler: these bounds are not supported by this IUT ({exc})")
    return lengths.cpu().tolist()


PRODUCTION_BUDGET_CASES = {
    case("S8/production-budget/bucketed-cost", "budget = brute-force argmax of tau / cost(B), padded affine cost",
         ["S8.production-budget"]): dict(cost="bucketed"),
    case("S8/production-budget/jagged-cost", "budget = brute-force argmax of tau / cost(B), cliffs and dips",
         ["S8.production-budget"]): dict(cost="jagged"),
    case("S8/production-budget/ties-and-zeros", "confidences in {0, 1/2, 1}: survival ties along and across rows",
         ["S8.production-budget"]): dict(values="halves", cost="jagged"),
    case("S8/production-budget/seconds-cost", "a cost table in seconds, every step cost below 1 (any cost > 0 is "
         "valid)", ["S8.production-budget"]): dict(cost="seconds"),
    case("S8/production-bounds/batch-wide", "one minimum and one maximum length for every request",
         ["S8.production-bounds", "S8.production-budget"]): dict(bounds="batch-wide"),
    case("S8/production-bounds/per-request", "each request its own minimum and maximum length",
         ["S8.production-bounds", "S8.production-budget"]): dict(bounds="per-request", cost="jagged"),
    case("S8/production-bounds/per-request-max", "no minimum, each request its own maximum length",
         ["S8.production-bounds", "S8.production-budget"]): dict(bounds="per-request-max", cost="jagged"),
}


@pytest.mark.parametrize("case", PRODUCTION_BUDGET_CASES, ids=case_id)
def test_S8_production_budget_is_the_objective_argmax(case, require, case_seed, dspark_device):
    """Exact: lengths within the bounds; the admitted extras are a set of the highest stale
    survivals (prefixes only, none of survival 0); their count maximises the declared
    objective over every budget (any maximiser: SPEC S8 orders no ties)."""
    iut = require(ProductionScheduler)
    rng = random.Random(case_seed)
    for index, inst in enumerate(production.instances(rng, PRODUCTION_INSTANCES, **PRODUCTION_BUDGET_CASES[case])):
        lengths = _production_lengths(iut, inst, inst.stale, dspark_device)
        production.check_lengths(f"{case.id} instance {index}", inst, lengths)


def _beyond_cut(stale, lengths, value) -> list[list[float]]:
    """The current block: the stale values up to each cut, ``value()`` beyond it."""
    return [[c if j < cut else value() for j, c in enumerate(row)] for row, cut in zip(stale, lengths)]


def _random_block(rng: random.Random, stale) -> list[list[float]]:
    return [[rng.choice(production.SIXTEENTHS) for _ in row] for row in stale]


def _current_block_variants(rng, inst, lengths):
    """Named current blocks that SPEC S8 says move nothing: fresh random blocks."""
    del lengths  # a fresh block ignores the cuts
    return {f"random block {i}": _random_block(rng, inst.stale) for i in range(3)}


def _beyond_cut_variants(rng, inst, lengths):
    """Current blocks equal to the stale one up to each admitted cut, changed beyond it."""
    return {
        "ones beyond the cut": _beyond_cut(inst.stale, lengths, lambda: 1.0),
        "zeros beyond the cut": _beyond_cut(inst.stale, lengths, lambda: 0.0),
        "random beyond the cut": _beyond_cut(inst.stale, lengths, lambda: rng.choice(production.SIXTEENTHS)),
    }


NON_ANTICIPATION_CASES = {
    case("S8/production-non-anticipation/current-block",
         "fresh current-block confidences leave every length unchanged",
         ["S8.production-non-anticipation"]): _current_block_variants,
    case("S8/production-non-anticipation/beyond-cut",
         "current-block survivals beyond each admitted cut (raised or lowered) move no prefix",
         ["S8.production-non-anticipation"]): _beyond_cut_variants,
}


@pytest.mark.parametrize("case", NON_ANTICIPATION_CASES, ids=case_id)
def test_S8_production_ignores_the_current_block(case, require, case_seed, dspark_device):
    """Exact: the lengths with the current block equal to the stale one are the baseline;
    every variant of the current block gives the same lengths (SPEC S8: the inputs are
    stale, so nothing the current block draws can move an admission)."""
    iut = require(ProductionScheduler)
    rng = random.Random(case_seed)
    for index, inst in enumerate(production.instances(rng, PRODUCTION_INSTANCES)):
        baseline = _production_lengths(iut, inst, inst.stale, dspark_device)
        for name, current in NON_ANTICIPATION_CASES[case](rng, inst, baseline).items():
            got = _production_lengths(iut, inst, current, dspark_device)
            assert got == baseline, (
                f"{case.id} instance {index}: {inst.describe()}; lengths {baseline} with the current "
                f"block equal to the stale one, {got} with the current block {current} ({name})"
            )


OTHER_REQUESTS_CASE = case(
    "S8/production-non-anticipation/other-requests",
    "a request's length does not change when every other request's current values do",
    ["S8.production-non-anticipation"],
)


@pytest.mark.parametrize("case", [OTHER_REQUESTS_CASE], ids=case_id)
def test_S8_production_rows_ignore_other_rows_current_values(case, require, case_seed, dspark_device):
    """Exact: for each request r, the other requests' current confidences set to 1, to 0
    and redrawn; ``lengths[r]`` stays what it was with the stale block."""
    iut = require(ProductionScheduler)
    rng = random.Random(case_seed)
    for index, inst in enumerate(production.instances(rng, PRODUCTION_INSTANCES)):
        baseline = _production_lengths(iut, inst, inst.stale, dspark_device)
        for r in range(len(inst.stale) if len(inst.stale) > 1 else 0):
            for fill in (lambda: 1.0, lambda: 0.0, lambda: rng.choice(production.SIXTEENTHS)):
                current = [row if i == r else [fill() for _ in row] for i, row in enumerate(inst.stale)]
                got = _production_lengths(iut, inst, current, dspark_device)
                assert got[r] == baseline[r], (
                    f"{case.id} instance {index}: {inst.describe()}; request {r} verifies {baseline[r]} "
                    f"drafts with the stale block, {got[r]} when the other requests' current block is "
                    f"{current} (all lengths {baseline} -> {got})"
                )
