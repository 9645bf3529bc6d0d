"""Chain and greedy verification through SGLang's accept path (SPEC S5), all versions.

* ``ChainVerifier``: ``dspark_verify.accept_draft_tokens``, the function the DSpark worker
  calls after target verify. It dispatches as the engine does: an all-greedy batch takes
  ``AcceptGreedy``; otherwise ``AcceptSampling`` (the Triton chain kernel
  ``chain_speculative_sampling_triton``, uniforms from ``torch.rand``), or, in 0.5.22+ with
  a ``RejectionNoise``, ``BlockwiseRejection``; mixed batches merge the greedy rows back
  with ``SelectMixedAccept``. The draft side (``DraftBlockResult``) carries the corrected
  logits with the temperatures and greedy mask SGLang stages for the draft.
* ``TruncatedChainVerifier``: the same call with the request's ``top_ks`` / ``top_ps`` /
  ``min_ps`` in ``sampling_info``; SGLang truncates the target law in
  ``build_dflash_verify_target_probs`` (0.5.23: ``build_speculative_verify_target_probs``):
  top-k by ``torch.topk`` (exactly k), top-p by the platform renorm kernel or the torch
  fallback ``top_p_normalize_probs_torch``, min-p not at all (F10). The handed-over q
  travels as ``log q`` at draft temperature 1 (``SoftmaxTemp`` gives ``q`` back).
* ``GreedyVerifier``: ``AcceptGreedy.execute``.
* The cap is SGLang's ragged-verify ``cutoff_layout.verify_lens`` (per row: an int cap fills
  every row, a ``[B]`` cap is passed as it is).
* Rows with fewer drafts: SGLang shortens a row by its verify length; the contract's
  trailing -1 sentinels are turned into that (``_ragged``), never handed to the kernels.
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

__all__ = ["accept", "committed", "draft_block_result", "ChainVerifier", "TruncatedChainVerifier", "GreedyVerifier"]

DraftParams = Callable[[SGLangModules, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _candidates(draft_tokens: torch.Tensor) -> torch.Tensor:
    anchor = torch.zeros(draft_tokens.shape[0], 1, dtype=torch.int64, device=draft_tokens.device)
    return torch.cat([anchor, draft_tokens.to(torch.int64)], dim=1)


def _cutoff_lens(cap: int | torch.Tensor | None, bs: int, device: torch.device) -> torch.Tensor | None:
    """SGLang's per-row ``verify_lens``: one cap for every row, or the contract's per-row caps."""
    if cap is None:
        return None
    if isinstance(cap, torch.Tensor):
        return cap.to(device=device, dtype=torch.int32)
    return torch.full((bs,), cap, dtype=torch.int32, device=device)


def committed(out_tokens: torch.Tensor, correct_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's commit layout ``out_tokens [B, gamma + 1]`` (``BuildOutTokens``: accepted drafts,
    then the bonus) and ``correct_len [B]`` -> the contract's ``(accepted [B] i64, tokens
    [B, gamma + 1] i64)``, ``-1`` after the bonus."""
    accepted = correct_len.to(torch.int64)
    positions = torch.arange(out_tokens.shape[1], device=out_tokens.device)
    return accepted, torch.where(positions[None, :] <= accepted[:, None], out_tokens.to(torch.int64), -1)


def _contract_outputs(modules, draft_tokens, correct_len, bonus) -> tuple[torch.Tensor, torch.Tensor]:
    gamma = draft_tokens.shape[1]
    out = modules["verify"].BuildOutTokens.execute(
        draft_tokens=draft_tokens, correct_len=correct_len, bonus=bonus,
        verify_num_draft_tokens=gamma + 1, gamma=gamma,
    )
    return committed(out, correct_len)


def _ragged(draft_tokens: torch.Tensor, cap: int | torch.Tensor | None) -> tuple[torch.Tensor, int | torch.Tensor | None]:
    """SGLang lays out a row with fewer drafts by its verify length, never by -1 drafts: the
    contract's trailing -1 sentinels become per-row caps (real drafts + 1, within ``cap``) and
    ids 0 that the shortened rows never read."""
    sentinel = draft_tokens < 0
    if not bool(sentinel.any()):
        return draft_tokens, cap
    lens = (~sentinel).to(torch.int64).cumprod(dim=1).sum(dim=1) + 1
    if cap is not None:
        lens = torch.minimum(lens, torch.as_tensor(cap, device=lens.device).to(torch.int64).expand_as(lens))
    return draft_tokens.masked_fill(sentinel, 0), lens


