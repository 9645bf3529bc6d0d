"""The drafter's logits cache as the installed vLLM shapes it (SPEC S2 -> S5 hand-over).

vLLM's DSpark drafter writes the corrected logits of each draft step into a cache that the
rejection sampler reads at verification. Up to 0.33.0 the cache is a tensor ``[max_num_reqs,
num_speculative_steps, V]`` (``gumbel_sample(logits_cache=...)``, ``rejection_sample(...,
draft_logits, ...)``); from 0.34.0 it is vLLM's ``DraftLogitsCache`` (``spec_decode/
draft_logits.py``), whose ``.values`` is that tensor and whose ``.row_mapping`` maps a request
state to its row (None for the replicated cache, the one single-rank drafting builds;
batch-sharded TP caches are not built here). Which one the installed release takes is read
from ``rejection_sample``'s parameters (:func:`takes_cache_object`), never from its version.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .loader import VLLMModules

__all__ = ["takes_cache_object", "new_cache", "cache_values", "cache_holding"]

#: vLLM's default fill of a fresh cache (``DraftModelSpeculator.draft_logits_spec``: head dtype, 0.0).
_FILL = 0.0


def takes_cache_object(modules: VLLMModules) -> bool:
    """True when ``rejection_sample`` takes a ``DraftLogitsCache`` (``draft_logits_cache``,
    0.34.0+), False when it takes the tensor (``draft_logits``)."""
    return "draft_logits_cache" in inspect.signature(modules["rejection"].rejection_sample).parameters


def new_cache(modules: VLLMModules, rows: int, steps: int, vocab: int, dtype: torch.dtype,
              device: torch.device) -> Any:
    """A fresh replicated cache of ``rows`` requests, ``steps`` draft steps and ``vocab``
    logits in ``dtype`` on ``device``: vLLM's ``DraftLogitsCache`` where the release has one,
    else the tensor ``[rows, steps, vocab]`` the drafter allocates (``torch.full(..., 0.0)``).

    Raises:
        KeyError: the release takes a cache object but its ``draft_logits`` module did not load.
    """
    if takes_cache_object(modules):
        return modules["draft_logits"].DraftLogitsCache(rows, steps, vocab, dtype=dtype, fill=_FILL, device=device)
    return torch.full((rows, steps, vocab), _FILL, dtype=dtype, device=device)


def cache_values(cache: Any) -> torch.Tensor:
    """The ``[rows, steps, V]`` logits a cache holds (``.values`` of a ``DraftLogitsCache``)."""
    return cache if isinstance(cache, torch.Tensor) else cache.values


def cache_holding(modules: VLLMModules, values: torch.Tensor) -> Any:
    """What ``rejection_sample`` takes as the draft logits for ``values [B, l, V]`` (row ``r``
    request state ``r``): the tensor itself, or a ``DraftLogitsCache`` filled with it."""
    if not takes_cache_object(modules):
        return values
    cache = new_cache(modules, *values.shape, dtype=values.dtype, device=values.device)
    cache.values.copy_(values)
    return cache
