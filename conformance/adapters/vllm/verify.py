"""Chain and greedy verification (SPEC S5) through vLLM's ``rejection_sample``.

``rejection_sample`` is the verifier of vLLM's V2 model runner (DSpark drafts are verified
by the same kernels as every draft model). The adapter lays the contract's batch out as
vLLM's verify step does:

* one request state per row (``idx_mapping`` the identity); row ``r`` with ``n_r`` drafts
  owns ``n_r + 1`` logits rows (``cu_num_logits``), the verify positions of the anchor and
  its drafts; ``draft_sampled`` holds the verify input ids of those rows, ``[anchor, x_1..
  x_{n_r}]`` (the kernel reads the draft of logits row ``k`` at ``k + 1``; the anchor is
  not read and is passed as 0); ``expanded_local_pos`` is ``k``;
* ``pos`` is each logits row's sequence position: ``positions[r] - 1 + k`` (the contract's
  ``positions`` is the position of the first draft; the anchor sits one before it);
* ``temperature`` / ``seed`` are the request state (:mod:`.engine_inputs`); without
  ``seeds`` the seeds and positions are drawn from the suite's generator;
* target logits go through vLLM's ``apply_temperature`` first, as the target sampler's
  ``apply_sampling_params`` does before verification; the draft logits are the corrected
  logits the drafter caches: pre-temperature from 0.28.0 (the kernel divides on load),
  temperature-applied in 0.25.0 (``cache_is_processed``: the adapter applies vLLM's
  ``apply_temperature`` to them, as the 0.25.0 drafter's sampler stored them); handed over
  as the tensor, or from 0.34.0 in vLLM's ``DraftLogitsCache`` (:mod:`.draft_cache`).

Greedy rows (temperature state 0) accept while the draft equals the target argmax; an
all-greedy batch passes no draft logits (vLLM's greedy drafter keeps none).
The cap: vLLM takes no cap argument but verifies a per-row draft count (adaptive
verification shortens rows that way), so a cap ``c`` (one int, or ``[B]`` per-row caps)
verifies each row's first ``max(c - 1, 0)`` drafts. Trailing ``-1`` sentinel drafts go to the
kernel as they are (vLLM's own placeholder id). Output: ``sampled[B, l + 1]`` with ``num_sampled = accepted + 1``;
vLLM leaves slots after ``num_sampled`` uninitialised, the adapter sets them to -1.
Explicit uniforms raise ``NotImplementedError`` (vLLM hashes its own from seed and position).
"""

from __future__ import annotations

import inspect

import torch

from .draft_cache import cache_holding
from .engine_inputs import identity_mapping, positions_from, request_temperatures, sampling_constants, seeds_from
from .loader import VLLMModules
from .sampling import cache_is_processed

__all__ = ["ChainVerifier", "GreedyVerifier", "verify_rows"]


def _apply_temperature(modules: VLLMModules, logits: torch.Tensor, temps: torch.Tensor, rows_per_req) -> torch.Tensor:
    """vLLM's ``apply_temperature`` on a float32 copy of ``logits [N, V]`` whose row ``i``
    belongs to request ``rows_per_req[i]``."""
    out = logits.to(torch.float32).clone().contiguous()
    if out.numel():
        modules["gumbel"].apply_temperature(out, rows_per_req, temps)
    return out


