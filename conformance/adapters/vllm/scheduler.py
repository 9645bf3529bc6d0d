"""SPEC S8 production variant through vLLM's adaptive verification (0.28.0+).

vLLM's ``AdaptiveVerificationManager`` (``spec_decode/adaptive_verification.py``) schedules
in two calls per step, and the adapter makes both on the manager itself:

* ``get_num_tokens``: the draft budget, the argmax over budgets of ``(sampling requests +
  top-k stale survivals) / (draft_cost[R] + verify_cost[R + k])``, the stale confidences
  read from the manager's host slot (the copy of an earlier step's confidences);
* ``reallocate_drafts``: the budget's slots ranked by ``_confidence_probs``, the
  confidences ``record_confidences`` last published, i.e. those of the block about to be
  verified (the current block), in ``_assign_draft_token_budget``'s top-k (0.34.0: the
  Triton ``assign_draft_token_budget``, a threshold search with ties in request order,
  over the manager's ``_draft_survival`` scratch).

Smallest faithful inputs: the manager's ``__init__`` opens CUDA streams and pinned
buffers, so the manager is made with ``object.__new__`` and given the state those two calls
read: one slot per request (``idx_mapping`` the identity), every request decoding one
bonus token and ``max_lengths[r]`` scheduled drafts (vLLM's per-request maximum: its
eligible slots), the stale confidences in the read slot, the current ones in
``_confidence_probs``, cost tables ``draft = 0`` and ``verify[b] = cost[b - 1]`` (what
``build_cost_tables_from_curves`` would return for a profiled curve through those points).
vLLM has no minimum length: other minimums raise ``NotImplementedError``.

Where it runs: 0.28.0-0.29.0's ``reallocate_drafts`` copies to the device through
``buffer_utils.async_copy_to_gpu``, which pins host memory (``Tensor.pin_memory``, a CUDA
call even for a CPU target), so those releases need CUDA (:func:`requirement`); 0.33.0's
``async_tensor_h2d`` pins only where the platform has pinned memory, and runs on CPU too.
"""

from __future__ import annotations

import inspect
import types

import numpy as np
import torch

from conformance.contract import Requirement

from .loader import VLLMModules

__all__ = ["ProductionScheduler", "adaptive_manager", "admitted_drafts", "requirement"]

_PINNING_COPY = Requirement(
    devices=("cuda",), reason="this release's reallocate_drafts pins host memory (buffer_utils.async_copy_to_gpu)"
)


def requirement(modules: VLLMModules) -> Requirement | None:
    """Where the loaded vLLM's adaptive verification runs: CUDA only when its
    ``reallocate_drafts`` copies through ``async_copy_to_gpu`` (module note); None: anywhere."""
    return _PINNING_COPY if hasattr(modules["adaptive"], "async_copy_to_gpu") else None

_BONUS_TOKENS = 1  # one target-sampled token per request (no DSpark anchor extra)


def _request_states(rows: int, gamma: int, device: torch.device) -> types.SimpleNamespace:
    """What the manager reads of ``RequestState``: slots, every request past prefill, and the
    table sizes ``set_cost_curves`` builds for (``rows`` requests, ``rows (gamma + 1)`` tokens)."""
    return types.SimpleNamespace(
        req_id_to_index={f"r{i}": i for i in range(rows)},
        num_computed_tokens_np=np.full(rows, 1 << 20, dtype=np.int32),
        prefill_len=types.SimpleNamespace(np=np.ones(rows, dtype=np.int32)),
        max_num_reqs=rows,
        max_num_batched_tokens=rows * (gamma + _BONUS_TOKENS),
        device=device,
    )


def adaptive_manager(adaptive: types.ModuleType, stale: torch.Tensor, current: torch.Tensor) -> object:
    """An ``AdaptiveVerificationManager`` (module note) over ``stale [R, gamma]`` and ``current
    [R, gamma]`` confidences (float, in [0, 1]), no cost tables yet, no CUDA graphs."""
    rows, gamma = stale.shape
    device = current.device
    manager = object.__new__(adaptive.AdaptiveVerificationManager)
    manager.req_states = _request_states(rows, gamma, device)
    manager.num_speculative_steps = gamma
    manager.num_bonus_tokens = _BONUS_TOKENS
    manager._max_total_logits = rows * (gamma + _BONUS_TOKENS)
    manager.cost_tables = None
    manager._cudagraph_limit = 0
    manager._stale_confidences = [types.SimpleNamespace(np=stale.cpu().float().numpy().copy())]
    manager._stale_idx = 0
    manager._batch_budget = None
    manager._confidence_probs = current.float().clone()
    manager._batch_draft_capacity = torch.empty(rows, dtype=torch.int32, device=device)
    manager._num_non_draft_tokens = torch.empty(rows, dtype=torch.int32, device=device)
    manager._cu_num_logits = torch.empty(rows + 1, dtype=torch.int32, device=device)
    manager.query_start_loc = torch.empty(rows + 1, dtype=torch.int32, device=device)
    manager._copy_admitted_drafts_to_host = False
    if _takes_survival_scratch(adaptive):
        # 0.34.0+: the Triton budget kernel's int32 scratch, one slot per (request, step).
        manager._draft_survival = torch.empty(rows * gamma, dtype=torch.int32, device=device)
    return manager


def _takes_survival_scratch(adaptive: types.ModuleType) -> bool:
    """Whether the installed draft-budget function (``assign_draft_token_budget``, 0.34.0+)
    takes the manager's ``survival`` scratch buffer."""
    budget = getattr(adaptive, "assign_draft_token_budget", None)
    return budget is not None and "survival" in inspect.signature(budget).parameters


def admitted_drafts(manager: object, max_lengths: torch.Tensor) -> torch.Tensor:
    """``lengths[R]`` int64: the manager's step, ``get_num_tokens`` (the budget) then
    ``reallocate_drafts`` (the fill), for requests scheduled with ``max_lengths[R]`` drafts
    each; on the manager's device."""
    rows = max_lengths.shape[0]
    drafts = {f"r{i}": [0] * int(n) for i, n in enumerate(max_lengths.tolist())}
    manager.get_num_tokens({r: _BONUS_TOKENS + len(d) for r, d in drafts.items()}, drafts)
    idx_mapping = torch.arange(rows, dtype=torch.int32, device=manager.req_states.device)
    cu_num_logits = manager.reallocate_drafts(list(drafts), idx_mapping)[0]
    return (cu_num_logits.diff() - _BONUS_TOKENS).to(torch.int64)


class ProductionScheduler:
    """SPEC S8 production variant through ``AdaptiveVerificationManager``."""

    def __init__(self, modules: VLLMModules) -> None:
        self._adaptive = modules["adaptive"]

    def schedule_production(self, stale_confidences, confidences, cost, min_lengths, max_lengths):
        if bool((min_lengths != 0).any()):
            raise NotImplementedError("vLLM's adaptive verification has no minimum verify length")
        rows = stale_confidences.shape[0]
        manager = adaptive_manager(self._adaptive, stale_confidences, confidences)
        manager.cost_tables = (np.zeros(rows + 1), np.array([cost[0], *cost], dtype=np.float64))
        return admitted_drafts(manager, max_lengths).to(stale_confidences.device)
