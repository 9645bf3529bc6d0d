"""Benchmark ``folded``: one drafted block, folded (CUDA graph) against eager (SPEC S4).

Setup per (gamma, B), untimed: ``V = 129280``, a bf16 LM head (base logits ``[B, gamma, V]``
bf16, random), a vanilla Markov head of rank 256 (bf16 weights), every row sampling at
``T = 0.8`` (race and noise on every row: the costlier case), inputs and sampling
parameters staged once into a ``FoldedDraftSampler`` with ``max_bs = B``.

* ``FoldedDraftSampler.replay [graph]``: ``capture(B)`` once, then ``replay(B)`` per block
  (on CPU ``replay`` runs the same body eagerly; the note says so);
* ``FoldedDraftSampler.propose [eager]``: the same body eagerly (the speedup baseline);
* ``sample_block, fresh sampler [eager]``: ``markov.sample_block`` with a new step sampler
  per block that draws fresh noise from a generator (``sample_step(generator=...)``),
  i.e. the eager proposal of ``proposal.propose_block`` without the LM-head matmul;
* ``roofline``: the bytes below at the measured copy bandwidth.

Bytes moved per block (the traffic the folded design cannot avoid; ``s`` = 2 for bf16):
base logits read ``B*gamma*V*s``; Markov projection ``W2`` read once per step,
``gamma*V*r*s``; noise written and read every step, ``gamma*2*B*V*4``; corrected logits
written, ``B*gamma*V*s``. Float32 step-logit temporaries are not counted.
"""

from __future__ import annotations

import itertools

import torch

from dspark_ref.folded import FoldedDraftSampler
from dspark_ref.markov import VanillaMarkovHead, sample_block
from dspark_ref.sampling import sample_step

from .common import CopyBandwidth, Row, Timing, measure, roofline_row

__all__ = ["GAMMAS", "BATCHES", "VOCAB", "RANK", "LM_DTYPE", "block_bytes", "run"]

BENCHMARK = "folded"
GAMMAS = (5, 7)
BATCHES = (1, 64, 256)
VOCAB = 129_280
RANK = 256
LM_DTYPE = torch.bfloat16
QUICK_GAMMAS, QUICK_BATCHES, QUICK_VOCAB, QUICK_RANK = (2,), (1, 4), 512, 8
TEMPERATURE = 0.8
TOP_K_NO_CUT = 1 << 30  # SGLang's "whole vocabulary" top_k: a sampling row


def block_bytes(batch: int, gamma: int, vocab: int, rank: int, itemsize: int) -> int:
    """Bytes one drafted block must move (module note); ``itemsize`` of the LM-head dtype."""
    base_logits = corrected = batch * gamma * vocab * itemsize
    projection = gamma * vocab * rank * itemsize
    noise = gamma * 2 * batch * vocab * 4
    return base_logits + projection + noise + corrected


def _sampler(head, batch: int, gamma: int, vocab: int, device: torch.device) -> FoldedDraftSampler:
    gen = torch.Generator(device).manual_seed(batch * gamma)
    sampler = FoldedDraftSampler(head, max_bs=batch, gamma=gamma, vocab_size=vocab, lm_dtype=LM_DTYPE,
                                 device=device)
    base = (3.0 * torch.randn(batch, gamma, vocab, generator=gen, device=device)).to(LM_DTYPE)
    anchors = torch.randint(0, vocab, (batch,), generator=gen, device=device)
    sampler.load_inputs(base, anchors)
    sampler.stage_sampling_params(batch, temperatures=[TEMPERATURE] * batch, top_k=[TOP_K_NO_CUT] * batch)
    return sampler


def _fresh_sampler_block(sampler: FoldedDraftSampler, batch: int, gen: torch.Generator):
    """Eager ``sample_block`` over the sampler's staged inputs, a new step sampler per block."""
    temps, greedy = sampler.temperatures[:batch], sampler.greedy_mask[:batch]

    def block():
        def step(step_logits, k):
            return sample_step(step_logits, temps, greedy, generator=gen)

        return sample_block(sampler.head, sampler.base_logits[:batch], sampler.first_prev[:batch], None, step)

    return block


def _shape_rows(head, batch: int, gamma: int, vocab: int, timing: Timing, copy: CopyBandwidth) -> list[Row]:
    device = timing.device
    sampler = _sampler(head, batch, gamma, vocab, device)
    shape = f"gamma={gamma} B={batch} V={vocab} bf16 r={head.rank}"
    params = {"gamma": gamma, "B": batch, "V": vocab, "lm_dtype": "bfloat16", "rank": head.rank}
    nbytes = block_bytes(batch, gamma, vocab, head.rank, LM_DTYPE.itemsize)

    def replay():
        sampler.capture(batch)
        return lambda: sampler.replay(batch)

    replay_note = "" if device.type == "cuda" else f"{device.type}: eager body, no CUDA graph"
    gen = torch.Generator(device).manual_seed(gamma * batch + 1)
    return [
        measure(BENCHMARK, shape, "FoldedDraftSampler.replay [graph]", params, replay, timing,
                bytes_moved=nbytes, note=replay_note),
        measure(BENCHMARK, shape, "FoldedDraftSampler.propose [eager]", params,
                lambda: lambda: sampler.propose(batch), timing, bytes_moved=nbytes, baseline=True),
        measure(BENCHMARK, shape, "sample_block, fresh sampler [eager]", params,
                lambda: _fresh_sampler_block(sampler, batch, gen), timing, bytes_moved=nbytes),
        roofline_row(BENCHMARK, shape, "roofline", params, nbytes, copy, "block bytes at copy BW"),
    ]


def run(timing: Timing, copy: CopyBandwidth, *, quick: bool = False) -> list[Row]:
    """Time one drafted block for every (gamma, B) (module note); rows in table order.

    ``quick`` shrinks to ``gamma = 2``, ``B in (1, 4)``, ``V = 512``, rank 8 (CPU smoke runs).
    """
    gammas, batches, vocab, rank = (
        (QUICK_GAMMAS, QUICK_BATCHES, QUICK_VOCAB, QUICK_RANK) if quick else (GAMMAS, BATCHES, VOCAB, RANK)
    )
    head = VanillaMarkovHead(vocab, rank, generator=torch.Generator().manual_seed(0), device=timing.device,
                             dtype=LM_DTYPE)
    rows: list[Row] = []
    for gamma, batch in itertools.product(gammas, batches):
        rows += _shape_rows(head, batch, gamma, vocab, timing, copy)
    return rows
