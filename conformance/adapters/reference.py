"""The bundled reference (``dspark_ref``) behind the adapter contract: ``--dspark-impl reference``.

Each class below implements one capability of :mod:`conformance.contract` by calling the
reference; mutants (``fixtures/mutants``) subclass these and change one thing. The
reference's greedy rule is SGLang's (``top_k <= 1``). On CUDA tensors the SPEC step (S3)
runs as the fused Triton race (``dspark_ref.fused_sampling``) on torch's Exp(1) noise (drawn
from the call's generator for ``StepSampler``, given for ``NoiseStepSampler``); elsewhere, and for a mutant's
``steps``, as ``sample_step`` in torch.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from dspark_ref import (
    confidence,
    folded,
    fused_sampling,
    markov,
    proposal,
    scheduler,
    simulated,
    speculative,
    speculative_round,
    tensor_parallel,
    tiny_models,
    verify,
)
from dspark_ref._checks import check_int
from dspark_ref.sampling import (
    TEMPERATURE_FLOOR,
    RaceSteps,
    Truncation,
    clamp_temperature,
    exponential_noise,
    greedy_argmax,
    greedy_rows,
    sample_step,
)

from .. import contract as c
from ..inputs import tiny_models as case_models

GREEDY_RULE = "top_k"
TOP_K_TIES = "all"
LAYOUTS = ("anchor-first", "bonus-anchor")
DRAFT_VOCABULARIES = ("target", "padded", "reduced")
# SPEC S3 / S5 degenerate inputs: NaN, negative or infinite temperatures and NaN or all -inf
# rows raise ValueError (dspark_ref validates them); a q(x) = 0 draft passes u * q < p iff p > 0.
BAD_TEMPERATURES = "error"
DEGENERATE_ROWS = "error"
ZERO_Q_DRAFTS = "accept"


def greedy_mask_of(temperatures: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Greedy rows by the reference's declared rule (``top_k <= 1``, SPEC S3)."""
    return greedy_rows(temperatures=temperatures, top_k=top_k, rule=GREEDY_RULE)


def _fused(logits: torch.Tensor) -> bool:
    """Whether the SPEC step runs as the fused Triton kernel: CUDA tensors and triton."""
    return logits.is_cuda and fused_sampling.triton is not None


class StepSampler:
    """SPEC S3 through :func:`dspark_ref.sampling.sample_step` (fresh noise per call), or on
    CUDA :func:`dspark_ref.fused_sampling.fused_exponential_race` on Exp(1) noise drawn from
    ``generator`` on every call (not the kernel's counter noise: the contract's draws come from
    ``generator``, so a seed reproduces a run on any backend). ``steps``: the race's steps, a
    :class:`dspark_ref.sampling.RaceSteps` (None: the SPEC step; a subclass runs in torch)."""

    def __init__(self, steps: RaceSteps | None = None) -> None:
        self.steps = steps

    def sample(self, logits, temperatures, top_k, vocab_size, generator):
        if self.steps is None and _fused(logits):
            check_int("vocab_size", vocab_size, minimum=1, maximum=logits.shape[1])
            cropped = logits[:, :vocab_size]
            noise = exponential_noise(cropped.shape, generator=generator, device=logits.device)
            return fused_sampling.fused_exponential_race(
                cropped, temperatures, noise, greedy_mask=greedy_mask_of(temperatures, top_k)
            )
        return sample_step(
            logits, temperatures, greedy_mask_of(temperatures, top_k),
            generator=generator, vocab_size=vocab_size, steps=self.steps,
        )


class NoiseStepSampler:
    """SPEC S3 exponential race with explicit noise (on CUDA: the fused Triton kernel)."""

    def sample_with_noise(self, logits, temperatures, top_k, noise):
        if _fused(logits):
            return fused_sampling.fused_exponential_race(
                logits, temperatures, noise, greedy_mask=greedy_mask_of(temperatures, top_k)
            )
        return sample_step(logits, temperatures, greedy_mask_of(temperatures, top_k), noise=noise)


