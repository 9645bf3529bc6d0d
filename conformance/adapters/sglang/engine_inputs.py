"""SGLang's runtime inputs, built from the contract's canonical tensors.

SGLang's DSpark functions read a few fields of server objects (``SamplingBatchInfo``,
``DFlashDraftInputV2``, the draft model, the tensor-parallel group). The builders here
fill exactly those fields, the way the server fills them for the same requests:

* a row is greedy iff ``top_k <= 1`` (SGLang's ``SamplingParams`` turns a request with
  ``temperature < 1e-6`` into ``top_k = 1``, so the contract's ``top_k`` carries the greedy
  decision); sampling rows get ``TOP_K_ALL``, except for the truncating capabilities
  (``vocab_size`` given): there a row keeps its ``top_k``, and ``top_k >= V`` (the
  contract's neutral value) becomes ``TOP_K_ALL``, as a request without top-k arrives;
* ``top_ps`` / ``min_ps`` are the request's (neutral 1 / 0 when not given), and the batch
  flags ``need_top_p_sampling`` / ``need_min_p_sampling`` are computed from them as
  ``SamplingBatchInfo.from_schedule_batch`` computes them;
* temperatures travel unclamped in ``[B, 1]``, as in ``SamplingBatchInfo``; SGLang's own
  staging code clamps them.

Randomness: SGLang draws from the process-wide torch RNG (``torch.rand``,
``exponential_``, ``torch.multinomial``) or from a Philox key. :func:`seed_from` derives
that seed from the suite's generator and :func:`seeded_global_rng` forks the global RNG
around the call, so the suite controls the draw and the rest of the process is untouched.
"""

from __future__ import annotations

import contextlib
import types
from typing import Iterator

import torch

__all__ = [
    "TOP_K_ALL",
    "sampling_info",
    "draft_input",
    "single_rank_tp_sync",
    "tp_sync_argument",
    "target_worker_stand_in",
    "seed_from",
    "seeded_global_rng",
    "DraftModelStandIn",
]

#: SGLang's "whole vocabulary" ``top_k`` (``sglang.srt.sampling.sampling_params.TOP_K_ALL``).
TOP_K_ALL = 1 << 30


def _request_top_ks(top_k: torch.Tensor, vocab_size: int | None = None) -> torch.Tensor:
    """``top_ks [B]`` int32 as ``SamplingParams`` leaves them: 1 on greedy rows; on sampling
    rows ``TOP_K_ALL``, or (``vocab_size`` given) the row's ``top_k``, ``TOP_K_ALL`` from
    ``vocab_size`` on."""
    if vocab_size is None:
        kept = torch.full_like(top_k, TOP_K_ALL)
    else:
        kept = torch.where(top_k >= vocab_size, TOP_K_ALL, top_k)
    return torch.where(top_k <= 1, 1, kept).to(torch.int32)


def sampling_info(
    temperatures: torch.Tensor,
    top_k: torch.Tensor,
    *,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
    vocab_size: int | None = None,
) -> types.SimpleNamespace:
    """The ``SamplingBatchInfo`` fields DSpark reads, for rows ``temperatures[B]``, ``top_k[B]``
    (and, for the truncating capabilities, ``top_p[B]``, ``min_p[B]`` and ``vocab_size``).

    ``temperatures [B, 1]`` float32, ``top_ks [B]`` int32 (:func:`_request_top_ks`),
    ``top_ps`` / ``min_ps [B]`` float32, and the batch flags computed as SGLang computes
    them from the requests.
    """
    top_ks = _request_top_ks(top_k, vocab_size)
    greedy = top_ks <= 1
    top_ps = torch.ones_like(temperatures, dtype=torch.float32) if top_p is None else top_p.to(torch.float32)
    min_ps = torch.zeros_like(temperatures, dtype=torch.float32) if min_p is None else min_p.to(torch.float32)
    return types.SimpleNamespace(
        temperatures=temperatures.to(torch.float32).view(-1, 1),
        top_ks=top_ks,
        top_ps=top_ps,
        min_ps=min_ps,
        is_all_greedy=bool(greedy.all()),
        is_any_greedy=bool(greedy.any()),
        need_top_k_sampling=bool((top_ks != TOP_K_ALL).any()),
        need_top_p_sampling=bool((top_ps != 1.0).any()),
        need_min_p_sampling=bool((min_ps > 0).any()),
    )


