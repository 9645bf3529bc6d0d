"""Benchmark ``throughput``: the cost of the suite's distributional assertions (SPEC S3).

A statistical case of ``conformance/suite/test_sampling.py`` repeats one logits row ``n`` times,
samples every row once through the reference adapter's ``StepSampler`` and feeds the token
counts to ``stats.goodness_of_fit``. This times both halves at ``V = 16`` with ``n`` from
``stats.sample_size_for_tv(16)`` (224581 at the default budget):

* ``reference StepSampler + bincount``: ``StepSampler.sample(logits[n, V], T = 1,
  top_k = V, generator)`` (``sample_step`` with fresh noise) in one call, then
  ``torch.bincount`` (the counts the test hands over); the note gives draws per second,
  ``n / median``;
* ``stats.goodness_of_fit``: one chi-square call on those counts (host code, timed on the
  host whatever the device; recorded in a private ledger, not the run's).

No bytes are counted: at ``V = 16`` the step is bound by kernel launches, not memory.
"""

from __future__ import annotations

import dataclasses

import torch

from conformance import stats
from conformance.adapters.reference import StepSampler
from conformance.budget import StatLedger

from .common import CopyBandwidth, Row, Timing, measure, skipped_row

__all__ = ["VOCAB", "run"]

BENCHMARK = "throughput"
VOCAB = 16
QUICK_DRAWS = 20_000


def _draws_row(logits, timing: Timing, draws: int) -> tuple[Row, torch.Tensor | None]:
    """The timed draw, and the counts of one more draw (None if drawing failed)."""
    device = timing.device
    temps = torch.ones(draws, device=device)
    top_k = torch.full((draws,), VOCAB, dtype=torch.int64, device=device)  # > 1: sampling rows
    gen = torch.Generator(device).manual_seed(draws)
    sampler = StepSampler()

    def draw_counts():
        tokens = sampler.sample(logits, temps, top_k, VOCAB, gen)
        return torch.bincount(tokens, minlength=VOCAB)

    params = {"V": VOCAB, "n": draws}
    row = measure(BENCHMARK, f"V={VOCAB} n={draws}", "reference StepSampler + bincount", params, lambda: draw_counts,
                  timing)
    if not row.median_ms:
        return row, None
    row.params["draws_per_s"] = draws / (row.median_ms * 1e-3)
    row.note = f"{row.params['draws_per_s']:.3g} draws/s"
    return row, draw_counts().cpu()


def run(timing: Timing, copy: CopyBandwidth | None = None, *, quick: bool = False) -> list[Row]:
    """Time the draw and the chi-square test of one statistical case (module note).

    ``copy`` is unused (no bytes counted); ``quick`` draws ``n = 20000`` instead.
    """
    draws = QUICK_DRAWS if quick else stats.sample_size_for_tv(VOCAB)
    row = torch.linspace(-2.0, 2.0, VOCAB, dtype=torch.float32)
    logits = row.to(timing.device).expand(draws, -1).contiguous()
    draw_row, counts = _draws_row(logits, timing, draws)
    gof_shape, gof_params = f"k={VOCAB} bins n={draws}", {"k": VOCAB, "n": draws}
    if counts is None:
        return [draw_row, skipped_row(BENCHMARK, gof_shape, "stats.goodness_of_fit", gof_params, "no counts drawn")]
    probs = torch.softmax(row.double(), dim=0)
    ledger = StatLedger()

    def test_counts():
        return stats.goodness_of_fit(counts, probs, name="bench/throughput/goodness-of-fit", ledger=ledger)

    host = dataclasses.replace(timing, device=torch.device("cpu"))
    gof_row = measure(BENCHMARK, gof_shape, "stats.goodness_of_fit", gof_params, lambda: test_counts, host,
                      note="host (scipy)")
    return [draw_row, gof_row]
