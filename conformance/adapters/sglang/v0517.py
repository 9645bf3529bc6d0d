"""Capabilities of SGLang 0.5.17-0.5.21 (the folded-sampling API generation).

What maps to what:

* ``StepSampler`` / ``NoiseStepSampler`` (S3): ``SampleStepTokens.execute`` (Triton
  online race on CUDA, its torch reference on CPU) with the temperatures and greedy mask
  staged by ``DsparkDraftSampler.stage_sampling_params`` (clamp ``T >= 1e-5``, greedy iff
  ``top_k <= 1``). Noise: ``Exp(1)`` drawn from the suite's generator (SGLang draws the
  same law in-graph with ``exponential_()``), or the given noise.
* ``MarkovBlock`` (S2): heads from ``build_markov_head``; ``sample_block`` is SGLang's
  eager proposal ``dspark_draft.sample_draft_block`` (its RNG seeded from the generator;
  with the default ``SGLANG_DSPARK_FAST_SAMPLING`` it samples by ``SampleStepTokens``);
  ``apply_block_logits`` is the head's own ``apply_block_logits``, which SGLang never
  calls: it adds the bias of the whole block in one batched GEMM, so it can round
  differently from ``sample_block``'s per-step bias.
* ``FoldedDraft`` (S4): ``DsparkDraftSampler(folded_sampling=True)``; tokens from ``out``,
  corrected logits from ``corrected_out``.
* ``FoldGate`` (S4.7): ``_resolve_folded_sampling`` under ``SGLANG_DSPARK_FOLDED_SAMPLING``;
  buffer bytes measured on a sampler built on the ``meta`` device (what SGLang allocates).
  The free memory is an argument from 0.5.19; 0.5.17-0.5.18 probe it themselves, so the
  adapter answers their probe (``get_available_gpu_memory``) with the given bytes (0.5.17's
  AUTO probe also asks ``torch.cuda.current_device()``: cannot run without a CUDA device).
* 0.5.17-0.5.18 have no ``SpecTpSync``: no ``tp_sync`` argument is passed there
  (``engine_inputs.tp_sync_argument``).

Verification, simulated acceptance and the confidence head live in ``verify.py``,
``simulated.py`` and ``confidence.py``.
"""

from __future__ import annotations

import contextlib
import types
from typing import Iterator

import torch

from conformance.checks import check_choice, check_int
from conformance.contract import CannotRunHere

from .engine_inputs import (
    DraftModelStandIn,
    sampling_info,
    seed_from,
    seeded_global_rng,
    tp_sync_argument,
)
from .folded_session import BlockPassCounter, FoldedSession
from .heads import SGLangHead, load_head
from .loader import SGLangModules

__all__ = ["draft_params", "draft_block", "StepSampler", "NoiseStepSampler", "MarkovBlock", "FoldedDraft", "FoldGate"]

_GIB = 1 << 30
#: ``_resolve_folded_sampling(available_memory_gb=...)``: the caller passes free memory (0.5.19+);
#: before, the function probes the device itself.
_MEMORY_ARGUMENT = (0, 5, 19)
#: 0.5.18+ probes through ``torch.get_device_module()`` (CPU-safe); 0.5.17 through ``torch.cuda``.
_DEVICE_MODULE_PROBE = (0, 5, 18)


