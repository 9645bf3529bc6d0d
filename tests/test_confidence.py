"""Reference tests for SPEC S7: confidence head, STS calibration and metrics.

Hand-computed cases first, then properties (hypothesis) against brute-force oracles written
here, then the synthetic STS fit, then bad inputs. Add a case as ``test_S7_<what>``.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_ref.confidence import (
    DEFAULT_STS_GRID,
    ConfidenceHead,
    auroc,
    brier,
    calibrate,
    ece,
    fit_sts,
    prefix_survival,
)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _head_with(weight: list[float], bias: float, hidden_size: int, markov_rank: int | None):
    head = ConfidenceHead(hidden_size, markov_rank=markov_rank)
    with torch.no_grad():
        head.proj.weight.copy_(torch.tensor([weight]))
        head.proj.bias.fill_(bias)
    return head


# ----------------------------------------------------------------------------- head
def test_S7_head_raw_logits_hand_case():
    head = _head_with([1.0, -2.0, 0.5], bias=0.25, hidden_size=2, markov_rank=1)
    hidden = torch.tensor([[[1.0, 1.0], [0.0, 2.0]]])
    markov = torch.tensor([[[2.0], [-4.0]]])
    # 1 - 2 + 1 + 0.25 = 0.25 ; 0 - 4 - 2 + 0.25 = -5.75
    raw = head.raw_logits(hidden, markov)
    assert raw.dtype == torch.float32
    assert raw.tolist() == [[0.25, -5.75]]
    expected = torch.tensor([[_sigmoid(0.25), _sigmoid(-5.75)]])
    torch.testing.assert_close(head(hidden, markov), expected, rtol=0, atol=1e-7)


def test_S7_head_without_markov_feature_hand_case():
    head = _head_with([2.0, 1.0], bias=-1.0, hidden_size=2, markov_rank=None)
    raw = head.raw_logits(torch.tensor([[[1.0, 3.0]], [[0.5, 0.0]]]))
    assert raw.tolist() == [[4.0], [0.0]]


def test_S7_head_shapes_follow_runtime_gamma():
    head = ConfidenceHead(4, markov_rank=3, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 7, 4, generator=gen)
    markov = torch.randn(2, 7, 3, generator=gen)
    full = head.raw_logits(hidden, markov)
    short = head.raw_logits(hidden[:, :3], markov[:, :3])
    assert full.shape == (2, 7) and short.shape == (2, 3)
    # Positions are scored independently: a shorter runtime block is a prefix of a longer one.
    torch.testing.assert_close(short, full[:, :3])
    assert head.raw_logits(hidden[:, :0], markov[:, :0]).shape == (2, 0)


def test_S7_head_bf16_hidden_is_scored_in_float32():
    head = ConfidenceHead(4, generator=torch.Generator().manual_seed(0))
    hidden = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(2)).bfloat16()
    raw = head.raw_logits(hidden)
    assert raw.dtype == torch.float32
    torch.testing.assert_close(raw, head.raw_logits(hidden.float()), rtol=0, atol=0)


def test_S7_head_generator_makes_init_reproducible():
    def make(seed):
        return ConfidenceHead(6, markov_rank=2, generator=torch.Generator().manual_seed(seed))

    a, b, c = make(5), make(5), make(6)
    assert set(a.state_dict()) == {"proj.weight", "proj.bias"}
    assert a.state_dict()["proj.weight"].shape == (1, 8)
    torch.testing.assert_close(a.state_dict(), b.state_dict(), rtol=0, atol=0)
    assert not torch.equal(a.proj.weight, c.proj.weight)
    assert float(a.proj.weight.detach().abs().max()) <= 1 / math.sqrt(8)


def test_S7_head_forward_applies_sts_temperatures():
    head = _head_with([1.0], bias=0.0, hidden_size=1, markov_rank=None)
    hidden = torch.tensor([[[2.0], [-3.0]]])
    conf = head(hidden, temperatures=torch.tensor([2.0, 3.0]))
    expected = torch.tensor([[_sigmoid(1.0), _sigmoid(-1.0)]])
    torch.testing.assert_close(conf, expected, rtol=0, atol=1e-7)


# ----------------------------------------------------------------------------- calibrate / survival
def test_S7_calibrate_divides_raw_by_position_temperature():
    raw = torch.tensor([[2.0, -3.0, 0.0], [4.0, 6.0, -1.0]], dtype=torch.float64)
    t = torch.tensor([2.0, 3.0, 0.5], dtype=torch.float64)
    expected = torch.tensor(
        [[_sigmoid(1.0), _sigmoid(-1.0), 0.5], [_sigmoid(2.0), _sigmoid(2.0), _sigmoid(-2.0)]],
        dtype=torch.float64,
    )
    torch.testing.assert_close(calibrate(raw, t), expected, rtol=1e-15, atol=0)


def test_S7_prefix_survival_is_cumulative_product():
    conf = torch.tensor([[0.5, 0.5, 0.8], [1.0, 0.0, 0.9]], dtype=torch.float64)
    assert prefix_survival(conf).tolist() == [[0.5, 0.25, 0.2], [1.0, 0.0, 0.0]]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-8, 8), min_size=2, max_size=12),
    st.floats(0.05, 20),
)
def test_S7_calibrate_is_order_preserving(raw_values, temperature):
    raw = torch.tensor(raw_values, dtype=torch.float64)[:, None]
    conf = calibrate(raw, torch.tensor([temperature], dtype=torch.float64))[:, 0]
    for i, j in itertools.combinations(range(len(raw_values)), 2):
        if raw_values[i] < raw_values[j]:
            assert conf[i] <= conf[j]


# ----------------------------------------------------------------------------- metrics
def test_S7_ece_hand_case():
    # 5 bins. Bin [0.2, 0.4): three predictions at 0.2, one positive: (3/4)|1/3 - 0.2| = 0.1.
    # Bin [0.8, 1.0]: 0.9 vs 1: (1/4)|1 - 0.9| = 0.025.
    prob = torch.tensor([0.2, 0.2, 0.2, 0.9], dtype=torch.float64)
    label = torch.tensor([True, False, False, True])
    assert ece(prob, label, n_bins=5) == pytest.approx(0.125, rel=1e-12)


def test_S7_ece_edges_fall_in_expected_bins():
    # 1.0 joins the last bin, 0.0 the first: both perfectly calibrated here.
    assert ece(torch.tensor([1.0, 0.0]), torch.tensor([True, False])) == 0.0
    # 0.5 with 2 bins opens bin [0.5, 1]; it shares it with 1.0: |1/2 - 3/4| * 2/3 = 1/6.
    prob = torch.tensor([0.5, 1.0, 0.25], dtype=torch.float64)
    label = torch.tensor([False, True, False])
    assert ece(prob, label, n_bins=2) == pytest.approx(1 / 6 + 0.25 / 3, rel=1e-12)


def test_S7_brier_hand_case():
    prob = torch.tensor([0.2, 0.9], dtype=torch.float64)
    assert brier(prob, torch.tensor([False, True])) == pytest.approx(0.025, rel=1e-12)


def test_S7_auroc_hand_cases():
    scores = torch.tensor([0.1, 0.4, 0.35, 0.8], dtype=torch.float64)
    assert auroc(scores, torch.tensor([False, False, True, True])) == 0.75
    # A positive/negative tie counts one half: (0.5 + 1 + 1 + 1) / 4.
    tied = torch.tensor([0.5, 0.5, 0.2, 0.9], dtype=torch.float64)
    assert auroc(tied, torch.tensor([True, False, False, True])) == 0.875


def _ece_oracle(prob: list[float], label: list[bool], n_bins: int) -> float:
    total = 0.0
    for b in range(n_bins):
        members = [
            i for i, p in enumerate(prob) if b == min(int(math.floor(p * n_bins)), n_bins - 1)
        ]
        if members:
            conf = sum(prob[i] for i in members) / len(members)
            acc = sum(label[i] for i in members) / len(members)
            total += len(members) / len(prob) * abs(acc - conf)
    return total


def _auroc_oracle(score: list[float], label: list[bool]) -> float:
    pos = [s for s, y in zip(score, label) if y]
    neg = [s for s, y in zip(score, label) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


_scored_labels = st.lists(
    st.tuples(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.95, 1.0]) | st.floats(0, 1), st.booleans()),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(_scored_labels, st.integers(1, 20))
def test_S7_metrics_match_brute_force_oracles(pairs, n_bins):
    prob = [p for p, _ in pairs]
    label = [y for _, y in pairs]
    prob_t, label_t = torch.tensor(prob, dtype=torch.float64), torch.tensor(label)
    expected_ece = _ece_oracle(prob, label, n_bins)
    assert ece(prob_t, label_t, n_bins) == pytest.approx(expected_ece, abs=1e-12)
    expected_brier = sum((p - y) ** 2 for p, y in zip(prob, label)) / len(prob)
    assert brier(prob_t, label_t) == pytest.approx(expected_brier, abs=1e-12)
    if 0 < sum(label) < len(label):
        assert auroc(prob_t, label_t) == pytest.approx(_auroc_oracle(prob, label), abs=1e-12)


# ----------------------------------------------------------------------------- STS
def _overconfident_blocks(n: int, gamma: int, true_temperature: float, seed: int):
    """Raw logits whose true conditional acceptance is sigmoid(raw / true_temperature)."""
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randn(n, gamma, generator=gen, dtype=torch.float64) * 3 + 2
    survives = torch.rand(n, gamma, generator=gen, dtype=torch.float64)
    survives = survives < torch.sigmoid(raw / true_temperature)
    return raw, survives.cumprod(dim=1).bool()


def test_S7_sts_recovers_temperature_and_lowers_ece():
    raw, accepted = _overconfident_blocks(20_000, 3, true_temperature=2.0, seed=1234)
    temperatures = fit_sts(raw, accepted)
    assert temperatures.dtype == torch.float64 and temperatures.shape == (3,)
    assert torch.all((temperatures > 1.7) & (temperatures < 2.4)), temperatures
    before = prefix_survival(torch.sigmoid(raw))
    after = prefix_survival(calibrate(raw, temperatures))
    for k in range(3):
        ece_before, ece_after = ece(before[:, k], accepted[:, k]), ece(after[:, k], accepted[:, k])
        assert ece_before > 0.08 and ece_after < 0.02, (k, ece_before, ece_after)
        assert brier(after[:, k], accepted[:, k]) < brier(before[:, k], accepted[:, k])


def test_S7_sts_is_left_to_right_grid_argmin():
    raw, accepted = _overconfident_blocks(500, 3, true_temperature=1.5, seed=7)
    grid = torch.linspace(0.5, 4.0, 15, dtype=torch.float64)
    temperatures = fit_sts(raw, accepted, grid=grid, n_bins=10)
    survival = torch.ones(500, dtype=torch.float64)
    for k in range(3):
        errors = [ece(survival * torch.sigmoid(raw[:, k] / t), accepted[:, k], 10) for t in grid]
        assert float(temperatures[k]) == float(grid[errors.index(min(errors))])
        survival = survival * torch.sigmoid(raw[:, k] / temperatures[k])


def test_S7_sts_earlier_temperatures_ignore_later_labels():
    raw, accepted = _overconfident_blocks(2_000, 3, true_temperature=2.0, seed=3)
    truncated = accepted.clone()
    truncated[:, 2] = False
    first, second = fit_sts(raw, accepted), fit_sts(raw, truncated)
    torch.testing.assert_close(first[:2], second[:2], rtol=0, atol=0)
    assert float(second[2]) != float(first[2])


def test_S7_sts_temperatures_preserve_order_and_come_from_grid():
    raw, accepted = _overconfident_blocks(1_000, 2, true_temperature=3.0, seed=11)
    temperatures = fit_sts(raw, accepted)
    assert all(float(t) in DEFAULT_STS_GRID.tolist() for t in temperatures)
    calibrated = calibrate(raw, temperatures)
    for k in range(2):
        order = torch.argsort(raw[:, k], stable=True)
        assert torch.equal(torch.argsort(calibrated[:, k], stable=True), order)


# ----------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(hidden_size=0), ValueError, "hidden_size"),
        (dict(hidden_size=4, markov_rank=0), ValueError, "markov_rank"),
        (dict(hidden_size=4.0), TypeError, "hidden_size"),
    ],
)
def test_S7_head_rejects_bad_config(kwargs, error, match):
    hidden_size = kwargs.pop("hidden_size")
    with pytest.raises(error, match=match):
        ConfidenceHead(hidden_size, **kwargs)


def test_S7_head_rejects_bad_inputs():
    head = ConfidenceHead(4, markov_rank=2)
    hidden, markov = torch.zeros(2, 3, 4), torch.zeros(2, 3, 2)
    with pytest.raises(ValueError, match="hidden"):
        head.raw_logits(torch.zeros(2, 4), markov)
    with pytest.raises(ValueError, match="hidden"):
        head.raw_logits(torch.zeros(2, 3, 5), markov)
    with pytest.raises(TypeError, match="hidden"):
        head.raw_logits(torch.zeros(2, 3, 4, dtype=torch.int64), markov)
    with pytest.raises(ValueError, match="hidden"):
        head.raw_logits(torch.full((2, 3, 4), math.nan), markov)
    with pytest.raises(ValueError, match="markov_features"):
        head.raw_logits(hidden, None)
    with pytest.raises(ValueError, match="markov_features"):
        head.raw_logits(hidden, torch.zeros(2, 4, 2))  # checkpoint gamma 4 vs runtime gamma 3
    with pytest.raises(ValueError, match="markov_features"):
        ConfidenceHead(4).raw_logits(hidden, markov)


def test_S7_calibrate_rejects_bad_temperatures():
    raw = torch.zeros(3, 2)
    for bad in ([1.0, 0.0], [1.0, -2.0], [math.nan, 1.0], [math.inf, 1.0]):
        with pytest.raises(ValueError, match="temperatures"):
            calibrate(raw, torch.tensor(bad))
    with pytest.raises(ValueError, match="temperatures"):
        calibrate(raw, torch.ones(3))
    with pytest.raises(ValueError, match="raw"):
        calibrate(torch.tensor([math.nan, 0.0]), torch.ones(2))
    with pytest.raises(ValueError, match="raw"):
        calibrate(torch.tensor(1.0), torch.ones(1))


def test_S7_prefix_survival_rejects_non_probabilities():
    for bad in ([0.5, 1.5], [-0.1, 0.5], [math.nan, 0.5]):
        with pytest.raises(ValueError, match="confidences"):
            prefix_survival(torch.tensor(bad))
    with pytest.raises(TypeError, match="confidences"):
        prefix_survival(torch.tensor([1, 0]))


def test_S7_fit_sts_rejects_bad_inputs():
    raw = torch.zeros(4, 2)
    ok = torch.tensor([[True, True], [True, False], [False, False], [True, False]])
    with pytest.raises(ValueError, match="accepted"):
        fit_sts(raw, torch.tensor([[True, True], [False, True], [False, False], [True, False]]))
    with pytest.raises(TypeError, match="accepted"):
        fit_sts(raw, ok.long())
    with pytest.raises(ValueError, match="accepted"):
        fit_sts(raw, ok[:, :1])
    with pytest.raises(ValueError, match="raw"):
        fit_sts(torch.zeros(4), ok)
    with pytest.raises(ValueError, match="raw"):
        fit_sts(torch.zeros(0, 2), ok[:0])
    with pytest.raises(ValueError, match="raw"):
        fit_sts(torch.full((4, 2), math.nan), ok)
    for grid in ([1.0, 0.0], [-1.0], [], [math.nan]):
        with pytest.raises(ValueError, match="grid"):
            fit_sts(raw, ok, grid=grid)
    with pytest.raises(ValueError, match="n_bins"):
        fit_sts(raw, ok, n_bins=0)


def test_S7_metrics_reject_bad_inputs():
    prob, label = torch.tensor([0.2, 0.8]), torch.tensor([False, True])
    for metric in (ece, brier, auroc):
        name = "score" if metric is auroc else "prob"
        with pytest.raises(ValueError, match=name):
            metric(torch.tensor([0.2, 1.2]), label)
        with pytest.raises(ValueError, match=name):
            metric(torch.tensor([0.2, math.nan]), label)
        with pytest.raises(ValueError, match=name):
            metric(prob[None], label[None])
        with pytest.raises(ValueError, match=name):
            metric(torch.zeros(0), torch.zeros(0, dtype=torch.bool))
        with pytest.raises(TypeError, match="label"):
            metric(prob, label.float())
        with pytest.raises(ValueError, match="label"):
            metric(prob, torch.tensor([True, False, True]))
    with pytest.raises(ValueError, match="label"):
        auroc(prob, torch.tensor([True, True]))
    with pytest.raises(ValueError, match="n_bins"):
        ece(prob, label, n_bins=0)