def draft_input(top_k: torch.Tensor, vocab_size: int | None = None) -> types.SimpleNamespace:
    """The ``DFlashDraftInputV2`` fields the sampling accept reads (``max_top_k``,
    ``uniform_top_k_value``), computed over the rows' ``top_ks`` as the server computes them
    (``vocab_size`` as in :func:`sampling_info`)."""
    top_ks = _request_top_ks(top_k, vocab_size).tolist()
    uniform = len(set(top_ks)) == 1
    return types.SimpleNamespace(
        max_top_k=max([1, *top_ks]), uniform_top_k_value=top_ks[0] if uniform else None
    )


def single_rank_tp_sync(tp_sync_module: types.ModuleType) -> object:
    """SGLang's own ``SpecTpSync`` over a one-rank group (its broadcasts are then no-ops)."""
    group = types.SimpleNamespace(world_size=1, rank_in_group=0)
    return tp_sync_module.SpecTpSync(group)


def tp_sync_argument(modules) -> dict[str, object]:
    """``{"tp_sync": <one-rank SpecTpSync>}`` for releases that take one (0.5.19+), else ``{}``.

    0.5.17-0.5.18 ship no ``spec_tp_sync``: their draft sampler, eager proposal and verify
    executor take no ``tp_sync`` argument (draft sampling there is rank-local).
    """
    return {"tp_sync": single_rank_tp_sync(modules["tp_sync"])} if "tp_sync" in modules else {}


def target_worker_stand_in() -> types.SimpleNamespace:
    """The target-worker fields ``TargetVerifyExecutor`` reads: the target's model type (it
    picks the fused argmax by it; None: not the model that has one)."""
    config = types.SimpleNamespace(hf_text_config=types.SimpleNamespace(model_type=None))
    return types.SimpleNamespace(model_runner=types.SimpleNamespace(model_config=config))


def seed_from(generator: torch.Generator) -> int:
    """A 62-bit seed drawn from ``generator`` (one draw per call: fresh every time)."""
    draw = torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)
    return int(draw.item())


@contextlib.contextmanager
def seeded_global_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Run the body with the global RNG of ``device`` (and the CPU) seeded by ``seed``,
    restoring both afterwards."""
    device = torch.device(device)
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices):
        torch.random.default_generator.manual_seed(seed)
        if cuda_devices:
            with torch.cuda.device(cuda_devices[0]):
                torch.cuda.manual_seed(seed)
        yield


class DraftModelStandIn:
    """The draft-model fields ``DsparkDraftSampler`` reads, around static input buffers.

    The backbone is out of scope (SPEC S1 base logits are the suite's input): the anchor
    layout is SGLang's ``sample_from_anchor`` (the anchor first, every position predicts),
    and ``compute_base_logits`` returns the staged base logits instead of projecting
    hidden states through the LM head.

    Attributes:
        base_logits: ``[max_bs * gamma, V]`` in the LM-head dtype.
        hidden_states: ``[max_bs * gamma, d]`` (``d = 1`` for heads without hidden input).
        input_ids: ``[max_bs * gamma]`` int64; the anchor sits at each row's position 0.
    """

    sample_from_anchor = True
    confidence_head = None

    def __init__(self, markov_head, *, max_bs, gamma, vocab_size, hidden_size, hidden_dtype, lm_dtype, device):
        self.markov_head = markov_head
        # Only dtype and org_vocab_size are read: no LM-head weight is needed.
        self.lm_head = types.SimpleNamespace(
            org_vocab_size=vocab_size, weight=torch.empty(0, dtype=lm_dtype, device="meta")
        )
        rows = max_bs * gamma
        self.base_logits = torch.zeros(rows, vocab_size, dtype=lm_dtype, device=device)
        self.hidden_states = torch.zeros(rows, hidden_size, dtype=hidden_dtype, device=device)
        self.input_ids = torch.zeros(rows, dtype=torch.int64, device=device)

    def compute_base_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The staged base logits of the first ``hidden.shape[0]`` rows (no confidence tap)."""
        return self.base_logits[: hidden.shape[0]], None