def _on_device(device: torch.device, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """``tensors`` on ``device``: the integer CPU ones moved in ONE int64 copy (each
    host-to-device copy waits for the stream, and a verify step has five small ones), the
    others as they are. Shapes are kept; dtypes become int64."""
    host = [t for t in tensors if t.device != device]
    if not host:
        return list(tensors)
    flat = iter(torch.cat([t.reshape(-1).to(torch.int64) for t in host]).to(device).split([t.numel() for t in host]))
    return [next(flat).view(t.shape) if t.device != device else t for t in tensors]


def verify_rows(modules: VLLMModules, draft_tokens, target_logits, draft_logits, temps, seeds, first_pos,
                num_drafts, *, target_processed: bool = False, draft_cached: bool = False,
                synthetic_rates: torch.Tensor | None = None, masked_targets: bool = False):
    """``(accepted[B] i64, tokens[B, l + 1] i64 padded with -1)`` from ``rejection_sample``.

    ``temps`` is vLLM's temperature state (0 = greedy), ``first_pos[B]`` the position of each
    row's first draft, ``num_drafts[B]`` how many of its ``l`` drafts row ``r`` verifies;
    ``draft_logits`` may be None when every row is greedy. ``target_processed``: the target
    logits already went through the target sampler's steps (temperature included);
    ``draft_cached``: the draft logits are the drafter's cache as vLLM hands it over (else they
    are the contract's corrected logits, put into the cache's form here). ``synthetic_rates``:
    vLLM's ``synthetic_conditional_rates [l]`` float32 (synthetic rejection mode, SPEC S6;
    :mod:`.simulated`), None for the standard accept. ``masked_targets``: some row's target
    sampler may have set logits to -inf (vLLM's ``may_mask_logits``), which from 0.34.0 lets
    the residual resample skip all -inf vocabulary blocks (``skip_masked_vocab_blocks``).
    """
    bs, l = draft_tokens.shape
    device = draft_tokens.device
    counts = num_drafts.to(torch.int64).cpu()
    rows = torch.repeat_interleave(torch.arange(bs), counts + 1)
    local = torch.cat([torch.arange(int(n) + 1) for n in counts]) if bs else torch.zeros(0, dtype=torch.int64)
    cu = torch.zeros(bs + 1, dtype=torch.int64)
    cu[1:] = torch.cumsum(counts + 1, 0)
    rows_d, local_d, cu, seeds, first_pos = _on_device(device, rows, local, cu, seeds, first_pos)
    padded = torch.cat([torch.zeros(bs, 1, dtype=torch.int64, device=device), draft_tokens.to(torch.int64)], dim=1)
    draft_sampled = padded[rows_d, local_d].contiguous()
    pos = (first_pos.to(torch.int64)[rows_d] - 1 + local_d).contiguous()
    idx = identity_mapping(bs, device)
    expanded = rows_d.to(torch.int32).contiguous()
    target = target_logits[rows_d, local_d].to(torch.float32).contiguous()
    if not target_processed:
        target = _apply_temperature(modules, target, temps, expanded)
    gumbel = modules["gumbel"].gumbel_sample
    if draft_logits is not None:
        draft = draft_logits.to(torch.float32).contiguous()
        if cache_is_processed(gumbel) and not draft_cached:
            vocab = draft.shape[-1]  # explicit: l = 0 leaves no element to infer it from
            flat = _apply_temperature(modules, draft.reshape(bs * l, vocab), temps,
                                      identity_mapping(bs, device).repeat_interleave(l))
            draft = flat.reshape(bs, l, vocab)
    else:
        draft = None
    if draft is not None:
        draft = cache_holding(modules, draft)
    rejection_sample = modules["rejection"].rejection_sample
    extra = {"skip_masked_vocab_blocks": masked_targets} if _takes(rejection_sample, "skip_masked_vocab_blocks") else {}
    sampled, num_sampled = rejection_sample(
        target, draft, draft_sampled, cu.to(torch.int32), pos, idx, expanded, local_d.to(torch.int32).contiguous(),
        temps, seeds, l, synthetic_rates, **extra,
    )
    num_sampled = num_sampled.to(torch.int64)
    slots = torch.arange(l + 1, device=device)
    tokens = torch.where(slots[None, :] < num_sampled[:, None], sampled.to(torch.int64), -1)
    return num_sampled - 1, tokens


def _takes(function, name: str) -> bool:
    return name in inspect.signature(function).parameters


def _num_drafts(bs: int, l: int, cap: int | torch.Tensor | None, device) -> torch.Tensor:
    """Drafts each row verifies: ``min(l, max(c - 1, 0))`` per row (an int cap or ``[B]`` caps)."""
    if isinstance(cap, torch.Tensor):
        return (cap.to(device=device, dtype=torch.int64) - 1).clamp(0, l)
    n = l if cap is None else min(l, max(cap - 1, 0))
    return torch.full((bs,), n, dtype=torch.int64, device=device)


class ChainVerifier:
    """SPEC S5 chain verification through ``rejection_sample`` (see the module note)."""

    def __init__(self, modules: VLLMModules) -> None:
        self._modules = modules
        self._eps, self._max_temp = sampling_constants(modules.root, modules.version)

    def verify(self, draft_tokens, target_logits, draft_logits, temperatures, top_k, *, generator=None,
               accept_uniforms=None, final_uniforms=None, seeds=None, positions=None, cap=None):
        if accept_uniforms is not None or final_uniforms is not None:
            raise NotImplementedError(
                "explicit uniforms: vLLM's rejection_sample hashes its own from (seed, position)"
            )
        bs, l = draft_tokens.shape
        device = draft_tokens.device
        if seeds is None:
            generator = torch.random.default_generator if generator is None else generator
            seeds = seeds_from(generator, bs, device)
            positions = positions_from(generator, bs, device) if positions is None else positions
        elif positions is None:
            positions = torch.ones(bs, dtype=torch.int64, device=device)
        temps = request_temperatures(temperatures, self._eps, self._max_temp)
        draft = None if bool((temps == 0).all()) else draft_logits
        return verify_rows(self._modules, draft_tokens, target_logits, draft, temps,
                           seeds.to(torch.int64).to(device), positions, _num_drafts(bs, l, cap, device))


class GreedyVerifier:
    """SPEC S5 greedy verification: ``rejection_sample`` with every row greedy."""

    def __init__(self, modules: VLLMModules) -> None:
        self._modules = modules

    def verify_greedy(self, draft_tokens, target_logits, cap=None):
        bs, l = draft_tokens.shape
        device = draft_tokens.device
        zeros = torch.zeros(bs, dtype=torch.float32, device=device)
        return verify_rows(self._modules, draft_tokens, target_logits, None, zeros,
                           torch.zeros(bs, dtype=torch.int64, device=device),
                           torch.ones(bs, dtype=torch.int64, device=device), _num_drafts(bs, l, cap, device))
