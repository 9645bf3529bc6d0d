"""dspark_ref: the reference implementation of DSpark speculative decoding (docs/SPEC.md).

One module per SPEC topic (``docs/architecture.md`` maps them):

====================  =====  ==========================================================
module                SPEC   what
====================  =====  ==========================================================
``proposal``          S1     base logits and the eager block proposal
``layouts``           S1     bonus-anchor layout, padded / reduced draft vocabularies
``markov``            S2     vanilla / gated / rnn Markov heads, ``sample_block``
``sampling``          S3     greedy rule, temperature clamp, exponential race
``tiled_sampling``    S3     tiled race (Triton kernel, torch fallback)
``fused_sampling``    S3     one-launch Triton race (explicit or counter noise)
``fused_checks``      S3     its value checks, read at once or deferred
``folded``            S4     folded draft sampler, memory gate
``verify``            S5     chain / greedy verification, cap, seeded uniforms
``simulated``         S6     simulated acceptance and its verify executor
``confidence``        S7     confidence head, STS, calibration metrics
``scheduler``         S8     Algorithm 1 and the production variant
``speculative``       S9     the speculative loop (``tiny_models``: its small models)
``speculative_round`` S9     one round: the drafter's laws handed to the verifier
``tensor_parallel``   S5     one round on one rank of a tensor-parallel group
====================  =====  ==========================================================

Every public name of those modules is importable from here (``from dspark_ref import
chain_verify``); a module is imported on first use, so ``import dspark_ref`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "DraftProposal": "proposal",
    "base_logits": "proposal",
    "propose_block": "proposal",
    "draft_block": "proposal",
    "LAYOUTS": "layouts",
    "block_positions": "layouts",
    "check_d2t": "layouts",
    "lift_to_target": "layouts",
    "MarkovHead": "markov",
    "VanillaMarkovHead": "markov",
    "GatedMarkovHead": "markov",
    "RNNMarkovHead": "markov",
    "HEAD_TYPES": "markov",
    "build_markov_head": "markov",
    "StepSampler": "markov",
    "BlockSample": "markov",
    "sample_block": "markov",
    "apply_block_logits": "markov",
    "GREEDY_RULES": "sampling",
    "TEMPERATURE_FLOOR": "sampling",
    "clamp_temperature": "sampling",
    "greedy_rows": "sampling",
    "greedy_argmax": "sampling",
    "exponential_noise": "sampling",
    "exponential_race": "sampling",
    "RaceSteps": "sampling",
    "sample_step": "sampling",
    "TOP_K_TIE_RULES": "sampling",
    "truncate_logits": "sampling",
    "Truncation": "sampling",
    "BACKENDS": "tiled_sampling",
    "KERNEL_INTERPRETED": "tiled_sampling",
    "tile_partials": "tiled_sampling",
    "tiled_exponential_race": "tiled_sampling",
    "fused_exponential_race": "fused_sampling",
    "philox_state": "fused_sampling",
    "INTERPRETER_DEFECT": "fused_sampling",
    "interpreter_defect": "fused_sampling",
    "splits_for": "fused_sampling",
    "check_deferred": "fused_checks",
    "FoldingMode": "folded",
    "GIB": "folded",
    "HEADROOM_GIB": "folded",
    "folded_buffer_bytes": "folded",
    "resolve_folded_sampling": "folded",
    "eligible_for_folded": "folded",
    "use_eager_accept": "folded",
    "ConfidenceFn": "folded",
    "FoldedOutputs": "folded",
    "FoldedDraftSampler": "folded",
    "ACCEPT_STREAM": "verify",
    "FINAL_STREAM": "verify",
    "RESIDUAL_MASS_FLOOR": "verify",
    "VerifyUniforms": "verify",
    "VerifyResult": "verify",
    "ChainRule": "verify",
    "seeded_uniforms": "verify",
    "seeded_verify_uniforms": "verify",
    "target_distribution": "verify",
    "draft_distribution": "verify",
    "residual_distribution": "verify",
    "chain_verify": "verify",
    "greedy_verify": "verify",
    "SIMULATED_METHODS": "simulated",
    "sample_simulated_acc_len": "simulated",
    "sample_simulated_acc_lens": "simulated",
    "SimulatedVerifyExecutor": "simulated",
    "BonusRule": "simulated",
    "simulated_bonus": "simulated",
    "ConfidenceHead": "confidence",
    "DEFAULT_STS_GRID": "confidence",
    "calibrate": "confidence",
    "prefix_survival": "confidence",
    "fit_sts": "confidence",
    "ece": "confidence",
    "brier": "confidence",
    "auroc": "confidence",
    "SPSCurve": "scheduler",
    "AdmissionRule": "scheduler",
    "schedule_prefixes": "scheduler",
    "schedule_prefixes_retrospective": "scheduler",
    "schedule_prefixes_async_topk": "scheduler",
    "ProductionRule": "scheduler",
    "schedule_prefixes_production": "scheduler",
    "expected_throughput": "scheduler",
    "appendix_a_first_token_law": "scheduler",
    "TargetModel": "speculative",
    "DraftModel": "speculative",
    "SpecResult": "speculative",
    "RoundSteps": "speculative",
    "speculative_generate": "speculative",
    "autoregressive_generate": "speculative",
    "DRAFT_STREAM": "speculative_round",
    "RoundResult": "speculative_round",
    "RoundParts": "speculative_round",
    "draft_and_verify": "speculative_round",
    "TPRoundResult": "tensor_parallel",
    "TPSteps": "tensor_parallel",
    "tp_round": "tensor_parallel",
    "TargetOutput": "tiny_models",
    "DraftBlock": "tiny_models",
    "TinyTargetLM": "tiny_models",
    "TinyDSparkDraft": "tiny_models",
    "OracleDraft": "tiny_models",
    "exact_next_token_law": "tiny_models",
    "exact_sequence_law": "tiny_models",
    "MAX_ENUMERATED_SEQUENCES": "tiny_models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dspark_ref' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dspark_ref.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