class TruncatedStepSampler:
    """SPEC S3 truncation (top-k, top-p, min-p): the request's
    :class:`~dspark_ref.sampling.Truncation` of ``L / T`` (``truncation_class``: a subclass
    changes how the sets are taken), then the exponential race of
    :func:`dspark_ref.sampling.sample_step` on it; greedy rows take the argmax of the logits."""

    truncation_class = Truncation

    def sample_truncated(self, logits, temperatures, top_k, top_p, min_p, generator):
        temps = clamp_temperature(temperatures).to(torch.float32)
        cut = self.truncation_class(top_k=top_k, top_p=top_p, min_p=min_p, top_k_ties=TOP_K_TIES).apply(
            logits.to(torch.float32), temps)
        drawn = sample_step(cut, torch.ones_like(temps), torch.zeros_like(temps, dtype=torch.bool),
                            generator=generator)
        return torch.where(greedy_mask_of(temperatures, top_k), greedy_argmax(logits), drawn)


class MarkovBlock:
    """SPEC S2 through :mod:`dspark_ref.markov`; the head handle is the reference module,
    built from the registry ``head_types`` (a subclass may map a type to a variant head)."""

    head_types = markov.HEAD_TYPES

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device):
        head = markov.build_markov_head(
            {"markov_head_type": head_type, "markov_rank": rank, "vocab_size": vocab_size,
             "hidden_size": hidden_size},
            head_types=self.head_types,
        )
        head.load_state_dict(dict(state_dict))
        return head.to(device)

    def step_sampler(self, temperatures, top_k, generator):
        """The per-step sampler ``sample_block`` calls (fresh noise from ``generator``)."""
        greedy = greedy_mask_of(temperatures, top_k)
        return lambda logits, k: sample_step(logits, temperatures, greedy, generator=generator)

    def sample_block(self, head, base_logits, first_prev, hidden, temperatures, top_k, generator):
        block = markov.sample_block(
            head, base_logits, first_prev, hidden, self.step_sampler(temperatures, top_k, generator)
        )
        return block.tokens, block.corrected_logits

    def apply_block_logits(self, head, base_logits, token_ids, hidden):
        return markov.apply_block_logits(head, base_logits, token_ids, hidden)


class DraftLayouts:
    """SPEC S1 layouts and draft vocabularies through :func:`dspark_ref.proposal.draft_block`;
    the head is built from the registry ``head_types`` with ``W1`` over the target vocabulary
    and ``W2`` over the draft vocabulary (the base logits' width)."""

    head_types = markov.HEAD_TYPES

    def load_head(self, head_type, state_dict, draft_vocab_size, vocab_size, hidden_size, device):
        """The reference head of ``state_dict`` (rank from ``W1.weight``) on ``device``."""
        config = {"markov_head_type": head_type, "markov_rank": state_dict["W1.weight"].shape[1],
                  "vocab_size": vocab_size, "hidden_size": hidden_size}
        if draft_vocab_size != vocab_size:
            config["draft_vocab_size"] = draft_vocab_size
        head = markov.build_markov_head(config, head_types=self.head_types)
        head.load_state_dict(dict(state_dict))
        return head.to(device)

    def draft_block(self, head_type, state_dict, base_logits, first_prev, hidden, temperatures, top_k, generator, *,
                    layout, vocab_size, d2t):
        hidden_size = None if hidden is None else hidden.shape[-1]
        head = self.load_head(head_type, state_dict, base_logits.shape[-1], vocab_size, hidden_size,
                              base_logits.device)
        sampler = MarkovBlock().step_sampler(temperatures, top_k, generator)
        block = proposal.draft_block(head, base_logits, first_prev, hidden, sampler, layout=layout,
                                     vocab_size=vocab_size, d2t=d2t)
        return block.tokens, block.corrected_logits


class FoldedSession:
    """One :class:`dspark_ref.folded.FoldedDraftSampler`; counts real graph replays and
    the ``sample_block`` passes behind each proposal (a graph replay adds the passes its
    capture recorded; warm-up passes are not proposals and are not counted). ``bs``: the
    live rows the next capture or replay runs (set by ``stage`` and ``load_inputs``)."""

    def __init__(self, sampler: folded.FoldedDraftSampler) -> None:
        self.sampler = sampler
        self.graph_replays = 0
        self.sample_block_calls: int | None = 0
        self.bs = sampler.max_bs
        self._eager_passes = 0
        self._graph_passes: dict[int, int] = {}
        build_step_sampler = sampler.step_sampler

        def counted(bs):  # the proposal body builds one step sampler per sample_block pass
            if sampler.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                self._graph_passes[bs] = self._graph_passes.get(bs, 0) + 1
            else:
                self._eager_passes += 1
            return build_step_sampler(bs)

        sampler.step_sampler = counted

    def stage(self, bs, temperatures, top_k):
        self.bs = bs
        self.sampler.stage_sampling_params(bs, temperatures=temperatures, top_k=top_k)

    def load_inputs(self, base_logits, first_prev, hidden):
        self.bs = base_logits.shape[0]
        self.sampler.load_inputs(base_logits, first_prev, hidden)

    def capture(self):
        self._graph_passes[self.bs] = 0
        self.sampler.capture(self.bs)

    def replay(self):
        before = self._eager_passes
        out = self.sampler.replay(self.bs)
        if self.sampler.device.type == "cuda":
            self.graph_replays += 1
            self.sample_block_calls += self._graph_passes[self.bs]
        self.sample_block_calls += self._eager_passes - before
        return out.tokens, out.corrected_logits


