"""Folded draft sampler: the draft proposal captured in the draft CUDA graph (SPEC S4).

``FoldedDraftSampler`` owns static buffers sized once for ``max_bs`` (a CUDA graph bakes
their addresses in). Before every replay the host stages the inputs (``load_inputs``)
and the sampling parameters (``stage_sampling_params``); the captured body runs exactly
one ``sample_block`` pass whose step sampler refreshes ``exp_noise`` in place (an
in-graph draw, so every replay gets fresh noise), samples greedy rows by argmax and the
others by exponential race, and writes the tokens and the corrected logits of that same
pass into ``out`` and ``corrected_out``. On CPU ``replay`` runs the same body eagerly.

The gate (S4.5, S4.7) decides whether sampling batches may use the folded proposal:
``resolve_folded_sampling`` (mode OFF / AUTO / FORCE and the memory rule),
``eligible_for_folded`` and ``use_eager_accept``.

Greedy rule (S3): a row is greedy iff ``top_k <= 1`` (the SGLang draft-sampler rule).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dspark_ref._checks import (
    FLOAT_DTYPES,
    INT_DTYPES,
    check_choice,
    check_int,
    check_same_device,
    check_tensor,
    check_token_ids,
)
from dspark_ref.markov import MarkovHead, StepSampler, sample_block
from dspark_ref.sampling import clamp_temperature, greedy_rows, sample_step

__all__ = [
    "FoldingMode",
    "GIB",
    "HEADROOM_GIB",
    "folded_buffer_bytes",
    "resolve_folded_sampling",
    "eligible_for_folded",
    "use_eager_accept",
    "ConfidenceFn",
    "FoldedOutputs",
    "FoldedDraftSampler",
]

logger = logging.getLogger(__name__)

GIB = 2**30
#: AUTO folds sampling only if this much device memory stays free after the buffers.
HEADROOM_GIB = 1.0
GREEDY_RULE = "top_k"

#: ``confidence_fn(hidden[B, gamma, d], prev_tokens[B, gamma] int64) -> [B, gamma]``
#: with ``prev_tokens = [x0, x_0 .. x_{gamma-2}]`` (SPEC S7).
ConfidenceFn = Callable[[Tensor, Tensor], Tensor]

# Configurations already warned about: the AUTO fallback warns once per process each.
_warned_configs: set[tuple] = set()


class FoldingMode(enum.Enum):
    """Folded-sampling mode (SPEC S4.7): OFF never folds sampling, FORCE always does,
    AUTO (the default) folds iff the static buffers leave ``HEADROOM_GIB`` free."""

    OFF = "off"
    AUTO = "auto"
    FORCE = "force"


def folded_buffer_bytes(max_bs: int, gamma: int, vocab_size: int, lm_dtype: torch.dtype) -> int:
    """Bytes of the folded-sampling buffers (SPEC S4.7):
    ``max_bs*V*4`` (``exp_noise`` float32) + ``max_bs*gamma*V*itemsize(lm_dtype)``
    (``corrected_out``).

    Raises:
        TypeError: non-int sizes, ``lm_dtype`` not a float dtype.
        ValueError: a size below 1.

    Example:
        >>> folded_buffer_bytes(256, 5, 129_280, torch.bfloat16)
        463339520
    """
    _check_sizes(max_bs, gamma, vocab_size, lm_dtype)
    return max_bs * vocab_size * 4 + max_bs * gamma * vocab_size * lm_dtype.itemsize


def resolve_folded_sampling(
    mode: FoldingMode | str = FoldingMode.AUTO,
    *,
    max_bs: int,
    gamma: int,
    vocab_size: int,
    lm_dtype: torch.dtype,
    free_bytes: int,
    rank: int = 0,
) -> bool:
    """Whether sampling batches use the folded proposal (SPEC S4.7).

    OFF -> False; FORCE -> True; AUTO -> True iff ``free_GiB - need_GiB >= 1.0`` with
    ``need = folded_buffer_bytes(...)`` and ``GiB = 2**30`` (compared exactly in bytes).
    An AUTO fallback logs one warning (``logging``, rank 0 only, once per process per
    ``(max_bs, gamma, vocab_size, lm_dtype)``); greedy-only folding stays on and sampling
    batches propose eagerly.

    Args:
        mode: a ``FoldingMode`` or its value ``"off"`` / ``"auto"`` / ``"force"``.
        max_bs, gamma, vocab_size, lm_dtype: as ``folded_buffer_bytes``.
        free_bytes: free device memory in bytes (>= 0).
        rank: this process's rank (>= 0).
    Raises:
        TypeError / ValueError: naming the bad argument.

    Example:
        >>> resolve_folded_sampling("auto", max_bs=1, gamma=1, vocab_size=8,
        ...                         lm_dtype=torch.float32, free_bytes=2 * GIB)
        True
    """
    mode = _check_resolve(mode, max_bs, gamma, vocab_size, lm_dtype, free_bytes, rank)
    if mode is not FoldingMode.AUTO:
        return mode is FoldingMode.FORCE
    need = folded_buffer_bytes(max_bs, gamma, vocab_size, lm_dtype)
    if free_bytes - need >= HEADROOM_GIB * GIB:
        return True
    config = (max_bs, gamma, vocab_size, lm_dtype)
    if rank == 0 and config not in _warned_configs:
        _warned_configs.add(config)
        logger.warning(
            "folded draft sampling off: its buffers need %.2f GiB (max_bs=%d, gamma=%d, V=%d, %s) "
            "and %.2f GiB is free, below the %.1f GiB headroom; greedy batches still fold, "
            "sampling batches propose eagerly (FoldingMode.FORCE overrides)",
            need / GIB, max_bs, gamma, vocab_size, lm_dtype, free_bytes / GIB, HEADROOM_GIB,
        )
    return False


def eligible_for_folded(batch_all_greedy: bool, folded_sampling_on: bool) -> bool:
    """A batch may use the folded proposal iff it is all-greedy or folded sampling is on
    (SPEC S4.5).

    Raises:
        TypeError: a non-bool argument.
    """
    _check_bools(batch_all_greedy=batch_all_greedy, folded_sampling_on=folded_sampling_on)
    return batch_all_greedy or folded_sampling_on


def use_eager_accept(folded_draft: bool, batch_all_greedy: bool) -> bool:
    """Whether verification takes the eager accept path (SPEC S4.5).

    The in-graph accept is greedy-only: only an all-greedy batch that drafted folded
    stays in the graph; after a folded draft a batch with any sampling row goes eager
    (and an eager draft is always accepted eagerly).

    Raises:
        TypeError: a non-bool argument.
    """
    _check_bools(folded_draft=folded_draft, batch_all_greedy=batch_all_greedy)
    return not (folded_draft and batch_all_greedy)


@dataclass(frozen=True)
class FoldedOutputs:
    """Views of the static output buffers for the first ``bs`` rows, overwritten by the
    next replay: ``tokens[bs, gamma]`` int64, ``corrected_logits[bs, gamma, V]`` (LM-head
    dtype), ``confidence[bs, gamma]`` float32 or None."""

    tokens: Tensor
    corrected_logits: Tensor
    confidence: Tensor | None


class FoldedDraftSampler:
    """Draft proposal over static buffers, captured as a CUDA graph on CUDA (SPEC S4).

    Buffers (allocated once; rows ``[:bs]`` are live, ``out``/``corrected_out`` row
    ``i * gamma + k`` holds step ``k`` of request ``i``):
    inputs ``base_logits[max_bs, gamma, V]`` (LM-head dtype), ``first_prev[max_bs]``
    int64, ``hidden[max_bs, gamma, d]`` (LM-head dtype; only if the head or
    ``confidence_fn`` reads it); sampling ``temperatures[max_bs]`` float32,
    ``greedy_mask[max_bs]`` bool, ``exp_noise[max_bs, V]`` float32; outputs
    ``out[max_bs * gamma]`` int64, ``corrected_out[max_bs * gamma, V]`` (LM-head dtype),
    ``confidence_out[max_bs, gamma]`` float32 (only with ``confidence_fn``). The input
    buffers stand in for the upstream part of the draft graph (backbone and LM head) and
    are not counted by ``folded_buffer_bytes``.

    Args:
        head: the Markov head (``head.vocab_size == vocab_size``).
        max_bs: largest batch (>= 1). gamma: block length (>= 1). vocab_size: ``V``.
        lm_dtype: LM-head dtype (float32 / bf16 / fp16 / float64).
        device: where the buffers live.
        hidden_size: ``d``; defaults to ``head.hidden_size``; needed with ``confidence_fn``
            when the head has none.
        confidence_fn: optional ``ConfidenceFn`` evaluated in the same pass.
        generator: optional ``torch.Generator`` on ``device`` for the noise (default: the
            device's default generator). On CUDA it is registered with the graph, so its
            philox offset advances on every replay.
    Raises:
        TypeError / ValueError: naming the bad argument.

    Example (CPU; on CUDA call ``capture(2)`` once before the first ``replay``):
        >>> from dspark_ref.markov import VanillaMarkovHead
        >>> fs = FoldedDraftSampler(VanillaMarkovHead(16, 4), max_bs=2, gamma=3,
        ...                         vocab_size=16, lm_dtype=torch.float32, device="cpu")
        >>> fs.load_inputs(torch.zeros(2, 3, 16), torch.tensor([1, 2]))
        >>> fs.stage_sampling_params(2, temperatures=[1.0, 0.5], top_k=[1, 50])
        >>> fs.replay(2).tokens.shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        head: MarkovHead,
        *,
        max_bs: int,
        gamma: int,
        vocab_size: int,
        lm_dtype: torch.dtype,
        device: torch.device | str,
        hidden_size: int | None = None,
        confidence_fn: ConfidenceFn | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        device = torch.device(device)
        if hidden_size is None:
            hidden_size = getattr(head, "hidden_size", None)
        _check_sampler_args(head, max_bs, gamma, vocab_size, lm_dtype, device, hidden_size, confidence_fn, generator)
        self.head, self.max_bs, self.gamma, self.vocab_size = head, max_bs, gamma, vocab_size
        self.lm_dtype, self.hidden_size = lm_dtype, hidden_size
        self.confidence_fn, self.generator = confidence_fn, generator
        reads_hidden = head.needs_hidden or confidence_fn is not None

        def buffer(*shape, dtype=lm_dtype):
            return torch.zeros(shape, dtype=dtype, device=device)

        self.base_logits = buffer(max_bs, gamma, vocab_size)
        self.first_prev = buffer(max_bs, dtype=torch.int64)
        self.hidden = buffer(max_bs, gamma, hidden_size) if reads_hidden else None
        self.temperatures = buffer(max_bs, dtype=torch.float32).fill_(1.0)
        self.greedy_mask = buffer(max_bs, dtype=torch.bool).fill_(True)
        self.exp_noise = buffer(max_bs, vocab_size, dtype=torch.float32)
        self.out = buffer(max_bs * gamma, dtype=torch.int64)
        self.corrected_out = buffer(max_bs * gamma, vocab_size)
        self.confidence_out = buffer(max_bs, gamma, dtype=torch.float32) if confidence_fn is not None else None
        self.device = self.out.device  # resolved: "cuda" -> "cuda:0"
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def load_inputs(self, base_logits: Tensor, first_prev: Tensor, hidden: Tensor | None = None) -> None:
        """Copy one batch's inputs into the static input buffers (host side, before replay).

        Args:
            base_logits: ``[bs, gamma, V]`` in ``lm_dtype``, ``bs <= max_bs``.
            first_prev: ``[bs]`` int64 / int32 anchors in ``[0, V)``.
            hidden: ``[bs, gamma, d]`` float; required iff the head or ``confidence_fn``
                reads it, ignored otherwise.
        Raises:
            TypeError / ValueError: naming the bad argument.
        """
        bs = self._check_inputs(base_logits, first_prev, hidden)
        self.base_logits[:bs].copy_(base_logits)
        self.first_prev[:bs].copy_(first_prev)
        if self.hidden is not None:
            self.hidden[:bs].copy_(hidden)

    def stage_sampling_params(
        self,
        bs: int,
        temperatures: Tensor | Sequence[float] | None = None,
        top_k: Tensor | Sequence[int] | None = None,
    ) -> None:
        """Stage the sampling parameters of rows ``[:bs]`` before a replay (SPEC S4.2).

        ``temperatures[:bs] = clamp(T, min=1e-5)``; ``greedy_mask[:bs] = top_k <= 1``.
        Both None: every row greedy, ``T = 1``. Only ``temperatures``: every row samples.
        Only ``top_k``: ``T = 1``. ``top_k`` only selects the greedy rows (the folded race
        draws from the full ``softmax(L / T)``); stage "no cut" as a large value, as SGLang
        does (``1 << 30``): under ``top_k <= 1`` a ``-1`` or ``0`` means greedy.

        Args:
            bs: live rows, ``1 <= bs <= max_bs``.
            temperatures: ``[bs]`` floats ``>= 0`` (tensor on any device, or a sequence).
            top_k: ``[bs]`` ints (tensor on any device, or a sequence).
        Raises:
            TypeError / ValueError: naming the bad argument (NaN or negative temperatures).
        """
        temps, top_k = self._check_params(bs, temperatures, top_k)
        if temps is None and top_k is None:
            self.temperatures[:bs].fill_(1.0)
            self.greedy_mask[:bs].fill_(True)
            return
        temps = torch.ones(bs) if temps is None else clamp_temperature(temps)
        greedy = torch.zeros(bs, dtype=torch.bool) if top_k is None else greedy_rows(
            temperatures=temps, top_k=top_k, rule=GREEDY_RULE
        )
        self.temperatures[:bs].copy_(temps)
        self.greedy_mask[:bs].copy_(greedy)

    @torch.no_grad()
    def propose(self, bs: int) -> FoldedOutputs:
        """Run the proposal body eagerly over the staged rows ``[:bs]`` (SPEC S4.3-S4.4).

        Raises:
            TypeError / ValueError: ``bs`` not an int in ``[1, max_bs]``.
        """
        check_int("bs", bs, minimum=1, maximum=self.max_bs)
        self.propose_body(bs)
        return self.outputs(bs)

    def capture(self, bs: int | None = None) -> None:
        """Capture the proposal body for ``bs`` rows (default ``max_bs``) as a CUDA graph.

        Warms up on a side stream first (the warm-up draws advance the generator). On CPU
        this only validates ``bs``: ``replay`` runs the body eagerly there.

        Raises:
            TypeError / ValueError: ``bs`` not an int in ``[1, max_bs]``.
        """
        bs = self.max_bs if bs is None else bs
        check_int("bs", bs, minimum=1, maximum=self.max_bs)
        if self.device.type != "cuda":
            return
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):
                self.propose_body(bs)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if self.generator is not None and not any(self.generator is g for g in torch.cuda.default_generators):
            graph.register_generator_state(self.generator)  # the default generator is registered by capture
        with torch.cuda.graph(graph), torch.no_grad():
            self.propose_body(bs)
        self._graphs[bs] = graph

    def replay(self, bs: int | None = None) -> FoldedOutputs:
        """Replay the captured proposal for ``bs`` rows (default ``max_bs``); eager on CPU.

        Raises:
            TypeError / ValueError: ``bs`` not in ``[1, max_bs]``, or (CUDA) no graph
                captured for ``bs``.
        """
        bs = self.max_bs if bs is None else bs
        check_int("bs", bs, minimum=1, maximum=self.max_bs)
        if self.device.type != "cuda":
            return self.propose(bs)
        if bs not in self._graphs:
            raise ValueError(
                f"bs: no CUDA graph captured for bs={bs} (captured: {sorted(self._graphs)}); call capture({bs})"
            )
        self._graphs[bs].replay()
        return self.outputs(bs)

    def outputs(self, bs: int) -> FoldedOutputs:
        """Views of the output buffers for rows ``[:bs]``."""
        check_int("bs", bs, minimum=1, maximum=self.max_bs)
        return FoldedOutputs(
            self.out[: bs * self.gamma].view(bs, self.gamma),
            self.corrected_out[: bs * self.gamma].view(bs, self.gamma, self.vocab_size),
            None if self.confidence_out is None else self.confidence_out[:bs],
        )

    def propose_body(self, bs: int) -> None:
        """The captured work for rows ``[:bs]``: one ``sample_block`` pass with
        :meth:`step_sampler`, tokens into ``out``, corrected logits into ``corrected_out``
        (and confidences into ``confidence_out``) (SPEC S4.3-S4.4). ``bs`` is not checked
        here (``propose``, ``capture`` and ``replay`` do); a subclass may override it."""
        hidden = None if self.hidden is None else self.hidden[:bs]
        first_prev = self.first_prev[:bs]
        block = sample_block(
            self.head, self.base_logits[:bs], first_prev, hidden if self.head.needs_hidden else None,
            self.step_sampler(bs),
        )
        rows = bs * self.gamma
        self.out[:rows].copy_(block.tokens.reshape(rows))
        self.corrected_out[:rows].copy_(block.corrected_logits.reshape(rows, self.vocab_size))
        if self.confidence_fn is not None:
            prev_tokens = torch.cat([first_prev[:, None], block.tokens[:, :-1]], dim=1)
            self.confidence_out[:bs].copy_(self.confidence_fn(hidden, prev_tokens))

    def step_sampler(self, bs: int) -> StepSampler:
        """The ``StepSampler`` of one ``sample_block`` pass over rows ``[:bs]``: each step
        refreshes ``exp_noise[:bs]`` from the generator in place (in-graph under capture)
        and samples by ``sample_step`` with the staged ``temperatures`` and ``greedy_mask``
        (SPEC S4.3). Built once per pass; a subclass may override it."""
        noise, temps, greedy = self.exp_noise[:bs], self.temperatures[:bs], self.greedy_mask[:bs]

        def sampler(step_logits: Tensor, k: int) -> Tensor:
            noise.exponential_(generator=self.generator)  # in-graph draw: fresh every step and replay
            return sample_step(step_logits, temps, greedy, noise=noise)

        return sampler

    def _check_inputs(self, base_logits, first_prev, hidden) -> int:
        check_tensor("base_logits", base_logits, shape=(None, self.gamma, self.vocab_size), dtypes=(self.lm_dtype,))
        bs = base_logits.shape[0]
        check_int("base_logits.shape[0] (bs)", bs, minimum=1, maximum=self.max_bs)
        check_tensor("first_prev", first_prev, shape=(bs,), dtypes=INT_DTYPES)
        check_token_ids("first_prev", first_prev, self.vocab_size)
        if self.hidden is None:
            hidden = None
        elif hidden is None:
            raise ValueError(f"hidden: expected [bs, gamma, d] = [{bs}, {self.gamma}, {self.hidden_size}], got None")
        else:
            check_tensor("hidden", hidden, shape=(bs, self.gamma, self.hidden_size), dtypes=FLOAT_DTYPES)
        if base_logits.device != self.device:
            raise ValueError(f"base_logits: expected device {self.device} (the sampler's), got {base_logits.device}")
        check_same_device(base_logits=base_logits, first_prev=first_prev, hidden=hidden)
        return bs

    def _check_params(self, bs, temperatures, top_k):
        check_int("bs", bs, minimum=1, maximum=self.max_bs)
        if temperatures is not None:
            if not isinstance(temperatures, Tensor):
                temperatures = torch.as_tensor(temperatures, dtype=torch.float32)
            check_tensor("temperatures", temperatures, shape=(bs,), dtypes=FLOAT_DTYPES)
            temperatures = temperatures.cpu()
        if top_k is not None:
            if not isinstance(top_k, Tensor):
                top_k = torch.as_tensor(top_k, dtype=torch.int64)
            check_tensor("top_k", top_k, shape=(bs,), dtypes=INT_DTYPES)
            top_k = top_k.cpu()
        return temperatures, top_k


