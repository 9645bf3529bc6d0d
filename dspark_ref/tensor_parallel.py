"""One speculative round on one rank of a tensor-parallel group (SPEC S5 "Tensor parallelism", S8, S10).

Every rank of a tensor-parallel (TP) group runs the drafter, the scheduler and the verifier
on the same request inputs, and all ranks must commit the same tokens. Two things can make
ranks diverge even on identical inputs: random draws taken from a rank's own generator
state, and decisions taken from rank-local measurements (a steps-per-second table each
rank profiles itself). The reference avoids both:

* every random number comes from the request's seed (seeded rows:
  :func:`dspark_ref.speculative_round.draft_and_verify` draws the draft noise from stream 2
  and the verifier's coins from streams 0 and 1), never from the rank's generator;
* the verify budget is rank 0's plan, broadcast to the group (SGLang's ``SpecTpSync``
  broadcasts it at its ``DSPARK_PLAN`` site the same way).

``group`` is any object with ``rank``, ``world_size`` and ``broadcast(tensor, src)`` (in
place, collective: every rank calls it), e.g. a wrapper of ``torch.distributed``. Each step
a variant may replace is one method of :class:`TPSteps` (the plan, the round's parts, the
verification of the rows that share a verify length).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch
from torch import Tensor

from dspark_ref._checks import FLOAT_DTYPES, INT_DTYPES, check_tensor
from dspark_ref.markov import MarkovHead
from dspark_ref.scheduler import schedule_prefixes
from dspark_ref.speculative_round import RoundParts, draft_and_verify
from dspark_ref.verify import VerifyResult, chain_verify

__all__ = ["TPRoundResult", "TPSteps", "tp_round"]


@dataclasses.dataclass(frozen=True)
class TPRoundResult:
    """One rank's round (SPEC S5).

    Attributes:
        draft_tokens: ``[B, gamma]`` int64 drafted block.
        verify_lengths: ``[B]`` int64 in ``[0, gamma]``, the drafts each row verified.
        accepted: ``[B]`` int64 in ``[0, verify_lengths]``.
        tokens: ``[B, gamma + 1]`` int64 committed tokens, ``-1`` after them.
    """

    draft_tokens: Tensor
    verify_lengths: Tensor
    accepted: Tensor
    tokens: Tensor


class TPSteps:
    """The rank-dependent steps of :func:`tp_round`, one overridable method each."""

    def plan(self, group: Any, confidences: Tensor, sps: Sequence[float]) -> Tensor:
        """Verify lengths ``[B]`` int64: Algorithm 1 (SPEC S8) on this rank's ``sps``, then
        rank 0's lengths broadcast to the group (``sps`` is a rank-local measurement)."""
        lengths = schedule_prefixes(confidences, sps).to(torch.int64).contiguous()
        group.broadcast(lengths, src=0)
        return lengths

    def round_parts(self, group: Any, generator: torch.Generator | None) -> RoundParts:
        """The round's steps on this rank, given the rank's own ``generator``: the SPEC's,
        which draw from the request's seed only and never read ``generator``."""
        return RoundParts()

    def verify(self, generator: torch.Generator | None, draft_tokens: Tensor, target_logits: Tensor,
               temperatures: Tensor, greedy_mask: Tensor, seeds: Tensor, positions: Tensor,
               draft_probs: Tensor) -> VerifyResult:
        """Chain verification (SPEC S5) of the rows that share one verify length ``l``:
        ``draft_tokens [R, l]``, ``target_logits [R, l + 1, V]``, ``draft_probs [R, l, V]``,
        ``temperatures`` / ``greedy_mask`` / ``seeds`` / ``positions`` ``[R]``. Every draw comes
        from the request's seed, rows with ``l = 0`` (which emit their draw from ``p_1``)
        included; the rank's own ``generator`` is never read."""
        return chain_verify(draft_tokens, target_logits, None, temperatures, greedy_mask, seeds=seeds,
                            positions=positions, draft_probs=draft_probs)


