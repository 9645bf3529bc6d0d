"""SPEC S5 "Tensor parallelism" through SGLang's own TP path (``TensorParallelRound``, 0.5.19+).

One DSpark decode round on one rank, the parts the worker (``dspark_worker_v2``) runs per
step, each handed a real multi-rank ``SpecTpSync`` (``speculative/spec_tp_sync.py``) built
over the suite's :class:`~conformance.contract.RankGroup` (it reads ``world_size``,
``rank_in_group`` and ``broadcast(values, src=0)``, exactly what SGLang's ``GroupCoordinator``
offers; the sites are ``SGLANG_SPEC_TP_SYNC``'s, ``all`` by default):

* draft: the eager proposal ``dspark_draft.sample_draft_block`` (:func:`.v0517.draft_block`,
  :func:`.v0522.draft_block`), which broadcasts each step's tokens from rank 0
  (``DSPARK_DRAFT_GREEDY`` / ``_SAMPLE`` / ``_MULTINOMIAL``; 0.5.22+: ``DSPARK_DRAFT``);
* plan: the budget of ``HostConfidenceBudgetPlanner.compute_budget`` over this rank's own
  ``sps`` table (:func:`.scheduler.verify_token_budget`; SGLang does not synchronise it),
  then ``DSparkVerifyPlanner._schedule_verify_lens``: ``ScheduleVerifyLensTopk`` over the
  confidences and rank 0's verify lengths broadcast (``DSPARK_PLAN``). The planner is a
  stand-in carrying the three fields that method reads (its constructor needs the server's
  global config); ``confidences`` serve as both the relayed and the current ones;
* verify: ``TargetVerifyExecutor.accept_and_finalize`` on its eager path
  (``accept_draft_tokens`` with the plan as ``cutoff_layout.verify_lens``, then rank 0's
  ``correct_len``, ``bonus`` and trims broadcast, ``DSPARK_ACCEPT_GREEDY`` / ``_SAMPLE``,
  then ``BuildOutTokens``).

Randomness is the rank's: one seed from the rank's ``generator`` plays the server's
``random_seed`` (the draft noise and the verifier's ``torch.rand`` coins, as in
:mod:`.speculative_round`). SGLang's DSpark path has no per-request seed; ``seeds`` are not
read and ``positions`` are the rows' prefix lengths (``FinalizeAcceptLens``). Ranks agree by
the broadcasts, not by shared draws.

0.5.17-0.5.18 ship no ``SpecTpSync`` (their draft and accept are rank-local): ``tp_round``
raises ``NotImplementedError`` naming that, before any collective.
"""

from __future__ import annotations

import types

import torch

from .engine_inputs import (
    draft_input,
    sampling_info,
    seed_from,
    seeded_global_rng,
    target_worker_stand_in,
)
from .heads import load_head
from .loader import SGLangModules
from .scheduler import verify_token_budget
from .verify import _triton_runs_on, committed

__all__ = ["NO_TP_SYNC", "TensorParallelRound"]

#: Why 0.5.17-0.5.18 cannot run a synchronised round (the skip's reason).
NO_TP_SYNC = ("ships no SpecTpSync (speculative/spec_tp_sync.py first shipped in 0.5.19): its DSpark draft, "
              "planner and accept take no tp_sync and broadcast nothing across ranks")


def _planner_stand_in(modules: SGLangModules, tp_sync, cfg) -> object:
    """A ``DSparkVerifyPlanner`` with the fields ``_schedule_verify_lens`` reads: a budget
    planner present (the scheduling modes), the schedule config and the ``SpecTpSync``."""
    planner = object.__new__(modules["planner"].DSparkVerifyPlanner)
    planner._budget_planner = True  # only tested against None there
    planner._schedule_cfg = cfg
    planner._tp_sync = tp_sync
    return planner


class TensorParallelRound:
    """SPEC S5 one round per rank with SGLang's ``SpecTpSync`` over the suite's group (module note).

    Args:
        modules: the loaded SGLang.
        draft_block: the version's eager proposal (``v0517.draft_block`` / ``v0522.draft_block``).
    """

    def __init__(self, modules: SGLangModules, draft_block) -> None:
        self._modules = modules
        self._draft_block = draft_block

    def tp_sync(self, group) -> object:
        """SGLang's ``SpecTpSync`` over ``group`` (a :class:`~conformance.contract.RankGroup`).

        Raises:
            NotImplementedError: this release ships no ``SpecTpSync`` (0.5.17-0.5.18).
        """
        if "tp_sync" not in self._modules:
            raise NotImplementedError(f"sglang=={self._modules.version} {NO_TP_SYNC}")
        return self._modules["tp_sync"].SpecTpSync(group)

    def tp_round(self, group, head_type, state_dict, base_logits, first_prev, hidden, target_logits, temperatures,
                 top_k, confidences, sps, *, generator, seeds, positions):
        tp_sync = self.tp_sync(group)
        rows, gamma, vocab = base_logits.shape
        device = base_logits.device
        info = sampling_info(temperatures, top_k)
        if not info.is_all_greedy and not _triton_runs_on(device):
            raise NotImplementedError("SGLang's chain kernel chain_speculative_sampling_triton is Triton-only: on "
                                      "CPU run the suite with TRITON_INTERPRET=1")
        _, rank = state_dict["W1.weight"].shape
        head = load_head(self._modules["heads"], head_type, state_dict, vocab, rank,
                         None if hidden is None else hidden.shape[-1], device)
        planner = self._modules["planner"]
        cfg = planner.DSparkScheduleConfig(gamma=gamma)
        if hidden is not None:
            hidden = hidden.to(head.module.markov_w1.weight.dtype)
        seed = seed_from(generator)
        with seeded_global_rng(seed, device), torch.no_grad():
            block = self._draft_block(self._modules, head, base_logits, first_prev, hidden, info, seed,
                                      tp_sync=tp_sync)
            budget = verify_token_budget(self._modules, confidences, sps, cfg)
            verify_lens = _planner_stand_in(self._modules, tp_sync, cfg)._schedule_verify_lens(
                req_pool_indices=torch.arange(rows, device=device), prefix_lens=positions, device=device,
                confidence=confidences.float(), budget=budget,
            )
            outs = self._verify(tp_sync, block, first_prev, target_logits, info, top_k, verify_lens, positions)
        accepted, tokens = committed(outs.out_tokens, outs.correct_len)
        return block.draft_tokens.to(torch.int64), verify_lens.to(torch.int64) - 1, accepted, tokens

    def _verify(self, tp_sync, block, anchor, target_logits, info, top_k, verify_lens, prefix_lens):
        """``TargetVerifyExecutor.accept_and_finalize`` (eager) -> SGLang's ``AcceptOuts``."""
        rows, gamma = block.draft_tokens.shape
        executor = self._modules["verify"].TargetVerifyExecutor(
            target_worker=target_worker_stand_in(), gamma=gamma, verify_num_draft_tokens=gamma + 1,
            model_runner=None, kv_injector=None, tp_sync=tp_sync,
        )
        candidates = torch.cat([anchor.to(torch.int64).view(rows, 1), block.draft_tokens.to(torch.int64)], dim=1)
        return executor.accept_and_finalize(
            folded_accept=False, bs=rows, verify_ids_2d=candidates,
            target_logits=target_logits.reshape(rows * (gamma + 1), -1), draft_block=block, sampling_info=info,
            draft_input=draft_input(top_k), layout=types.SimpleNamespace(verify_lens=verify_lens),
            prefix_lens=prefix_lens, draft_tokens=block.draft_tokens,
        )
