"""Chain and greedy verification through SGLang's accept path (SPEC S5), all versions.

* ``ChainVerifier``: ``dspark_verify.accept_draft_tokens``, the function the DSpark worker
  calls after target verify. It dispatches as the engine does: an all-greedy batch takes
  ``AcceptGreedy``; otherwise ``AcceptSampling`` (the Triton chain kernel
  ``chain_speculative_sampling_triton``, uniforms from ``torch.rand``), or, in 0.5.22+ with
  a ``RejectionNoise``, ``BlockwiseRejection``; mixed batches merge the greedy rows back
  with ``SelectMixedAccept``. The draft side (``DraftBlockResult``) carries the corrected
  logits with the temperatures and greedy mask SGLang stages for the draft.
* ``GreedyVerifier``: ``AcceptGreedy.execute``.
* The cap is SGLang's ragged-verify ``cutoff_layout.verify_lens`` (one length for all rows).
* Output: SGLang's commit layout ``BuildOutTokens`` (accepted drafts, then the bonus),
  with positions after the bonus set to -1 as the contract asks.

The anchor (candidate column 0) is not read by verification; it is passed as token 0.
SGLang's accept takes no explicit uniforms and no per-row seeds: ``accept_uniforms`` /
``final_uniforms`` and ``seeds`` / ``positions`` raise ``NotImplementedError``. The classic
chain kernel is Triton-only: on CPU it runs under ``TRITON_INTERPRET=1`` (set before the
process starts), otherwise sampling batches raise ``NotImplementedError`` naming that.
"""

from __future__ import annotations

import os
import types
from typing import Callable

import torch

from .engine_inputs import draft_input, sampling_info, seed_from, seeded_global_rng
from .loader import SGLangModules

__all__ = ["ChainVerifier", "GreedyVerifier"]

DraftParams = Callable[[SGLangModules, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _candidates(draft_tokens: torch.Tensor) -> torch.Tensor:
    anchor = torch.zeros(draft_tokens.shape[0], 1, dtype=torch.int64, device=draft_tokens.device)
    return torch.cat([anchor, draft_tokens.to(torch.int64)], dim=1)


def _cutoff_lens(cap: int | None, bs: int, device: torch.device) -> torch.Tensor | None:
    return None if cap is None else torch.full((bs,), cap, dtype=torch.int32, device=device)


def _contract_outputs(modules, draft_tokens, correct_len, bonus) -> tuple[torch.Tensor, torch.Tensor]:
    gamma = draft_tokens.shape[1]
    out = modules["verify"].BuildOutTokens.execute(
        draft_tokens=draft_tokens, correct_len=correct_len, bonus=bonus,
        verify_num_draft_tokens=gamma + 1, gamma=gamma,
    )
    accepted = correct_len.to(torch.int64)
    positions = torch.arange(gamma + 1, device=out.device)
    return accepted, torch.where(positions[None, :] <= accepted[:, None], out, -1)


def _triton_runs_on(device: torch.device) -> bool:
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


class ChainVerifier:
    """SPEC S5 chain verification through ``accept_draft_tokens``.

    Args:
        modules: the loaded SGLang.
        draft_params: the version's draft staging (``v0517.draft_params`` / ``v0522.draft_params``).
        blockwise: 0.5.22+ only: pass a ``RejectionNoise`` keyed from the generator, which
            selects SGLang's block-parallel counter-based rejection (``BlockwiseRejection``).
    """

    def __init__(self, modules: SGLangModules, draft_params: DraftParams, *, blockwise: bool = False) -> None:
        self._modules = modules
        self._draft_params = draft_params
        self._blockwise = blockwise

    def verify(self, draft_tokens, target_logits, draft_logits, temperatures, top_k, *,
               generator=None, accept_uniforms=None, final_uniforms=None, seeds=None,
               positions=None, cap=None):
        if accept_uniforms is not None or final_uniforms is not None:
            raise NotImplementedError(
                "explicit uniforms: SGLang's accept draws its own (torch.rand / Philox) and takes none"
            )
        if seeds is not None or positions is not None:
            raise NotImplementedError("seeded rows: SGLang's accept takes no per-row (seed, position)")
        bs, gamma = draft_tokens.shape
        device = draft_tokens.device
        generator = torch.random.default_generator if generator is None else generator
        info = sampling_info(temperatures, top_k)
        # Blockwise rejection serves full-vocab batches only (mixed batches carry top_k = 1
        # rows, so SGLang sends them to the chain kernel).
        chain_kernel = not info.is_all_greedy and not (self._blockwise and not info.need_top_k_sampling)
        if chain_kernel and not _triton_runs_on(device):
            raise NotImplementedError(
                "SGLang's chain kernel chain_speculative_sampling_triton is Triton-only: on CPU "
                "run the suite with TRITON_INTERPRET=1"
            )
        draft_temps, greedy_mask = self._draft_params(self._modules, temperatures, top_k)
        block_fields = dict(
            draft_tokens=draft_tokens, corrected_logits=draft_logits, greedy_mask=greedy_mask,
            temperatures=draft_temps,
        )
        if self._modules.generation == "philox":
            block_fields["greedy_draft"] = False
        kwargs = dict(
            candidates=_candidates(draft_tokens),
            target_logits=target_logits.reshape(bs * (gamma + 1), -1),
            draft_block=self._modules["draft"].DraftBlockResult(**block_fields),
            sampling_info=info,
            draft_input=draft_input(top_k),
            gamma=gamma,
            verify_num_draft_tokens=gamma + 1,
            cutoff_layout=None if cap is None else types.SimpleNamespace(
                verify_lens=_cutoff_lens(cap, bs, device)
            ),
        )
        if self._blockwise:
            blockwise = self._modules["blockwise"]
            kwargs["rejection_noise"] = blockwise.RejectionNoise(
                key=blockwise.rejection_noise_key(seed_from(generator)),
                counter=torch.zeros(1, dtype=torch.int64, device=device),
            )
        with seeded_global_rng(seed_from(generator), device):
            correct_len, bonus, _trim = self._modules["verify"].accept_draft_tokens(**kwargs)
        return _contract_outputs(self._modules, draft_tokens, correct_len, bonus)


class GreedyVerifier:
    """SPEC S5 greedy verification through ``AcceptGreedy.execute``."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules

    def verify_greedy(self, draft_tokens, target_logits, cap=None):
        bs, gamma = draft_tokens.shape
        correct_len, bonus, _trim = self._modules["accept"].AcceptGreedy.execute(
            candidates=_candidates(draft_tokens),
            target_logits=target_logits.reshape(bs * (gamma + 1), -1),
            verify_num_draft_tokens=gamma + 1,
            cutoff_verify_lens=_cutoff_lens(cap, bs, draft_tokens.device),
        )
        return _contract_outputs(self._modules, draft_tokens, correct_len, bonus)
