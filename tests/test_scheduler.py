"""Reference tests for SPEC S8: the hardware-aware prefix scheduler (paper Algorithm 1).

Paper Appendix A exactly, hand cases (multi-request, ties, jagged SPS), the asynchronous
top-K variant, the production variant (brute force over budgets, bounds, stale inputs only),
properties (hypothesis) against the suite's plain-Python oracle of Algorithm 1's admission
path (``conformance.oracles.prefix_schedule``, the one home of that oracle), then bad
inputs. Add a case as ``test_S8_<what>``.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_ref.scheduler import (
    appendix_a_first_token_law,
    expected_throughput,
    schedule_prefixes,
    schedule_prefixes_async_topk,
    schedule_prefixes_production,
    schedule_prefixes_retrospective,
    ProductionRule,
)
from conformance.oracles import prefix_schedule

APPENDIX_A_SPS = (1.0, 0.5, 0.45)


def _conf(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ----------------------------------------------------------------------------- Appendix A
@pytest.mark.parametrize(
    "c2, length, theta",
    [(0.9, 0, 1.0), (0.9, 1, 0.9), (0.9, 2, 1.134), (0.0, 2, 0.81)],
)
def test_S8_appendix_a_theta_values(c2, length, theta):
    value = expected_throughput(_conf([[0.8, c2]]), torch.tensor([length]), APPENDIX_A_SPS)
    assert value == pytest.approx(theta, rel=1e-14)


@pytest.mark.parametrize("c2", [0.9, 0.0])
def test_S8_appendix_a_causal_returns_zero_without_looking_ahead(c2):
    queried = []

    def sps(batch):
        queried.append(batch)
        return APPENDIX_A_SPS[batch - 1]

    assert schedule_prefixes(_conf([[0.8, c2]]), sps).tolist() == [0]
    # Theta1 = 0.9 <= Theta0 = 1.0 stops before SPS(3), i.e. before anything c2 decides.
    assert queried == [1, 2]


def test_S8_appendix_a_retrospective_admits_only_after_a():
    assert schedule_prefixes_retrospective(_conf([[0.8, 0.9]]), APPENDIX_A_SPS).tolist() == [2]
    assert schedule_prefixes_retrospective(_conf([[0.8, 0.0]]), APPENDIX_A_SPS).tolist() == [0]


def test_S8_appendix_a_first_token_law_exact():
    # Causal: l = 0 for both x1, so Y ~ p_t. Retrospective: x1 = A admitted and accepted
    # (min(1, 0.7/0.5) = 1), x1 = B not admitted: Pr(A) = 0.5 * 1 + 0.5 * 0.7.
    assert appendix_a_first_token_law(schedule_prefixes) == (0.7, 0.3)
    assert appendix_a_first_token_law(schedule_prefixes_retrospective) == (0.85, 0.15)


def test_S8_appendix_a_law_is_lossless_for_any_fixed_length():
    # Admitting x1 whatever it is: 0.5 * 1 + 0.5 * (0.4 residual -> A) = 0.7 for A.
    for length in (0, 1, 2):
        law = appendix_a_first_token_law(lambda c, sps, n=length: torch.tensor([n]))
        assert law == (0.7, 0.3)
    peeking = appendix_a_first_token_law(lambda c, sps: torch.tensor([1 if c[0, 1] > 0 else 0]))
    assert peeking == (0.85, 0.15)


def test_S8_appendix_a_law_rejects_bad_schedulers():
    with pytest.raises(TypeError, match="schedule_fn"):
        appendix_a_first_token_law(None)
    with pytest.raises(ValueError, match="schedule_fn"):
        appendix_a_first_token_law(lambda c, sps: torch.tensor([3]))
    with pytest.raises(ValueError, match="schedule_fn"):
        appendix_a_first_token_law(lambda c, sps: torch.tensor([0, 0]))
    with pytest.raises(TypeError, match="schedule_fn"):
        appendix_a_first_token_law(lambda c, sps: torch.tensor([1.0]))


# ----------------------------------------------------------------------------- hand cases
def test_S8_multi_request_hand_case():
    # a = [[0.9, 0.45], [0.6, 0]]; path (0,1) 0.9, (1,1) 0.6, (0,2) 0.45.
    # Theta: 2 * 1.0 = 2.0 -> 2.9 * 0.95 = 2.755 -> 3.5 * 0.9 = 3.15 -> 3.95 * 0.7 = 2.765 (stop).
    conf, sps = _conf([[0.9, 0.5], [0.6, 0.0]]), [1.0, 1.0, 0.95, 0.9, 0.7]
    for schedule in (schedule_prefixes, schedule_prefixes_retrospective):
        lengths = schedule(conf, sps)
        assert lengths.dtype == torch.int64 and lengths.tolist() == [1, 1]
    assert expected_throughput(conf, torch.tensor([1, 1]), sps) == pytest.approx(3.15, rel=1e-14)


def test_S8_ties_keep_row_major_prefix_order():
    # a = [[0.5, 0.5], [0.5, 0]]: path (0,1), (0,2), (1,1); the SPS table admits two.
    # Theta: 2.0 -> 2.5 * 0.9 = 2.25 -> 3.0 * 0.8 = 2.4 -> 3.5 * 0.5 = 1.75 (stop).
    sps = [1.0, 1.0, 0.9, 0.8, 0.5]
    assert schedule_prefixes(_conf([[0.5, 1.0], [0.5, 0.0]]), sps).tolist() == [2, 0]
    # Same values, rows swapped: row 0 now has the single candidate and goes first.
    assert schedule_prefixes(_conf([[0.5, 0.0], [0.5, 1.0]]), sps).tolist() == [1, 1]


def test_S8_equal_theta_is_not_an_improvement():
    # Theta1 = (1 + 1) * 0.5 = 1.0 == Theta0.
    for schedule in (schedule_prefixes, schedule_prefixes_retrospective):
        assert schedule(_conf([[1.0]]), [1.0, 0.5]).tolist() == [0]


def test_S8_jagged_sps_separates_causal_from_retrospective():
    # a = 0.5, 0.5, 0.5; Theta = 1.0, 0.9, 1.0, 1.125: causal stops at once, global max is l = 3.
    conf, sps = _conf([[0.5, 1.0, 1.0]]), [1.0, 0.6, 0.5, 0.45]
    assert schedule_prefixes(conf, sps).tolist() == [0]
    assert schedule_prefixes_retrospective(conf, sps).tolist() == [3]


def test_S8_zero_survival_is_never_admitted():
    sps = [1.0, 5.0, 5.0]
    assert schedule_prefixes(_conf([[0.0, 1.0], [1.0, 0.0]]), sps).tolist() == [0, 1]


def test_S8_sps_callable_table_and_tensor_agree():
    conf = _conf([[0.9, 0.8, 0.3], [0.7, 0.7, 0.7]])
    table = [1.0, 1.0, 0.98, 0.95, 0.9, 0.8, 0.6, 0.5]
    # Path a: 0.9, 0.72, 0.7, 0.49, ...; Theta 2.0, 2.842, 3.439, 3.888, 3.848 (stop).
    expected = schedule_prefixes(conf, table).tolist()
    assert expected == [2, 1]
    assert schedule_prefixes(conf, lambda b: table[b - 1]).tolist() == expected
    assert schedule_prefixes(conf, torch.tensor(table)).tolist() == expected


def test_S8_empty_batch_and_empty_block():
    assert schedule_prefixes(torch.zeros(0, 3, dtype=torch.float64), []).tolist() == []
    assert schedule_prefixes(torch.ones(2, 0), [1.0, 1.0]).tolist() == [0, 0]


def test_S8_float32_confidences_are_scheduled_in_float64():
    conf = torch.tensor([[0.8, 0.9]], dtype=torch.float32)
    assert schedule_prefixes_retrospective(conf, APPENDIX_A_SPS).tolist() == [2]


# ----------------------------------------------------------------------------- async top-K
def test_S8_async_topk_capacity_from_stale_fills_with_current():
    # Stale confidences of the jagged case give K = 3 (retrospective cut).
    stale = _conf([[0.5, 1.0, 1.0]])
    sps = [1.0, 0.6, 0.5, 0.45]
    # Current a = [[0.9, 0.18, 0.162], [0.8, 0.56, 0]]: top 3 are (0,1), (1,1), (1,2).
    current = _conf([[0.9, 0.2, 0.9], [0.8, 0.7, 0.0]])
    lengths = schedule_prefixes_async_topk(stale, sps, confidences=current)
    assert lengths.dtype == torch.int64 and lengths.tolist() == [1, 2]


def test_S8_async_topk_capacity_capped_by_positive_candidates():
    stale, sps = _conf([[0.5, 1.0, 1.0]]), [1.0, 0.6, 0.5, 0.45]
    current = _conf([[0.9, 0.0, 1.0], [0.0, 1.0, 1.0]])
    assert schedule_prefixes_async_topk(stale, sps, confidences=current).tolist() == [1, 0]


def test_S8_async_topk_zero_capacity_admits_nothing():
    stale = _conf([[0.8, 0.9]])  # Theta = 1.0, 0.18, 0.252 under this SPS: K = 0
    current = _conf([[1.0, 1.0]])
    assert schedule_prefixes_async_topk(stale, [1.0, 0.1, 0.1], confidences=current).tolist() == [0]


# ----------------------------------------------------------------------------- properties
@st.composite
def schedules(draw):
    """(confidences as lists, SPS table covering every batch size); values with exact products."""
    rows, gamma = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    values = st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.875, 1.0])
    conf = [[draw(values) for _ in range(gamma)] for _ in range(rows)]
    size = rows * (gamma + 1)
    table = draw(st.lists(st.floats(0.05, 2.0), min_size=size, max_size=size))
    return conf, table


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_S8_causal_is_algorithm_1(case):
    conf, table = case
    _, candidates, thetas = prefix_schedule.theta_trace(conf, table)
    count = prefix_schedule.algorithm_1(conf, table)[0]
    lengths = schedule_prefixes(_conf(conf), table)
    assert lengths.tolist() == prefix_schedule.oracle_lengths(candidates, count, len(conf))
    # Stops at the first non-improvement; the kept Theta is the best seen up to there.
    assert count == len(candidates) or thetas[count + 1] <= thetas[count]
    theta = expected_throughput(_conf(conf), lengths, table)
    assert theta == pytest.approx(max(thetas[: count + 1]), rel=1e-12)


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_S8_retrospective_is_path_argmax_and_dominates_causal(case):
    conf, table = case
    _, candidates, thetas = prefix_schedule.theta_trace(conf, table)
    count = thetas.index(max(thetas))
    retro = schedule_prefixes_retrospective(_conf(conf), table)
    assert retro.tolist() == prefix_schedule.oracle_lengths(candidates, count, len(conf))
    causal = schedule_prefixes(_conf(conf), table)
    theta_retro = expected_throughput(_conf(conf), retro, table)
    assert theta_retro == pytest.approx(max(thetas), rel=1e-12)
    assert expected_throughput(_conf(conf), causal, table) <= theta_retro * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_S8_lengths_are_valid_prefixes(case):
    conf, table = case
    survival = torch.cumprod(_conf(conf), dim=1)
    gamma = len(conf[0])
    for schedule in (schedule_prefixes, schedule_prefixes_retrospective):
        lengths = schedule(_conf(conf), table)
        assert lengths.shape == (len(conf),) and lengths.dtype == torch.int64
        for r, length in enumerate(lengths.tolist()):
            assert 0 <= length <= gamma
            assert length == 0 or survival[r, length - 1] > 0


@settings(max_examples=100, deadline=None)
@given(schedules(), st.data())
def test_S8_async_topk_takes_the_k_best_current_candidates(case, data):
    stale, table = case
    current = [[data.draw(st.sampled_from([0.0, 0.5, 0.75, 1.0])) for _ in row] for row in stale]
    lengths = schedule_prefixes_async_topk(_conf(stale), table, confidences=_conf(current))
    capacity = int(schedule_prefixes_retrospective(_conf(stale), table).sum())
    candidates = prefix_schedule.candidate_path(prefix_schedule.survival(current))
    assert lengths.tolist() == prefix_schedule.oracle_lengths(candidates, capacity, len(stale))
    # With fresh == stale the production variant is the retrospective search.
    same = schedule_prefixes_async_topk(_conf(stale), table, confidences=_conf(stale))
    assert same.tolist() == schedule_prefixes_retrospective(_conf(stale), table).tolist()


# ----------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "conf, error",
    [
        (torch.tensor([[0.5, 1.5]]), ValueError),
        (torch.tensor([[-0.5, 0.5]]), ValueError),
        (torch.tensor([[math.nan, 0.5]]), ValueError),
        (torch.tensor([0.5, 0.5]), ValueError),
        (torch.tensor([[[0.5]]]), ValueError),
        (torch.tensor([[1, 0]]), TypeError),
        ([[0.5, 0.5]], TypeError),
    ],
)
def test_S8_rejects_bad_confidences(conf, error):
    for schedule in (schedule_prefixes, schedule_prefixes_retrospective):
        with pytest.raises(error, match="confidences"):
            schedule(conf, [1.0] * 8)
    with pytest.raises(error, match="stale_confidences"):
        schedule_prefixes_async_topk(conf, [1.0] * 8, confidences=_conf([[0.5]]))
    with pytest.raises(error, match="confidences"):
        schedule_prefixes_async_topk(_conf([[0.5]]), [1.0] * 8, confidences=conf)


def test_S8_rejects_short_or_bad_sps():
    conf = _conf([[0.8, 0.9]])
    with pytest.raises(ValueError, match="sps"):
        schedule_prefixes(conf, [1.0, 0.5])  # path reaches B = 3
    with pytest.raises(ValueError, match="sps"):
        schedule_prefixes(conf, [1.0, -0.5, 0.45])
    with pytest.raises(ValueError, match="sps"):
        schedule_prefixes(conf, [1.0, math.nan, 0.45])
    with pytest.raises(ValueError, match="sps"):
        schedule_prefixes(conf, lambda b: math.inf)
    with pytest.raises(TypeError, match="sps"):
        schedule_prefixes(conf, "1.0 0.5 0.45")
    with pytest.raises(TypeError, match="sps"):
        schedule_prefixes(conf, 1.0)
    with pytest.raises(ValueError, match="sps"):
        schedule_prefixes(conf, torch.ones(3, 1))
    with pytest.raises(ValueError, match="sps"):
        expected_throughput(conf, torch.tensor([2]), [1.0, 0.5])


def test_S8_expected_throughput_rejects_bad_lengths():
    conf = _conf([[0.8, 0.9]])
    with pytest.raises(ValueError, match="lengths"):
        expected_throughput(conf, torch.tensor([3]), APPENDIX_A_SPS)
    with pytest.raises(ValueError, match="lengths"):
        expected_throughput(conf, torch.tensor([-1]), APPENDIX_A_SPS)
    with pytest.raises(ValueError, match="lengths"):
        expected_throughput(conf, torch.tensor([1, 1]), APPENDIX_A_SPS)
    with pytest.raises(TypeError, match="lengths"):
        expected_throughput(conf, torch.tensor([1.0]), APPENDIX_A_SPS)
    with pytest.raises(ValueError, match="confidences"):
        expected_throughput(torch.zeros(0, 2), torch.zeros(0, dtype=torch.int64), [1.0])


# ----------------------------------------------------------------------------- production variant
def test_S8_production_example_and_flat_cost():
    stale = _conf([[0.9, 0.5], [0.5, 0.5]])  # survivals [0.9, 0.45], [0.5, 0.25]
    # tau / cost: k = 0: 2 / 1; k = 1: 2.9 / 1.25 = 2.32; k = 2: 3.4 / 1.5 = 2.27 -> k = 1
    assert schedule_prefixes_production(stale, [1.0, 1.0, 1.25, 1.5, 2.0, 2.5]).tolist() == [1, 0]
    assert schedule_prefixes_production(stale, [1.0] * 6).tolist() == [2, 2]  # flat: every a > 0
    low, high = torch.tensor([1, 0]), torch.tensor([1, 2])
    assert schedule_prefixes_production(stale, [1.0] * 6, min_lengths=low, max_lengths=high).tolist() == [1, 2]
    # a zero survival is never an extra; a minimum admits it anyway
    zero = _conf([[0.0, 1.0]])
    assert schedule_prefixes_production(zero, [1.0] * 3).tolist() == [0]
    assert schedule_prefixes_production(zero, [1.0] * 3, min_lengths=torch.tensor([2])).tolist() == [2]


@st.composite
def production_cases(draw):
    """(stale, current, min, max, cost table); values with exact products, costs > 0."""
    rows, gamma = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    values = st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.875, 1.0])
    stale = [[draw(values) for _ in range(gamma)] for _ in range(rows)]
    current = [[draw(values) for _ in range(gamma)] for _ in range(rows)]
    low = [draw(st.integers(0, gamma)) for _ in range(rows)]
    high = [draw(st.integers(lo, gamma)) for lo in low]
    cost = draw(st.lists(st.floats(0.5, 8.0), min_size=rows * (gamma + 1), max_size=rows * (gamma + 1)))
    return stale, current, low, high, cost


@settings(max_examples=150, deadline=None)
@given(production_cases())
def test_S8_production_is_the_brute_force_argmax(case):
    stale, current, low, high, cost = case
    rows = len(stale)
    survival = torch.cumprod(_conf(stale), dim=1).tolist()
    extra = sorted(((r, j) for r in range(rows) for j in range(low[r], high[r]) if survival[r][j] > 0),
                   key=lambda rj: (-survival[rj[0]][rj[1]], rj))
    forced = rows + sum(survival[r][j] for r in range(rows) for j in range(low[r]))
    objective = [(forced + sum(survival[r][j] for r, j in extra[:k])) / cost[rows + sum(low) + k - 1]
                 for k in range(len(extra) + 1)]
    budget = objective.index(max(objective))
    expected = list(low)
    for r, _ in extra[:budget]:
        expected[r] += 1
    bounds = dict(min_lengths=torch.tensor(low), max_lengths=torch.tensor(high))
    lengths = schedule_prefixes_production(_conf(stale), cost, **bounds)
    assert lengths.tolist() == expected
    assert schedule_prefixes_production(_conf(stale), cost, confidences=_conf(current), **bounds).tolist() == expected


def test_S8_production_rejects_bad_inputs():
    conf = _conf([[0.5, 0.5]])
    with pytest.raises(ValueError, match="cost"):
        schedule_prefixes_production(conf, [1.0, 1.0])  # covers B = 1..2, needs 3
    with pytest.raises(ValueError, match="cost"):
        schedule_prefixes_production(conf, [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="min_lengths / max_lengths"):
        schedule_prefixes_production(conf, [1.0] * 3, min_lengths=torch.tensor([2]), max_lengths=torch.tensor([1]))
    with pytest.raises(ValueError, match="max_lengths"):
        schedule_prefixes_production(conf, [1.0] * 3, max_lengths=torch.tensor([1, 1]))
    with pytest.raises(TypeError, match="min_lengths"):
        schedule_prefixes_production(conf, [1.0] * 3, min_lengths=torch.tensor([0.0]))
    with pytest.raises(ValueError, match="confidences"):
        schedule_prefixes_production(conf, [1.0] * 3, confidences=_conf([[2.0, 0.5]]))
    with pytest.raises(TypeError, match="rule"):
        schedule_prefixes_production(conf, [1.0] * 3, rule=object())
    assert schedule_prefixes_production(conf, [1.0] * 3, rule=ProductionRule()).tolist() == [2]


@pytest.mark.gpu
def test_S8_cuda_calls_schedule_as_the_cpu_and_reject_the_same_inputs():
    """The schedulers read CUDA inputs back once a call (the walk runs on the host): every
    length equals the CPU call's, returned on the confidences' device; bad values raise the
    same errors."""
    cuda = torch.device("cuda")
    gen = torch.Generator().manual_seed(5)
    for trial in range(200):
        rows, gamma = int(torch.randint(1, 5, (1,), generator=gen)), int(torch.randint(1, 6, (1,), generator=gen))
        conf = (torch.randint(0, 17, (rows, gamma), generator=gen) / 16).double()
        current = (torch.randint(0, 17, (rows, gamma), generator=gen) / 16).double()
        dtype = (torch.float64, torch.float32, torch.bfloat16)[trial % 3]
        conf, current = conf.to(dtype), current.to(dtype)
        low = torch.randint(0, gamma + 1, (rows,), generator=gen)
        high = torch.minimum(low + torch.randint(0, gamma + 1, (rows,), generator=gen), torch.tensor(gamma))
        bounds = (low, high) if trial % 2 else (low.int(), high.int())
        sps = (torch.rand(rows * (gamma + 1) + 1, generator=gen) + 0.5).tolist()
        for schedule in (schedule_prefixes, schedule_prefixes_retrospective):
            got = schedule(conf.to(cuda), sps)
            assert got.device.type == "cuda" and got.tolist() == schedule(conf, sps).tolist(), trial
        got = schedule_prefixes_async_topk(conf.to(cuda), sps, confidences=current.to(cuda))
        assert got.tolist() == schedule_prefixes_async_topk(conf, sps, confidences=current).tolist(), trial
        got = schedule_prefixes_production(conf.to(cuda), sps, min_lengths=bounds[0].to(cuda),
                                           max_lengths=bounds[1].to(cuda), confidences=current.to(cuda))
        want = schedule_prefixes_production(conf, sps, min_lengths=bounds[0], max_lengths=bounds[1],
                                            confidences=current)
        assert got.device.type == "cuda" and got.tolist() == want.tolist(), trial
    conf = _conf([[0.5, 0.5]]).to(cuda)
    for bad in ([[0.5, 1.5]], [[math.nan, 0.5]]):
        with pytest.raises(ValueError, match="confidences: expected values in"):
            schedule_prefixes(_conf(bad).to(cuda), [1.0] * 3)
        with pytest.raises(ValueError, match="stale_confidences: expected values in"):
            schedule_prefixes_production(_conf(bad).to(cuda), [1.0] * 3)
    with pytest.raises(ValueError, match="min_lengths / max_lengths"):
        schedule_prefixes_production(conf, [1.0] * 3, min_lengths=torch.tensor([2], device=cuda),
                                     max_lengths=torch.tensor([1], device=cuda))
    with pytest.raises(ValueError, match="min_lengths: expected a tensor on cuda"):
        schedule_prefixes_production(conf, [1.0] * 3, min_lengths=torch.tensor([0]))