class FoldedDraft:
    """SPEC S4 sessions over :class:`dspark_ref.folded.FoldedDraftSampler` (mutants swap
    ``sampler_class`` or ``session_class`` for a faulty one)."""

    sampler_class = folded.FoldedDraftSampler
    session_class = FoldedSession

    def session(self, head, max_bs, gamma, vocab_size, lm_dtype, device, seed):
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
        return self.session_class(
            self.sampler_class(
                head, max_bs=max_bs, gamma=gamma, vocab_size=vocab_size, lm_dtype=lm_dtype,
                device=device, generator=generator,
            )
        )


class FoldGate:
    """SPEC S4.7 through :func:`dspark_ref.folded.resolve_folded_sampling`."""

    def buffer_bytes(self, max_bs, gamma, vocab_size, lm_dtype):
        return folded.folded_buffer_bytes(max_bs, gamma, vocab_size, lm_dtype)

    def folds_sampling(self, mode, max_bs, gamma, vocab_size, lm_dtype, free_bytes):
        return folded.resolve_folded_sampling(
            folded.FoldingMode[mode.upper()], max_bs=max_bs, gamma=gamma,
            vocab_size=vocab_size, lm_dtype=lm_dtype, free_bytes=free_bytes,
        )


class FoldRouting:
    """SPEC S4.5 through :func:`dspark_ref.folded.eligible_for_folded` and
    :func:`dspark_ref.folded.use_eager_accept`."""

    def route(self, all_greedy, folded_sampling_on):
        folded_draft = folded.eligible_for_folded(all_greedy, folded_sampling_on)
        return folded_draft, folded.use_eager_accept(folded_draft, all_greedy)


class ChainVerifier:
    """SPEC S5 through :func:`dspark_ref.verify.chain_verify`. ``rule``: the steps of the
    chain rule, a :class:`dspark_ref.verify.ChainRule` (None: the SPEC rule)."""

    def __init__(self, rule: verify.ChainRule | None = None) -> None:
        self.rule = rule

    def verify(self, draft_tokens, target_logits, draft_logits, temperatures, top_k, *,
               generator=None, accept_uniforms=None, final_uniforms=None, seeds=None,
               positions=None, cap=None):
        uniforms = None
        if accept_uniforms is not None or final_uniforms is not None:
            uniforms = verify.VerifyUniforms(accept=accept_uniforms, final=final_uniforms)
            generator = None
        result = verify.chain_verify(
            draft_tokens, target_logits, draft_logits, temperatures, greedy_mask_of(temperatures, top_k),
            uniforms=uniforms, generator=generator, seeds=seeds, positions=positions, cap=cap,
            rule=self.rule,
        )
        return result.accepted, result.tokens


class TruncatedChainVerifier:
    """SPEC S5 truncation through :func:`dspark_ref.verify.chain_verify` with the request's
    :class:`~dspark_ref.sampling.Truncation` (``truncation_class``: a subclass changes how
    the sets are taken) and the handed-over ``draft_probs``. ``rule``: the steps of the
    chain rule, a :class:`dspark_ref.verify.ChainRule` (None: the SPEC rule)."""

    truncation_class = Truncation

    def __init__(self, rule: verify.ChainRule | None = None) -> None:
        self.rule = rule

    def verify_truncated(self, draft_tokens, target_logits, draft_probs, temperatures, top_k, top_p, min_p,
                         generator):
        truncation = self.truncation_class(top_k=top_k, top_p=top_p, min_p=min_p, top_k_ties=TOP_K_TIES)
        result = verify.chain_verify(
            draft_tokens, target_logits, None, temperatures, greedy_mask_of(temperatures, top_k),
            generator=generator, truncation=truncation, draft_probs=draft_probs, rule=self.rule,
        )
        return result.accepted, result.tokens


