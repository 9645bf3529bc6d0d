"""The tiny target and drafts the S9 loop cases hand an implementation (SPEC S9), their
weights drawn from a seed; written from the SPEC, no ``dspark_ref``.

:class:`TinyTargetLM` is a causal LM small enough to enumerate (``V`` of 3..8): embedding,
a GRU over the context, an LM head. Its next-token law depends on the whole context, so a
loop that feeds the target the wrong context changes the output law.

:class:`TinyDSparkDraft` is a DSpark drafter (SPEC S1, S2, S7): a DFlash-style parallel
backbone (anchor-as-first-position inputs, the target's hidden state before the anchor
injected at every position, one bidirectional two-head attention layer), base logits through
the target's own LM head, a random Markov head (:func:`.markov_heads.markov_head_state`) and
optionally a confidence head. The draft holds the weights and computes the backbone and the
confidences; the Markov head's bias, the sampling and the loop are the implementation's.

:class:`OracleDraft` is a draft built on the target's own recurrence: its Markov head is the
target's GRU, so its corrected logits are the target's (a perfect draft) plus, with
``logit_noise``, a fixed random offset per anchor and step (a near-perfect one).

Weights are frozen ``nn.Parameter`` s drawn from one CPU ``torch.Generator``, tensor after
tensor in the order each constructor lists them; a state dict keeps the reference layout of
``conformance.contract`` (``markov_head.W1.weight`` ..., ``confidence_head.proj.weight``).
``tests/test_inputs.py`` pins the weights and the forward passes by digest: they equal, bit
for bit, the models the S9 cases drew before the suite had its own (``dspark_ref.tiny_models``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from conformance.checks import check_choice, check_float, check_int, check_tensor

from .markov_heads import MARKOV_HEAD_TYPES, markov_head_state

__all__ = ["TargetOutput", "DraftBlock", "TinyTargetLM", "TinyDSparkDraft", "OracleDraft", "MarkovHeadWeights",
           "ConfidenceHeadWeights"]

#: Std of the draft's Markov-head weights: large enough that the head visibly changes the
#: draft law (the DeepSpec default 0.02 would make every head type look alike).
MARKOV_INIT_SCALE = 0.5
NUM_ATTENTION_HEADS = 2
#: Std of the confidence-head weights: spreads the confidences so that a prefix scheduler
#: picks every verify length from 0 to gamma.
CONFIDENCE_INIT_SCALE = 1.0
_IDS = (torch.int64, torch.int32)


@dataclass(frozen=True)
class TargetOutput:
    """One target pass: ``logits[B, n, V]`` float32 (position ``t`` predicts token ``t + 1``)
    and ``hidden[B, n, d]`` float32 (the GRU state after token ``t``)."""

    logits: Tensor
    hidden: Tensor


@dataclass(frozen=True)
class DraftBlock:
    """One backbone pass over a block (SPEC S1): ``hidden[B, gamma, d]`` and
    ``base_logits[B, gamma, V]``, float32."""

    hidden: Tensor
    base_logits: Tensor


def _frozen(generator: torch.Generator, *shape: int, std: float) -> nn.Parameter:
    """``randn(*shape) * std`` from ``generator``, frozen."""
    return nn.Parameter(torch.randn(*shape, generator=generator) * std, requires_grad=False)


def _check_generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(f"generator: expected a CPU torch.Generator, got {generator!r}")
    return generator


def _check_ids(name: str, ids: object, shape: tuple, vocab: int) -> Tensor:
    """int64 / int32 ``ids`` of ``shape`` (``None``: any size) in ``[0, vocab)``."""
    check_tensor(name, ids, shape=shape, dtypes=_IDS)
    if ids.numel() and not bool(((ids >= 0) & (ids < vocab)).all()):
        raise ValueError(f"{name}: expected token ids in [0, {vocab}), got min {int(ids.min())}, max {int(ids.max())}")
    return ids


class TinyTargetLM(nn.Module):
    """A tiny causal LM: embedding -> GRU -> LM head (the SPEC S9 target).

    ``h_t = GRU(h_{t-1}, E[x_t])`` with ``h_{-1} = 0`` and ``logits_t = W_lm h_t``; the GRU:
    ``[r_in, z_in, n_in] = E[x] W_in.T + b``, ``[r_h, z_h, n_h] = h W_h.T``, ``r = sigmoid(r_in +
    r_h)``, ``z = sigmoid(z_in + z_h)``, ``n = tanh(n_in + r * n_h)``, ``h' = (1 - z) n + z h``.
    The forward pass runs the recurrence one position at a time with the ``[B, d]`` operations
    of :meth:`advance` and :meth:`next_token_logits`, so an incremental computation
    reproduces it bit for bit.

    Weights, in drawing order (iid normal): ``embedding [V, d]`` (std 1), ``w_input [3d, d]``
    (std ``2 / sqrt(d)``), ``w_state [3d, d]`` (std ``1 / sqrt(d)``), ``bias [3d]`` (std 0.1),
    ``lm_head_weight [V, d]`` (std 1.5); a draft shares ``embedding`` and ``lm_head_weight``.

    Args:
        vocab_size: ``V >= 2``. hidden_size: ``d >= 1``.
        generator: CPU ``torch.Generator``; the weights are its next draws.
    Raises:
        TypeError / ValueError: naming the bad argument.

    Example:
        >>> lm = TinyTargetLM(5, 8, generator=torch.Generator().manual_seed(0))
        >>> lm(torch.tensor([[1, 2, 3]])).logits.shape
        torch.Size([1, 3, 5])
    """

    def __init__(self, vocab_size: int, hidden_size: int, *, generator: torch.Generator) -> None:
        check_int("vocab_size", vocab_size, minimum=2)
        check_int("hidden_size", hidden_size, minimum=1)
        _check_generator(generator)
        super().__init__()
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        gate_std = 1.0 / math.sqrt(hidden_size)
        self.embedding = _frozen(generator, vocab_size, hidden_size, std=1.0)
        self.w_input = _frozen(generator, 3 * hidden_size, hidden_size, std=2 * gate_std)
        self.w_state = _frozen(generator, 3 * hidden_size, hidden_size, std=gate_std)
        self.bias = _frozen(generator, 3 * hidden_size, std=0.1)
        self.lm_head_weight = _frozen(generator, vocab_size, hidden_size, std=1.5)

    def advance(self, state: Tensor, token_ids: Tensor) -> Tensor:
        """One GRU step: the state ``[B, d]`` float32 after ``token_ids [B]`` (int64 / int32
        in ``[0, V)``) from ``state [B, d]`` float32.

        Raises:
            TypeError / ValueError: wrong shape, dtype or ids.
        """
        check_tensor("state", state, shape=(None, self.hidden_size), dtypes=(torch.float32,))
        _check_ids("token_ids", token_ids, (state.shape[0],), self.vocab_size)
        return self._advance(state, token_ids)

    def next_token_logits(self, state: Tensor) -> Tensor:
        """Next-token logits ``[B, V]`` float32 from a state ``[B, d]`` float32.

        Raises:
            TypeError / ValueError: ``state`` not a ``[B, d]`` float32 tensor.
        """
        check_tensor("state", state, shape=(None, self.hidden_size), dtypes=(torch.float32,))
        return state @ self.lm_head_weight.T

    @torch.no_grad()
    def forward(self, context_ids: Tensor) -> TargetOutput:
        """Logits and states at every position of ``context_ids [B, n]`` (int, ``n >= 1``).

        Returns:
            ``TargetOutput(logits [B, n, V], hidden [B, n, d])``, float32.
        Raises:
            TypeError / ValueError: not a 2-D int tensor of ids in ``[0, V)`` with ``n >= 1``.
        """
        _check_ids("context_ids", context_ids, (None, None), self.vocab_size)
        if context_ids.shape[1] == 0:
            raise ValueError(f"context_ids: expected at least one token per row, got shape {tuple(context_ids.shape)}")
        state = self.embedding.new_zeros(context_ids.shape[0], self.hidden_size)
        logits, hidden = [], []
        for t in range(context_ids.shape[1]):
            state = self._advance(state, context_ids[:, t])
            hidden.append(state)
            logits.append(state @ self.lm_head_weight.T)
        return TargetOutput(torch.stack(logits, dim=1), torch.stack(hidden, dim=1))

    def _advance(self, state: Tensor, token_ids: Tensor) -> Tensor:
        in_reset, in_update, in_new = (self.embedding[token_ids] @ self.w_input.T + self.bias).chunk(3, dim=-1)
        st_reset, st_update, st_new = (state @ self.w_state.T).chunk(3, dim=-1)
        reset = torch.sigmoid(in_reset + st_reset)
        update = torch.sigmoid(in_update + st_update)
        candidate = torch.tanh(in_new + reset * st_new)
        return (1 - update) * candidate + update * state


class _UninitialisedLinear(nn.Linear):
    """``nn.Linear`` whose parameters are left as allocated (no random draw): the caller sets
    them. (``torch.nn.utils.skip_init`` does so too, through the meta device, whose first use
    in a process costs about a second.)"""

    def reset_parameters(self) -> None:
        pass


def _linear(weight: Tensor, bias: Tensor | None = None) -> nn.Linear:
    """A frozen ``nn.Linear`` holding ``weight [m, n]`` (and ``bias [m]``), no initialisation."""
    layer = _UninitialisedLinear(weight.shape[1], weight.shape[0], bias=bias is not None)
    layer.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias, requires_grad=False)
    return layer


class MarkovHeadWeights(nn.Module):
    """A Markov head's weights in the reference layout (SPEC S2): ``W1`` an embedding
    ``[V, r]``, ``W2`` a bias-free linear ``r -> V``, plus ``Wg`` (gated) or ``Wz`` (rnn),
    from :func:`.markov_heads.markov_head_state`. It computes nothing but ``W1[prev]``
    (the confidence feature, SPEC S7): the bias is the implementation's.

    Attributes:
        head_type: ``"vanilla"``, ``"gated"`` or ``"rnn"``. rank: ``r``.
    """

    def __init__(self, head_type: str, state: dict[str, Tensor]) -> None:
        super().__init__()
        self.head_type, self.rank = head_type, state["W1.weight"].shape[1]
        self.W1 = nn.Embedding.from_pretrained(state["W1.weight"], freeze=True)
        self.W2 = _linear(state["W2.weight"])
        for name in ("Wg", "Wz"):
            if f"{name}.weight" in state:
                setattr(self, name, _linear(state[f"{name}.weight"], state[f"{name}.bias"]))


class ConfidenceHeadWeights(nn.Module):
    """A confidence head (SPEC S7): ``c_k = sigmoid(w . [h_k ; W1[x_{k-1}]] + b)`` in one
    linear ``proj`` (``weight [1, d + r]``, hidden part first; ``bias [1]``)."""

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        self.proj = _linear(weight, torch.zeros(1))

    def forward(self, hidden: Tensor, markov_features: Tensor) -> Tensor:
        """``[B, gamma]`` float32 confidences from ``hidden [B, gamma, d]`` and
        ``markov_features = W1[prev] [B, gamma, r]``."""
        features = torch.cat([hidden.float(), markov_features.float()], dim=-1)
        return torch.sigmoid(self.proj(features).squeeze(-1))


class TinyDSparkDraft(nn.Module):
    """A tiny DSpark drafter over a :class:`TinyTargetLM` (SPEC S1, S2, S7).

    Block pass of ``gamma`` positions: ``x_k = in_k + P_k + W_c c`` with ``in_0 = E[anchor]``,
    ``in_k = m`` (the mask embedding) for ``k >= 1``, ``P`` position embeddings, ``c`` the
    target's state before the anchor; ``h = tanh(x + Attn(x))`` with one bidirectional
    two-head attention layer (``softmax(q k^T / sqrt(d / 2)) v``, then ``W_out``); base logits
    ``U = h @ W_lm.T`` with the target's LM head (SPEC S1). ``tanh`` keeps ``h`` in the range of
    the target's GRU states, which the shared LM head expects.

    Weights, in drawing order after the target's: ``mask_embedding [d]`` (std 1),
    ``position_embedding [gamma, d]`` (std 1), ``context_proj [d, d]``, ``w_qkv [3d, d]``,
    ``w_out [d, d]`` (std ``1 / sqrt(d)``), the Markov head (std :data:`MARKOV_INIT_SCALE`),
    then with a confidence head one ``rand [1, d + r]`` draw (discarded, so that a seed still
    draws the weights the S9 cases have always drawn) and ``proj.weight`` (std
    :data:`CONFIDENCE_INIT_SCALE`), bias 0.

    Args:
        target: the :class:`TinyTargetLM` whose embedding and LM head are shared (same tensors).
        gamma: the largest block length, ``>= 1``.
        markov_head_type: ``"vanilla"``, ``"gated"`` or ``"rnn"``. markov_rank: ``r >= 1``.
        generator: CPU ``torch.Generator`` for every draft weight.
        with_confidence: build a confidence head (the prefix scheduler reads it).
    Raises:
        TypeError / ValueError: naming the bad argument; ``target.hidden_size`` must be even.
    """

    def __init__(self, target: TinyTargetLM, *, gamma: int, markov_head_type: str = "vanilla",
                 markov_rank: int = 4, generator: torch.Generator, with_confidence: bool = False) -> None:
        if not isinstance(target, TinyTargetLM):
            raise TypeError(f"target: expected a TinyTargetLM, got {type(target).__name__}")
        d = target.hidden_size
        if d % NUM_ATTENTION_HEADS:
            raise ValueError(f"target: expected an even hidden_size (the draft has {NUM_ATTENTION_HEADS} "
                             f"attention heads), got {d}")
        check_int("gamma", gamma, minimum=1)
        check_choice("markov_head_type", markov_head_type, MARKOV_HEAD_TYPES)
        check_int("markov_rank", markov_rank, minimum=1)
        _check_generator(generator)
        if not isinstance(with_confidence, bool):
            raise TypeError(f"with_confidence: expected a bool, got {type(with_confidence).__name__}")
        super().__init__()
        self.gamma, self.vocab_size, self.hidden_size = gamma, target.vocab_size, d
        self.embedding, self.lm_head_weight = target.embedding, target.lm_head_weight
        self.mask_embedding = _frozen(generator, d, std=1.0)
        self.position_embedding = _frozen(generator, gamma, d, std=1.0)
        self.context_proj = _frozen(generator, d, d, std=1.0 / math.sqrt(d))
        self.w_qkv = _frozen(generator, 3 * d, d, std=1.0 / math.sqrt(d))
        self.w_out = _frozen(generator, d, d, std=1.0 / math.sqrt(d))
        state = markov_head_state(markov_head_type, target.vocab_size, markov_rank, d, generator,
                                  scale=MARKOV_INIT_SCALE)
        self.markov_head = MarkovHeadWeights(markov_head_type, state)
        self.confidence_head = None
        if with_confidence:
            torch.rand(1, d + markov_rank, generator=generator)
            weight = torch.randn(1, d + markov_rank, generator=generator) * CONFIDENCE_INIT_SCALE
            self.confidence_head = ConfidenceHeadWeights(weight)

    @torch.no_grad()
    def block(self, context_hidden: Tensor, anchor: Tensor, gamma: int | None = None) -> DraftBlock:
        """Backbone pass over one block (SPEC S1, anchor-as-first-position).

        Args:
            context_hidden: ``[B, d]`` float32, the target's state of the token before the anchor.
            anchor: ``[B]`` int64 / int32, the anchor ``x0`` (the last committed token).
            gamma: block length, ``1 <= gamma <= self.gamma`` (default ``self.gamma``).
        Returns:
            ``DraftBlock(hidden [B, gamma, d], base_logits [B, gamma, V])``, float32.
        Raises:
            TypeError / ValueError: wrong shape, dtype, ids or ``gamma``.
        """
        gamma = _check_block(self, context_hidden, anchor, gamma)
        batch, d = context_hidden.shape
        inputs = torch.cat([self.embedding[anchor][:, None], self.mask_embedding.expand(batch, gamma - 1, d)], dim=1)
        x = inputs + self.position_embedding[:gamma] + (context_hidden @ self.context_proj.T)[:, None]
        hidden = torch.tanh(x + self._attention(x))
        return DraftBlock(hidden, F.linear(hidden, self.lm_head_weight)[..., :self.vocab_size])

    @torch.no_grad()
    def confidences(self, hidden: Tensor, anchor: Tensor, tokens: Tensor) -> Tensor:
        """Confidences ``c[B, gamma] = sigmoid(w . [h_k ; W1[x_{k-1}]] + b)`` float32 (SPEC S7)
        of the block ``tokens [B, gamma]`` drawn after ``anchor [B]`` (int ids), from its
        backbone states ``hidden [B, gamma, d]`` (float).

        Raises:
            ValueError: a draft without a confidence head; TypeError / ValueError: bad shapes or ids.
        """
        if self.confidence_head is None:
            raise ValueError("confidence_head: this draft was built with with_confidence=False")
        check_tensor("hidden", hidden, shape=(None, None, self.hidden_size),
                     dtypes=(torch.float32, torch.float64, torch.bfloat16, torch.float16))
        _check_ids("anchor", anchor, (hidden.shape[0],), self.vocab_size)
        _check_ids("tokens", tokens, tuple(hidden.shape[:2]), self.vocab_size)
        prev = torch.cat([anchor[:, None].long(), tokens[:, :-1].long()], dim=1)
        return self.confidence_head(hidden, self.markov_head.W1(prev))

    def _attention(self, x: Tensor) -> Tensor:
        batch, gamma, d = x.shape
        head_dim = d // NUM_ATTENTION_HEADS
        q, k, v = (part.reshape(batch, gamma, NUM_ATTENTION_HEADS, head_dim).transpose(1, 2)
                   for part in (x @ self.w_qkv.T).chunk(3, dim=-1))
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head_dim), dim=-1)
        return (weights @ v).transpose(1, 2).reshape(batch, gamma, d) @ self.w_out.T


class OracleDraft(nn.Module):
    """A draft built on the target's own recurrence (SPEC S9 test double).

    The backbone repeats the target's state before the anchor over the block; the Markov head
    is the target's GRU on the previous token (seeded at step 0 with that state), so step
    ``k``'s bias is the target's logits after ``anchor, x_0 .. x_{k-1}``. Base logits are
    ``base_offsets[anchor, k]``, a ``[V, gamma, V]`` table, ``randn * logit_noise``:

    * ``logit_noise = 0`` (zeros, no draw): corrected logits equal the target's bit for bit,
      every draft is accepted, ``tau = gamma + 1`` each round;
    * ``logit_noise > 0``: a near-perfect draft, ``q != p`` depending on the drawn tokens.

    Args:
        target: the :class:`TinyTargetLM` to mirror (held as ``self.target``).
        gamma: the largest block length, ``>= 1``.
        logit_noise: std of the base-logit offsets, ``>= 0``.
        generator: CPU ``torch.Generator`` for the offsets (needed iff ``logit_noise > 0``).
    Raises:
        TypeError / ValueError: naming the bad argument.
    """

    confidence_head = None

    def __init__(self, target: TinyTargetLM, *, gamma: int, logit_noise: float = 0.0,
                 generator: torch.Generator | None = None) -> None:
        if not isinstance(target, TinyTargetLM):
            raise TypeError(f"target: expected a TinyTargetLM, got {type(target).__name__}")
        check_int("gamma", gamma, minimum=1)
        check_float("logit_noise", logit_noise, minimum=0.0)
        super().__init__()
        self.gamma, self.vocab_size, self.hidden_size = gamma, target.vocab_size, target.hidden_size
        self.target = target
        vocab = target.vocab_size
        self.base_offsets = (
            _frozen(_check_generator(generator), vocab, gamma, vocab, std=logit_noise) if logit_noise > 0
            else nn.Parameter(torch.zeros(vocab, gamma, vocab), requires_grad=False))

    @torch.no_grad()
    def block(self, context_hidden: Tensor, anchor: Tensor, gamma: int | None = None) -> DraftBlock:
        """As :meth:`TinyDSparkDraft.block`: ``hidden`` repeats ``context_hidden`` over the
        block, base logits ``base_offsets[anchor, :gamma]``."""
        gamma = _check_block(self, context_hidden, anchor, gamma)
        hidden = context_hidden[:, None].expand(context_hidden.shape[0], gamma, self.hidden_size).contiguous()
        return DraftBlock(hidden, self.base_offsets[anchor, :gamma])


def _check_block(draft, context_hidden: object, anchor: object, gamma: object) -> int:
    """Validate a ``block`` call of either draft; returns the block length."""
    gamma = draft.gamma if gamma is None else check_int("gamma", gamma, minimum=1, maximum=draft.gamma)
    check_tensor("context_hidden", context_hidden, shape=(None, draft.hidden_size), dtypes=(torch.float32,))
    _check_ids("anchor", anchor, (context_hidden.shape[0],), draft.vocab_size)
    return gamma