@torch.no_grad()
def tp_round(
    group: Any,
    head: MarkovHead,
    base_logits: Tensor,
    first_prev: Tensor,
    hidden: Tensor | None,
    target_logits: Tensor,
    temperatures: Tensor,
    greedy_mask: Tensor,
    confidences: Tensor,
    sps: Sequence[float],
    *,
    seeds: Tensor,
    positions: Tensor,
    generator: torch.Generator | None = None,
    steps: TPSteps | None = None,
) -> TPRoundResult:
    """Draft, schedule and verify one block on one TP rank (SPEC S5, S8, S9).

    The block is drafted with every row seeded (``seeds``, ``positions``); the verify length
    of each row is :meth:`TPSteps.plan`'s; the first ``l_r`` drafts of row ``r`` are verified
    against ``target_logits[:, :l_r + 1]`` with the drafter's laws (a row with ``l_r = 0``
    emits its draw from ``p_1``). ``generator`` is this rank's own generator, handed to
    :meth:`TPSteps.round_parts`: the SPEC steps never read it.

    Args:
        group: ``rank``, ``world_size``, ``broadcast(tensor, src)`` (see the module docstring).
        head, base_logits ``[B, gamma, V]``, first_prev ``[B]``, hidden, target_logits
            ``[B, gamma + 1, V]``, temperatures ``[B]``, greedy_mask ``[B]``: as
            :func:`dspark_ref.speculative_round.draft_and_verify`.
        confidences: ``[B, gamma]`` float in ``[0, 1]``, the scheduler's input (SPEC S8).
        sps: steps per second at batch sizes ``1 .. B * (gamma + 1)``.
        seeds, positions: ``[B]`` int64, the request's seed and first draft position.
        generator: this rank's generator (only :meth:`TPSteps.round_parts` sees it).
        steps: a :class:`TPSteps` (default: the SPEC steps).
    Returns:
        :class:`TPRoundResult`.
    Raises:
        TypeError / ValueError: as ``draft_and_verify`` and ``schedule_prefixes``; naming
            ``confidences``, ``seeds`` or ``group`` on bad input.
    """
    steps = TPSteps() if steps is None else steps
    _check_tp_round(group, base_logits, confidences, seeds, positions, steps)
    rows, gamma, _ = base_logits.shape
    lengths = steps.plan(group, confidences, sps)
    # The round's own full-length verification is not used: the rows verify their planned prefixes below.
    block = draft_and_verify(head, base_logits, first_prev, hidden, target_logits, temperatures, greedy_mask,
                             seeds=seeds, positions=positions, parts=steps.round_parts(group, generator))
    q = block.draft_probs
    accepted = torch.zeros(rows, dtype=torch.int64, device=base_logits.device)
    tokens = torch.full((rows, gamma + 1), -1, dtype=torch.int64, device=base_logits.device)
    for length in sorted(set(lengths.tolist())):
        picked = (lengths == length).nonzero()[:, 0]
        result = steps.verify(generator, block.draft_tokens[picked, :length], target_logits[picked, : length + 1],
                              temperatures[picked], greedy_mask[picked], seeds[picked], positions[picked],
                              q[picked, :length])
        accepted[picked] = result.accepted
        tokens[picked, : length + 1] = result.tokens
    return TPRoundResult(block.draft_tokens, lengths, accepted, tokens)


def _check_tp_round(group, base_logits, confidences, seeds, positions, steps) -> None:
    for attribute in ("rank", "world_size", "broadcast"):
        if not hasattr(group, attribute):
            raise TypeError(f"group: expected rank, world_size and broadcast(tensor, src), got "
                            f"{type(group).__name__} without {attribute!r}")
    check_tensor("base_logits", base_logits, ndim=3, dtypes=FLOAT_DTYPES)
    rows, gamma, _ = base_logits.shape
    check_tensor("confidences", confidences, shape=(rows, gamma), dtypes=FLOAT_DTYPES)
    check_tensor("seeds", seeds, shape=(rows,), dtypes=INT_DTYPES)
    check_tensor("positions", positions, shape=(rows,), dtypes=INT_DTYPES)
    if not isinstance(steps, TPSteps):
        raise TypeError(f"steps: expected a TPSteps, got {type(steps).__name__}")
