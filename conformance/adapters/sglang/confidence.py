"""Confidence head, prefix survival and STS through SGLang (SPEC S7), all versions.

* ``confidences``: ``DSparkConfidenceHead`` (``sglang.srt.models.dspark``) built with
  ``bias=True`` and ``with_markov`` iff Markov features are given; the reference layout is
  SGLang's (``proj.weight [1, d + r]``, hidden part first, ``proj.bias [1]``). Calibration
  as the DSpark planner applies a loaded STS table: the per-position temperatures replace
  the head's ``sts_temperatures`` buffer, then ``apply_sts`` (``sigmoid(raw / t)``). The
  head is position-free, so the checkpoint's block length plays no part.
* ``prefix_survival``: the scheduler's ``compute_sort_survival`` over ``[requests, gamma]``
  (leading axes folded into requests; a float32 cumulative product, whatever the input
  dtype).
* ``fit_sts``: SGLang's offline fitter ``sglang/benchmark/dspark_sts_fit.py``
  (``fit_sts_temperatures`` over ``default_temperature_grid()``, 15 ECE bins), fed the
  accepted-prefix mask as its ``prefix_mask``.
"""

from __future__ import annotations

import torch

from .loader import SGLangModules

__all__ = ["Confidence"]


class Confidence:
    """SPEC S7 through SGLang's confidence head, survival and STS fitter."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules

    @torch.no_grad()
    def confidences(self, state_dict, hidden, markov_features, temperatures, *, checkpoint_gamma):
        rank = 0 if markov_features is None else markov_features.shape[-1]
        head = self._modules["heads"].DSparkConfidenceHead(
            hidden_size=hidden.shape[-1], markov_rank=rank, with_markov=markov_features is not None, bias=True,
        )
        head.load_state_dict(dict(state_dict))
        head = head.to(hidden.device)
        if temperatures is not None:
            head.sts_temperatures = temperatures.to(device=hidden.device, dtype=torch.float32)
        return head.apply_sts(head(hidden, markov_features))

    def prefix_survival(self, confidences):
        # SGLang's survival is over [requests, gamma]: fold any leading axes into requests.
        rows = confidences.reshape(-1, confidences.shape[-1])
        return self._modules["schedule"].compute_sort_survival(rows).reshape(confidences.shape)

    def fit_sts(self, raw, accepted):
        fitter = self._modules["sts_fit"]
        fitted = fitter.fit_sts_temperatures(
            logits=raw.cpu(), prefix_mask=accepted.cpu(), grid=fitter.default_temperature_grid()
        )
        # SGLang fits on the host; the contract returns on the device of ``raw``.
        return torch.tensor(fitted["temperatures"], dtype=torch.float64, device=raw.device)
