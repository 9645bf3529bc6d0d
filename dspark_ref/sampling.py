"""Step sampling (SPEC S3): greedy rows, temperature clamp, exponential race, truncation.

One call samples one token per row from step logits ``[B, V]``. Greedy rows take the
argmax (lowest index among ties); sampling rows draw from ``softmax(L / T)`` with
``T >= TEMPERATURE_FLOOR`` by the exponential race ``argmax_v p_v / E_v``, optionally after
top-k / top-p / min-p truncation. The tiled (Triton) form of the race lives in
``tiled_sampling.py``.

Why probabilities instead of Gumbel logs: with ``G_v = -log E_v``,
``log(p_v / E_v) = L_v / T - log Z + G_v``. ``log`` is increasing and ``log Z`` is the same
for every ``v``, so ``argmax_v p_v / E_v == argmax_v (L_v / T + G_v)`` (Gumbel-max) in exact
arithmetic, and both draw ``v`` with probability ``p_v``. The ratio form needs no ``log`` of
the noise, is what production kernels compute, and is what the tiled rescale
``key * exp(tile_max - global_max)`` is defined on.

Data-dependent checks (NaN scans) read tensor values on the host; they are skipped while a
CUDA graph is being captured, where a host read is illegal.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import torch

from dspark_ref._rows import rowwise
from dspark_ref._checks import (
    FLOAT_DTYPES,
    INT_DTYPES,
    all_finite,
    check_choice,
    check_finite,
    check_int,
    check_same_device,
    check_tensor,
)

__all__ = [
    "GREEDY_RULES",
    "TEMPERATURE_FLOOR",
    "clamp_temperature",
    "greedy_rows",
    "greedy_argmax",
    "exponential_noise",
    "exponential_race",
    "RaceSteps",
    "TOP_K_TIE_RULES",
    "truncate_logits",
    "Truncation",
    "sample_step",
]

TEMPERATURE_FLOOR = 1e-5
GREEDY_RULES = ("top_k", "temperature")
#: Which tokens a top-k cut keeps when several tie with the k-th value (SPEC S3).
TOP_K_TIE_RULES = ("all", "lowest")

# Key given to zero-probability tokens: below every key p / E >= 0 of a token with p > 0,
# so such a token can never win, even when E == 0 would make p / E a NaN.
_ZERO_PROBABILITY_KEY = -1.0


def _values_checkable(tensor: torch.Tensor) -> bool:
    """False while capturing a CUDA graph, where reading tensor values is illegal."""
    return not (tensor.is_cuda and torch.cuda.is_current_stream_capturing())


def _check_temperatures(temperatures: object, rows: int | None = None) -> torch.Tensor:
    check_tensor("temperatures", temperatures, shape=(rows,), dtypes=FLOAT_DTYPES)
    if _values_checkable(temperatures):
        check_finite("temperatures", temperatures)
        if bool((temperatures < 0).any()):
            bad = int((temperatures < 0).nonzero()[0])
            raise ValueError(
                f"temperatures: expected values >= 0, got {temperatures[bad].item()} at index {bad}"
            )
    return temperatures


def _check_logits(name: str, logits: object) -> torch.Tensor:
    """``[B, V]`` float logits; NaN and +inf rejected; every row needs a finite logit."""
    check_tensor(name, logits, ndim=2, dtypes=FLOAT_DTYPES)
    if logits.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty vocabulary axis, got shape {tuple(logits.shape)}")
    # All finite: no dead row either (the common case, one pass).
    if _values_checkable(logits) and not all_finite(logits):
        check_finite(name, logits, allow_neg_inf=True)
        dead = (logits == -math.inf).all(dim=1)
        if bool(dead.any()):
            row = int(dead.nonzero()[0])
            raise ValueError(f"{name}: expected at least one finite logit per row, row {row} is all -inf")
    return logits


def _check_noise(noise: object, shape: Sequence[int]) -> torch.Tensor:
    check_tensor("noise", noise, shape=tuple(shape), dtypes=(torch.float32,))
    if _values_checkable(noise):
        check_finite("noise", noise)
        if bool((noise < 0).any()):
            idx = tuple(int(i) for i in (noise < 0).nonzero()[0])
            raise ValueError(f"noise: expected Exp(1) draws >= 0, got {noise[idx].item()} at index {idx}")
    return noise


def _first_argmax(values: torch.Tensor) -> torch.Tensor:
    """Index of the row maximum of ``[B, V]`` values, lowest index among ties (no NaN)."""
    width = values.shape[-1]
    best = values.amax(dim=-1, keepdim=True)
    # Positions in the narrowest integer type that holds the sentinel ``width``: the same
    # minimum, a fraction of the bytes to select and reduce.
    narrow = torch.uint8 if width <= 255 else torch.int16 if width <= 32767 else torch.int64
    positions = torch.arange(width, device=values.device, dtype=narrow)
    return torch.where(values == best, positions, width).amin(dim=-1).to(torch.int64)


def clamp_temperature(temperatures: torch.Tensor) -> torch.Tensor:
    """Clamp sampling temperatures to at least ``TEMPERATURE_FLOOR`` (SPEC S3, S4.2).

    Args:
        temperatures: ``[B]`` float tensor, values ``>= 0``.

    Returns:
        ``[B]`` float32, ``max(T, 1e-5)``.

    Raises:
        TypeError: not a float tensor.
        ValueError: not 1-D, a NaN or infinite value, or a negative value.

    Example:
        >>> clamp_temperature(torch.tensor([0.0, 0.7]))
        tensor([1.0000e-05, 7.0000e-01])
    """
    _check_temperatures(temperatures)
    return temperatures.to(torch.float32).clamp(min=TEMPERATURE_FLOOR)


def _check_greedy_rows(temperatures, top_k, rule) -> None:
    check_choice("rule", rule, GREEDY_RULES)
    _check_temperatures(temperatures)
    if rule == "top_k":
        if top_k is None:
            raise ValueError("top_k: expected a [B] int tensor for rule='top_k', got None")
        check_tensor("top_k", top_k, shape=(temperatures.shape[0],), dtypes=INT_DTYPES)
        check_same_device(temperatures=temperatures, top_k=top_k)


def greedy_rows(
    *, temperatures: torch.Tensor, top_k: torch.Tensor | None = None, rule: str
) -> torch.Tensor:
    """Which rows decode greedily, under a declared convention (SPEC S3).

    Args:
        temperatures: ``[B]`` float tensor (unclamped request temperatures).
        top_k: ``[B]`` int tensor; required for ``rule="top_k"``, ignored otherwise.
        rule: ``"top_k"`` (SGLang draft sampler: ``top_k <= 1``) or ``"temperature"``
            (vLLM: ``temperature < 1e-5``).

    Returns:
        ``[B]`` bool greedy mask.

    Raises:
        TypeError: wrong dtype.
        ValueError: unknown ``rule``, ``top_k`` missing for ``rule="top_k"``, bad shapes,
            NaN or negative temperatures.

    Example:
        >>> greedy_rows(temperatures=torch.tensor([0.0, 1.0]), rule="temperature")
        tensor([ True, False])
    """
    _check_greedy_rows(temperatures, top_k, rule)
    if rule == "top_k":
        return top_k <= 1
    return temperatures < TEMPERATURE_FLOOR


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """Greedy token per row, lowest index among tied maxima (SPEC S3).

    ``torch.argmax`` does not document its tie rule on every device, so ties are resolved
    explicitly: the row maximum, then the first index equal to it.

    Args:
        logits: ``[B, V]`` float tensor (any float dtype; compared exactly).

    Returns:
        ``[B]`` int64 token ids.

    Raises:
        TypeError: not a float tensor.
        ValueError: not 2-D, empty vocabulary, NaN or +inf, or a row that is all -inf.

    Example:
        >>> greedy_argmax(torch.tensor([[1.0, 3.0, 3.0]]))
        tensor([1])
    """
    _check_logits("logits", logits)
    return _first_argmax(logits)


def _check_exponential_noise(shape, generator, device) -> tuple[tuple[int, ...], torch.device]:
    """Validate ``exponential_noise`` arguments; returns the sizes and the output device."""
    sizes = tuple(check_int(f"shape[{i}]", size, minimum=0) for i, size in enumerate(shape))
    if generator is None:
        return sizes, torch.device("cpu" if device is None else device)
    device = generator.device if device is None else torch.device(device)
    if device.type != generator.device.type:
        raise ValueError(f"generator: expected a generator on {device.type}, got one on {generator.device}")
    return sizes, device


def exponential_noise(
    shape: Sequence[int],
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Fresh iid Exp(1) noise for the exponential race (SPEC S3).

    Args:
        shape: output shape, typically ``(B, V)``.
        generator: optional ``torch.Generator`` on ``device``.
        device: output device (default: the generator's device, else CPU).

    Returns:
        float32 tensor of ``shape``.

    Raises:
        TypeError: ``shape`` holds a non-int.
        ValueError: a negative size, or ``generator`` on another device type.

    Example:
        >>> exponential_noise((2, 3), generator=torch.Generator().manual_seed(0)).shape
        torch.Size([2, 3])
    """
    sizes, device = _check_exponential_noise(shape, generator, device)
    return torch.empty(sizes, dtype=torch.float32, device=device).exponential_(generator=generator)


