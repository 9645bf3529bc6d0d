"""Simulated acceptance (benchmark mode, SPEC S6) through vLLM's synthetic rejection mode.

vLLM's counterpart of S6 is ``SpeculativeConfig(rejection_sample_method="synthetic")``
(every release 0.25.0-0.34.0, the same code):

* a mean length ``synthetic_acceptance_length = value`` (in ``[1, n + 1]``, ``n =
  num_speculative_tokens``) is resolved by ``SpeculativeConfig.
  _resolve_synthetic_acceptance_rates`` into per-position *unconditional* rates with the
  "minimum-variance schedule" (``_acceptance_length_to_rates``: ``[1] * floor(value - 1) +
  [frac] + [0] * ...``); the ``RejectionSampler`` turns them into conditional rates
  (``unconditional_to_conditional_rates``: ``vllm/v1/spec_decode/utils.py`` up to 0.33.0,
  the V2 rejection-sampler module from 0.34.0; taken from whichever file defines it);
* ``rejection_sample(..., synthetic_conditional_rates)`` then accepts draft ``i`` iff its
  hashed uniform ``u(seed, pos) < rate_i`` and stops at the first rejection, so each verify
  step draws a fresh length per request: ``acc_len = accepted + 1``.

That is SPEC S6's ``match-expected`` law: ``acc_len`` is ``floor(value)`` or ``floor(value)
+ 1``, the upper with probability ``value - floor(value)``. The adapter runs exactly that
path with ``n = max_len - 1`` (``gamma`` for the executor): the two helpers compiled from
the wheel's files (:func:`.loader.source_functions`; their modules import the engine
configuration and the platform), then vLLM's ``rejection_sample`` in synthetic mode
(:func:`.verify.verify_rows`) on greedy rows with zero target logits (the synthetic accept
reads neither law; greedy rows skip the residual resample). ``step`` returns
``num_sampled``, and ``correct_drafts`` is built from the tokens vLLM committed: its first
``accepted`` outputs (the drafts it kept), ``-1`` after them.

What does not map:

* ``multinomial`` (``round(clamp(Normal(value, 1), 1, max_len))``) and SPEC's method names:
  vLLM's synthetic mode has one law for a mean length and no method selector, so any method
  other than ``match-expected`` raises ``NotImplementedError`` naming that (a skip); the
  S6 rule "any other method: ValueError" has no vLLM counterpart;
* vLLM's other form, ``synthetic_acceptance_rates`` (a per-position rate vector), has no
  contract counterpart and is not exercised;
* values outside ``[1, max_len]``: vLLM raises ``ValueError`` ("synthetic_acceptance_length
  must be in [1, n + 1]") where SPEC S6 clamps (finding V6, ``docs/conformance/
  vllm-findings.md``); the adapter passes the value on unchanged.

Randomness: vLLM's uniforms are a hash of (seed, position); each draw (each verify step of
an executor) uses fresh seeds and positions drawn from the suite's generator (the
executor's from ``torch.Generator().manual_seed(seed)``).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

import torch

from conformance.loading import AdapterLoadError

from .engine_inputs import positions_from, seeds_from
from .loader import VLLMModules, source_functions
from .verify import verify_rows

__all__ = ["BATCH_ROWS", "MATCH_EXPECTED", "SimulatedAcceptance", "SyntheticExecutor", "synthetic_rates"]

MATCH_EXPECTED = "match-expected"
# Requests per synthetic verify step of a batched draw: a large serving batch, and a bound
# on the step's temporaries.
BATCH_ROWS = 65536
_CONFIG_FILE = "vllm/config/speculative.py"
#: Where releases define ``unconditional_to_conditional_rates``: 0.34.0+ first, then 0.25.0-0.33.0.
_RATES_FILES = ("vllm/v1/worker/gpu/spec_decode/rejection_sampler.py", "vllm/v1/spec_decode/utils.py")


def _helpers(modules: VLLMModules) -> tuple[Callable[..., list[float]], Callable[[list[float]], list[float]]]:
    return _helpers_at(modules.root, modules.version)


@functools.cache
def _helpers_at(root: str, version_text: str):
    config = source_functions(root, version_text, _CONFIG_FILE, ("_acceptance_length_to_rates",
                                                      "_resolve_synthetic_acceptance_rates"),
                              class_name="SpeculativeConfig")
    return config["_resolve_synthetic_acceptance_rates"], _first_definition(root, version_text, _RATES_FILES,
                                                                           "unconditional_to_conditional_rates")


def _first_definition(root: str, version_text: str, files: tuple[str, ...], name: str) -> Callable[..., Any]:
    """vLLM's function ``name`` from the first of ``files`` that defines it.

    Raises:
        AdapterLoadError: none does (names the version and every file tried).
    """
    errors = []
    for relative_path in files:
        try:
            return source_functions(root, version_text, relative_path, (name,))[name]
        except AdapterLoadError as exc:
            errors.append(str(exc))
    raise AdapterLoadError(f"vllm=={version_text}: no file defines {name}: " + "; ".join(errors))


def synthetic_rates(modules: VLLMModules, value: float, num_drafts: int, device: torch.device) -> torch.Tensor:
    """The ``synthetic_conditional_rates [num_drafts]`` float32 on ``device`` that vLLM's
    ``RejectionSampler`` holds for ``synthetic_acceptance_length = value`` with
    ``num_speculative_tokens = num_drafts``.

    Raises:
        ValueError: vLLM's, for ``value`` outside ``[1, num_drafts + 1]``.
        AdapterLoadError: the installed files lack the helpers (names the file).
    """
    resolve, to_conditional = _helpers(modules)
    unconditional = resolve(num_drafts, None, float(value))
    return torch.tensor(to_conditional(unconditional), dtype=torch.float32, device=device)


def _kernel_device() -> torch.device:
    """Where vLLM's Triton kernels run for a call that brings no tensor: the GPU when there is
    one and the kernels are compiled, else the CPU (``TRITON_INTERPRET=1``)."""
    compiled = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
    return torch.device("cuda" if compiled else "cpu")


def _check_method(method: str) -> None:
    if method != MATCH_EXPECTED:
        raise NotImplementedError(
            f"method {method!r}: vLLM's synthetic rejection mode has one law for a mean length "
            f"(the minimum-variance schedule, SPEC S6 {MATCH_EXPECTED!r}) and no method selector"
        )


def _synthetic_step(modules: VLLMModules, rates: torch.Tensor, drafts: torch.Tensor,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(accepted[B] i64, tokens[B, n + 1] i64)`` of one synthetic verify step of
    ``drafts [B, n]`` (greedy rows, zero target logits, fresh seeds and positions).

    The target has one column: on greedy rows the synthetic accept compares a hashed
    uniform with the rate and reads the target only for its argmax (the token after the
    last kept draft), never at a draft's id. Seeds, positions and counts stay on the host:
    ``verify_rows`` moves them in one copy (a step of many small copies is slow on a busy GPU).
    """
    bs, n = drafts.shape
    device = drafts.device
    host = torch.device("cpu")
    target = torch.zeros(bs, n + 1, 1, dtype=torch.float32, device=device)
    temps = torch.zeros(bs, dtype=torch.float32, device=device)
    return verify_rows(modules, drafts.to(torch.int64), target, None, temps, seeds_from(generator, bs, host),
                       positions_from(generator, bs, host), torch.full((bs,), n, dtype=torch.int64),
                       synthetic_rates=rates)


