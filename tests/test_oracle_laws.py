"""The one tempered law of the suite's oracles (``conformance/oracles/laws.py``): SPEC S3's
``softmax(L / max(T, 1e-5))`` in float64, against the formula written out with ``math``."""

from __future__ import annotations

import math

import pytest
import torch

from conformance.oracles.laws import tempered_softmax64
from conformance.spec import TEMPERATURE_FLOOR


def _softmax(logits: list[float], temperature: float) -> list[float]:
    weights = [math.exp((x - max(logits)) / temperature) if x > -math.inf else 0.0 for x in logits]
    return [w / sum(weights) for w in weights]


@pytest.mark.parametrize("temperature", [0.0, -1.0, 1e-7, 9.99e-6, TEMPERATURE_FLOOR])
def test_temperatures_below_the_floor_act_as_the_floor(temperature):
    """SPEC S3: ``0 < T < 1e-5`` (and the 0 / negative values a caller clamps) race at 1e-5:
    logits 5e-6 apart spread to ``L / T = 0, 0.5, 1``, neither uniform nor one-hot."""
    logits = torch.tensor([[0.0, 5e-6, 1e-5]], dtype=torch.float64)
    got = tempered_softmax64(logits, temperature)
    assert got[0].tolist() == pytest.approx(_softmax([0.0, 0.5, 1.0], 1.0), rel=1e-9)


def test_one_temperature_per_row_and_zero_mass_at_minus_infinity():
    logits = torch.tensor([[2.0, -1.0, -math.inf, 0.5], [0.0, 3.0, 1.0, -math.inf]], dtype=torch.float32)
    before = logits.clone()
    got = tempered_softmax64(logits, torch.tensor([0.7, 2.5], dtype=torch.float32))
    assert got.dtype == torch.float64 and got.device.type == "cpu" and got.shape == (2, 4)
    for row, t in zip(range(2), (0.7, 2.5)):
        assert got[row].tolist() == pytest.approx(_softmax(logits[row].tolist(), float(torch.tensor(t))), rel=1e-12)
    assert got[0, 2] == 0.0 and got[1, 3] == 0.0
    assert torch.equal(logits, before)


def test_a_scalar_temperature_is_one_law_for_every_row():
    """A float, a 0-d tensor and a ``[B]`` tensor of the same value give the same bits."""
    logits = torch.randn(3, 2, 9, generator=torch.Generator().manual_seed(5))
    scalar = tempered_softmax64(logits, 1.3)
    assert torch.equal(scalar, tempered_softmax64(logits, torch.tensor(1.3, dtype=torch.float64)))
    assert torch.equal(scalar[0], tempered_softmax64(logits[0], torch.full((2,), 1.3, dtype=torch.float64)))


def test_each_row_is_shifted_by_its_own_max():
    """Softmax is shift-invariant per row: rows 1000 nats apart keep their laws (a shift by
    the batch's max would underflow the lower row to 0 / 0)."""
    got = tempered_softmax64(torch.tensor([[0.0, 1.0], [1000.0, 1001.0]], dtype=torch.float64), 1.0)
    assert got[0].tolist() == pytest.approx(_softmax([0.0, 1.0], 1.0), rel=1e-12)
    assert torch.equal(got[0], got[1])