class GreedyVerifier:
    """SPEC S5 greedy verification through :func:`dspark_ref.verify.greedy_verify`."""

    def verify_greedy(self, draft_tokens, target_logits, cap=None):
        result = verify.greedy_verify(draft_tokens, target_logits, cap=cap)
        return result.accepted, result.tokens


class TensorParallelRound:
    """SPEC S5 tensor parallelism through :func:`dspark_ref.tensor_parallel.tp_round`: seeded
    rows only (the rank's generator unread), rank 0's plan broadcast. ``steps``: a
    :class:`dspark_ref.tensor_parallel.TPSteps` (None: the SPEC steps)."""

    def __init__(self, steps: tensor_parallel.TPSteps | None = None) -> None:
        self.steps = steps

    def tp_round(self, group, head_type, state_dict, base_logits, first_prev, hidden, target_logits, temperatures,
                 top_k, confidences, sps, *, generator, seeds, positions):
        vocab, rank = state_dict["W1.weight"].shape
        head = MarkovBlock().load_head(head_type, state_dict, vocab, rank, None if hidden is None else hidden.shape[-1],
                                       base_logits.device)
        result = tensor_parallel.tp_round(
            group, head, base_logits, first_prev, hidden, target_logits, temperatures,
            greedy_mask_of(temperatures, top_k), confidences, sps, seeds=seeds, positions=positions,
            generator=generator, steps=self.steps,
        )
        return result.draft_tokens, result.verify_lengths, result.accepted, result.tokens


class SimulatedAcceptance:
    """SPEC S6 through :mod:`dspark_ref.simulated`."""

    def sample_acc_len(self, value, method, max_len, generator):
        return simulated.sample_simulated_acc_len(value, method, max_len, generator=generator)

    def executor(self, value, method, gamma, seed):
        return simulated.SimulatedVerifyExecutor(
            value, method, gamma, generator=torch.Generator().manual_seed(seed)
        )


class SimulatedAcceptanceBatch:
    """SPEC S6 batched draws through :func:`dspark_ref.simulated.sample_simulated_acc_lens`.
    Not offered by :func:`capabilities`: the reference's S6 law cases go through
    ``sample_acc_len``, the path its single-draw mutants break; a toy or a mutant that
    offers a batch starts from this class."""

    def sample_acc_lens(self, value, method, max_len, n, generator):
        return simulated.sample_simulated_acc_lens(value, method, max_len, n, generator=generator)


class Confidence:
    """SPEC S7 through :mod:`dspark_ref.confidence` (state dict of ``ConfidenceHead``)."""

    def head(self, state_dict: Mapping[str, torch.Tensor], hidden: torch.Tensor) -> confidence.ConfidenceHead:
        """The reference head of ``state_dict`` on ``hidden``'s device (rank from the fan-in)."""
        fan_in = state_dict["proj.weight"].shape[1]
        rank = fan_in - hidden.shape[-1] or None
        head = confidence.ConfidenceHead(hidden.shape[-1], markov_rank=rank)
        head.load_state_dict(dict(state_dict))
        return head.to(hidden.device)

    def confidences(self, state_dict, hidden, markov_features, temperatures, *, checkpoint_gamma):
        # Positions are scored independently, so the checkpoint's gamma fixes nothing here.
        with torch.no_grad():
            return self.head(state_dict, hidden)(hidden, markov_features, temperatures)

    def prefix_survival(self, confidences):
        return confidence.prefix_survival(confidences)

    def fit_sts(self, raw, accepted):
        return confidence.fit_sts(raw, accepted)


class PrefixScheduler:
    """SPEC S8 through :func:`dspark_ref.scheduler.schedule_prefixes` (Algorithm 1).
    ``rule``: its admission order and improvement test, a
    :class:`dspark_ref.scheduler.AdmissionRule` (None: the paper's)."""

    def __init__(self, rule: scheduler.AdmissionRule | None = None) -> None:
        self.rule = rule

    def schedule(self, confidences: torch.Tensor, sps: Sequence[float]) -> torch.Tensor:
        return scheduler.schedule_prefixes(confidences, sps, rule=self.rule)


