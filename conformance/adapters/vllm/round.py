"""One speculative round (SPEC S9) as vLLM wires it: its DSpark drafter feeds its verifier.

* **Draft**: ``DSparkSpeculator._sample_sequential`` (:func:`.markov.run_markov_loop`) with
  the request's temperature state and seed; the anchor sits at ``positions - 1`` and step
  ``i`` predicts position ``positions + i``, keyed by ``positions + i - 1`` (vLLM keys a draw
  by the position before the sampled token). The drafter writes its corrected logits into
  its ``draft_logits`` cache in the head's dtype: what vLLM hands to the verifier.
* **Verify**: ``rejection_sample`` (:func:`.verify.verify_rows`) with the *same* request seed
  and the verify positions of the anchor and the drafts (``positions - 1 + k``), the cache
  as the draft logits, and the target logits after the target sampler's steps: vLLM's
  ``apply_temperature``, then its ``apply_min_p`` (``vllm.v1.worker.gpu.sample.min_p``).
  Top-k / top-p: vLLM applies them through ``vllm.v1.sample.ops.topk_topp_sampler``, which
  needs the platform layer; a request with ``top_k < V`` or ``top_p < 1`` raises
  ``NotImplementedError`` naming that (a skip).
* The drafter draws from the full tempered softmax (``Conventions.draft_truncates=False``:
  vLLM's DSpark drafter applies no request truncation), so ``draft_probs`` is
  ``softmax(cache / T)`` (one-hot on greedy rows), the law the kernel reads from the cache.

Without ``seeds`` the seeds and positions are drawn from the suite's generator, once per
round and shared by drafter and verifier, as vLLM shares a request's seed.
"""

from __future__ import annotations

import importlib

import torch

from .engine_inputs import positions_from, request_temperatures, sampling_constants, seeds_from
from .loader import VLLMModules
from .markov import MarkovBlock, VLLMHead, run_markov_loop
from .sampling import cache_is_processed
from .verify import verify_rows

__all__ = ["SpeculativeRound", "MIN_P_MODULE"]

MIN_P_MODULE = "vllm.v1.worker.gpu.sample.min_p"


class SpeculativeRound:
    """SPEC S9 one round through vLLM's drafter loop and rejection sampler (module note)."""

    def __init__(self, modules: VLLMModules) -> None:
        self._modules = modules
        self._block = MarkovBlock(modules)
        self._eps, self._max_temp = sampling_constants(modules.root, modules.version)

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device, dtype):
        return self._block.load_head(head_type, state_dict, vocab_size, rank, hidden_size, device).to(dtype)

    def _min_p(self, logits: torch.Tensor, rows: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
        module = importlib.import_module(MIN_P_MODULE)
        out = logits.clone()
        module.apply_min_p(out, rows, min_p.to(torch.float32).contiguous())
        return out

    def round(self, head, base_logits, first_prev, hidden, target_logits, temperatures, top_k, top_p, min_p, *,
              generator=None, seeds=None, positions=None):
        bs, gamma, vocab = base_logits.shape
        device = base_logits.device
        if bool((top_k < vocab).any()) or bool((top_p < 1).any()):
            raise NotImplementedError(
                "top-k / top-p truncation: vLLM applies it through vllm.v1.sample.ops.topk_topp_sampler, "
                "which needs vLLM's platform layer (not loaded by the adapter)"
            )
        temps = request_temperatures(temperatures, self._eps, self._max_temp)
        if seeds is None:
            generator = torch.random.default_generator if generator is None else generator
            seeds = seeds_from(generator, bs, device)
            positions = positions_from(generator, bs, device) if positions is None else positions
        elif positions is None:
            raise ValueError("seeds without positions: each row's first draft position is needed")
        drafts, accepted, tokens, cache = self.seeded_round(
            head, base_logits, first_prev, target_logits, temps, min_p, seeds, positions,
            torch.full((bs,), gamma, dtype=torch.int64, device=device), hidden=hidden,
        )
        return drafts, accepted, tokens, self._draft_probs(cache, temps)

    def seeded_round(self, head: VLLMHead, base_logits, first_prev, target_logits, temps, min_p, seeds, positions,
                     num_drafts, *, hidden=None):
        """``(drafts[B, gamma] i64, accepted[B] i64, tokens[B, gamma + 1] i64, draft_logits cache)``:
        the drafter's loop then ``rejection_sample`` over row ``r``'s first ``num_drafts[r]``
        drafts (module note). ``temps[B]``: vLLM's temperature state; ``min_p[B]``; ``seeds`` /
        ``positions [B]`` int: each request's seed and first draft position; ``hidden [B, gamma,
        d]``: the backbone's hidden states (an rnn head reads them)."""
        bs, gamma, vocab = base_logits.shape
        device = base_logits.device
        seeds = seeds.to(torch.int64).to(device)
        positions = positions.to(torch.int64).to(device)
        drafts, cache = run_markov_loop(self._modules, head, base_logits.to(head.w1.dtype).contiguous(), first_prev,
                                        temps, seeds, positions - 1, hidden=hidden)
        # The target sampler's apply_sampling_params: temperature, then min_p (when a row has one).
        rows = torch.arange(bs, dtype=torch.int32, device=device).repeat_interleave(gamma + 1)
        flat = target_logits.to(torch.float32).reshape(bs * (gamma + 1), vocab).clone()
        self._modules["gumbel"].apply_temperature(flat, rows, temps)
        if bool((min_p > 0).any()):
            flat = self._min_p(flat, rows, min_p)
        # vLLM's SamplingStates.masks_logits for the requests a round takes (top-k = V, top-p = 1):
        # min-p on a sampling row may mask target logits.
        masked = bool(((temps != 0) & (min_p != 0)).any())
        accepted, tokens = verify_rows(self._modules, drafts, flat.reshape(bs, gamma + 1, vocab), cache, temps, seeds,
                                       positions, num_drafts, target_processed=True, draft_cached=True,
                                       masked_targets=masked)
        return drafts, accepted, tokens, cache

    def _draft_probs(self, cache: torch.Tensor, temps: torch.Tensor) -> torch.Tensor:
        logits = cache.to(torch.float32)
        if not cache_is_processed(self._modules["gumbel"].gumbel_sample):
            logits = logits / torch.where(temps > 0, temps, torch.ones_like(temps))[:, None, None]
        probs = torch.softmax(logits, dim=-1)
        greedy = (temps == 0)[:, None, None]
        onehot = torch.nn.functional.one_hot(cache.to(torch.float32).argmax(dim=-1), cache.shape[-1]).to(probs.dtype)
        return torch.where(greedy, onehot, probs)
