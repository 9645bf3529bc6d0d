"""Simulated acceptance (benchmark mode, SPEC S6) through SGLang, all versions.

* ``sample_acc_len``: ``spec_utils.sample_simulated_acc_len`` (``_sample_simulated_acc_len``
  in older releases). It draws from the global CPU RNG (``torch.normal`` /
  ``torch.multinomial``), seeded here from the suite's generator.
* ``executor``: SGLang's ``TargetVerifyExecutor`` with ``simulate_acc_len = value``;
  ``step`` draws one length per verify step as the worker does:
  ``_simulated_correct_len(bs, dtype, device)`` in 0.5.17-0.5.21 (a reused buffer filled
  with ``acc_len - 1``), ``begin_simulated_step()`` in 0.5.22+ (fills the one-element
  ``simulated_correct_len`` that the accept repeats over the batch).

* ``simulated_bonus`` (0.5.22+): ``dspark_verify.sample_simulated_bonus``, the eager path the
  verify step takes for a simulated run (every verify row Gumbel-max sampled at
  ``max(T, 1e-5)`` by SGLang's Triton kernel, the row at ``correct_len`` kept); its Philox seed
  is ``random.getrandbits(31)`` of Python's global RNG, seeded here from the suite's
  generator (and restored after). Rows travel flattened, ``[B * (gamma + 1), V]``, as the
  verify logits do.

SGLang reads the method once, at import, from ``SGLANG_SIMULATE_ACC_METHOD`` into
``dspark_verify.SIMULATE_ACC_METHOD``; the executor sets that module constant around each
step (what starting the server with that variable does). 0.5.17's executor reads no method
and draws nothing (a constant ``round(value - 1)`` correct drafts): there the method is not
passed on, and the suite sees what that release does.
"""

from __future__ import annotations

import contextlib
import random
import types
from typing import Iterator

import torch

from .engine_inputs import seed_from, seeded_global_rng, target_worker_stand_in, tp_sync_argument
from .loader import SGLangModules

__all__ = ["SimulatedAcceptance", "SimulatedExecutor", "SimulatedBonus"]

_CORRECT_LEN_DTYPE = torch.int32  # dtype of SGLang's accept lengths


#: First release whose DSpark executor draws by ``SIMULATE_ACC_METHOD``; 0.5.17's reads no
#: method (its ``_simulated_correct_len`` is the constant ``round(value - 1)``), so there the
#: method reaches only ``sample_acc_len``.
_EXECUTOR_METHOD = (0, 5, 18)


@contextlib.contextmanager
def _method(verify_module: types.ModuleType, method: str) -> Iterator[None]:
    if not hasattr(verify_module, "SIMULATE_ACC_METHOD"):
        raise AttributeError(
            f"{verify_module.__name__} has no SIMULATE_ACC_METHOD (expected from sglang "
            f"{'.'.join(map(str, _EXECUTOR_METHOD))}): update simulated.py for this release"
        )
    saved = verify_module.SIMULATE_ACC_METHOD
    verify_module.SIMULATE_ACC_METHOD = method
    try:
        yield
    finally:
        verify_module.SIMULATE_ACC_METHOD = saved


class SimulatedExecutor:
    """One SGLang ``TargetVerifyExecutor`` in simulated-acceptance mode.

    ``step(draft_tokens[B, gamma]) -> acc_len[B] int64``: one fresh draw per call, seeded
    from a generator of ``seed``. ``correct_drafts[B, gamma]`` (after a step): the drafts
    the engine commits for that length, ``-1`` after them. SGLang keeps only the lengths
    (0.5.17-0.5.21: a reused buffer of ``acc_len - 1`` per row); the drafts are built here
    from them, so buffer reuse itself is not observable.
    """

    def __init__(self, modules: SGLangModules, value: float, method: str, gamma: int, seed: int) -> None:
        self._verify = modules["verify"]
        self._method = method
        self._seeds = torch.Generator().manual_seed(seed)
        self._philox = modules.generation == "philox"
        self._reads_method = modules.release >= _EXECUTOR_METHOD
        self.correct_drafts: torch.Tensor | None = None
        extra = {"simulated_correct_len": torch.zeros(1, dtype=torch.int64)} if self._philox else {}
        self._executor = self._verify.TargetVerifyExecutor(
            target_worker=target_worker_stand_in(), gamma=gamma, verify_num_draft_tokens=gamma + 1,
            model_runner=None, kv_injector=None, **tp_sync_argument(modules),
            simulate_acc_len=value, **extra,
        )

    def step(self, draft_tokens: torch.Tensor) -> torch.Tensor:
        """Accept lengths of one verify step (all rows share the step's draw)."""
        bs, device = draft_tokens.shape[0], draft_tokens.device
        method = _method(self._verify, self._method) if self._reads_method else contextlib.nullcontext()
        with method, seeded_global_rng(seed_from(self._seeds), "cpu"):
            if self._philox:
                self._executor.begin_simulated_step()
                correct = self._executor._simulated_correct_len.repeat(bs)
            else:
                correct = self._executor._simulated_correct_len(
                    bs=bs, dtype=_CORRECT_LEN_DTYPE, device=device
                )
        correct = correct.to(device=device, dtype=torch.int64)
        positions = torch.arange(draft_tokens.shape[1], device=device)
        self.correct_drafts = torch.where(positions[None, :] < correct[:, None], draft_tokens, -1)
        return correct + 1


class SimulatedAcceptance:
    """SPEC S6 through SGLang's ``sample_simulated_acc_len`` and verify executor."""

    def __init__(self, modules: SGLangModules) -> None:
        self._modules = modules
        spec_utils = modules["spec_utils"]
        # Older releases kept the sampler private under a leading underscore.
        self._sample = (
            getattr(spec_utils, "sample_simulated_acc_len", None) or spec_utils._sample_simulated_acc_len
        )

    def sample_acc_len(self, value, method, max_len, generator):
        with seeded_global_rng(seed_from(generator), "cpu"):
            return int(self._sample(value, method, max_len))

    def executor(self, value, method, gamma, seed):
        return SimulatedExecutor(self._modules, value, method, gamma, seed)


@contextlib.contextmanager
def _seeded_python_rng(seed: int) -> Iterator[None]:
    """Python's global ``random`` seeded by ``seed`` for the body, its state restored after."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


class SimulatedBonus:
    """SPEC S6 simulated bonus through SGLang's ``sample_simulated_bonus`` (0.5.22+)."""

    def __init__(self, modules: SGLangModules) -> None:
        self._sample = modules["verify"].sample_simulated_bonus

    def simulated_bonus(self, target_logits, accepted, temperatures, generator):
        rows, positions, vocab = target_logits.shape
        sampling_info = types.SimpleNamespace(temperatures=temperatures.float().reshape(rows, 1))
        with _seeded_python_rng(seed_from(generator)):
            bonus = self._sample(
                target_logits=target_logits.float().reshape(rows * positions, vocab).contiguous(),
                correct_len=accepted.to(torch.int64), greedy_bonus=torch.zeros(rows, dtype=torch.int64,
                                                                             device=target_logits.device),
                sampling_info=sampling_info, bs=rows, verify_num_draft_tokens=positions,
            )
        return bonus.to(torch.int64)
