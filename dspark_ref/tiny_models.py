"""Tiny target and draft models for end-to-end checks, and their exact laws (SPEC S9).

``TinyTargetLM`` is a causal language model small enough to enumerate on the CPU (``V`` of
4..8): embedding, a GRU over the context, and an LM head. Its next-token law depends on the
whole context, not only on the last token, so a loop that feeds the target the wrong
context (or a draft with a Markov-order bug) changes the output law.

``TinyDSparkDraft`` is a DFlash-style parallel drafter with a DSpark Markov head (SPEC S1,
S2): target-context injection (a projection of the target's hidden state before the anchor,
added to every block position), anchor-as-first-position inputs (anchor embedding, then
``gamma - 1`` mask embeddings), one bidirectional attention layer over the block, and the
target's embedding and LM head shared as the same (frozen) tensors. ``OracleDraft`` is a
test double built on the target's own recurrence: a perfect draft (corrected logits equal
to the target's, bit for bit) or, with base-logit noise, a near-perfect one.

``exact_next_token_law`` and ``exact_sequence_law`` are the float64 oracles the loop's
output law is compared with. Every model is frozen and initialised from a
``torch.Generator``, so a seed fixes the weights.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from dspark_ref._checks import (
    FLOAT_DTYPES,
    INT_DTYPES,
    check_choice,
    check_float,
    check_int,
    check_same_device,
    check_tensor,
    check_token_ids,
)
from dspark_ref.confidence import ConfidenceHead
from dspark_ref.markov import HEAD_TYPES, MarkovHead, build_markov_head
from dspark_ref.proposal import base_logits

__all__ = [
    "TargetOutput",
    "DraftBlock",
    "TinyTargetLM",
    "TinyDSparkDraft",
    "OracleDraft",
    "exact_next_token_law",
    "exact_sequence_law",
    "MAX_ENUMERATED_SEQUENCES",
]

#: ``exact_sequence_law`` refuses to enumerate more continuations than this.
MAX_ENUMERATED_SEQUENCES = 1 << 20

# Std of the Markov-head weights: large enough that the head visibly changes the draft law
# (the DeepSpec default 0.02 would make every head type look alike).
_MARKOV_INIT_SCALE = 0.5
_NUM_ATTENTION_HEADS = 2
# Std of the confidence-head weights: spreads the confidences so that a prefix scheduler
# picks every verify length from 0 to gamma (the default init keeps them near 0.5).
_CONFIDENCE_INIT_SCALE = 1.0


@dataclass(frozen=True)
class TargetOutput:
    """One target pass: ``logits[B, n, V]`` float32 (position ``t`` predicts token ``t + 1``)
    and ``hidden[B, n, d]`` float32 (the recurrent state after token ``t``)."""

    logits: Tensor
    hidden: Tensor


@dataclass(frozen=True)
class DraftBlock:
    """One backbone pass over a block: ``hidden[B, gamma, d]`` and ``base_logits[B, gamma, V]``
    (float32), SPEC S1."""

    hidden: Tensor
    base_logits: Tensor


def _frozen(generator: torch.Generator, *shape: int, std: float) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, generator=generator) * std, requires_grad=False)


def _check_generator(generator: object) -> None:
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(f"generator: expected a CPU torch.Generator, got {generator!r}")


class TinyTargetLM(nn.Module):
    """A tiny causal LM: embedding -> GRU -> LM head (SPEC S9 target).

    ``h_t = GRU(h_{t-1}, E[x_t])`` with ``h_{-1} = 0`` and ``logits_t = W_lm h_t``. The
    forward pass runs the recurrence one position at a time with ``[B, d]`` operations, the
    same operations ``advance`` and ``next_token_logits`` perform, so a position's logits
    do not depend on how many positions follow it (a right-padded batch is safe) and an
    incremental computation reproduces them bit for bit.

    Args:
        vocab_size: ``V >= 2``.
        hidden_size: ``d >= 1``.
        generator: CPU ``torch.Generator`` for the weights (iid normal).

    Attributes:
        embedding: ``[V, d]`` token embedding (shared with drafts).
        lm_head_weight: ``[V, d]`` LM head (shared with drafts).

    Raises:
        TypeError / ValueError: naming the bad argument.

    Example:
        >>> lm = TinyTargetLM(5, 8, generator=torch.Generator().manual_seed(0))
        >>> lm.logits(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 5])
    """

    def __init__(self, vocab_size: int, hidden_size: int, *, generator: torch.Generator) -> None:
        check_int("vocab_size", vocab_size, minimum=2)
        check_int("hidden_size", hidden_size, minimum=1)
        _check_generator(generator)
        super().__init__()
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        gate_std = 1.0 / math.sqrt(hidden_size)
        self.embedding = _frozen(generator, vocab_size, hidden_size, std=1.0)
        self.w_input = _frozen(generator, 3 * hidden_size, hidden_size, std=2 * gate_std)
        self.w_state = _frozen(generator, 3 * hidden_size, hidden_size, std=gate_std)
        self.bias = _frozen(generator, 3 * hidden_size, std=0.1)
        self.lm_head_weight = _frozen(generator, vocab_size, hidden_size, std=1.5)

    def initial_state(self, batch: int) -> Tensor:
        """The state before the first token, zeros ``[batch, d]`` float32."""
        check_int("batch", batch, minimum=0)
        return self.embedding.new_zeros(batch, self.hidden_size)

    def advance(self, state: Tensor, token_ids: Tensor) -> Tensor:
        """One GRU step: the hidden state after ``token_ids`` (SPEC S9).

        Args:
            state: ``[B, d]`` float32 hidden state after the previous token.
            token_ids: ``[B]`` int64 / int32 ids in ``[0, V)``.
        Returns:
            ``[B, d]`` float32.
        Raises:
            TypeError / ValueError: wrong shape, dtype, device or token ids.
        """
        self._check_step(state, token_ids)
        return self._advance(state, token_ids)

    def next_token_logits(self, state: Tensor) -> Tensor:
        """Next-token logits ``[B, V]`` float32 from a hidden state ``[B, d]`` (SPEC S9).

        Raises:
            TypeError / ValueError: ``state`` not a ``[B, d]`` float32 tensor.
        """
        check_tensor("state", state, shape=(None, self.hidden_size), dtypes=(torch.float32,))
        return self._next_token_logits(state)

    @torch.no_grad()
    def forward(self, context_ids: Tensor) -> TargetOutput:
        """Logits and hidden states at every position of ``context_ids[B, n]`` (causal).

        Returns:
            ``TargetOutput(logits[B, n, V], hidden[B, n, d])``, float32.
        Raises:
            TypeError / ValueError: not a 2-D int tensor with ``n >= 1``, ids out of range.
        """
        self._check_context(context_ids)
        state = self.initial_state(context_ids.shape[0])
        logits, hidden = [], []
        for t in range(context_ids.shape[1]):
            state = self._advance(state, context_ids[:, t])
            hidden.append(state)
            logits.append(self._next_token_logits(state))
        return TargetOutput(torch.stack(logits, dim=1), torch.stack(hidden, dim=1))

    def logits(self, context_ids: Tensor) -> Tensor:
        """Next-token logits ``[B, n, V]`` at each position; as ``forward``."""
        return self(context_ids).logits

    def hidden_states(self, context_ids: Tensor) -> Tensor:
        """Hidden states ``[B, n, d]`` (for target-context injection); as ``forward``."""
        return self(context_ids).hidden

    def _advance(self, state: Tensor, token_ids: Tensor) -> Tensor:
        from_input = self.embedding[token_ids] @ self.w_input.T + self.bias
        from_state = state @ self.w_state.T
        in_reset, in_update, in_new = from_input.chunk(3, dim=-1)
        st_reset, st_update, st_new = from_state.chunk(3, dim=-1)
        reset = torch.sigmoid(in_reset + st_reset)
        update = torch.sigmoid(in_update + st_update)
        candidate = torch.tanh(in_new + reset * st_new)
        return (1 - update) * candidate + update * state

    def _next_token_logits(self, state: Tensor) -> Tensor:
        return state @ self.lm_head_weight.T

    def _check_context(self, context_ids: Tensor) -> None:
        check_tensor("context_ids", context_ids, ndim=2, dtypes=INT_DTYPES)
        if context_ids.shape[1] == 0:
            raise ValueError("context_ids: expected at least one token per row, got shape "
                             f"{tuple(context_ids.shape)}")
        check_same_device(embedding=self.embedding, context_ids=context_ids)
        check_token_ids("context_ids", context_ids, self.vocab_size)

    def _check_step(self, state: Tensor, token_ids: Tensor) -> None:
        check_tensor("state", state, shape=(None, self.hidden_size), dtypes=(torch.float32,))
        check_tensor("token_ids", token_ids, shape=(state.shape[0],), dtypes=INT_DTYPES)
        check_same_device(embedding=self.embedding, state=state, token_ids=token_ids)
        check_token_ids("token_ids", token_ids, self.vocab_size)


class TinyDSparkDraft(nn.Module):
    """A tiny DSpark drafter: DFlash-style parallel backbone + Markov head (SPEC S1, S2, S7).

    Block pass for ``gamma`` positions (``1 <= gamma <= self.gamma``):
    ``x_k = in_k + P_k + W_c c`` with ``in_0 = E[anchor]`` and ``in_k = m`` (the mask
    embedding) for ``k >= 1`` (anchor-as-first-position), ``P`` learned position embeddings,
    ``c`` the target's hidden state before the anchor; ``h = tanh(x + Attn(x))``, one
    bidirectional two-head attention layer (``tanh`` keeps ``h`` in the range of the
    target's GRU states, which the shared LM head expects); base logits ``U = h @ W_lm.T`` through
    ``proposal.base_logits`` with the target's LM head. The Markov head comes from
    ``markov.build_markov_head``; the optional confidence head scores
    ``[h_k ; W1[x_{k-1}]]``.

    Args:
        target: the ``TinyTargetLM`` whose embedding and LM head are shared (same tensors).
        gamma: the largest block length, ``>= 1``.
        markov_head_type: ``"vanilla"``, ``"gated"`` or ``"rnn"``.
        markov_rank: ``r >= 1``.
        generator: CPU ``torch.Generator`` for every draft weight.
        with_confidence: build a ``ConfidenceHead`` (needed by the prefix scheduler).

    Raises:
        TypeError / ValueError: naming the bad argument; ``target.hidden_size`` must be even
            (two attention heads).
    """

    def __init__(
        self,
        target: TinyTargetLM,
        *,
        gamma: int,
        markov_head_type: str = "vanilla",
        markov_rank: int = 4,
        generator: torch.Generator,
        with_confidence: bool = False,
    ) -> None:
        _check_draft_args(target, gamma, markov_head_type, markov_rank, generator, with_confidence)
        super().__init__()
        d = target.hidden_size
        self.gamma = gamma
        self.vocab_size = target.vocab_size
        self.hidden_size = d
        self.embedding = target.embedding
        self.lm_head_weight = target.lm_head_weight
        self.mask_embedding = _frozen(generator, d, std=1.0)
        self.position_embedding = _frozen(generator, gamma, d, std=1.0)
        self.context_proj = _frozen(generator, d, d, std=1.0 / math.sqrt(d))
        self.w_qkv = _frozen(generator, 3 * d, d, std=1.0 / math.sqrt(d))
        self.w_out = _frozen(generator, d, d, std=1.0 / math.sqrt(d))
        self.markov_head = build_markov_head(
            {"markov_rank": markov_rank, "markov_head_type": markov_head_type,
             "vocab_size": target.vocab_size, "hidden_size": d},
            scale=_MARKOV_INIT_SCALE, generator=generator,
        ).requires_grad_(False)
        self.confidence_head = self._confidence_head(markov_rank, generator) if with_confidence else None

    def _confidence_head(self, markov_rank: int, generator: torch.Generator) -> ConfidenceHead:
        head = ConfidenceHead(self.hidden_size, markov_rank=markov_rank, generator=generator)
        with torch.no_grad():
            weight = torch.randn(head.proj.weight.shape, generator=generator)
            head.proj.weight.copy_(weight * _CONFIDENCE_INIT_SCALE)
        return head.requires_grad_(False)

    @torch.no_grad()
    def block(self, context_hidden: Tensor, anchor: Tensor, gamma: int | None = None) -> DraftBlock:
        """Backbone pass over one block (SPEC S1, anchor-as-first-position).

        Args:
            context_hidden: ``[B, d]`` float32 target hidden state of the token before the
                anchor (target-context injection).
            anchor: ``[B]`` int64 / int32 anchor ``x0`` (the last committed token).
            gamma: block length, ``1 <= gamma <= self.gamma`` (default ``self.gamma``).
        Returns:
            ``DraftBlock(hidden[B, gamma, d], base_logits[B, gamma, V])``, float32.
        Raises:
            TypeError / ValueError: wrong shape, dtype, device, ids or ``gamma``.
        """
        gamma = _check_block(self, context_hidden, anchor, gamma, self.embedding)
        batch, d = context_hidden.shape
        inputs = torch.cat(
            [self.embedding[anchor][:, None], self.mask_embedding.expand(batch, gamma - 1, d)], dim=1
        )
        x = inputs + self.position_embedding[:gamma] + (context_hidden @ self.context_proj.T)[:, None]
        hidden = torch.tanh(x + self._attention(x))
        return DraftBlock(hidden, base_logits(hidden, self.lm_head_weight, self.vocab_size))

    @torch.no_grad()
    def confidences(self, hidden: Tensor, anchor: Tensor, tokens: Tensor) -> Tensor:
        """Confidences ``c[B, gamma] = sigmoid(w . [h_k ; W1[x_{k-1}]] + b)`` (SPEC S7).

        Args:
            hidden: ``[B, gamma, d]`` block hidden states (from ``block``).
            anchor: ``[B]`` int64 anchor ``x0``.
            tokens: ``[B, gamma]`` int64 draft tokens drawn from this block.
        Returns:
            ``[B, gamma]`` float32 in ``[0, 1]``.
        Raises:
            ValueError: the draft was built without a confidence head, or bad shapes/ids.
        """
        if self.confidence_head is None:
            raise ValueError("confidence_head: this draft was built with with_confidence=False")
        check_tensor("hidden", hidden, shape=(None, None, self.hidden_size), dtypes=FLOAT_DTYPES)
        check_tensor("anchor", anchor, shape=(hidden.shape[0],), dtypes=INT_DTYPES)
        check_tensor("tokens", tokens, shape=tuple(hidden.shape[:2]), dtypes=INT_DTYPES)
        check_token_ids("anchor", anchor, self.vocab_size)
        check_token_ids("tokens", tokens, self.vocab_size)
        prev = torch.cat([anchor[:, None].long(), tokens[:, :-1].long()], dim=1)
        return self.confidence_head(hidden, self.markov_head.W1(prev))

    def _attention(self, x: Tensor) -> Tensor:
        batch, gamma, d = x.shape
        head_dim = d // _NUM_ATTENTION_HEADS
        q, k, v = (
            part.reshape(batch, gamma, _NUM_ATTENTION_HEADS, head_dim).transpose(1, 2)
            for part in (x @ self.w_qkv.T).chunk(3, dim=-1)
        )
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head_dim), dim=-1)
        return (weights @ v).transpose(1, 2).reshape(batch, gamma, d) @ self.w_out.T


class _TargetRecurrenceHead(MarkovHead):
    """A head whose bias is the target's next-token logits: the state is the target's GRU
    state, seeded at step 0 from ``hidden_k`` (the target state before the anchor)."""

    needs_hidden = True

    def __init__(self, target: TinyTargetLM) -> None:
        super().__init__(target.vocab_size, 1, target.hidden_size)
        nn.init.zeros_(self.W1.weight)
        nn.init.zeros_(self.W2.weight)
        self.requires_grad_(False)
        self.target = target

    def step_bias(self, prev, hidden_k, state):
        self._check_step(prev, hidden_k)
        state = self.target.advance(hidden_k if state is None else state, prev)
        return self.target.next_token_logits(state), state


class OracleDraft(nn.Module):
    """Test double: a draft built on the target's own recurrence (SPEC S9).

    The backbone repeats the target's hidden state before the anchor over the block; the
    "Markov head" runs the target's GRU on the previous token, so step ``k`` gets exactly
    the target logits after ``anchor, x_0 .. x_{k-1}``. Base logits are
    ``logit_noise * N[anchor, k]`` with ``N`` a fixed iid standard normal table
    ``[V, gamma, V]``:

    * ``logit_noise = 0``: a perfect draft, corrected logits equal to the target's bit for
      bit; every draft is accepted, ``tau = gamma + 1`` each round.
    * ``logit_noise > 0``: a near-perfect draft whose law ``q != p`` depends on the drawn
      tokens; most drafts pass, so it exercises accept, reject and residual paths and is
      the most sensitive draft for law checks.

    Args:
        target: the ``TinyTargetLM`` to mirror.
        gamma: the largest block length, ``>= 1``.
        logit_noise: std of the base-logit perturbation, ``>= 0``.
        generator: CPU ``torch.Generator`` for the perturbation (needed iff noise > 0).
    Raises:
        TypeError / ValueError: naming the bad argument.
    """

    confidence_head = None

    def __init__(
        self,
        target: TinyTargetLM,
        *,
        gamma: int,
        logit_noise: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(target, TinyTargetLM):
            raise TypeError(f"target: expected a TinyTargetLM, got {type(target).__name__}")
        check_int("gamma", gamma, minimum=1)
        check_float("logit_noise", logit_noise, minimum=0.0)
        if logit_noise > 0:
            _check_generator(generator)
        super().__init__()
        self.gamma = gamma
        self.vocab_size = target.vocab_size
        self.hidden_size = target.hidden_size
        self.markov_head = _TargetRecurrenceHead(target)
        vocab = target.vocab_size
        self.base_offsets = (
            _frozen(generator, vocab, gamma, vocab, std=logit_noise) if logit_noise > 0
            else nn.Parameter(torch.zeros(vocab, gamma, vocab), requires_grad=False)
        )

    @torch.no_grad()
    def block(self, context_hidden: Tensor, anchor: Tensor, gamma: int | None = None) -> DraftBlock:
        """As ``TinyDSparkDraft.block``: ``hidden`` repeats ``context_hidden`` over the block,
        base logits ``logit_noise * N[anchor, :gamma]``."""
        gamma = _check_block(self, context_hidden, anchor, gamma, self.base_offsets)
        batch = context_hidden.shape[0]
        hidden = context_hidden[:, None].expand(batch, gamma, self.hidden_size).contiguous()
        return DraftBlock(hidden, self.base_offsets[anchor, :gamma])


def _check_block(draft, context_hidden, anchor, gamma, weight) -> int:
    """Validate a ``block`` call of either draft; returns the block length."""
    gamma = draft.gamma if gamma is None else check_int("gamma", gamma, minimum=1, maximum=draft.gamma)
    check_tensor("context_hidden", context_hidden, shape=(None, draft.hidden_size), dtypes=(torch.float32,))
    check_tensor("anchor", anchor, shape=(context_hidden.shape[0],), dtypes=INT_DTYPES)
    check_same_device(weights=weight, context_hidden=context_hidden, anchor=anchor)
    check_token_ids("anchor", anchor, draft.vocab_size)
    return gamma


def _check_draft_args(target, gamma, markov_head_type, markov_rank, generator, with_confidence) -> None:
    if not isinstance(target, TinyTargetLM):
        raise TypeError(f"target: expected a TinyTargetLM, got {type(target).__name__}")
    if target.hidden_size % _NUM_ATTENTION_HEADS:
        raise ValueError(
            f"target: expected an even hidden_size (the draft has {_NUM_ATTENTION_HEADS} attention "
            f"heads), got {target.hidden_size}"
        )
    check_int("gamma", gamma, minimum=1)
    check_choice("markov_head_type", markov_head_type, tuple(HEAD_TYPES))
    check_int("markov_rank", markov_rank, minimum=1)
    _check_generator(generator)
    if not isinstance(with_confidence, bool):
        raise TypeError(f"with_confidence: expected a bool, got {type(with_confidence).__name__}")


def _check_oracle(target, name, context, temperature) -> float:
    if not isinstance(target, TinyTargetLM):
        raise TypeError(f"target: expected a TinyTargetLM, got {type(target).__name__}")
    check_tensor(name, context, ndim=1, dtypes=INT_DTYPES)
    if context.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one token, got an empty tensor")
    check_token_ids(name, context, target.vocab_size)
    temperature = check_float("temperature", temperature)
    if temperature <= 0:
        raise ValueError(f"temperature: expected a number > 0, got {temperature}")
    return temperature


def _next_token_laws(target: TinyTargetLM, contexts: Tensor, temperature: float) -> Tensor:
    """float64 ``softmax(logits / T)`` after each row of ``contexts[N, n]``: ``[N, V]``."""
    last = target.logits(contexts)[:, -1].to(torch.float64)
    return torch.softmax(last / temperature, dim=-1)


def exact_next_token_law(target: TinyTargetLM, context: Tensor, temperature: float) -> Tensor:
    """The target's next-token law ``softmax(logits / T)`` after ``context``, float64 (SPEC S9).

    Args:
        target: a ``TinyTargetLM``.
        context: ``[n]`` int64 token ids, ``n >= 1``.
        temperature: ``T > 0`` (finite).
    Returns:
        ``[V]`` float64 probabilities.
    Raises:
        TypeError / ValueError: naming the bad argument.

    Example:
        >>> lm = TinyTargetLM(4, 6, generator=torch.Generator().manual_seed(0))
        >>> float(exact_next_token_law(lm, torch.tensor([1, 2]), 1.0).sum())
        1.0
    """
    temperature = _check_oracle(target, "context", context, temperature)
    return _next_token_laws(target, context[None], temperature)[0]


def exact_sequence_law(
    target: TinyTargetLM, prompt: Tensor, n_tokens: int, temperature: float
) -> dict[tuple[int, ...], float]:
    """Exact law of the next ``n_tokens`` tokens of autoregressive sampling (SPEC S9 oracle).

    Enumerates all ``V ** n_tokens`` continuations breadth first (one target pass per
    depth) and multiplies the float64 next-token laws along each.

    Args:
        target: a ``TinyTargetLM``.
        prompt: ``[n]`` int64 token ids, ``n >= 1``.
        n_tokens: ``>= 1``, with ``V ** n_tokens <= MAX_ENUMERATED_SEQUENCES``.
        temperature: ``T > 0`` (finite).
    Returns:
        ``{continuation (tuple of ints): probability}``, probabilities summing to 1.
    Raises:
        TypeError / ValueError: naming the bad argument.

    Example:
        >>> lm = TinyTargetLM(4, 6, generator=torch.Generator().manual_seed(0))
        >>> law = exact_sequence_law(lm, torch.tensor([1]), 2, 1.0)
        >>> len(law), round(sum(law.values()), 12)
        (16, 1.0)
    """
    temperature = _check_oracle(target, "prompt", prompt, temperature)
    check_int("n_tokens", n_tokens, minimum=1)
    if target.vocab_size ** n_tokens > MAX_ENUMERATED_SEQUENCES:
        raise ValueError(
            f"n_tokens: expected V ** n_tokens <= {MAX_ENUMERATED_SEQUENCES}, got "
            f"{target.vocab_size} ** {n_tokens}"
        )
    vocab = target.vocab_size
    contexts = prompt[None].long()
    probs = torch.ones(1, dtype=torch.float64)
    for _ in range(n_tokens):
        laws = _next_token_laws(target, contexts, temperature)
        probs = (probs[:, None] * laws).reshape(-1)
        next_ids = torch.arange(vocab).repeat(contexts.shape[0])[:, None]
        contexts = torch.cat([contexts.repeat_interleave(vocab, dim=0), next_ids], dim=1)
    continuations = itertools.product(range(vocab), repeat=n_tokens)
    return dict(zip(continuations, probs.tolist()))
