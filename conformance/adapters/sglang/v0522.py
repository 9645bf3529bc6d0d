"""Capabilities of SGLang 0.5.22+ (the Philox-keyed draft API generation).

What maps to what:

* ``StepSampler`` (S3): ``MarkovSampleStep.execute`` with a zero bias (0.5.22+ has no
  stand-alone step sampler: the bias add and the pick are one kernel) and the step
  temperatures of ``resolve_draft_params`` (``0`` on greedy rows, which the kernel
  argmaxes; ``clamp(T, 1e-5)`` otherwise). The Philox key and counter offset are drawn
  from the suite's generator on every call. The padded tail is masked by the kernel
  itself (``bias`` covers the first ``vocab_size`` columns).
* ``NoiseStepSampler``: not offered; the noise is generated inside the kernel from
  (key, offset, row, step, token) and cannot be supplied.
* ``MarkovBlock`` (S2): heads from ``build_markov_head``; ``sample_block`` is SGLang's
  eager proposal ``dspark_draft.sample_draft_block`` (``greedy_draft=False``, so step
  logits are kept) with a ``DraftNoise`` keyed from the generator. ``apply_block_logits``:
  SGLang 0.5.22+ has no teacher-forcing entry point, so the adapter runs
  ``draft_markov_block``'s per-step pair with given tokens: ``head.step_bias`` then
  ``MarkovSampleStep(logits_out=...)``, which writes the step logits exactly as the
  sampling pass does.
* ``FoldedDraft`` (S4): ``DsparkDraftSampler`` (``greedy_draft=False``) with SGLang's own
  ``DraftNoise(draft_noise_key(seed), offset)``; tokens from ``out``, corrected logits from
  ``step_logits`` (views of both). Needs a CUDA build of torch (``FOLDED_REQUIREMENT``).
* ``FoldGate``: not offered; 0.5.22 removed the OFF/AUTO/FORCE folded-sampling gate.
"""

from __future__ import annotations

import torch

from conformance.contract import Inconclusive, Requirement

from .engine_inputs import DraftModelStandIn, sampling_info, seed_from, single_rank_tp_sync
from .folded_session import BlockPassCounter, FoldedSession
from .heads import SGLangHead, load_head
from .loader import SGLangModules

__all__ = ["draft_params", "draft_block", "StepSampler", "MarkovBlock", "FoldedDraft", "FOLDED_REQUIREMENT"]

_OFFSET_MASK = 0xFFFFFFFF  # the kernel reads the low 32 bits of the counter offset

#: ``DsparkDraftSampler._step_logits`` asks ``torch.cuda.is_current_stream_capturing()``
#: before it allocates its buffer: a CPU-only torch cannot answer (any test device).
FOLDED_REQUIREMENT = Requirement(
    cuda_build=True, reason="DsparkDraftSampler queries torch.cuda capture state before it sizes step_logits"
)