def draft_params(
    modules: SGLangModules, temperatures: torch.Tensor, top_k: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(temperatures[B] f32, greedy_mask[B] bool)`` as SGLang stages them for the draft.

    Runs ``DsparkDraftSampler.stage_sampling_params`` on buffers of this batch's size.
    """
    bs, device = temperatures.shape[0], temperatures.device
    staged = types.SimpleNamespace(
        folded_sampling=True,
        temperatures=torch.empty(bs, dtype=torch.float32, device=device),
        greedy_mask=torch.empty(bs, dtype=torch.bool, device=device),
    )
    info = sampling_info(temperatures, top_k)
    modules["draft_sampler"].DsparkDraftSampler.stage_sampling_params(staged, bs=bs, sampling_info=info)
    return staged.temperatures, staged.greedy_mask


def draft_block(modules: SGLangModules, head: SGLangHead, base_logits, first_prev, hidden, info, seed=None, *,
                tp_sync=None):
    """SGLang's eager proposal ``sample_draft_block`` -> its ``DraftBlockResult`` (tokens,
    corrected logits, staged temperatures, greedy mask). Its noise is ``exponential_()``
    (or, with ``SGLANG_DSPARK_FAST_SAMPLING=0``, ``torch.multinomial``) on the global RNG:
    call it inside ``seeded_global_rng``. ``seed`` is not read (0.5.22+'s signature).
    ``tp_sync``: a ``SpecTpSync`` (0.5.19+; each step's tokens broadcast from rank 0), None
    for a one-rank one (none before 0.5.19)."""
    sync = tp_sync_argument(modules) if tp_sync is None else {"tp_sync": tp_sync}
    return modules["draft"].sample_draft_block(
        base_logits=base_logits,
        anchor_tokens=first_prev,
        draft_hidden=hidden,
        sampling_info=info,
        markov_head=head.module,
        device=base_logits.device,
        **sync,
    )


class NoiseStepSampler:
    """SPEC S3 exponential race with explicit noise: ``SampleStepTokens.execute``."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules

    def sample_with_noise(self, logits, temperatures, top_k, noise):
        temps, greedy = draft_params(self._modules, temperatures, top_k)
        return self._modules["step"].SampleStepTokens.execute(
            step_logits=logits, temperatures=temps, greedy_mask=greedy, exp_noise=noise
        )


class StepSampler(NoiseStepSampler):
    """SPEC S3 with fresh ``Exp(1)`` noise from ``generator`` on every call.

    Padded logits are cropped to ``vocab_size`` first: SGLang crops the gathered logits
    (``gather_and_crop_vocab``) before they reach its sampler.
    """

    def sample(self, logits, temperatures, top_k, vocab_size, generator):
        step_logits = logits[:, :vocab_size]
        noise = torch.empty(step_logits.shape, dtype=torch.float32, device=logits.device)
        noise.exponential_(generator=generator)
        return self.sample_with_noise(step_logits, temperatures, top_k, noise)


class MarkovBlock:
    """SPEC S2 through SGLang's heads and its eager proposal ``sample_draft_block``."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device):
        return load_head(self._modules["heads"], head_type, state_dict, vocab_size, rank, hidden_size, device)

    def sample_block(self, head: SGLangHead, base_logits, first_prev, hidden, temperatures, top_k, generator):
        with seeded_global_rng(seed_from(generator), base_logits.device), torch.no_grad():
            block = draft_block(self._modules, head, base_logits, first_prev, hidden, sampling_info(temperatures, top_k))
        return block.draft_tokens, block.corrected_logits

    def apply_block_logits(self, head: SGLangHead, base_logits, token_ids, hidden):
        with torch.no_grad():
            return head.module.apply_block_logits(base_logits, token_ids=token_ids, hidden_states=hidden)


class FoldedDraft:
    """SPEC S4 sessions over ``DsparkDraftSampler(folded_sampling=True)``.

    SGLang's in-graph noise is ``exp_noise.exponential_()`` on the device's default
    generator: a session seeds that generator with ``seed`` on CUDA (a process-wide side
    effect, as in the server), and seeds each eager pass from a generator of ``seed``.
    """

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules
        self._tp_sync_arg = tp_sync_argument(modules)

    def session(self, head: SGLangHead, max_bs, gamma, vocab_size, lm_dtype, device, seed):
        device = torch.device(device)
        model = DraftModelStandIn(
            head.module, max_bs=max_bs, gamma=gamma, vocab_size=vocab_size,
            hidden_size=head.hidden_size or 1, hidden_dtype=head.module.markov_w1.weight.dtype,
            lm_dtype=lm_dtype, device=device,
        )
        sampler = self._modules["draft_sampler"].DsparkDraftSampler(
            model=model, gamma=gamma, max_bs=max_bs, device=device, folded_sampling=True,
            **self._tp_sync_arg,
        )
        counter = BlockPassCounter(head.module, "sample_block")
        sampler.markov_head = counter
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        eager_seeds = torch.Generator().manual_seed(seed)
        return FoldedSession(
            sampler, model, counter, gamma=gamma, max_bs=max_bs, device=device,
            reads_hidden=head.needs_hidden,
            corrected=lambda bs: sampler.corrected_out[: bs * gamma].view(bs, gamma, vocab_size),
            eager_rng=lambda: seeded_global_rng(seed_from(eager_seeds), device),
        )


class FoldGate:
    """SPEC S4.7 through SGLang's ``_resolve_folded_sampling`` (mode from its env field)."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules
        self._tp_sync_arg = tp_sync_argument(modules)

    def _meta_model(self, max_bs, gamma, vocab_size, lm_dtype) -> DraftModelStandIn:
        return DraftModelStandIn(
            None, max_bs=max_bs, gamma=gamma, vocab_size=vocab_size, hidden_size=1,
            hidden_dtype=torch.float32, lm_dtype=lm_dtype, device="meta",
        )

    def buffer_bytes(self, max_bs, gamma, vocab_size, lm_dtype):
        check_int("max_bs", max_bs, minimum=1)
        sampler = self._modules["draft_sampler"].DsparkDraftSampler(
            model=self._meta_model(max_bs, gamma, vocab_size, lm_dtype), gamma=gamma,
            max_bs=max_bs, device="meta", folded_sampling=True, **self._tp_sync_arg,
        )
        return sampler.exp_noise.nbytes + sampler.corrected_out.nbytes

    def folds_sampling(self, mode, max_bs, gamma, vocab_size, lm_dtype, free_bytes):
        check_choice("mode", mode, ("off", "auto", "force"))
        if mode == "auto" and self._modules.release < _DEVICE_MODULE_PROBE and not torch.cuda.is_available():
            raise CannotRunHere(
                f"sglang=={self._modules.version} _resolve_folded_sampling (AUTO) calls "
                "torch.cuda.current_device() for its free-memory probe; no CUDA device here"
            )
        environ = self._modules["environ"]
        setting = int(environ.DsparkFoldedSampling[mode.upper()])
        arguments = dict(
            model=self._meta_model(max_bs, gamma, vocab_size, lm_dtype), gamma=gamma, max_bs=max_bs,
            device="meta", tp_rank=0,
        )
        resolve = self._modules["draft_sampler"]._resolve_folded_sampling
        with environ.envs.SGLANG_DSPARK_FOLDED_SAMPLING.override(setting):
            if self._modules.release >= _MEMORY_ARGUMENT:
                return bool(resolve(**arguments, available_memory_gb=free_bytes / _GIB))
            with _free_memory_probe(self._modules["draft_sampler"], free_bytes / _GIB):
                return bool(resolve(**arguments))


@contextlib.contextmanager
def _free_memory_probe(draft_sampler: types.ModuleType, free_gb: float) -> Iterator[None]:
    """0.5.17-0.5.18: ``_resolve_folded_sampling`` reads free memory from the server utility
    ``get_available_gpu_memory(device, gpu_id)`` (a stub here); answer it with ``free_gb``."""
    stub = draft_sampler.get_available_gpu_memory
    draft_sampler.get_available_gpu_memory = lambda device, gpu_id: free_gb
    try:
        yield
    finally:
        draft_sampler.get_available_gpu_memory = stub
