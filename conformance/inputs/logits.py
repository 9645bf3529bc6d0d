"""Rows of step logits of named families: the laws the S3 samplers and S5 verifiers are fed."""

from __future__ import annotations

import math

import torch

from conformance.checks import check_choice, check_int

__all__ = ["LOGIT_FAMILIES", "NO_TOP_K_CUT", "logit_rows"]

LOGIT_FAMILIES = ("flat", "peaked", "near-tie", "random")
#: ``top_k`` of a row with no top-k cut (SGLang's TOP_K_ALL): a sampling row under either greedy
#: rule when its temperature is at least 1e-5 (SPEC S3).
NO_TOP_K_CUT = 1 << 30


def logit_rows(family: str, batch: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """``[batch, vocab]`` float32 logits of one family, drawn from the CPU ``generator``.

    * ``flat``: all zeros (uniform law; draws nothing);
    * ``peaked``: one token holds about half the mass at T = 1, the rest near uniform;
    * ``near-tie``: two leading tokens 1e-3 apart, far above the rest;
    * ``random``: iid N(0, 2^2), a generic mid-entropy law.

    Raises:
        ValueError: unknown ``family`` (choices listed), ``batch`` or ``vocab`` < 1.
        TypeError: ``batch`` or ``vocab`` not an int.

    Example:
        >>> logit_rows("near-tie", 2, 5, torch.Generator().manual_seed(0)).shape
        torch.Size([2, 5])
    """
    check_choice("family", family, LOGIT_FAMILIES)
    check_int("batch", batch, minimum=1)
    check_int("vocab", vocab, minimum=1)
    if family == "flat":
        return torch.zeros(batch, vocab)
    noise = torch.randn(batch, vocab, generator=generator)
    if family == "random":
        return 2.0 * noise
    logits = 0.1 * noise
    top = torch.randint(vocab, (batch,), generator=generator)
    rows = torch.arange(batch)
    if family == "peaked":
        # log(V - 1) above the rest: the top token weighs about as much as all others together.
        logits[rows, top] += torch.log(torch.tensor(float(max(vocab - 1, 1))))
    else:
        logits[rows, top] = 6.0
        logits[rows, (top + 1) % vocab] = 6.0 - 1e-3
    return logits