def draft_params(
    modules: SGLangModules, temperatures: torch.Tensor, top_k: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(temperatures[B] f32, greedy_mask[B] bool)`` from SGLang's ``resolve_draft_params``."""
    params = modules["draft"].resolve_draft_params(
        sampling_info=sampling_info(temperatures, top_k), bs=temperatures.shape[0],
        device=temperatures.device,
    )
    return params.temperatures, params.greedy_mask


def _noise(modules: SGLangModules, generator: torch.Generator, device: torch.device):
    offset = torch.tensor([seed_from(generator) & _OFFSET_MASK], dtype=torch.int64, device=device)
    return modules["draft"].DraftNoise(key=seed_from(generator), offset=offset)


def _sample_draft_block(modules: SGLangModules, head: SGLangHead, base_logits, first_prev, hidden, info, noise,
                        tp_sync=None):
    return modules["draft"].sample_draft_block(
        base_logits=base_logits,
        anchor_tokens=first_prev,
        draft_hidden=hidden,
        sampling_info=info,
        markov_head=head.module,
        noise=noise,
        device=base_logits.device,
        tp_sync=single_rank_tp_sync(modules["tp_sync"]) if tp_sync is None else tp_sync,
        greedy_draft=False,
    )


def draft_block(modules: SGLangModules, head: SGLangHead, base_logits, first_prev, hidden, info, seed: int, *,
                tp_sync=None):
    """SGLang's eager proposal ``sample_draft_block`` (``draft_markov_block`` with kept step
    logits, ``greedy_draft=False``, the worker's default ``SGLANG_DSPARK_USE_GREEDY_DRAFT=0``)
    -> its ``DraftBlockResult``. The noise is the proposer's: ``DraftNoise(key=
    draft_noise_key(seed), offset=0)``, a fresh server of ``random_seed = seed``.
    ``tp_sync``: a ``SpecTpSync`` (each step's tokens broadcast from rank 0), None for a
    one-rank one."""
    draft = modules["draft"]
    noise = draft.DraftNoise(
        key=draft.draft_noise_key(seed), offset=torch.zeros(1, dtype=torch.int64, device=base_logits.device)
    )
    return _sample_draft_block(modules, head, base_logits, first_prev, hidden, info, noise, tp_sync)


class StepSampler:
    """SPEC S3 through ``MarkovSampleStep`` with a zero bias (see the module note)."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules

    def sample(self, logits, temperatures, top_k, vocab_size, generator):
        params = self._modules["draft"].resolve_draft_params(
            sampling_info=sampling_info(temperatures, top_k), bs=logits.shape[0], device=logits.device
        )
        noise = _noise(self._modules, generator, logits.device)
        bias = torch.zeros(logits.shape[0], vocab_size, dtype=torch.float32, device=logits.device)
        return self._modules["step"].MarkovSampleStep.execute(
            base_logits=logits, bias=bias, temperatures=params.step_temperatures, key=noise.key,
            offset=noise.offset, step=0, step_dtype=logits.dtype,
        )


class MarkovBlock:
    """SPEC S2 through SGLang's heads, ``sample_draft_block`` and ``MarkovSampleStep``."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device):
        return load_head(self._modules["heads"], head_type, state_dict, vocab_size, rank, hidden_size, device)

    def sample_block(self, head: SGLangHead, base_logits, first_prev, hidden, temperatures, top_k, generator):
        with torch.no_grad():
            block = _sample_draft_block(
                self._modules, head, base_logits, first_prev, hidden, sampling_info(temperatures, top_k),
                _noise(self._modules, generator, base_logits.device),
            )
        return block.draft_tokens, block.corrected_logits

    @torch.no_grad()
    def apply_block_logits(self, head: SGLangHead, base_logits, token_ids, hidden):
        module = head.module
        bs, gamma, vocab = base_logits.shape
        step_dtype = module.step_logits_dtype(base_logits.dtype)
        out = torch.empty(bs, gamma, vocab, dtype=step_dtype, device=base_logits.device)
        greedy = torch.zeros(bs, dtype=torch.float32, device=base_logits.device)
        offset = torch.zeros(1, dtype=torch.int64, device=base_logits.device)
        state = module.init_state(hidden)
        for step in range(gamma):
            bias, state = module.step_bias(
                token_ids[:, step], hidden_states=None if hidden is None else hidden[:, step], state=state
            )
            self._modules["step"].MarkovSampleStep.execute(
                base_logits=base_logits[:, step], bias=bias, temperatures=greedy, key=0, offset=offset,
                step=step, step_dtype=step_dtype, logits_out=out[:, step], has_sampled_rows=False,
            )
        return out


class FoldedDraft:
    """SPEC S4 sessions over SGLang's ``DsparkDraftSampler`` (``greedy_draft=False``).

    The sampler sizes its step-logits buffer on first use and asserts that no CUDA graph is
    capturing then, through ``torch.cuda.is_current_stream_capturing()``, which a torch
    build without CUDA cannot answer: the adapter declares ``FOLDED_REQUIREMENT``, so the
    suite skips these cases there. A session opened there anyway (outside ``require``)
    raises ``Inconclusive``.
    """

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules
        self._tp_sync = single_rank_tp_sync(modules["tp_sync"])

    def session(self, head: SGLangHead, max_bs, gamma, vocab_size, lm_dtype, device, seed):
        if not torch.backends.cuda.is_built():
            raise Inconclusive(
                f"sglang=={self._modules.version} DsparkDraftSampler needs a CUDA build of torch "
                "(it queries torch.cuda capture state); this torch is CPU-only"
            )
        device = torch.device(device)
        draft = self._modules["draft"]
        model = DraftModelStandIn(
            head.module, max_bs=max_bs, gamma=gamma, vocab_size=vocab_size,
            hidden_size=head.hidden_size or 1, hidden_dtype=head.module.markov_w1.weight.dtype,
            lm_dtype=lm_dtype, device=device,
        )
        noise = draft.DraftNoise(
            key=draft.draft_noise_key(seed), offset=torch.zeros(1, dtype=torch.int64, device=device)
        )
        sampler = self._modules["draft_sampler"].DsparkDraftSampler(
            model=model, gamma=gamma, max_bs=max_bs, device=device, noise=noise,
            tp_sync=self._tp_sync, greedy_draft=False,
        )
        counter = BlockPassCounter(head.module, "init_state")
        sampler.markov_head = counter
        return FoldedSession(
            sampler, model, counter, gamma=gamma, max_bs=max_bs, device=device,
            reads_hidden=head.needs_hidden,
            corrected=lambda bs: sampler.step_logits[:bs],
        )
