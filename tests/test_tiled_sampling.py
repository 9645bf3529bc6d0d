"""Reference unit tests of ``dspark_ref.tiled_sampling`` (SPEC S3 tiled exponential race).

The tiled race must pick the untiled race's token for the same noise (greedy rows: the
untiled argmax), barring float32 near-ties, which ``_mismatched_rows`` forgives only when
the two tokens' float64 Gumbel scores agree within ``NEAR_TIE``. A broken combine without
the ``exp(tile_max - global_max)`` rescale is shown to fail that same check.

How the Triton kernel is tested without a GPU: ``triton.jit`` decides at import time
whether the kernel is compiled or interpreted, from ``TRITON_INTERPRET``. So the
interpreter tests (``test_s3_interpreted_*``) run only when this module was imported under
``TRITON_INTERPRET=1``; in a plain run, ``test_s3_triton_interpreter_subprocess`` re-runs
them in a child pytest with that variable set. To run them directly:
``TRITON_INTERPRET=1 python -m pytest tests/test_tiled_sampling.py -k interpreted``.
GPU tests (``@pytest.mark.gpu``) compare the compiled kernel with the torch mirror at the
production vocabularies.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from dspark_ref.sampling import TEMPERATURE_FLOOR, exponential_noise, exponential_race, greedy_argmax
from dspark_ref.tiled_sampling import KERNEL_INTERPRETED, tile_partials, tiled_exponential_race

try:
    import triton
except ImportError:
    triton = None

INF = math.inf
# float64 Gumbel-score gap under which two tokens count as a near-tie (float32 rounding
# of L/T with |L/T| <= ~200 and of the keys stays far below it).
NEAR_TIE = 1e-4

needs_interpreter = pytest.mark.skipif(
    not KERNEL_INTERPRETED, reason="needs TRITON_INTERPRET=1 at import (run by the subprocess test)"
)
needs_compiled_kernel = pytest.mark.skipif(
    not torch.cuda.is_available() or triton is None or KERNEL_INTERPRETED,
    reason="needs CUDA, triton, and the compiled (not interpreted) kernel",
)


def _case(seed, rows, vocab, *, device="cpu", scale=4.0, masked_fraction=0.0, greedy_fraction=0.3):
    """Seeded logits (some -inf), temperatures (some 0), noise and greedy mask."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=generator) * scale
    logits[torch.rand(rows, vocab, generator=generator) < masked_fraction] = -INF
    keep = torch.randint(vocab, (rows,), generator=generator)
    logits[torch.arange(rows), keep] = logits[torch.arange(rows), keep].clamp(min=-scale)
    temperatures = torch.rand(rows, generator=generator) * 2 + 0.05
    temperatures[torch.rand(rows, generator=generator) < 0.1] = 0.0
    noise = exponential_noise((rows, vocab), generator=generator)
    greedy = torch.rand(rows, generator=generator) < greedy_fraction
    return tuple(t.to(device) for t in (logits, temperatures, noise, greedy))


def _untiled(logits, temperatures, noise, greedy):
    return torch.where(greedy, greedy_argmax(logits), exponential_race(logits, temperatures, noise))


def _mismatched_rows(tokens, expected, logits, temperatures, noise, greedy):
    """Rows where ``tokens`` differs from ``expected`` other than by a float32 near-tie.

    Greedy rows must match exactly. Race rows may differ only if the two tokens' float64
    scores ``L/T - log E`` lie within ``NEAR_TIE`` (independent oracle, float64, CPU).
    """
    tokens, expected = tokens.cpu(), expected.cpu()
    temps = temperatures.cpu().double().clamp(min=TEMPERATURE_FLOOR)[:, None]
    scores = logits.cpu().double() / temps - noise.cpu().double().log()
    gap = (scores.gather(1, tokens[:, None]) - scores.gather(1, expected[:, None])).abs().squeeze(1)
    forgiven = ~greedy.cpu() & (gap <= NEAR_TIE)
    return ((tokens != expected) & ~forgiven).nonzero().flatten().tolist()


