"""The tempered law of SPEC S3 / S5, ``softmax(L / max(T, 1e-5))`` in float64: the one
implementation every oracle and test of the suite reads (step sampling, truncation, chain
verification, the S9 draft tree).

Written out (shift by the row max, ``exp``, divide by the sum) rather than ``torch.softmax``:
the same operations in the same order on every call, so two oracles given the same logits
agree bit for bit, and about twice as fast as ``torch.softmax`` on the S9 tree's 5-wide rows
on one thread.

A few fixed-temperature float64 laws stay ``torch.softmax`` (block_law, markov_block.joint_law,
test_folded, test_speculative's sequence law, the S5 round inputs), each with a comment saying
why: switching changes the last bits of 60 to 100% of their rows, so the recorded p-values or
bounds, or (inputs) the import would close a package cycle.
"""

from __future__ import annotations

import torch

from conformance.spec import TEMPERATURE_FLOOR

__all__ = ["tempered_softmax64"]


def tempered_softmax64(logits: torch.Tensor, temperature) -> torch.Tensor:
    """``softmax(L / max(T, TEMPERATURE_FLOOR))`` over the last axis, in float64 on the CPU
    (SPEC S3 "a sampling row uses temperature ``T`` clamped to at least ``1e-5``, and draws
    from ``softmax(L / T)``"; SPEC S5 ``p_j``, ``q_j``).

    Args:
        logits: ``[..., V]`` any float dtype, any device (read, detached, never modified);
            ``-inf`` entries get probability 0.
        temperature: a Python float, a 0-d tensor (one temperature for every row) or a
            ``[B]`` tensor, one per row of ``[B, V]`` logits; clamped to at least
            :data:`~conformance.spec.TEMPERATURE_FLOOR` (0 and negative values included).
    Returns:
        ``[..., V]`` float64 CPU tensor, each row summing to 1 up to rounding.
    """
    temps = torch.as_tensor(temperature, dtype=torch.float64, device="cpu").clamp(min=TEMPERATURE_FLOOR)
    scaled = logits.detach().cpu().double() / (temps[..., None] if temps.ndim else temps)
    weights = torch.exp(scaled - scaled.amax(dim=-1, keepdim=True))
    return weights / weights.sum(dim=-1, keepdim=True)
