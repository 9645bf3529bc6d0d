"""Markov heads: the sequential stage of a DSpark draft block (SPEC S2, paper eqs. 4-6).

The parallel backbone yields base logits ``U[B, gamma, V]`` for a whole block; a Markov
head adds, step by step, a bias that depends on the previously drawn token (and, for the
gated and rnn heads, on the step's hidden state; the rnn head also carries a recurrent
state ``s[B, r]`` across the block). ``sample_block`` draws a block left to right;
``apply_block_logits`` recomputes its corrected logits from given tokens (teacher
forcing). Both run the same per-step code (``_corrected_step``) in the same order, so
they agree bit for bit.

Dtype rule: biases and corrected logits are float32 whatever the dtype of the base
logits, ``L_k = U_k.float() + bias_k`` (a bf16 LM head does not round the bias away).
The one exception is ``gamma == 0``, which returns the base logits object unchanged.

To add a head: subclass ``MarkovHead``, implement ``step_bias`` (and ``init_state`` if it
carries state), and register it in ``HEAD_TYPES``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from dspark_ref._checks import (
    FLOAT_DTYPES,
    INT_DTYPES,
    check_choice,
    check_finite,
    check_float,
    check_int,
    check_same_device,
    check_tensor,
    check_token_ids,
)
from dspark_ref.layouts import check_d2t

__all__ = [
    "MarkovHead",
    "VanillaMarkovHead",
    "GatedMarkovHead",
    "RNNMarkovHead",
    "HEAD_TYPES",
    "build_markov_head",
    "StepSampler",
    "BlockSample",
    "sample_block",
    "apply_block_logits",
]

#: ``sampler(step_logits[B, V] float32, k) -> tokens[B] int64``: draws step ``k``.
StepSampler = Callable[[Tensor, int], Tensor]

DEFAULT_INIT_SCALE = 0.02


class _UninitialisedEmbedding(nn.Embedding):
    """``nn.Embedding`` whose weight is left uninitialised: ``_finish_init`` draws every
    parameter. (``torch.nn.utils.skip_init`` leaves it so too, but through the meta device,
    whose first default-init kernel imports about 900 modules: 3 to 4 s in every process
    that builds its first head.)"""

    def reset_parameters(self) -> None:
        pass


class _UninitialisedLinear(nn.Linear):
    """``nn.Linear`` whose weight and bias are left uninitialised, as
    :class:`_UninitialisedEmbedding`."""

    def reset_parameters(self) -> None:
        pass


class MarkovHead(nn.Module):
    """Base class: embedding ``W1[V, r]`` and bias-free projection ``W2: r -> V`` (SPEC S2).

    Subclasses create their own layers, then call ``_finish_init`` (parameters start
    uninitialised), and implement ``step_bias``. Weights are drawn iid ``N(0, scale)`` on the CPU
    from ``generator`` (the global RNG if None), then moved to ``device`` / ``dtype``, so
    one seed gives the same head on every device.

    Attributes:
        vocab_size: ``V``, the width of the bias (``W2``'s output: the draft vocabulary).
        prev_vocab_size: the ids the head conditions on (``W1``'s rows: the target
            vocabulary, SPEC S1); ``vocab_size`` unless a draft vocabulary differs from it.
        rank: ``r``. hidden_size: ``d`` (None when unused).
        needs_hidden: whether ``step_bias`` reads the step's hidden state.
    """

    needs_hidden = False

    def __init__(self, vocab_size: int, rank: int, hidden_size: int | None = None, *,
                 prev_vocab_size: int | None = None) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.prev_vocab_size = vocab_size if prev_vocab_size is None else prev_vocab_size
        self.rank = rank
        self.hidden_size = hidden_size
        self.W1 = _UninitialisedEmbedding(self.prev_vocab_size, rank)
        self.W2 = _UninitialisedLinear(rank, vocab_size, bias=False)

    def _finish_init(self, scale: float, generator: torch.Generator | None, device, dtype) -> None:
        with torch.no_grad():
            for param in self.parameters():
                nn.init.normal_(param, 0.0, scale, generator=generator)
        self.to(device=device, dtype=dtype)

    def init_state(self, batch: int, device: torch.device | str) -> Tensor | None:
        """Recurrent state before step 0 of a block (``None`` for stateless heads)."""
        return None

    def step_bias(
        self, prev: Tensor, hidden_k: Tensor | None, state: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """Bias of one step: ``(bias[B, V] float32, next state)``.

        Args:
            prev: ``[B]`` int64 previous token (the anchor ``x0`` at step 0).
            hidden_k: ``[B, d]`` hidden state of this step (required iff ``needs_hidden``).
            state: what ``init_state`` or the previous step returned.
        Raises:
            TypeError / ValueError: bad ``prev`` or ``hidden_k`` (see ``_check_step``).
        """
        raise NotImplementedError

    def _check_step(self, prev: Tensor, hidden_k: Tensor | None) -> None:
        check_tensor("prev", prev, ndim=1, dtypes=INT_DTYPES)
        if hidden_k is None:
            if self.needs_hidden:
                raise ValueError(
                    f"hidden_k: the {type(self).__name__} needs the step's hidden state "
                    f"[B, {self.hidden_size}], got None"
                )
            return
        check_tensor("hidden_k", hidden_k, shape=(prev.shape[0], self.hidden_size), dtypes=FLOAT_DTYPES)

    def _project(self, features: Tensor) -> Tensor:
        return self.W2(features).float()

    def _hidden(self, hidden_k: Tensor) -> Tensor:
        # A bf16 backbone may feed a float32 head: compute in the head's dtype.
        return hidden_k.to(self.W1.weight.dtype)


class VanillaMarkovHead(MarkovHead):
    """First-order Markov head: ``bias(prev) = W2(W1[prev])`` (SPEC S2, paper eq. 5).

    Args:
        vocab_size: ``V >= 1``. rank: ``r >= 1``.
        prev_vocab_size: rows of ``W1`` (ids conditioned on; default ``vocab_size``; SPEC S1
            draft vocabularies).
        scale: std of the ``N(0, scale)`` initial weights (>= 0).
        generator: CPU ``torch.Generator`` for reproducible weights.
        device, dtype: where the parameters live (default CPU, float32).
    Raises:
        TypeError / ValueError: naming the bad argument.

    Example:
        >>> head = VanillaMarkovHead(10, 4, generator=torch.Generator().manual_seed(0))
        >>> bias, _ = head.step_bias(torch.tensor([3]), None, None)
        >>> bias.shape
        torch.Size([1, 10])
    """

    def __init__(
        self,
        vocab_size: int,
        rank: int,
        *,
        prev_vocab_size: int | None = None,
        scale: float = DEFAULT_INIT_SCALE,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        _check_head_args(vocab_size=vocab_size, rank=rank, scale=scale, generator=generator, dtype=dtype,
                         prev_vocab_size=prev_vocab_size)
        super().__init__(vocab_size, rank, prev_vocab_size=prev_vocab_size)
        self._finish_init(scale, generator, device, dtype)

    def step_bias(self, prev, hidden_k, state):
        self._check_step(prev, hidden_k)
        return self._project(self.W1(prev)), state


class _HiddenConditionedHead(MarkovHead):
    """The constructor shared by the heads that read the backbone hidden state ``h_k``
    (gated, rnn): check the arguments, build ``W1``, ``W2`` and the head's own layers
    (:meth:`_add_layers`, in that order, so seeded weights are reproducible), initialise."""

    needs_hidden = True

    def __init__(
        self,
        vocab_size: int,
        rank: int,
        hidden_size: int,
        *,
        prev_vocab_size: int | None = None,
        scale: float = DEFAULT_INIT_SCALE,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        _check_head_args(
            vocab_size=vocab_size, rank=rank, hidden_size=hidden_size, scale=scale,
            generator=generator, dtype=dtype, needs_hidden=True, prev_vocab_size=prev_vocab_size,
        )
        super().__init__(vocab_size, rank, hidden_size, prev_vocab_size=prev_vocab_size)
        self._add_layers(rank, hidden_size)
        self._finish_init(scale, generator, device, dtype)

    def _add_layers(self, rank: int, hidden_size: int) -> None:
        raise NotImplementedError


class GatedMarkovHead(_HiddenConditionedHead):
    """Gated Markov head (SPEC S2): ``g = sigmoid(Wg [h_k ; W1[prev]] + bg)``,
    ``bias = W2(g * W1[prev])``; ``Wg`` is a linear ``d + r -> r`` with bias.

    Args: as ``VanillaMarkovHead`` plus ``hidden_size`` (``d >= 1``).
    Raises:
        TypeError / ValueError: naming the bad argument.
    """

    def _add_layers(self, rank: int, hidden_size: int) -> None:
        self.Wg = _UninitialisedLinear(hidden_size + rank, rank)

    def gate_input(self, hidden_k: Tensor, embedded: Tensor) -> Tensor:
        """The gate's input ``[h_k ; W1[prev]]``, ``[B, d + r]`` in the head's dtype, from
        ``hidden_k [B, d]`` (already in the head's dtype) and ``embedded = W1[prev] [B, r]``;
        a variant head overrides it (e.g. another feature order)."""
        return torch.cat([hidden_k, embedded], dim=-1)

    def step_bias(self, prev, hidden_k, state):
        self._check_step(prev, hidden_k)
        embedded = self.W1(prev)
        gate = torch.sigmoid(self.Wg(self.gate_input(self._hidden(hidden_k), embedded)))
        return self._project(gate * embedded), state


class RNNMarkovHead(_HiddenConditionedHead):
    """Recurrent Markov head (SPEC S2, paper eq. 6).

    ``z = [s_{k-1} ; W1[prev] ; h_k]``; one linear ``Wz: 2r + d -> 3r`` (with bias, as in
    DeepSpec checkpoints) split into gate, candidate, output;
    ``s_k = sigmoid(gate) * s_{k-1} + (1 - sigmoid(gate)) * tanh(cand)``,
    ``bias = W2(tanh(out))``, ``s_0 = 0``. The state carries across the steps of a block.

    Args: as ``GatedMarkovHead``.
    Raises:
        TypeError / ValueError: naming the bad argument.
    """

    def _add_layers(self, rank: int, hidden_size: int) -> None:
        self.Wz = _UninitialisedLinear(2 * rank + hidden_size, 3 * rank)

    def init_state(self, batch, device):
        return torch.zeros(batch, self.rank, dtype=self.W1.weight.dtype, device=device)

    def step_bias(self, prev, hidden_k, state):
        self._check_step(prev, hidden_k)
        check_tensor("state", state, shape=(prev.shape[0], self.rank), dtypes=FLOAT_DTYPES)
        z = torch.cat([state, self.W1(prev), self._hidden(hidden_k)], dim=-1)
        gate, candidate, output = self.Wz(z).chunk(3, dim=-1)
        keep = torch.sigmoid(gate)
        next_state = keep * state + (1 - keep) * torch.tanh(candidate)
        return self._project(torch.tanh(output)), next_state


HEAD_TYPES: dict[str, type[MarkovHead]] = {
    "vanilla": VanillaMarkovHead,
    "gated": GatedMarkovHead,
    "rnn": RNNMarkovHead,
}


def build_markov_head(
    config: Mapping,
    *,
    scale: float = DEFAULT_INIT_SCALE,
    generator: torch.Generator | None = None,
    head_types: Mapping[str, type[MarkovHead]] = HEAD_TYPES,
) -> MarkovHead:
    """Build a head from DeepSpec-style config keys (SPEC S2).

    Keys: ``markov_rank`` (int >= 1), ``markov_head_type`` (one of ``head_types``,
    default ``"vanilla"``), ``vocab_size``, ``hidden_size`` (every type but vanilla), and
    optionally ``draft_vocab_size`` (SPEC S1: a draft vocabulary other than the target's;
    the bias is ``draft_vocab_size`` wide while ``W1`` keeps ``vocab_size`` rows, the ids
    the head conditions on).
    ``scale`` and ``generator`` are passed to the head's constructor. ``head_types`` maps
    a type to its class (default ``HEAD_TYPES``; a variant registry maps a type to a
    subclass taking the same constructor arguments).

    Raises:
        TypeError: ``config`` is not a mapping, or a value has the wrong type; a
            ``head_types`` value that is not a ``MarkovHead`` subclass.
        ValueError: ``markov_rank <= 0`` or missing, unknown ``markov_head_type``
            (the message lists the choices), missing ``vocab_size`` / ``hidden_size``.

    Example:
        >>> build_markov_head({"markov_rank": 4, "vocab_size": 10}).rank
        4
    """
    head_type = _check_config(config, head_types)
    vocab = {"prev_vocab_size": config["vocab_size"]} if "draft_vocab_size" in config else {}
    out_vocab = config.get("draft_vocab_size", config["vocab_size"])
    if head_type == "vanilla":
        return head_types[head_type](out_vocab, config["markov_rank"], scale=scale, generator=generator, **vocab)
    return head_types[head_type](
        out_vocab, config["markov_rank"], config["hidden_size"], scale=scale, generator=generator, **vocab
    )


@dataclass(frozen=True)
class BlockSample:
    """One drafted block: ``tokens[B, gamma]`` int64 and the ``corrected_logits[B, gamma, V]``
    (float32) of the same pass that drew them."""

    tokens: Tensor
    corrected_logits: Tensor


@torch.no_grad()
def sample_block(
    head: MarkovHead,
    base_logits: Tensor,
    first_prev: Tensor,
    hidden: Tensor | None,
    sampler: StepSampler,
    *,
    d2t: Tensor | None = None,
) -> BlockSample:
    """Draw a block left to right through the Markov head (SPEC S2).

    For ``k = 0 .. gamma-1``: ``L_k = U_k.float() + bias_k(prev_k)``, ``x_k = sampler(L_k, k)``,
    with ``prev_0 = first_prev`` (the anchor ``x0``) and ``prev_k = x_{k-1}``. Exactly
    ``gamma`` sampler calls. With a draft-to-target map ``d2t`` (SPEC S1, reduced draft
    vocabulary) the sampler draws draft ids and ``x_k = d2t[draft id]``: the target id is
    what is stored and what conditions step ``k + 1``.

    Args:
        head: a ``MarkovHead``.
        base_logits: ``U[B, gamma, V]``, float32 / bf16 / fp16.
        first_prev: ``x0[B]`` int64 / int32, ids in ``[0, head.prev_vocab_size)``.
        hidden: ``h[B, gamma, d]`` (required for gated / rnn heads; ignored by vanilla).
        sampler: ``StepSampler``; must return ``[B]`` int64 ids.
        d2t: optional ``[V]`` int64 draft-to-target map into ``[0, head.prev_vocab_size)``
            (validated by :func:`dspark_ref.layouts.check_d2t`).
    Returns:
        ``BlockSample(tokens[B, gamma] int64, corrected_logits[B, gamma, V] float32)``
        (tokens are target ids; corrected logits stay over the draft vocabulary);
        for ``gamma == 0``: empty ``tokens[B, 0]`` and ``base_logits`` itself.
    Raises:
        TypeError: wrong types or dtypes, ``sampler`` not callable or returning a bad dtype.
        ValueError: shape or device mismatch, ids out of range, NaN logits, ``hidden``
            missing for a head that needs it, a sampler output of the wrong shape.

    Example:
        >>> head = VanillaMarkovHead(8, 2, generator=torch.Generator().manual_seed(0))
        >>> argmax = lambda logits, k: logits.argmax(-1)
        >>> sample_block(head, torch.zeros(1, 3, 8), torch.tensor([1]), None, argmax).tokens.shape
        torch.Size([1, 3])
    """
    _check_block(head, base_logits, "first_prev", first_prev, hidden)
    if d2t is not None:
        check_d2t(d2t, head.vocab_size, head.prev_vocab_size)
        d2t = d2t.long().to(base_logits.device)
    if not callable(sampler):
        raise TypeError(f"sampler: expected a callable (logits[B, V], k) -> tokens[B], got {type(sampler).__name__}")
    batch, gamma, _ = base_logits.shape
    if gamma == 0:
        return BlockSample(first_prev.new_empty((batch, 0), dtype=torch.int64), base_logits)
    state = head.init_state(batch, base_logits.device)
    prev = first_prev.long()
    tokens, logits = [], []
    for k in range(gamma):
        step_logits, state = _corrected_step(head, base_logits, hidden, prev, state, k)
        prev = sampler(step_logits, k)
        check_tensor(f"sampler output at step {k}", prev, shape=(batch,), dtypes=(torch.int64,))
        if d2t is not None:
            prev = d2t[prev]
        tokens.append(prev)
        logits.append(step_logits)
    return BlockSample(torch.stack(tokens, dim=1), torch.stack(logits, dim=1))


def apply_block_logits(
    head: MarkovHead, base_logits: Tensor, token_ids: Tensor, hidden: Tensor | None
) -> Tensor:
    """Teacher forcing: corrected logits of a block from given previous tokens (SPEC S2).

    ``token_ids[:, k]`` is ``prev_k``, i.e. ``[x0, x_0 .. x_{gamma-2}]``. Equals, bit for
    bit, the ``corrected_logits`` of the ``sample_block`` call that drew those tokens.

    Args:
        head, base_logits, hidden: as ``sample_block``.
        token_ids: ``[B, gamma]`` int64 / int32 ids in ``[0, head.prev_vocab_size)``.
    Returns:
        ``[B, gamma, V]`` float32 (``base_logits`` itself when ``gamma == 0``).
    Raises:
        TypeError / ValueError: as ``sample_block``, naming ``token_ids``.
    """
    _check_block(head, base_logits, "token_ids", token_ids, hidden)
    batch, gamma, _ = base_logits.shape
    if gamma == 0:
        return base_logits
    state = head.init_state(batch, base_logits.device)
    logits = []
    for k in range(gamma):
        step_logits, state = _corrected_step(head, base_logits, hidden, token_ids[:, k].long(), state, k)
        logits.append(step_logits)
    return torch.stack(logits, dim=1)


def _corrected_step(head, base_logits, hidden, prev, state, k):
    hidden_k = hidden[:, k] if head.needs_hidden else None
    bias, state = head.step_bias(prev, hidden_k, state)
    return base_logits[:, k].float() + bias, state


def _capturing(tensor: Tensor) -> bool:
    # Value checks synchronise with the device, which CUDA-graph capture forbids (S4).
    return tensor.is_cuda and torch.cuda.is_current_stream_capturing()


def _check_head_args(*, vocab_size, rank, scale, generator, dtype, hidden_size=None, needs_hidden=False,
                     prev_vocab_size=None) -> None:
    check_int("vocab_size", vocab_size, minimum=1)
    if prev_vocab_size is not None:
        check_int("prev_vocab_size", prev_vocab_size, minimum=1)
    check_int("rank", rank, minimum=1)
    if needs_hidden:
        check_int("hidden_size", hidden_size, minimum=1)
    check_float("scale", scale, minimum=0.0)
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise TypeError(f"generator: expected a CPU torch.Generator or None, got {generator!r}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: expected a floating dtype, got {dtype}")


def _check_config(config, head_types) -> str:
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a mapping, got {type(config).__name__}")
    for key in ("markov_rank", "vocab_size"):
        if key not in config:
            raise ValueError(f"config: missing key {key!r} (DeepSpec draft config)")
    check_int("config['markov_rank']", config["markov_rank"], minimum=1)
    if "draft_vocab_size" in config:
        check_int("config['draft_vocab_size']", config["draft_vocab_size"], minimum=1)
    head_type = config.get("markov_head_type", "vanilla")
    check_choice("config['markov_head_type']", head_type, tuple(head_types))
    if not (isinstance(head_types[head_type], type) and issubclass(head_types[head_type], MarkovHead)):
        raise TypeError(
            f"head_types[{head_type!r}]: expected a MarkovHead subclass, got {head_types[head_type]!r}"
        )
    if head_type != "vanilla" and "hidden_size" not in config:
        raise ValueError(f"config: missing key 'hidden_size' (needed by the {head_type} Markov head)")
    return head_type


def _check_block(head, base_logits, ids_name, ids, hidden) -> None:
    if not isinstance(head, MarkovHead):
        raise TypeError(f"head: expected a MarkovHead, got {type(head).__name__}")
    check_tensor("base_logits", base_logits, ndim=3, dtypes=FLOAT_DTYPES)
    batch, gamma, vocab = base_logits.shape
    if vocab != head.vocab_size:
        raise ValueError(f"base_logits: expected last axis V = head.vocab_size = {head.vocab_size}, got {vocab}")
    ids_shape = (batch,) if ids_name == "first_prev" else (batch, gamma)
    check_tensor(ids_name, ids, shape=ids_shape, dtypes=INT_DTYPES)
    if hidden is None and head.needs_hidden:
        raise ValueError(
            f"hidden: the {type(head).__name__} needs hidden states [B, gamma, d] = "
            f"[{batch}, {gamma}, {head.hidden_size}], got None"
        )
    if hidden is not None:
        check_tensor("hidden", hidden, shape=(batch, gamma, head.hidden_size), dtypes=FLOAT_DTYPES)
    check_same_device(base_logits=base_logits, **{ids_name: ids}, hidden=hidden)
    if not _capturing(base_logits):
        check_token_ids(ids_name, ids, head.prev_vocab_size)
        check_finite("base_logits", base_logits, allow_neg_inf=True)