class SimulatedBonus:
    """SPEC S6 simulated bonus through :func:`dspark_ref.simulated.simulated_bonus`.
    ``rule``: a :class:`dspark_ref.simulated.BonusRule` (None: the SPEC's)."""

    def __init__(self, rule: simulated.BonusRule | None = None) -> None:
        self.rule = rule

    def simulated_bonus(self, target_logits, accepted, temperatures, generator):
        return simulated.simulated_bonus(target_logits, accepted, temperatures, generator=generator, rule=self.rule)


class ProductionScheduler:
    """SPEC S8 production variant through
    :func:`dspark_ref.scheduler.schedule_prefixes_production` (whose SPEC rule reads the
    stale confidences only). ``rule``: a :class:`dspark_ref.scheduler.ProductionRule` (None:
    the SPEC's)."""

    def __init__(self, rule: scheduler.ProductionRule | None = None) -> None:
        self.rule = rule

    def schedule_production(self, stale_confidences, confidences, cost, min_lengths, max_lengths):
        return scheduler.schedule_prefixes_production(
            stale_confidences, cost, min_lengths=min_lengths, max_lengths=max_lengths,
            confidences=confidences, rule=self.rule,
        )


def reference_models(target: case_models.TinyTargetLM, draft: case_models.TinyDSparkDraft | case_models.OracleDraft
                     ) -> tuple[tiny_models.TinyTargetLM, Any]:
    """The reference's own tiny models (:mod:`dspark_ref.tiny_models`) holding the weights of
    a case's ``target`` and ``draft`` (:mod:`conformance.inputs.tiny_models`, the same state-dict
    layout), on the target's device, the Markov head in the case head's dtype (float32 or
    bfloat16): the loop runs the reference's backbone, Markov head and confidence head on the
    case's weights.

    Raises:
        TypeError: ``target`` or ``draft`` not one of the suite's tiny models.
    """
    if not isinstance(target, case_models.TinyTargetLM):
        raise TypeError(f"target: expected a conformance.inputs.tiny_models.TinyTargetLM, got {type(target).__name__}")
    if not isinstance(draft, (case_models.TinyDSparkDraft, case_models.OracleDraft)):
        raise TypeError("draft: expected a conformance.inputs.tiny_models.TinyDSparkDraft or OracleDraft, got "
                        f"{type(draft).__name__}")
    # The constructors' throwaway weights (overwritten below) draw on a fresh generator, and
    # the confidence head's default init on the global RNG, which the fork leaves as it was.
    with torch.random.fork_rng(devices=[]):
        ref_target = tiny_models.TinyTargetLM(target.vocab_size, target.hidden_size, generator=torch.Generator())
        if isinstance(draft, case_models.OracleDraft):
            ref_draft = tiny_models.OracleDraft(ref_target, gamma=draft.gamma)
        else:
            ref_draft = tiny_models.TinyDSparkDraft(
                ref_target, gamma=draft.gamma, markov_head_type=draft.markov_head.head_type,
                markov_rank=draft.markov_head.rank, generator=torch.Generator(),
                with_confidence=draft.confidence_head is not None)
    ref_target.load_state_dict(target.state_dict())
    if isinstance(draft, case_models.OracleDraft):  # its Markov head is the target's own GRU
        with torch.no_grad():
            ref_draft.base_offsets.copy_(draft.base_offsets)
    else:
        ref_draft.markov_head.to(draft.markov_head.W1.weight.dtype)
        ref_draft.load_state_dict(draft.state_dict())
    device = target.embedding.device
    return ref_target.to(device), ref_draft.to(device)


class SpeculativeLoop:
    """SPEC S9 through :func:`dspark_ref.speculative.speculative_generate`; greedy iff
    ``temperature < 1e-5`` (the loop takes no ``top_k``). ``steps``: the round's steps, a
    :class:`dspark_ref.speculative.RoundSteps` (None: the reference round)."""

    def __init__(self, steps: speculative.RoundSteps | None = None) -> None:
        self.steps = steps

    def generate(self, target, draft, prompt, max_new_tokens, temperature, generator, *,
                 gamma=None, sps=None):
        result = speculative.speculative_generate(
            *reference_models(target, draft), prompt, max_new_tokens, temperature=temperature,
            greedy=temperature < TEMPERATURE_FLOOR, gamma=gamma, scheduler=sps, generator=generator,
            steps=self.steps,
        )
        return result.tokens, result.accept_lengths, result.verify_lengths