def _check_against_untiled(seed, rows, vocab, tile, backend, **case):
    logits, temperatures, noise, greedy = _case(seed, rows, vocab, **case)
    tokens = tiled_exponential_race(
        logits, temperatures, noise, greedy_mask=greedy, tile=tile, backend=backend
    )
    expected = _untiled(logits, temperatures, noise, greedy)
    assert tokens.dtype == torch.int64
    assert _mismatched_rows(tokens, expected, logits, temperatures, noise, greedy) == []


shapes = dict(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 4),
    vocab=st.integers(1, 300),
    tile=st.sampled_from([16, 64, 128]),
    masked_fraction=st.sampled_from([0.0, 0.6, 0.97]),
)


# --- torch mirror --------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(**shapes)
def test_s3_torch_tiled_matches_untiled(seed, rows, vocab, tile, masked_fraction):
    _check_against_untiled(seed, rows, vocab, tile, "torch", masked_fraction=masked_fraction)


@pytest.mark.parametrize("vocab", [1023, 1024, 1025])
def test_s3_torch_tiled_matches_untiled_at_tile_edges(vocab):
    _check_against_untiled(vocab, 8, vocab, 1024, "torch")


def test_s3_tiled_greedy_rows_tie_to_lowest_index_across_tiles():
    logits = torch.full((2, 64), -1.0)
    logits[0, [40, 20, 50]] = 3.0  # tied maxima in tiles 1, 1 and 3 of 16
    logits[1, [63, 17]] = 2.0
    greedy = torch.ones(2, dtype=torch.bool)
    tokens = tiled_exponential_race(
        logits, torch.ones(2), torch.ones(2, 64), greedy_mask=greedy, tile=16, backend="torch"
    )
    assert tokens.tolist() == [20, 17]


def test_s3_tiled_zero_probability_never_wins_even_with_zero_noise():
    logits = torch.full((1, 48), -INF)
    logits[0, 33] = 0.0  # the only finite logit, alone in tile 2 of 16
    noise = torch.zeros(1, 48)
    noise[0, 33] = 5.0
    assert tiled_exponential_race(logits, torch.ones(1), noise, tile=16, backend="torch").tolist() == [33]


def _dead_tail_case(vocab: int, seed: int = 0):
    """SPEC S3 degenerate inputs: the columns past the last multiple of 1024 all -inf (rows
    0, 2) or 1e4 below the rest (row 1), noise 0 there; row 3 greedy."""
    generator = torch.Generator().manual_seed(seed)
    tail = vocab % 1024
    logits = torch.randn(4, vocab, generator=generator) * 2
    noise = exponential_noise((4, vocab), generator=generator)
    logits[:, vocab - tail:] = -INF
    logits[1, vocab - tail:] = logits[1, : vocab - tail].min() - 1e4
    noise[:, vocab - tail:] = 0.0
    greedy = torch.tensor([False, False, False, True])
    return logits, torch.tensor([1.0, 1.0, 0.5, 0.0]), noise, greedy, tail


@pytest.mark.parametrize("vocab", [1025, 8193, 10_000, 151_936])
def test_s3_tiled_zero_mass_last_tile_never_wins(vocab):
    logits, temperatures, noise, greedy, tail = _dead_tail_case(vocab)
    tokens = tiled_exponential_race(logits, temperatures, noise, greedy_mask=greedy, tile=1024, backend="torch")
    assert bool((tokens < vocab - tail).all()), tokens.tolist()
    assert _mismatched_rows(tokens, _untiled(logits, temperatures, noise, greedy), logits, temperatures, noise,
                            greedy) == []