class SyntheticExecutor:
    """One vLLM verify step in synthetic mode per ``step`` call (SPEC S6 executor).

    ``step(draft_tokens[B, gamma] i64 or i32) -> acc_len[B] i64`` (``num_sampled``, on the
    drafts' device); ``correct_drafts [B, gamma] i64`` after a step: the tokens vLLM kept,
    ``-1`` after them. vLLM holds no such buffer (it writes the kept drafts into its
    output rows), so buffer reuse is not observable here.

    Raises (from ``step``):
        ValueError: the drafts are not ``[B, gamma]``.
    """

    def __init__(self, modules: VLLMModules, rates: torch.Tensor, gamma: int, seed: int) -> None:
        self._modules, self._rates, self._gamma = modules, rates, gamma
        self._generator = torch.Generator().manual_seed(seed)
        self._correct: torch.Tensor | None = None

    @property
    def correct_drafts(self) -> torch.Tensor:
        if self._correct is None:
            raise RuntimeError("correct_drafts: no verify step has run yet")
        return self._correct

    def step(self, draft_tokens: torch.Tensor) -> torch.Tensor:
        if draft_tokens.dim() != 2 or draft_tokens.shape[1] != self._gamma:
            raise ValueError(f"draft_tokens: expected [B, gamma={self._gamma}], got {tuple(draft_tokens.shape)}")
        if self._rates.device != draft_tokens.device:  # once per device, not per step
            self._rates = self._rates.to(draft_tokens.device)
        accepted, tokens = _synthetic_step(self._modules, self._rates, draft_tokens, self._generator)
        slots = torch.arange(self._gamma, device=draft_tokens.device)
        self._correct = torch.where(slots[None, :] < accepted[:, None], tokens[:, : self._gamma], -1)
        return accepted + 1


