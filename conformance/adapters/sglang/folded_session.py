"""One SGLang ``DsparkDraftSampler`` behind the contract's ``FoldedSession`` (SPEC S4).

SGLang's folded sampler is the tail hook of the draft CUDA graph: called with the draft's
hidden states and input ids, it computes base logits, runs one Markov block and writes
``out`` (and the corrected / step logits) into static buffers. The session feeds it from
:class:`~.engine_inputs.DraftModelStandIn` buffers, captures the call in a
``torch.cuda.CUDAGraph`` on CUDA, and runs it eagerly on CPU.

Honest counters: ``graph_replays`` counts replays that ran a captured graph (0 on CPU and
before ``capture``). ``sample_block_calls`` counts SGLang's block passes behind each
returned proposal: calls of the head's per-block entry point (``sample_block`` in
0.5.17-0.5.21, ``init_state`` in 0.5.22+, which ``draft_markov_block`` calls once per
block), spied on through a forwarding proxy; a graph replay adds the passes recorded in
the captured graph.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

import torch

from conformance.checks import check_int, check_tensor

from .engine_inputs import TOP_K_ALL, DraftModelStandIn, sampling_info

__all__ = ["BlockPassCounter", "FoldedSession"]


class BlockPassCounter:
    """Forwards every attribute to SGLang's head and counts calls of ``method``."""

    def __init__(self, head: torch.nn.Module, method: str) -> None:
        self._head = head
        self._method = method
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._head, name)
        if name != self._method:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return attr(*args, **kwargs)

        return counted


class FoldedSession:
    """The contract's ``FoldedSession`` over one SGLang ``DsparkDraftSampler``.

    Args:
        sampler: SGLang's sampler, built over ``model``; its ``markov_head`` is replaced by
            ``counter`` (a proxy of the same head).
        model: the stand-in whose buffers the sampler reads.
        counter: the :class:`BlockPassCounter` installed in the sampler.
        corrected: ``corrected(bs) -> [bs, gamma, V]``, a view of the static buffer where
            this SGLang keeps the corrected logits of the last pass.
        reads_hidden: whether the head reads step hidden states (gated / rnn); the
            vanilla head's ``hidden`` is ignored, as SGLang ignores it.
        eager_rng: a fresh context for one eager pass (seeds SGLang's global RNG draws).
    """

    def __init__(
        self,
        sampler: Any,
        model: DraftModelStandIn,
        counter: BlockPassCounter,
        *,
        gamma: int,
        max_bs: int,
        device: torch.device,
        corrected: Callable[[int], torch.Tensor],
        reads_hidden: bool,
        eager_rng: Callable[[], ContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        self._sampler = sampler
        self._model = model
        self._counter = counter
        self._gamma = gamma
        self._max_bs = max_bs
        self._device = torch.device(device)
        self._corrected = corrected
        self._reads_hidden = reads_hidden
        self._eager_rng = eager_rng
        self._bs = max_bs
        self._graph: torch.cuda.CUDAGraph | None = None
        self._graph_bs: int | None = None
        self._passes_per_replay = 0
        self.graph_replays = 0
        self.sample_block_calls: int | None = 0

    def stage(self, bs: int, temperatures: torch.Tensor | None, top_k: torch.Tensor | None) -> None:
        """SGLang's ``stage_sampling_params`` for rows ``[:bs]`` (SPEC S4.2).

        Both None: SGLang's "no sampling info" (all greedy, ``T = 1``). Only
        ``temperatures``: every row samples. Only ``top_k``: ``T = 1``.

        Raises:
            TypeError / ValueError: ``bs`` outside ``[1, max_bs]``, wrong shapes.
        """
        check_int("bs", bs, minimum=1, maximum=self._max_bs)
        self._bs = bs
        if temperatures is None and top_k is None:
            self._sampler.stage_sampling_params(bs=bs, sampling_info=None)
            return
        if temperatures is None:
            temperatures = torch.ones(bs)
        if top_k is None:
            top_k = torch.full((bs,), TOP_K_ALL)
        check_tensor("temperatures", temperatures, shape=(bs,))
        check_tensor("top_k", top_k, shape=(bs,))
        info = sampling_info(temperatures.to(self._device), top_k.to(self._device))
        self._sampler.stage_sampling_params(bs=bs, sampling_info=info)

    def load_inputs(
        self, base_logits: torch.Tensor, first_prev: torch.Tensor, hidden: torch.Tensor | None
    ) -> None:
        """Copy ``base_logits[bs, gamma, V]``, the anchors ``first_prev[bs]`` and ``hidden``
        (gated / rnn heads) into the stand-in's static buffers.

        Raises:
            TypeError / ValueError: wrong shapes, ``bs`` outside ``[1, max_bs]``.
        """
        check_tensor("base_logits", base_logits, ndim=3)
        bs = base_logits.shape[0]
        check_int("base_logits.shape[0] (bs)", bs, minimum=1, maximum=self._max_bs)
        check_tensor("first_prev", first_prev, shape=(bs,))
        rows = bs * self._gamma
        self._bs = bs
        self._model.base_logits[:rows].copy_(base_logits.reshape(rows, -1))
        # Anchor-first layout: position 0 of each row holds the anchor, the rest are mask
        # positions the sampler does not read.
        self._model.input_ids[:rows].view(bs, self._gamma)[:, 0].copy_(first_prev)
        if self._reads_hidden:
            check_tensor("hidden", hidden, ndim=3)
            self._model.hidden_states[:rows].copy_(hidden.reshape(rows, -1))

    def capture(self) -> None:
        """Capture one sampler call for the current ``bs`` as a CUDA graph (no-op on CPU).

        Two warm-up calls on a side stream first (they also size SGLang's lazily built
        buffers, which must exist before capture).
        """
        if self._device.type != "cuda":
            return
        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):
                self._call()
        torch.cuda.current_stream(self._device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        before = self._counter.calls
        with torch.cuda.graph(graph), torch.no_grad():
            self._call()
        self._passes_per_replay = self._counter.calls - before
        self._graph, self._graph_bs = graph, self._bs

    def replay(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One proposal: ``(tokens[bs, gamma] int64, corrected[bs, gamma, V])``, views of
        SGLang's own static buffers (``out`` and the corrected / step logits; SPEC S4.1), so
        the suite sees their addresses; the next replay overwrites them.

        Replays the captured graph when one exists for the current ``bs``, else calls the
        sampler eagerly (not counted in ``graph_replays``).
        """
        if self._graph is not None and self._graph_bs == self._bs:
            self._graph.replay()
            self.graph_replays += 1
            self.sample_block_calls += self._passes_per_replay
        else:
            before = self._counter.calls
            with self._eager_rng(), torch.no_grad():
                self._call()
            self.sample_block_calls += self._counter.calls - before
        bs, rows = self._bs, self._bs * self._gamma
        return self._sampler.out[:rows].view(bs, self._gamma), self._corrected(bs)

    def _call(self) -> None:
        rows = self._bs * self._gamma
        self._sampler(self._model.hidden_states[:rows], self._model.input_ids[:rows])
