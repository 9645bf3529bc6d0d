"""vLLM's per-request state, built from the contract's canonical tensors.

vLLM's DSpark kernels read a request's sampling state by request-state index
(``temperature[max_num_reqs]`` float32, ``seeds[max_num_reqs]`` int64) and each token's
sequence position (``pos``). The builders here fill them as vLLM's request path does:

* **Temperatures** (:func:`request_temperatures`): ``SamplingParams.__post_init__`` first
  floors ``0 < T < _MAX_TEMP`` to ``_MAX_TEMP``, then treats ``T < _SAMPLING_EPS`` as greedy
  (``temperature = 0``, which every DSpark kernel reads as argmax). The two constants are
  read from the installed ``vllm/sampling_params.py`` (:func:`sampling_constants`), whose
  import needs the whole engine. Because the floor runs first, a request at
  ``0 < T < 1e-5`` is *sampled* at ``T = 1e-2``, not greedy (see the vLLM findings). Values
  ``SamplingParams._verify_args`` rejects (non-finite, negative, above 2) raise
  ``ValueError`` with vLLM's wording.
* **Randomness**: vLLM's noise is counter-based (a hash of seed, position and token), not a
  ``torch.Generator``. :func:`seeds_from` and :func:`positions_from` derive the seeds (and,
  where the contract gives none, the positions) from draws of the suite's generator, so
  the suite controls every draw and fresh draws give fresh noise.
"""

from __future__ import annotations

import ast
import functools
import math
import os

import torch

from conformance.loading import AdapterLoadError

__all__ = [
    "MAX_REQUEST_TEMPERATURE",
    "sampling_constants",
    "request_temperatures",
    "seeds_from",
    "positions_from",
    "identity_mapping",
]

#: ``SamplingParams._verify_args``: "temperature must be in [0, 2]" (0.33.0).
MAX_REQUEST_TEMPERATURE = 2.0
_SEED_RANGE = 1 << 62
_POSITION_RANGE = 1 << 20  # vLLM positions are small (context lengths); kept well below 2**30


@functools.cache
def sampling_constants(root: str, version_text: str) -> tuple[float, float]:
    """``(_SAMPLING_EPS, _MAX_TEMP)`` read from ``<root>/vllm/sampling_params.py``.

    Raises:
        AdapterLoadError: the file or either constant is missing (names the version).
    """
    path = os.path.join(root, "vllm", "sampling_params.py")
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except OSError as exc:
        raise AdapterLoadError(f"vllm=={version_text}: cannot read {path}: {exc}") from exc
    found: dict[str, float] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("_SAMPLING_EPS", "_MAX_TEMP"):
                found[node.targets[0].id] = float(ast.literal_eval(node.value))
    missing = {"_SAMPLING_EPS", "_MAX_TEMP"} - set(found)
    if missing:
        raise AdapterLoadError(f"vllm=={version_text}: sampling_params.py defines no {sorted(missing)}")
    return found["_SAMPLING_EPS"], found["_MAX_TEMP"]


def request_temperatures(temperatures: torch.Tensor, eps: float, max_temp: float) -> torch.Tensor:
    """The ``temperature`` state vLLM holds for requests at ``temperatures[B]``: float32 on
    the same device, ``0`` for greedy rows (see the module note for the order of the rules).

    Raises:
        ValueError: a temperature vLLM's ``SamplingParams`` rejects (non-finite, negative,
            above 2), with vLLM's message.
    """
    values = temperatures.detach().to(torch.float64).cpu()
    for value in values.tolist():
        if not math.isfinite(value):
            raise ValueError(f"temperature must be a finite number, got {value}.")
        if value < 0.0:
            raise ValueError(f"temperature must be non-negative, got {value}.")
        if value > MAX_REQUEST_TEMPERATURE:
            raise ValueError(f"temperature must be in [0, 2], got {value}.")
    floored = torch.where((values > 0) & (values < max_temp), torch.full_like(values, max_temp), values)
    state = torch.where(floored < eps, torch.zeros_like(floored), floored)
    return state.to(torch.float32).to(temperatures.device)


def seeds_from(generator: torch.Generator, n: int, device: torch.device) -> torch.Tensor:
    """``n`` request seeds (int64 in ``[0, 2**62)``) drawn from ``generator``."""
    return torch.randint(0, _SEED_RANGE, (n,), generator=generator, device=generator.device).to(device)


def positions_from(generator: torch.Generator, n: int, device: torch.device) -> torch.Tensor:
    """``n`` sequence positions (int64 in ``[1, 2**20)``) drawn from ``generator``."""
    return torch.randint(1, _POSITION_RANGE, (n,), generator=generator, device=generator.device).to(device)


def identity_mapping(n: int, device: torch.device) -> torch.Tensor:
    """``idx_mapping`` for a batch whose row ``i`` is request state ``i`` (int32)."""
    return torch.arange(n, dtype=torch.int32, device=device)