def test_s3_tiled_zero_noise_on_a_token_whose_mass_underflows_after_the_rescale():
    # Tile 1's max is 60 below the row max (rescale e^-60 > 0) and token 20 is 110 below it:
    # its own weight e^-50 > 0, so E = 0 gives it an infinite tile key, but its probability
    # e^-110 is 0 in float32, as the untiled race sees it.
    logits = torch.zeros(1, 32)
    logits[0, 16:] = -60.0
    logits[0, 20] = -110.0
    noise = torch.ones(1, 32)
    noise[0, 20] = 0.0
    expected = exponential_race(logits, torch.ones(1), noise)
    assert tiled_exponential_race(logits, torch.ones(1), noise, tile=16, backend="torch").tolist() == expected.tolist()


def _combine_without_rescale(logits, temperatures, noise, tile):
    """A classic bug: compare tile keys measured against their own tile maxima."""
    _, tile_key, tile_idx = tile_partials(logits, temperatures, noise, tile=tile, backend="torch")
    return tile_idx.gather(1, tile_key.argmax(dim=1, keepdim=True)).squeeze(1)


def test_s3_tiled_check_rejects_a_combine_without_rescale():
    # Tile 0 holds p ~ 1 (logit 10, E = 1); tile 1 holds p ~ e^-10 (logit 0, E = 0.5).
    # Unscaled tile keys are 1 and 2, so the broken combine picks tile 1's token.
    logits = torch.full((1, 32), -INF)
    logits[0, 3], logits[0, 20] = 10.0, 0.0
    noise = torch.ones(1, 32)
    noise[0, 20] = 0.5
    temperatures, greedy = torch.ones(1), torch.zeros(1, dtype=torch.bool)
    expected = exponential_race(logits, temperatures, noise)
    broken = _combine_without_rescale(logits, temperatures, noise, 16)
    fixed = tiled_exponential_race(logits, temperatures, noise, tile=16, backend="torch")
    assert (expected.item(), broken.item(), fixed.item()) == (3, 20, 3)
    assert _mismatched_rows(broken, expected, logits, temperatures, noise, greedy) == [0]
    assert _mismatched_rows(fixed, expected, logits, temperatures, noise, greedy) == []


def test_s3_tiled_combine_without_rescale_fails_on_random_rows():
    logits, temperatures, noise, greedy = _case(0, 64, 300, greedy_fraction=0.0)
    broken = _combine_without_rescale(logits, temperatures, noise, 64)
    expected = _untiled(logits, temperatures, noise, greedy)
    assert len(_mismatched_rows(broken, expected, logits, temperatures, noise, greedy)) > 0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(tile=100), ValueError, "tile"),
        (dict(tile=8), ValueError, "tile"),
        (dict(tile=64.0), TypeError, "tile"),
        (dict(backend="cuda"), ValueError, "backend"),
        (dict(greedy_mask=torch.zeros(2, dtype=torch.int64)), TypeError, "greedy_mask"),
        (dict(greedy_mask=torch.zeros(3, dtype=torch.bool)), ValueError, "greedy_mask"),
        (dict(noise=torch.ones(2, 5)), ValueError, "noise"),
        (dict(temperatures=torch.tensor([1.0, -1.0])), ValueError, "temperatures"),
        (dict(logits=torch.tensor([[0.0, 1.0, math.nan, 0.0], [0.0] * 4])), ValueError, "logits"),
    ],
)
def test_s3_tiled_rejects_bad_input(kwargs, error, match):
    args = dict(logits=torch.zeros(2, 4), temperatures=torch.ones(2), noise=torch.ones(2, 4))
    args.update(kwargs)
    logits, temperatures, noise = args.pop("logits"), args.pop("temperatures"), args.pop("noise")
    with pytest.raises(error, match=match):
        tiled_exponential_race(logits, temperatures, noise, **args)