class SimulatedAcceptance:
    """SPEC S6 ``match-expected`` through vLLM's synthetic rejection mode (module note).

    Also the contract's ``SimulatedAcceptanceBatch``: vLLM draws each request's length from
    its own hashed uniforms, so ``sample_acc_lens`` is one synthetic verify step of ``n``
    requests (in chunks of ``BATCH_ROWS``), as a batch of that many requests runs it.
    """

    def __init__(self, modules: VLLMModules) -> None:
        self._modules = modules
        _helpers(modules)  # fail at load time when a release lacks them

    def sample_acc_len(self, value: float, method: str, max_len: int, generator: torch.Generator) -> int:
        """One length in ``[1, max_len]``: a one-request synthetic verify step of ``max_len - 1``
        drafts.

        Raises:
            NotImplementedError: ``method`` other than ``"match-expected"``.
            ValueError: ``max_len < 1``; vLLM's, for ``value`` outside ``[1, max_len]``.
        """
        return int(self._lengths(value, method, max_len, 1, generator)[0])

    def sample_acc_lens(self, value: float, method: str, max_len: int, n: int,
                        generator: torch.Generator) -> torch.Tensor:
        """``n`` lengths ``[n]`` int64 on the CPU, in ``[1, max_len]``: synthetic verify steps
        of ``max_len - 1`` drafts over ``n`` requests (fresh seeds and positions each).

        Raises:
            NotImplementedError: ``method`` other than ``"match-expected"``.
            ValueError: ``max_len < 1`` or ``n < 1``; vLLM's, for ``value`` outside
                ``[1, max_len]``.
        """
        if int(n) < 1:
            raise ValueError(f"n: expected >= 1, got {n}")
        return self._lengths(value, method, max_len, int(n), generator)

    def _lengths(self, value, method, max_len, n: int, generator: torch.Generator) -> torch.Tensor:
        _check_method(method)
        if int(max_len) < 1:
            raise ValueError(f"max_len: expected >= 1, got {max_len}")
        device = _kernel_device()
        rates = synthetic_rates(self._modules, value, int(max_len) - 1, device)
        chunks = []
        for start in range(0, n, BATCH_ROWS):
            drafts = torch.zeros(min(BATCH_ROWS, n - start), int(max_len) - 1, dtype=torch.int64, device=device)
            accepted, _ = _synthetic_step(self._modules, rates, drafts, generator)
            chunks.append(accepted.cpu() + 1)
        return torch.cat(chunks)

    def executor(self, value: float, method: str, gamma: int, seed: int) -> Any:
        """A :class:`SyntheticExecutor` for ``num_speculative_tokens = gamma``.

        Raises:
            NotImplementedError: ``method`` other than ``"match-expected"``.
            ValueError: ``gamma < 1``; vLLM's, for ``value`` outside ``[1, gamma + 1]``.
        """
        _check_method(method)
        if int(gamma) < 1:
            raise ValueError(f"gamma: expected >= 1, got {gamma}")
        return SyntheticExecutor(self._modules, synthetic_rates(self._modules, value, int(gamma), torch.device("cpu")),
                                 int(gamma), int(seed))
