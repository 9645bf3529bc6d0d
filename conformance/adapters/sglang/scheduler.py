"""SPEC S8 production variant through SGLang's verify-budget planner (0.5.17+, every version).

SGLang's ``DSparkVerifyPlanner`` (``dspark_components/dspark_planner.py``) schedules in two
calls per step, and the adapter makes both:

* the budget: ``HostConfidenceBudgetPlanner.compute_budget`` over the relayed (stale)
  confidences, ``compute_verify_token_budget``'s argmax over budgets of ``(R + top-k stale
  survivals) * SPS(R + k)``;
* the fill: ``ScheduleVerifyLensTopk.execute(confidence=..., budget=..., cfg=...)``
  (``kernels/ops/speculative/dspark/dspark_schedule.py``; the torch path on CPU, the Triton
  kernel on CUDA), which the worker (``dspark_worker_v2``) hands ``proposal.confidence``,
  the confidences of the block it is about to verify: here the current block's.

Smallest faithful inputs:

* cost -> an ``SpsCostTable`` through SGLang's ``profile_sps_table`` with one probe per batch
  size, ``SPS(b) = 1 / cost[b - 1]``; the planner's ``tau * SPS`` is then ``tau / cost`` up
  to one more rounding (the suite's instances keep near-ties away, see
  ``conformance/oracles/production_schedule.py``).
* bounds: SGLang's are batch-wide, in verify tokens with the anchor counted
  (``DSparkScheduleConfig(min_verify_len, max_verify_len)``): ``min + 1`` and ``max + 1``;
  per-request bounds raise ``NotImplementedError``. Lengths come back as ``verify_lens - 1``.
* the planner: ``relay_lag_steps`` equal to its own ``lag_steps``, so it keeps no carry ring
  (that needs the model runner's request pool): the stale confidences are taken as already
  relayed, every request of the same generation (fresh, not a recycled slot).
"""

from __future__ import annotations

import torch

from .loader import SGLangModules

__all__ = ["ProductionScheduler", "verify_token_budget"]


def verify_token_budget(modules: SGLangModules, stale: torch.Tensor, sps, cfg) -> int:
    """SGLang's verify-token budget for one step: ``HostConfidenceBudgetPlanner.compute_budget``
    over the relayed confidences ``stale [B, gamma]`` (float, in [0, 1]) and an ``SpsCostTable``
    profiled by ``profile_sps_table`` with one probe per batch size (``sps[b - 1]`` steps per
    second at forward batch size ``b``); ``cfg`` a ``DSparkScheduleConfig``. Returns the budget
    in verify tokens beyond each row's minimum (an int >= 0). The planner keeps no carry ring
    (``relay_lag_steps`` = its ``lag_steps``), every row fresh (generation 1)."""
    planner_module = modules["planner"]
    table = modules["sps"].profile_sps_table(probes=list(enumerate(sps, start=1)))
    planner = planner_module.HostConfidenceBudgetPlanner(sps_table=table, cfg=cfg, model_runner=None)
    planner = planner_module.HostConfidenceBudgetPlanner(
        sps_table=table, cfg=cfg, model_runner=None, relay_lag_steps=planner.lag_steps
    )
    rows = stale.shape[0]
    generation = torch.ones(rows, dtype=torch.int64)
    return planner.compute_budget(
        confidence=stale.cpu().float(), generation=generation, current_generation=generation,
        req_pool_indices_cpu=torch.arange(rows, dtype=torch.int64),
    )


def _batch_wide(name: str, bounds: torch.Tensor) -> int:
    values = set(bounds.tolist())
    if len(values) > 1:
        raise NotImplementedError(f"SGLang's verify-length bounds are batch-wide; {name} {sorted(values)} differ per request")
    return values.pop() if values else 0


class ProductionScheduler:
    """SPEC S8 production variant through SGLang's planner (budget) and top-k (fill)."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules
        self._planner = modules["planner"]
        self._topk = modules["schedule"].ScheduleVerifyLensTopk

    def schedule_production(self, stale_confidences, confidences, cost, min_lengths, max_lengths):
        low, high = _batch_wide("min_lengths", min_lengths), _batch_wide("max_lengths", max_lengths)
        gamma = stale_confidences.shape[1]
        cfg = self._planner.DSparkScheduleConfig(gamma=gamma, min_verify_len=low + 1, max_verify_len=high + 1)
        budget = verify_token_budget(self._modules, stale_confidences, [1.0 / c for c in cost], cfg)
        verify_lens = self._topk.execute(confidence=confidences.float(), budget=budget, cfg=cfg)
        return (verify_lens.to(torch.int64) - 1).to(stale_confidences.device)