def _check_sizes(max_bs, gamma, vocab_size, lm_dtype) -> None:
    check_int("max_bs", max_bs, minimum=1)
    check_int("gamma", gamma, minimum=1)
    check_int("vocab_size", vocab_size, minimum=1)
    if lm_dtype not in FLOAT_DTYPES:
        raise TypeError(f"lm_dtype: expected a float dtype (float32, bfloat16, float16, float64), got {lm_dtype!r}")


def _check_resolve(mode, max_bs, gamma, vocab_size, lm_dtype, free_bytes, rank) -> FoldingMode:
    if isinstance(mode, str):
        check_choice("mode", mode.lower(), [m.value for m in FoldingMode])
        mode = FoldingMode(mode.lower())
    elif not isinstance(mode, FoldingMode):
        raise TypeError(f"mode: expected a FoldingMode or 'off'/'auto'/'force', got {type(mode).__name__}")
    _check_sizes(max_bs, gamma, vocab_size, lm_dtype)
    check_int("free_bytes", free_bytes, minimum=0)
    check_int("rank", rank, minimum=0)
    return mode


def _check_bools(**flags) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected a bool, got {type(value).__name__} ({value!r})")


def _check_sampler_args(head, max_bs, gamma, vocab_size, lm_dtype, device, hidden_size, confidence_fn, generator):
    if not isinstance(head, MarkovHead):
        raise TypeError(f"head: expected a MarkovHead, got {type(head).__name__}")
    _check_sizes(max_bs, gamma, vocab_size, lm_dtype)
    head_device = head.W1.weight.device
    if head_device.type != device.type:
        raise ValueError(f"head: expected parameters on {device} (the buffers' device), got {head_device}")
    if head.vocab_size != vocab_size:
        raise ValueError(f"vocab_size: expected head.vocab_size = {head.vocab_size}, got {vocab_size}")
    if confidence_fn is not None and not callable(confidence_fn):
        raise TypeError(
            f"confidence_fn: expected a callable (hidden, prev_tokens) -> [B, gamma], got {confidence_fn!r}"
        )
    if head.needs_hidden or confidence_fn is not None:
        if hidden_size is None:
            raise ValueError("hidden_size: expected an int (confidence_fn reads hidden states), got None")
        check_int("hidden_size", hidden_size, minimum=1)
        if head.hidden_size is not None and hidden_size != head.hidden_size:
            raise ValueError(f"hidden_size: expected head.hidden_size = {head.hidden_size}, got {hidden_size}")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
        if generator.device.type != device.type:
            raise ValueError(f"generator: expected a generator on {device}, got one on {generator.device}")
