"""The two effect tiers (``conformance/budget.py``): which effect a case is sized for, and
the sample sizes that follow from the same power function at TV 0.01 and TV 0.002.

Runs on CPU: the GPU tier's selection logic and arithmetic need no GPU; its cases run on
CPU at the CPU tier's effect (checked by collecting them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance import budget, stats
from conformance.budget import DEFAULT_MIN_TV, GPU_TIER_MIN_TV, PER_ASSERTION_ALPHA, TARGET_POWER

ROOT = Path(__file__).resolve().parents[1]


def test_tier_of_device_types():
    assert (budget.tier_of("cuda"), budget.tier_of("cpu")) == ("gpu", "cpu")
    with pytest.raises(ValueError, match="device_type"):
        budget.tier_of("mps")


@pytest.mark.parametrize(
    "device, marked, expected",
    [("cuda", True, 0.002), ("cpu", True, 0.01), ("cuda", False, 0.01), ("cpu", False, 0.01)],
)
def test_tier_min_tv_only_moves_marked_cases_on_cuda(device, marked, expected):
    assert budget.tier_min_tv(device, marked) == expected


def test_tier_effects_are_declared_once():
    assert budget.TIERS == {"cpu": DEFAULT_MIN_TV, "gpu": GPU_TIER_MIN_TV}
    assert (DEFAULT_MIN_TV, GPU_TIER_MIN_TV) == (0.01, 0.002)


@pytest.mark.parametrize("bins", [2, 4, 5, 8, 16])
def test_gpu_tier_sample_size_is_the_least_n_with_target_power(bins):
    n = stats.sample_size_for_tv(bins, min_tv=GPU_TIER_MIN_TV)
    assert stats.power_chisquare(n, bins, GPU_TIER_MIN_TV, PER_ASSERTION_ALPHA) >= TARGET_POWER
    assert stats.power_chisquare(n - 1, bins, GPU_TIER_MIN_TV, PER_ASSERTION_ALPHA) < TARGET_POWER


@pytest.mark.parametrize("bins", [2, 4, 5, 8, 16])
def test_gpu_tier_draws_25_times_the_cpu_tier(bins):
    # Noncentrality 4 n TV^2: the real-valued solutions scale exactly by (0.01 / 0.002)^2;
    # each integer size is its solution rounded up, so the two differ by less than 25 + 1.
    cpu = stats.sample_size_for_tv(bins, min_tv=DEFAULT_MIN_TV)
    gpu = stats.sample_size_for_tv(bins, min_tv=GPU_TIER_MIN_TV)
    assert abs(gpu - 25 * cpu) <= 26


def test_gpu_tier_power_at_its_effect_from_a_result_record():
    n = stats.sample_size_for_tv(5, min_tv=GPU_TIER_MIN_TV)
    counts = [n // 5] * 4 + [n - 4 * (n // 5)]
    result = stats.goodness_of_fit(counts, [0.2] * 5, name="tests/tiers/record", min_tv=GPU_TIER_MIN_TV)
    assert result.min_effect == GPU_TIER_MIN_TV and result.power_at_min_effect >= TARGET_POWER


def _collect(marker: str) -> list[str]:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-m", marker,
               "conformance/suite/test_sampling.py"]
    child = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert child.returncode in (0, 5), child.stdout + child.stderr
    return [line for line in child.stdout.splitlines() if "::" in line]


def test_gpu_tier_marks_only_statistical_cases_and_collects_on_cpu():
    tier = _collect("gpu_tier")
    # S3: law 15, mixed batch 1 (two assertions), tiled law 5, fresh noise 2, truncation 5, top-k ties 1
    assert len(tier) == 29
    assert _collect("gpu_tier and not statistical") == []