@pytest.mark.skipif(
    KERNEL_INTERPRETED or triton is None or torch.cuda.is_available(), reason="CPU, compiled kernel"
)
def test_s3_triton_backend_on_cpu_without_interpreter_is_an_error():
    with pytest.raises(ValueError, match="backend"):
        tiled_exponential_race(torch.zeros(1, 4), torch.ones(1), torch.ones(1, 4), tile=16, backend="triton")


# --- Triton kernel under the interpreter ---------------------------------------------


@pytest.mark.skipif(KERNEL_INTERPRETED or triton is None, reason="already interpreted, or no triton")
def test_s3_triton_interpreter_subprocess():
    """Re-run this module's ``interpreted`` tests in a child with TRITON_INTERPRET=1."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, TRITON_INTERPRET="1")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
               "-k", "interpreted", str(Path(__file__).resolve())]
    child = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0 and " passed" in child.stdout, child.stdout + child.stderr
    assert "skipped" not in child.stdout, child.stdout


@needs_interpreter
def test_s3_interpreted_auto_backend_is_triton_on_cpu():
    logits, temperatures, noise, greedy = _case(1, 3, 40)
    auto = tiled_exponential_race(logits, temperatures, noise, greedy_mask=greedy, tile=16)
    forced = tiled_exponential_race(
        logits, temperatures, noise, greedy_mask=greedy, tile=16, backend="triton"
    )
    assert torch.equal(auto, forced)


@needs_interpreter
@settings(max_examples=25, deadline=None)
@given(**shapes)
def test_s3_interpreted_triton_matches_untiled(seed, rows, vocab, tile, masked_fraction):
    _check_against_untiled(seed, rows, vocab, tile, "triton", masked_fraction=masked_fraction)


@needs_interpreter
def test_s3_interpreted_triton_matches_untiled_at_tile_edges():
    for vocab in (1023, 1024, 1025):
        _check_against_untiled(vocab, 2, vocab, 1024, "triton")


@needs_interpreter
def test_s3_interpreted_triton_greedy_ties_and_zero_noise():
    logits = torch.full((2, 64), -INF)
    logits[0, [40, 20, 50]] = 3.0
    logits[1, 33] = 0.0
    noise = torch.zeros(2, 64)
    noise[1, 33] = 5.0
    greedy = torch.tensor([True, False])
    tokens = tiled_exponential_race(
        logits, torch.ones(2), noise, greedy_mask=greedy, tile=16, backend="triton"
    )
    assert tokens.tolist() == [20, 33]


@needs_interpreter
def test_s3_interpreted_triton_zero_mass_last_tile_never_wins():
    for vocab in (1025, 8193, 10_000):
        logits, temperatures, noise, greedy, tail = _dead_tail_case(vocab)
        tokens = tiled_exponential_race(logits, temperatures, noise, greedy_mask=greedy, tile=1024, backend="triton")
        assert bool((tokens < vocab - tail).all()), (vocab, tokens.tolist())
        assert _mismatched_rows(tokens, _untiled(logits, temperatures, noise, greedy), logits, temperatures, noise,
                                greedy) == []


# --- compiled Triton kernel on a GPU -------------------------------------------------


@pytest.mark.gpu
@needs_compiled_kernel
@pytest.mark.parametrize("vocab", [129_280, 151_936])
@pytest.mark.parametrize("rows", [1, 64, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_s3_gpu_triton_matches_torch_mirror(rows, vocab, dtype):
    logits, temperatures, noise, greedy = _case(rows * 7 + vocab, rows, vocab, device="cuda")
    logits = logits.to(dtype)
    args = (logits, temperatures, noise)
    triton_tokens = tiled_exponential_race(*args, greedy_mask=greedy, backend="triton")
    torch_tokens = tiled_exponential_race(*args, greedy_mask=greedy, backend="torch")
    assert torch.equal(triton_tokens, torch_tokens)
    expected = _untiled(logits, temperatures, noise, greedy)
    assert _mismatched_rows(triton_tokens, expected, logits.float(), temperatures, noise, greedy) == []