def _triton_runs_on(device: torch.device) -> bool:
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def _check_no_seeds(seeds, positions) -> None:
    if seeds is not None or positions is not None:
        raise NotImplementedError("seeded rows: SGLang's accept takes no per-row (seed, position)")


def accept(
    modules: SGLangModules,
    *,
    anchor: torch.Tensor | None,
    draft_block,
    target_logits: torch.Tensor,
    info,
    top_k: torch.Tensor,
    seed: int,
    blockwise: bool = False,
    cap: int | torch.Tensor | None = None,
    vocab_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's ``accept_draft_tokens`` on one drafted block, in contract outputs.

    Call it inside ``seeded_global_rng(seed, device)``: SGLang's coins are ``torch.rand``
    draws of the global RNG (the server seeds it with its ``random_seed``), and the
    blockwise ``RejectionNoise`` is ``make_rejection_noise``'s of the same ``seed``.

    Args:
        modules: the loaded SGLang.
        anchor: ``[B]`` the anchor ``x0`` (candidate column 0; verification does not read
            it), or None for token 0.
        draft_block: SGLang's ``DraftBlockResult`` (tokens ``[B, gamma]``, corrected logits,
            draft temperatures and greedy mask).
        target_logits: ``[B, gamma + 1, V]``.
        info: the ``SamplingBatchInfo`` fields (:func:`~.engine_inputs.sampling_info`).
        top_k: ``[B]`` the rows' ``top_k`` (for ``DFlashDraftInputV2``'s top-k fields).
        seed: the server seed the global RNG was seeded with (keys ``RejectionNoise``).
        blockwise: 0.5.23+: pass a ``RejectionNoise`` (``BlockwiseRejection``).
        cap: the ragged-verify length of every row (an int) or of each row ([B]), or None.
        vocab_size: ``V`` for the truncating capabilities (``draft_input``), else None.

    Raises:
        NotImplementedError: a sampling batch on CPU without ``TRITON_INTERPRET=1`` (the chain
            kernel is Triton-only).
    """
    draft_tokens = draft_block.draft_tokens
    bs, gamma = draft_tokens.shape
    device = draft_tokens.device
    # Blockwise rejection serves full-vocab batches only (mixed batches carry top_k = 1
    # rows, so SGLang sends them to the chain kernel).
    chain_kernel = not info.is_all_greedy and not (
        blockwise and not info.need_top_k_sampling and not info.need_top_p_sampling
    )
    if chain_kernel and not _triton_runs_on(device):
        raise NotImplementedError(
            "SGLang's chain kernel chain_speculative_sampling_triton is Triton-only: on CPU "
            "run the suite with TRITON_INTERPRET=1"
        )
    candidates = _candidates(draft_tokens) if anchor is None else torch.cat(
        [anchor.to(torch.int64).view(bs, 1), draft_tokens.to(torch.int64)], dim=1
    )
    kwargs = dict(
        candidates=candidates,
        target_logits=target_logits.reshape(bs * (gamma + 1), -1),
        draft_block=draft_block,
        sampling_info=info,
        draft_input=draft_input(top_k, vocab_size),
        gamma=gamma,
        verify_num_draft_tokens=gamma + 1,
        cutoff_layout=None if cap is None else types.SimpleNamespace(
            verify_lens=_cutoff_lens(cap, bs, device)
        ),
    )
    if blockwise:
        kwargs["rejection_noise"] = modules["blockwise"].make_rejection_noise(seed, device)
    try:
        correct_len, bonus, _trim = modules["verify"].accept_draft_tokens(**kwargs)
    except TypeError as exc:
        if _renorm_kernels_missing(modules):
            raise NotImplementedError(
                f"sglang=={modules.version}: verifying a batch with top-k / top-p rows (a mixed batch "
                "counts: its greedy rows have top_k = 1) calls sgl_kernel's top_k_renorm_prob / "
                "top_p_renorm_prob, which this platform lacks (build_dflash_verify_target_probs has "
                "no torch fallback before 0.5.18)"
            ) from exc
        raise
    return _contract_outputs(modules, draft_tokens, correct_len, bonus)


def _renorm_kernels_missing(modules: SGLangModules) -> bool:
    """0.5.17: ``dflash_utils`` calls ``top_k_renorm_prob`` / ``top_p_renorm_prob`` directly,
    which are None without ``sgl_kernel`` (CPU; CUDA without the wheel); 0.5.18+ fall back
    to torch (``_dflash_top_k_renorm_prob``)."""
    utils = modules["dflash_utils"]
    return not hasattr(utils, "_dflash_top_k_renorm_prob") and (
        getattr(utils, "top_k_renorm_prob", None) is None or getattr(utils, "top_p_renorm_prob", None) is None
    )


def draft_block_result(modules: SGLangModules, **fields) -> object:
    """SGLang's ``DraftBlockResult`` of ``fields`` (0.5.22+: an eager sampling draft,
    ``greedy_draft=False``, whose step logits are kept)."""
    if modules.generation == "philox":
        fields.setdefault("greedy_draft", False)
    return modules["draft"].DraftBlockResult(**fields)


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
        _check_no_seeds(seeds, positions)
        generator = torch.random.default_generator if generator is None else generator
        draft_tokens, cap = _ragged(draft_tokens, cap)
        draft_temps, greedy_mask = self._draft_params(self._modules, temperatures, top_k)
        block = draft_block_result(
            self._modules, draft_tokens=draft_tokens, corrected_logits=draft_logits, greedy_mask=greedy_mask,
            temperatures=draft_temps,
        )
        seed = seed_from(generator)
        with seeded_global_rng(seed, draft_tokens.device):
            return accept(
                self._modules, anchor=None, draft_block=block, target_logits=target_logits,
                info=sampling_info(temperatures, top_k), top_k=top_k, seed=seed, blockwise=self._blockwise, cap=cap,
            )


class TruncatedChainVerifier:
    """SPEC S5 truncation through ``accept_draft_tokens`` with the request's ``top_ks`` /
    ``top_ps`` / ``min_ps`` in ``sampling_info`` (SGLang builds the truncated target law
    with ``build_dflash_verify_target_probs``, 0.5.23: ``build_speculative_verify_target_probs``).

    The handed-over law ``q`` enters SGLang's handoff as the draft block's corrected logits
    ``log q`` at draft temperature 1: ``SoftmaxTemp`` then gives back ``q`` (within float32
    rounding; ``q = 0`` stays 0). Greedy rows (``top_k <= 1``) take ``AcceptGreedy`` as in
    the engine.

    Args: as :class:`ChainVerifier`.
    """

    def __init__(self, modules: SGLangModules, draft_params: DraftParams, *, blockwise: bool = False) -> None:
        self._modules = modules
        self._draft_params = draft_params
        self._blockwise = blockwise

    def verify_truncated(self, draft_tokens, target_logits, draft_probs, temperatures, top_k, top_p, min_p,
                         generator):
        generator = torch.random.default_generator if generator is None else generator
        vocab = target_logits.shape[-1]
        _draft_temps, greedy_mask = self._draft_params(self._modules, temperatures, top_k)
        block = draft_block_result(
            self._modules, draft_tokens=draft_tokens, corrected_logits=draft_probs.to(torch.float32).log(),
            greedy_mask=greedy_mask, temperatures=torch.ones_like(temperatures, dtype=torch.float32),
        )
        info = sampling_info(temperatures, top_k, top_p=top_p, min_p=min_p, vocab_size=vocab)
        seed = seed_from(generator)
        with seeded_global_rng(seed, draft_tokens.device):
            return accept(
                self._modules, anchor=None, draft_block=block, target_logits=target_logits, info=info, top_k=top_k,
                seed=seed, blockwise=self._blockwise, vocab_size=vocab,
            )


class GreedyVerifier:
    """SPEC S5 greedy verification through ``AcceptGreedy.execute``."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules

    def verify_greedy(self, draft_tokens, target_logits, cap=None):
        draft_tokens, cap = _ragged(draft_tokens, cap)
        bs, gamma = draft_tokens.shape
        correct_len, bonus, _trim = self._modules["accept"].AcceptGreedy.execute(
            candidates=_candidates(draft_tokens),
            target_logits=target_logits.reshape(bs * (gamma + 1), -1),
            verify_num_draft_tokens=gamma + 1,
            cutoff_verify_lens=_cutoff_lens(cap, bs, draft_tokens.device),
        )
        return _contract_outputs(self._modules, draft_tokens, correct_len, bonus)
