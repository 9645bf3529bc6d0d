"""SPEC S5 "Tensor parallelism" as vLLM keeps its ranks in agreement (``TensorParallelRound``).

vLLM's V2 model runner runs the drafter, the verify-length choice and the rejection sampler
on every tensor-parallel rank, and the ranks agree by construction, not by broadcasts of
per-step decisions. One round on one rank, as the worker runs it:

* **Draft**: the drafter's Markov loop (``DSparkSpeculator._sample_sequential``,
  :meth:`.round.SpeculativeRound.seeded_round`) with the request's ``seeds`` and
  ``positions``: vLLM's noise is a counter-based hash of (seed, position) inside
  ``gumbel_sample``, which reads no ``torch.Generator``, so the rank's ``generator`` is not
  read at all (nothing in vLLM's round would read it).
* **Plan** (0.28.0+, vLLM's adaptive verification; :mod:`.scheduler`): the profiled cost
  curves are rank-local measurements, and vLLM synchronises them once, where they are set:
  ``AdaptiveVerificationManager.set_cost_curves`` replaces every rank's curves by rank 0's
  (``get_tp_group().broadcast_object((draft_curve, verify_curve), src=0)``) before
  ``build_cost_tables_from_curves``. The adapter calls ``set_cost_curves`` itself on each
  rank with that rank's curves and vLLM's ``get_tp_group`` answered by :class:`_TPGroup`, a
  ``broadcast_object`` over the suite's :class:`~conformance.contract.RankGroup` (the
  pickled object's length, then its bytes, from ``src``). The budget (``get_num_tokens``)
  and the fill (``reallocate_drafts``) then run on each rank from the same confidences and
  the same tables. The per-step plan itself is not broadcast (vLLM has no such broadcast).
* **Verify**: ``rejection_sample`` over each row's admitted drafts with the same request
  seeds and positions (its coins are hashes of (seed, position) too).

Mapping the suite's inputs: ``sps[b - 1]`` (steps per second at forward batch size ``b``)
becomes the verify curve ``(b, 1000 / sps[b - 1])`` in milliseconds, vLLM's unit (its
``forward_ms`` over ``num_target_tokens``); the suite's table prices the whole step, so the
draft curve is ``[(1, 0.0)]`` (vLLM's ``draft_cost[R]`` adds the same constant to every budget
anyway; :class:`.scheduler.ProductionScheduler` maps a cost table the same way). No CUDA
graphs (``_cudagraph_limit = 0``). ``confidences`` serve as both the stale confidences the
budget reads and the current ones the fill ranks (one block). Every row is scheduled
``gamma`` drafts.

0.25.0 ships no adaptive verification: every row verifies ``gamma`` drafts (vLLM's fixed
``num_speculative_tokens``, also the default of later releases, whose
``enable_adaptive_verification`` is off unless set); ``sps`` is not read there.
0.28.0-0.29.0's ``reallocate_drafts`` pins host memory: the capability needs CUDA there
(:func:`.scheduler.requirement`).

Not mapped (``NotImplementedError``, the suite's skip, raised before any collective): the
gated and rnn heads (vLLM ships the vanilla head), top-k on sampling rows (vLLM's top-k is
the target sampler's, in ``vllm.v1.sample.ops``, not loaded); greedy rows drop ``top_k`` as
``SamplingParams`` does (``top_k = 0`` when ``temperature < _SAMPLING_EPS``).
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from .engine_inputs import request_temperatures, sampling_constants
from .loader import VLLMModules
from .round import SpeculativeRound
from .scheduler import adaptive_manager, admitted_drafts

__all__ = ["TensorParallelRound", "cost_curves"]

_MS_PER_S = 1000.0


def cost_curves(sps) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """``(draft_curve, verify_curve)`` for ``set_cost_curves`` from a steps-per-second table
    (``sps[b - 1] > 0`` at forward batch size ``b``): the verify step costs ``1000 / sps``
    milliseconds at ``b`` target tokens, the draft nothing (module note).

    Raises:
        ValueError: ``sps`` empty, or a value not finite and positive.
    """
    values = [float(v) for v in sps]
    if not values or not all(np.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"sps: expected finite positive steps per second, got {values}")
    return [(1, 0.0)], [(b, _MS_PER_S / v) for b, v in enumerate(values, start=1)]


class _TPGroup:
    """What ``AdaptiveVerificationManager`` calls on vLLM's TP ``GroupCoordinator``:
    ``broadcast_object(obj, src)`` (rank ``src``'s object on every rank; the object itself when
    the group has one rank, as vLLM's). vLLM sends it over its CPU (gloo) group; here it goes
    over the suite's ``RankGroup`` on ``device``, the round's device."""

    def __init__(self, group, device: torch.device) -> None:
        self._group = group
        self._device = device

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        if self._group.world_size == 1:
            return obj
        mine = self._group.rank == src
        payload = pickle.dumps(obj) if mine else b""
        size = torch.tensor([len(payload)], dtype=torch.int64, device=self._device)
        self._group.broadcast(size, src=src)
        if mine:
            data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(self._device)
        else:
            data = torch.empty(int(size.item()), dtype=torch.uint8, device=self._device)
        self._group.broadcast(data, src=src)
        return obj if mine else pickle.loads(data.cpu().numpy().tobytes())


@contextlib.contextmanager
def _tp_group(adaptive, group, device: torch.device) -> Iterator[None]:
    """Answer the adaptive module's ``get_tp_group()`` with :class:`_TPGroup` over ``group``."""
    real = adaptive.get_tp_group
    adaptive.get_tp_group = lambda: _TPGroup(group, device)
    try:
        yield
    finally:
        adaptive.get_tp_group = real


class TensorParallelRound:
    """SPEC S5 one round on one rank, as vLLM's worker runs it (module note)."""

    def __init__(self, modules: VLLMModules) -> None:
        self._modules = modules
        self._round = SpeculativeRound(modules)
        self._eps, self._max_temp = sampling_constants(modules.root, modules.version)

    def plan(self, group, confidences: torch.Tensor, sps) -> torch.Tensor:
        """``lengths[B]`` int64 in ``[0, gamma]`` on the confidences' device: adaptive
        verification with rank 0's cost curves (0.28.0+; a collective), else ``gamma``."""
        rows, gamma = confidences.shape
        if "adaptive" not in self._modules:
            return torch.full((rows,), gamma, dtype=torch.int64, device=confidences.device)
        adaptive = self._modules["adaptive"]
        manager = adaptive_manager(adaptive, confidences, confidences)
        with _tp_group(adaptive, group, confidences.device):
            manager.set_cost_curves(*cost_curves(sps))
        full = torch.full((rows,), gamma, dtype=torch.int64)
        return admitted_drafts(manager, full).to(confidences.device)

    def tp_round(self, group, head_type, state_dict, base_logits, first_prev, hidden, target_logits, temperatures,
                 top_k, confidences, sps, *, generator, seeds, positions):
        rows, _, vocab = base_logits.shape
        device = base_logits.device
        temps = request_temperatures(temperatures, self._eps, self._max_temp)
        if bool(((temps > 0) & (top_k.to(device) < vocab)).any()):
            raise NotImplementedError(
                "top-k on sampling rows: vLLM applies it through vllm.v1.sample.ops.topk_topp_sampler, "
                "which needs vLLM's platform layer (not loaded by the adapter)"
            )
        _, rank = state_dict["W1.weight"].shape
        head = self._round.load_head(head_type, state_dict, vocab, rank, None if hidden is None else hidden.shape[-1],
                                     device, base_logits.dtype)
        lengths = self.plan(group, confidences, sps)
        drafts, accepted, tokens, _ = self._round.seeded_round(
            head, base_logits, first_prev, target_logits, temps, torch.zeros(rows, device=device), seeds, positions,
            lengths, hidden=hidden,
        )
        return drafts, lengths, accepted, tokens
