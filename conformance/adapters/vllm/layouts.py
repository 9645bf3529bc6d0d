"""SPEC S1 draft vocabularies through vLLM's DSpark Markov loop (``DraftLayouts``).

vLLM's reduced draft vocabulary: the draft model holds ``draft_id_to_target_id`` as offsets
(``target = j + d2t[j]``); ``DSparkSpeculator.load_draft_model`` turns them into a scatter
index and a ``-inf`` buffer of the target's width, and each step of ``_sample_sequential``
scatters the draft-vocabulary logits ``U_k + bias`` into that buffer before
``gumbel_sample`` draws a target id, which then conditions the next step
(``markov_embed(prev)`` over the target vocabulary) and lands in ``draft_tokens``; the
logits cache (what the rejection sampler reads) is target-wide. This adapter builds the
speculator of :mod:`.markov` and sets exactly the fields ``load_draft_model`` sets for a
reduced vocabulary (the contract's target ids ``d2t`` become vLLM's offsets ``d2t - j``;
``index = j + offsets`` as vLLM computes it), then runs vLLM's loop.

Not offered (``NotImplementedError``, a skip naming the feature): the bonus-anchor layout
(vLLM's ``sample_from_anchor = False`` path sits in the DFlash prepare-inputs kernel, which
needs the engine's attention metadata), a padded draft vocabulary (vLLM treats a draft
vocabulary ``>=`` the target's as identity-mapped, with no crop; not declared), heads other
than vanilla (as :mod:`.markov`).
"""

from __future__ import annotations

import torch

from .draft_cache import cache_values, new_cache
from .loader import VLLMModules
from .markov import MarkovBlock, VLLMHead, _HeadModel, _speculator
from .sampling import cache_is_processed

__all__ = ["DraftLayouts"]


class _ReducedVocabModel(_HeadModel):
    """The head model with vLLM's ``draft_id_to_target_id`` offsets."""

    def __init__(self, head: VLLMHead, offsets: torch.Tensor) -> None:
        super().__init__(head)
        self.draft_id_to_target_id = offsets

    def map_draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.draft_id_to_target_id[draft_ids]


class DraftLayouts:
    """SPEC S1 through ``_sample_sequential`` with vLLM's d2t scatter (see the module note)."""

    def __init__(self, modules: VLLMModules) -> None:
        self._modules = modules
        self._markov = MarkovBlock(modules)

    def draft_block(self, head_type, state_dict, base_logits, first_prev, hidden, temperatures, top_k, generator, *,
                    layout, vocab_size, d2t):
        version = self._modules.version
        if layout != "anchor-first":
            raise NotImplementedError(f"layout {layout!r}: vLLM {version}'s bonus-anchor path is its DFlash "
                                      "prepare-inputs kernel, which needs the engine")
        draft_vocab = base_logits.shape[-1]
        if d2t is None:
            if draft_vocab != vocab_size:
                raise NotImplementedError(f"a padded draft vocabulary ({draft_vocab} > {vocab_size}): vLLM {version} "
                                          "maps a draft vocabulary >= the target's identically, without a crop")
            return self._markov.sample_block(self._markov.load_head(head_type, state_dict, vocab_size,
                                                                    state_dict["W1.weight"].shape[1], 0,
                                                                    base_logits.device),
                                             base_logits, first_prev, hidden, temperatures, top_k, generator)
        if head_type != "vanilla":
            raise NotImplementedError(f"a {head_type!r} head with a reduced draft vocabulary: vLLM {version}'s only "
                                      "non-vanilla head (Mistral Large 4's rnn) drafts over the target vocabulary")
        head = self._markov.load_head(head_type, state_dict, vocab_size, state_dict["W1.weight"].shape[1], 0,
                                      base_logits.device).to(base_logits.dtype)
        bs, gamma, _ = base_logits.shape
        device = base_logits.device
        temps, seeds, anchor_pos = self._markov._state(bs, temperatures, generator, device)
        offsets = d2t.to(device=device, dtype=torch.int64) - torch.arange(d2t.shape[0], device=device)
        spec = _speculator(self._modules, head, base_logits.contiguous(), first_prev, temps, seeds, anchor_pos)
        spec.model = _ReducedVocabModel(head, offsets)
        spec._d2t_scatter_index = torch.arange(offsets.shape[0], device=device) + offsets
        spec._draft_scatter_buf = torch.full((bs, vocab_size), float("-inf"), dtype=base_logits.dtype, device=device)
        spec.draft_logits = new_cache(self._modules, bs, gamma, vocab_size, base_logits.dtype, device)
        spec._fuse_markov_bias = False  # load_model's rule: no fusion with a d2t scatter (0.34.0+)
        with torch.no_grad():
            spec._sample_sequential(bs, base_logits.contiguous().reshape(bs * gamma, draft_vocab))
        cache = cache_values(spec.draft_logits)
        if cache_is_processed(self._modules["gumbel"].gumbel_sample):
            scale = torch.where(temps > 0, temps, torch.ones_like(temps)).to(cache.dtype)
            cache = cache * scale[:, None, None]
        return spec.draft_tokens, cache