def _race_keys(logits: torch.Tensor, temperatures: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Race keys ``softmax(L / T)_v / E_v`` in float32; zero-probability tokens get -1."""
    steps = RaceSteps()
    return steps.keys(torch.softmax(steps.scaled(logits, temperatures), dim=-1), noise)


def _check_race(logits, temperatures, noise) -> None:
    _check_logits("logits", logits)
    _check_temperatures(temperatures, logits.shape[0])
    _check_noise(noise, logits.shape)
    check_same_device(logits=logits, temperatures=temperatures, noise=noise)


def exponential_race(
    logits: torch.Tensor, temperatures: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """Exponential race ``x = argmax_v softmax(L / T)_v / E_v`` (SPEC S3).

    Computed in float32 on probabilities (see the module note for why this equals
    Gumbel-max ``argmax_v (L_v / T + G_v)``, ``G = -log E``). Temperatures are clamped to
    ``TEMPERATURE_FLOOR``. Zero-probability tokens (logit ``-inf``, or ``p`` underflowing
    to 0) never win, even where ``E == 0``. Ties go to the lowest index.

    Args:
        logits: ``[B, V]`` float tensor (computed in float32).
        temperatures: ``[B]`` float tensor, values ``>= 0``.
        noise: ``[B, V]`` float32 iid Exp(1), e.g. from ``exponential_noise``.

    Returns:
        ``[B]`` int64 token ids.

    Raises:
        TypeError: wrong dtype.
        ValueError: wrong rank or shape, devices differ, NaN/+inf logits or an all -inf
            row, NaN or negative temperatures, NaN/inf or negative noise.

    Example:
        >>> exponential_race(torch.tensor([[0.0, 5.0]]), torch.ones(1), torch.ones(1, 2))
        tensor([1])
    """
    _check_race(logits, temperatures, noise)
    return _first_argmax(_race_keys(logits, temperatures, noise))


def _check_truncation(top_k, top_p, min_p, rows: int, device: torch.device) -> None:
    if top_k is not None:
        check_tensor("top_k", top_k, shape=(rows,), dtypes=INT_DTYPES)
    for name, value, low_open in (("top_p", top_p, True), ("min_p", min_p, False)):
        if value is None:
            continue
        check_tensor(name, value, shape=(rows,), dtypes=FLOAT_DTYPES)
        if _values_checkable(value):
            check_finite(name, value)
            bad = ((value <= 0) if low_open else (value < 0)) | (value > 1)
            if bool(bad.any()):
                i = int(bad.nonzero()[0])
                interval = "(0, 1]" if low_open else "[0, 1]"
                raise ValueError(f"{name}: expected values in {interval}, got {value[i].item()} at index {i}")
    for name, value in (("top_k", top_k), ("top_p", top_p), ("min_p", min_p)):
        if value is not None and value.device != device:
            raise ValueError(f"{name}: expected device {device} (same as logits), got {value.device}")


def _check_sample_step(
    logits, temperatures, greedy_mask, noise, generator, vocab_size, top_k, top_p, min_p, top_k_ties, steps
) -> int:
    """Validate ``sample_step`` arguments; returns the effective vocabulary size."""
    check_tensor("logits", logits, ndim=2, dtypes=FLOAT_DTYPES)
    rows, width = logits.shape
    if vocab_size is None:
        vocab_size = width
    check_int("vocab_size", vocab_size, minimum=1, maximum=width)
    _check_logits("logits", logits[:, :vocab_size])
    _check_temperatures(temperatures, rows)
    check_tensor("greedy_mask", greedy_mask, shape=(rows,), dtypes=(torch.bool,))
    if noise is not None:
        if generator is not None:
            raise ValueError("generator: expected None when noise is given (noise is used as is)")
        check_tensor("noise", noise, ndim=2, dtypes=(torch.float32,))
        if noise.shape not in ((rows, width), (rows, vocab_size)):
            raise ValueError(
                f"noise: expected shape ({rows}, {width}) or ({rows}, {vocab_size}), got {tuple(noise.shape)}"
            )
        _check_noise(noise[:, :vocab_size], (rows, vocab_size))
    check_same_device(logits=logits, temperatures=temperatures, greedy_mask=greedy_mask, noise=noise)
    _check_truncation(top_k, top_p, min_p, rows, logits.device)
    _check_ties(top_k_ties)
    if steps is not None and not isinstance(steps, RaceSteps):
        raise TypeError(f"steps: expected a RaceSteps or None, got {type(steps).__name__}")
    return vocab_size


def _check_ties(ties: object) -> None:
    check_choice("top_k_ties", ties, TOP_K_TIE_RULES)


def truncate_logits(
    scaled: torch.Tensor,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
    *,
    top_k_ties: str = "all",
) -> torch.Tensor:
    """Mask tokens outside the top-k / top-p / min-p sets of ``softmax(scaled)`` to -inf
    (SPEC S3 truncation).

    ``scaled`` is the tempered logits ``L / T``: the top-p and min-p sets are taken on the
    tempered law, so they depend on ``T`` (the top-k set does not). Order: top-k, then
    top-p on the renormalised top-k law, then min-p (relative to the largest probability,
    hence unaffected by renormalisation). Ties: at the top-k cut, ``top_k_ties="all"``
    keeps every token tied with the k-th value, ``"lowest"`` keeps exactly ``k`` tokens,
    the lowest indices among the tied ones; at the top-p and min-p cuts ties are always
    kept, so those sets never depend on sort order.

    Args:
        scaled: ``[B, V]`` float32 or float64 tempered logits (``-inf`` allowed).
        top_k: optional ``[B]`` int; ``<= 0`` or ``>= V`` means no top-k cut.
        top_p: optional ``[B]`` float in ``(0, 1]``; 1 keeps all.
        min_p: optional ``[B]`` float in ``[0, 1]``; 0 keeps all.
        top_k_ties: ``"all"`` or ``"lowest"`` (:data:`TOP_K_TIE_RULES`).

    Returns:
        ``[B, V]`` tensor of ``scaled``'s dtype, ``-inf`` outside the kept set.

    Raises:
        TypeError / ValueError: wrong dtype, shape, device or values, naming the argument.

    Example:
        >>> truncate_logits(torch.tensor([[2.0, 1.0, 1.0, 0.0]]), top_k=torch.tensor([2]), top_k_ties="lowest")
        tensor([[2., 1., -inf, -inf]])
    """
    _check_truncate_logits(scaled, top_k, top_p, min_p, top_k_ties)
    out = _truncate(scaled, top_k, top_p, min_p, top_k_ties)
    return out.clone() if out is scaled else out  # never the caller's tensor itself


def _check_truncate_logits(scaled, top_k, top_p, min_p, top_k_ties) -> None:
    check_tensor("scaled", scaled, ndim=2, dtypes=(torch.float32, torch.float64))
    _check_truncation(top_k, top_p, min_p, scaled.shape[0], scaled.device)
    _check_ties(top_k_ties)


def _truncate(scaled: torch.Tensor, top_k, top_p, min_p, top_k_ties: str = "all") -> torch.Tensor:
    width = scaled.shape[-1]
    whole = not _values_checkable(scaled)  # under CUDA-graph capture: every row, no host read
    if top_k is not None:
        k = top_k.to(torch.int64).clamp(min=0)
        k = torch.where((k == 0) | (k >= width), width, k)  # top_k <= 0 or >= V: keep all
        scaled = _on_rows(whole or k < width, scaled, lambda rows, x: _top_k_cut(x, _take(k, rows), top_k_ties))
    if top_p is not None:
        active = whole or (top_p < 1) | ~_keeps_all_at_top_p_1(scaled)
        scaled = _on_rows(active, scaled, lambda rows, x: _top_p_cut(x, _take(top_p, rows)))
    if min_p is not None:
        scaled = _on_rows(whole or min_p > 0, scaled, lambda rows, x: _min_p_cut(x, _take(min_p, rows)))
    return scaled


def _take(values: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    return values if rows is None else values[rows]


def _on_rows(active, scaled: torch.Tensor, cut) -> torch.Tensor:
    """``scaled`` with ``cut(rows, scaled[rows])`` written into the rows where ``active``
    (``[B]`` bool, or True for every row; ``rows`` None then), the other rows unchanged.

    A cut is row by row, so a row's result does not depend on the other rows in the call:
    a row whose parameters keep every token (``top_k`` 0, ``min_p`` 0, ``top_p`` 1 with no
    probability near the rounding of a cumulative sum; see :func:`_keeps_all_at_top_p_1`)
    is left out without changing any bit of the result, and the cut's sorts and softmaxes
    run on the rows that can lose a token only.
    """
    if active is True or bool(active.all()):
        return cut(None, scaled)
    if not bool(active.any()):
        return scaled
    rows = active.nonzero()[:, 0]
    out = scaled.clone()
    out[rows] = cut(rows, scaled[rows])
    return out


def _keeps_all_at_top_p_1(scaled: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: rows whose top-p cut at ``top_p = 1`` provably keeps every token.

    At ``top_p = 1`` the cut keeps a token iff the rounded mass before it is below 1: a
    token whose probability is within the cumulative sum's rounding error of 0 can be cut
    (float32 rows spanning ~17 in tempered logits do). Every finite logit within ``R`` of
    the row maximum has probability at least ``exp(-R) / V``; the mass before any token is
    then below 1 by more than ``16 V eps`` (``eps`` the dtype's epsilon), several times
    the rounding error of the softmax and the cumulative sum (about ``(2V + 4) eps``), so
    no token is cut. A row with a ``-inf`` logit (or a wider span) is not claimed.
    """
    width = scaled.shape[-1]
    limit = -math.log(16 * width * width * torch.finfo(scaled.dtype).eps)
    if float(scaled.max() - scaled.min()) < limit:  # every row within the limit: one cheap reduction
        return torch.ones_like(scaled[:, 0], dtype=torch.bool)
    return scaled.amax(dim=-1) - scaled.amin(dim=-1) < limit


def _top_k_cut(scaled: torch.Tensor, k: torch.Tensor, top_k_ties: str) -> torch.Tensor:
    width = scaled.shape[-1]
    order = scaled.sort(dim=-1, descending=True, stable=True)
    if top_k_ties == "all":
        kth = order.values.gather(-1, (k - 1)[:, None])
        return scaled.masked_fill(scaled < kth, -math.inf)
    # a stable sort lists tied values by index, so the first k are the lowest ids
    ranks = torch.empty_like(order.indices).scatter_(
        -1, order.indices, torch.arange(width, device=scaled.device).expand_as(order.indices))
    return scaled.masked_fill(ranks >= k[:, None], -math.inf)


def _top_p_cut(scaled: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(scaled, dim=-1)
    sorted_probs = probs.sort(dim=-1, descending=True).values
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    # The last token needed to reach mass top_p is the last one whose prior mass < top_p.
    needed = (mass_before < top_p.to(scaled.dtype)[:, None]).sum(dim=-1, keepdim=True)
    cut = sorted_probs.gather(-1, needed - 1)
    return scaled.masked_fill(probs < cut, -math.inf)


def _min_p_cut(scaled: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(scaled, dim=-1)
    floor = min_p.to(scaled.dtype)[:, None] * probs.max(dim=-1, keepdim=True).values
    return scaled.masked_fill(probs < floor, -math.inf)


@dataclasses.dataclass(frozen=True)
class Truncation:
    """A request's truncation (SPEC S3, S5): the sets of :func:`truncate_logits`, taken on
    the tempered law.

    Attributes: ``top_k`` ``[B]`` int, ``top_p`` ``[B]`` float in ``(0, 1]``, ``min_p``
    ``[B]`` float in ``[0, 1]`` (each optional, on the logits' device; neutral values as in
    :func:`truncate_logits`); ``top_k_ties``: ``"all"`` or ``"lowest"``.

    Example:
        >>> Truncation(top_k=torch.tensor([1])).apply(torch.tensor([[0.0, 2.0]]), torch.tensor([0.5]))
        tensor([[-inf, 4.]])
    """

    top_k: torch.Tensor | None = None
    top_p: torch.Tensor | None = None
    min_p: torch.Tensor | None = None
    top_k_ties: str = "all"

    def apply(self, logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
        """Tempered, truncated logits: ``L / T`` with every position of row ``b`` cut by
        row ``b``'s parameters, ``-inf`` outside the kept set.

        Args:
            logits: ``[B, V]`` or ``[B, n, V]`` float32 / float64.
            temperatures: ``[B]`` float, already clamped (``clamp_temperature``).
        Returns:
            a tensor of ``logits``' shape and dtype.
        Raises:
            TypeError / ValueError: as :func:`truncate_logits`, naming the argument.
        """
        rows, vocab = logits.shape[0], logits.shape[-1]
        steps = logits.shape[1] if logits.dim() == 3 else 1
        scaled = logits / temperatures.to(logits.dtype).reshape((rows,) + (1,) * (logits.dim() - 1))
        per_position = [None if t is None else t.repeat_interleave(steps) for t in (self.top_k, self.top_p, self.min_p)]
        flat = scaled.reshape(rows * steps, vocab)
        _check_truncate_logits(flat, *per_position, self.top_k_ties)
        return _truncate(flat, *per_position, self.top_k_ties).reshape(logits.shape)


def laws_by_rows(law_of: Callable[[torch.Tensor, torch.Tensor, Truncation | None], torch.Tensor],
                 logits: torch.Tensor, temperatures: torch.Tensor, truncation: Truncation | None) -> torch.Tensor:
    """``law_of(logits, temperatures, truncation)`` for a ``law_of`` that works row by row
    (``logits [B, ...]``, ``temperatures [B]``), computed once per group of bit-identical rows
    (:func:`dspark_ref._rows.rowwise`) when the sets are this module's own (``truncation`` a
    :class:`Truncation` itself, or None); a subclass's sets are taken on the whole batch."""
    if truncation is not None and type(truncation) is not Truncation:
        return law_of(logits, temperatures, truncation)
    cut = (None, None, None) if truncation is None else (truncation.top_k, truncation.top_p, truncation.min_p)

    def on_rows(rows, temps, top_k, top_p, min_p):
        return law_of(rows, temps, None if truncation is None else
                      dataclasses.replace(truncation, top_k=top_k, top_p=top_p, min_p=min_p))

    return rowwise(on_rows, logits, temperatures, *cut)


class RaceSteps:
    """The steps of :func:`sample_step` after validation and truncation, one overridable
    method each (SPEC S3).

    An instance of this class is the SPEC step; a subclass that overrides one method
    changes that step alone (cropping, noise and truncation stay those of ``sample_step``).
    Shapes: ``B`` rows, ``V`` (cropped) vocabulary; float32 throughout.

    Example:
        >>> class GumbelSignFlipped(RaceSteps):  # key p * E instead of p / E
        ...     def keys(self, probs, noise):
        ...         return torch.where(probs > 0, probs * noise, -1.0)
    """

    def scaled(self, logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
        """``L / T`` ``[B, V]`` float32, ``T`` (``temperatures [B]``) clamped to
        ``TEMPERATURE_FLOOR``."""
        temps = temperatures.to(torch.float32).clamp(min=TEMPERATURE_FLOOR)
        return logits.to(torch.float32) / temps[:, None]

    def keys(self, probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Race keys ``[B, V]``: ``p_v / E_v``; zero-probability tokens get -1, so they
        never win (``probs``: ``softmax`` of the scaled, truncated logits)."""
        return torch.where(probs > 0, probs / noise, _ZERO_PROBABILITY_KEY)

    def greedy_tokens(self, logits: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """``[B]`` int64 tokens of greedy rows: the argmax of the (cropped) ``logits``,
        lowest index among ties (``probs``, the tempered law, is not read by the SPEC
        step)."""
        return _first_argmax(logits)


def sample_step(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    *,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    vocab_size: int | None = None,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
    top_k_ties: str = "all",
    steps: RaceSteps | None = None,
) -> torch.Tensor:
    """Sample one token per row: greedy argmax or exponential race (SPEC S3).

    Greedy rows take the argmax of their (cropped) logits, lowest index among ties.
    Sampling rows draw from ``softmax(L / T)``, ``T`` clamped to ``1e-5``, renormalised over
    the optional truncation sets (:func:`truncate_logits`: top-k, then top-p, then min-p),
    by the exponential race with ``noise`` if given, else with fresh noise drawn on every
    call (for all rows, so the generator advances the same way whatever the mask).

    Args:
        logits: ``[B, V_pad]`` float tensor; computed in float32.
        temperatures: ``[B]`` float tensor, values ``>= 0``.
        greedy_mask: ``[B]`` bool, True for greedy rows.
        noise: optional ``[B, V_pad]`` or ``[B, vocab_size]`` float32 Exp(1) draws.
        generator: optional ``torch.Generator`` for fresh noise (not with ``noise``).
        vocab_size: unpadded vocabulary; columns ``>= vocab_size`` are dropped, so every
            returned id is ``< vocab_size``. Default ``V_pad``.
        top_k: optional ``[B]`` int; ``<= 0`` or ``>= V`` means no top-k cut.
        top_p: optional ``[B]`` float in ``(0, 1]``; 1 keeps all.
        min_p: optional ``[B]`` float in ``[0, 1]``; 0 keeps all.
        top_k_ties: the top-k tie rule, ``"all"`` (default) or ``"lowest"``.
        steps: the race's steps, a :class:`RaceSteps` (default ``RaceSteps()``, the SPEC
            step); a subclass replaces one step.

    Returns:
        ``[B]`` int64 token ids in ``[0, vocab_size)``.

    Raises:
        TypeError: wrong dtype, a non-int ``vocab_size``, ``steps`` not a RaceSteps.
        ValueError: wrong rank or shape, devices differ, ``vocab_size`` outside
            ``[1, V_pad]``, NaN/+inf logits or a row with no finite logit below
            ``vocab_size``, bad temperatures, noise or truncation values, or both
            ``noise`` and ``generator`` given.

    Example:
        >>> logits = torch.tensor([[0.0, 2.0, 9.0], [1.0, 0.0, 0.0]])
        >>> sample_step(logits, torch.ones(2), torch.tensor([False, True]), vocab_size=2,
        ...             noise=torch.ones(2, 3))
        tensor([1, 0])
    """
    vocab_size = _check_sample_step(
        logits, temperatures, greedy_mask, noise, generator, vocab_size, top_k, top_p, min_p, top_k_ties, steps
    )
    steps = RaceSteps() if steps is None else steps
    logits = logits[:, :vocab_size]
    if noise is None:
        noise = exponential_noise(logits.shape, generator=generator, device=logits.device)
    noise = noise[:, :vocab_size]
    scaled = steps.scaled(logits, temperatures)
    probs = rowwise(lambda rows, *cut: torch.softmax(_truncate(rows, *cut, top_k_ties), dim=-1), scaled, top_k, top_p,
                    min_p)
    if greedy_mask.device.type == "cpu":  # a batch of one kind skips the other kind's step (no GPU sync)
        if not bool(greedy_mask.any()):
            return _first_argmax(steps.keys(probs, noise))
        if bool(greedy_mask.all()):
            return steps.greedy_tokens(logits, probs)
    keys = steps.keys(probs, noise)
    return torch.where(greedy_mask, steps.greedy_tokens(logits, probs), _first_argmax(keys))
