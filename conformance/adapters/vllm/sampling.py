"""The step sampler (SPEC S3) through vLLM's ``gumbel_sample``, every release 0.25.0+.

``gumbel_sample`` is the Gumbel-max kernel of vLLM's V2 model runner: the DSpark drafter
calls it once per Markov step (``is_drafting=True`` from 0.29.0, which salts the draft's
noise positions apart from the target's) and the target sampler calls it for normal decode.
Its noise is ``murmur3(seed, pos, token)`` (0.33.0; Philox ``tl.rand`` before), so the
adapter draws each row's seed and position from the suite's generator on every call
(:mod:`.engine_inputs`): fresh noise per call, reproducible per case seed.

What changes across releases, found by inspecting ``gumbel_sample``'s parameters
(:func:`gumbel_kwargs`), never by version string: the drafter's logits-cache arguments
(``output_processed_logits`` / ``_col`` in 0.25.0, ``logits_cache`` / ``_col`` from
0.28.0) and the ``is_drafting`` flag (0.29.0+).

Conventions: rows vLLM's request path makes greedy (temperature state 0) are argmaxed by
the kernel; ``top_k`` does not enter (vLLM's greedy rule is the temperature). The padded
tail ``[vocab_size, V_pad)`` is cut off by passing the ``[:, :vocab_size]`` view (the
kernel reads the row stride). No explicit noise (``NoiseStepSampler``) and no truncation
(``TruncatedStepSampler``): the noise is generated inside the kernel, and top-k/top-p are
applied by the target sampler, not by DSpark's draft.
"""

from __future__ import annotations

import inspect

import torch

from .engine_inputs import identity_mapping, positions_from, request_temperatures, sampling_constants, seeds_from
from .loader import VLLMModules

__all__ = ["gumbel_kwargs", "cache_is_processed", "StepSampler"]


def cache_is_processed(gumbel_sample) -> bool:
    """True when the drafter's logits cache holds temperature-applied logits ``L / T``
    (``gumbel_sample(output_processed_logits=...)``, 0.25.0), False when it holds the
    pre-temperature logits that the rejection sampler divides on load
    (``logits_cache=...``, 0.28.0+). In the first generation the rejection sampler also
    takes temperature-applied target logits; in both the target sampler applies the
    temperature to the target logits before verification (``apply_sampling_params``).
    """
    return "output_processed_logits" in inspect.signature(gumbel_sample).parameters


def gumbel_kwargs(gumbel_sample, *, drafting: bool, cache: torch.Tensor | None = None,
                  cache_col: torch.Tensor | None = None) -> dict:
    """Keyword arguments for the installed ``gumbel_sample``: the drafter's logits cache
    under the name this release uses, and ``is_drafting`` where it exists.

    Raises:
        TypeError: a cache was asked for and the release has neither argument name.
    """
    params = inspect.signature(gumbel_sample).parameters
    kwargs: dict = {"apply_temperature": True}
    if "is_drafting" in params:
        kwargs["is_drafting"] = drafting
    if cache is not None:
        for names in (("logits_cache", "logits_cache_col"),
                      ("output_processed_logits", "output_processed_logits_col")):
            if all(n in params for n in names):
                kwargs[names[0]], kwargs[names[1]] = cache, cache_col
                break
        else:
            raise TypeError(f"gumbel_sample{inspect.signature(gumbel_sample)} takes no logits cache")
    return kwargs


class StepSampler:
    """SPEC S3 through ``gumbel_sample`` (the drafter's call, without its logits cache)."""

    def __init__(self, modules: VLLMModules) -> None:
        self._modules = modules
        self._eps, self._max_temp = sampling_constants(modules.root, modules.version)

    def sample(self, logits, temperatures, top_k, vocab_size, generator):
        bs = logits.shape[0]
        device = logits.device
        gumbel_sample = self._modules["gumbel"].gumbel_sample
        return gumbel_sample(
            logits[:, :vocab_size],
            identity_mapping(bs, device),
            request_temperatures(temperatures, self._eps, self._max_temp),
            seeds_from(generator, bs, device),
            positions_from(generator, bs, device),
            **gumbel_kwargs(gumbel_sample, drafting=True),
        )