class SpeculativeLoopRecord:
    """SPEC S8 in the S9 loop: :func:`dspark_ref.speculative.speculative_generate` with its
    per-round record (the drafted blocks, the confidences the scheduler read). ``steps`` as
    :class:`SpeculativeLoop`."""

    def __init__(self, steps: speculative.RoundSteps | None = None) -> None:
        self.steps = steps

    def generate_recorded(self, target, draft, prompt, max_new_tokens, temperature, generator, *, gamma=None, sps):
        result = speculative.speculative_generate(
            *reference_models(target, draft), prompt, max_new_tokens, temperature=temperature,
            greedy=temperature < TEMPERATURE_FLOOR, gamma=gamma, scheduler=sps, generator=generator,
            steps=self.steps,
        )
        return (result.tokens, result.accept_lengths, result.verify_lengths, result.draft_tokens,
                result.confidences)


class SpeculativeRound:
    """SPEC S9 one round through :func:`dspark_ref.speculative_round.draft_and_verify`:
    the reference drafter (truncating, ``Conventions.draft_truncates``) hands its laws to
    the reference verifier. ``parts``: the round's steps, a
    :class:`dspark_ref.speculative_round.RoundParts` (None: the SPEC steps);
    ``truncation_class``: how both sides take the truncation sets."""

    truncation_class = Truncation

    def __init__(self, parts: speculative_round.RoundParts | None = None) -> None:
        self.parts = parts

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device, dtype):
        return MarkovBlock().load_head(head_type, state_dict, vocab_size, rank, hidden_size, device).to(dtype)

    def round(self, head, base_logits, first_prev, hidden, target_logits, temperatures, top_k, top_p, min_p, *,
              generator=None, seeds=None, positions=None):
        truncation = self.truncation_class(top_k=top_k, top_p=top_p, min_p=min_p, top_k_ties=TOP_K_TIES)
        result = speculative_round.draft_and_verify(
            head, base_logits, first_prev, hidden, target_logits, temperatures, greedy_mask_of(temperatures, top_k),
            truncation=truncation, generator=generator, seeds=seeds, positions=positions, parts=self.parts,
        )
        return result.draft_tokens, result.accepted, result.tokens, result.draft_probs


def capabilities() -> dict[type, Any]:
    """A fresh capability mapping of the reference (mutants replace one entry)."""
    return {
        c.StepSampler: StepSampler(),
        c.NoiseStepSampler: NoiseStepSampler(),
        c.TruncatedStepSampler: TruncatedStepSampler(),
        c.MarkovBlock: MarkovBlock(),
        c.DraftLayouts: DraftLayouts(),
        c.FoldedDraft: FoldedDraft(),
        c.FoldGate: FoldGate(),
        c.FoldRouting: FoldRouting(),
        c.ChainVerifier: ChainVerifier(),
        c.TruncatedChainVerifier: TruncatedChainVerifier(),
        c.GreedyVerifier: GreedyVerifier(),
        c.TensorParallelRound: TensorParallelRound(),
        c.SimulatedAcceptance: SimulatedAcceptance(),
        c.SimulatedBonus: SimulatedBonus(),
        c.Confidence: Confidence(),
        c.PrefixScheduler: PrefixScheduler(),
        c.ProductionScheduler: ProductionScheduler(),
        c.SpeculativeLoop: SpeculativeLoop(),
        c.SpeculativeLoopRecord: SpeculativeLoopRecord(),
        c.SpeculativeRound: SpeculativeRound(),
    }


def make_adapter() -> c.Adapter:
    """The reference adapter: every capability, SGLang's greedy rule, degenerate inputs
    rejected with ValueError, CPU and CUDA."""
    return c.Adapter(
        name="reference",
        conventions=c.Conventions(greedy_rule=GREEDY_RULE, top_k_ties=TOP_K_TIES, draft_truncates=True,
                                  layouts=LAYOUTS, draft_vocabularies=DRAFT_VOCABULARIES,
                                  bad_temperatures=BAD_TEMPERATURES, degenerate_rows=DEGENERATE_ROWS,
                                  zero_q_drafts=ZERO_Q_DRAFTS),
        capabilities=capabilities(),
        description="dspark_ref: the bundled reference implementation of SPEC S1-S9",
    )
