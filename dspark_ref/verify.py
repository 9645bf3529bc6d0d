"""Chain verification (SPEC S5): speculative sampling, greedy verify, cap/trim, seeded coins.

Per row, the target checks the draft block ``x_1..x_l`` left to right: draft ``x_j`` is
accepted iff ``u_j * q_j(x_j) < p_j(x_j)``; the first reject stops the chain and the row
emits a correction from the residual distribution ``normalize(max(p_j - q_j, 0))``; if all
drafts pass, it emits the bonus token from ``p_{l+1}``. ``p_j = softmax(target_j / T)`` and
``q_j = softmax(corrected_j / T)``, the draft law the tokens were actually drawn from.
Greedy rows use one-hot argmax laws for both, which reduces the rule to "accept while
``x_j == argmax p_j``, emit the argmax at the stop".

Randomness enters only through :class:`VerifyUniforms` (``accept[B, l]`` coins and one
``final[B]`` uniform for the inverse-CDF draw of the emitted token), so a result is a pure
function of its inputs and uniforms. Uniforms come from the caller, from a
``torch.Generator``, or from a counter hash of ``(seed, position, stream)``
(:func:`seeded_uniforms`), which repeats run to run.

Probabilities are computed in float64 whatever the logits dtype.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
import torch.nn.functional as F

from dspark_ref._checks import (
    FLOAT_DTYPES,
    INT_DTYPES,
    all_finite,
    check_finite,
    check_int,
    check_same_device,
    check_tensor,
    check_token_ids,
)
from dspark_ref.sampling import Truncation, clamp_temperature, greedy_argmax, laws_by_rows

__all__ = [
    "ACCEPT_STREAM",
    "FINAL_STREAM",
    "SENTINEL",
    "RESIDUAL_MASS_FLOOR",
    "VerifyUniforms",
    "VerifyResult",
    "ChainRule",
    "seeded_uniforms",
    "seeded_verify_uniforms",
    "target_distribution",
    "draft_distribution",
    "residual_distribution",
    "chain_verify",
    "greedy_verify",
]

ACCEPT_STREAM = 0
FINAL_STREAM = 1
#: Draft id a row with fewer drafts carries in its trailing slots (SPEC S5 degenerate values).
SENTINEL = -1

# Residual mass sum(max(p - q, 0)) at or below this counts as zero and the row falls back
# to p. The mass is the total-variation distance of two normalised laws, so the threshold
# is relative to a total of 1; float64 softmax rounding leaves ~1e-16, far below it, and a
# reject is itself this unlikely when the mass is this small.
RESIDUAL_MASS_FLOOR = 1e-12
# Handed-over draft laws may be rounded (a bf16 law's sum errs by up to ~2^-9); beyond this
# the argument is not a law at all.
DRAFT_PROBS_SUM_TOLERANCE = 1e-2

_MASK64 = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15


@dataclasses.dataclass(frozen=True)
class VerifyUniforms:
    """The uniforms one verify round consumes (SPEC S5).

    Attributes:
        accept: ``[B, l]`` float64 in ``[0, 1)``; ``accept[:, j]`` is the coin of draft ``j``.
        final: ``[B]`` float64 in ``[0, 1)``; drives the inverse-CDF draw of the emitted
            (correction or bonus) token.
    """

    accept: torch.Tensor
    final: torch.Tensor


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """Outcome of one verify round (SPEC S5).

    Attributes:
        accepted: ``[B]`` int64, drafts accepted after the cap.
        tokens: ``[B, l + 1]`` int64, the committed tokens: the accepted draft prefix, then
            the emitted correction/bonus token, then ``-1`` padding.
        tau: ``[B]`` int64 acceptance length ``accepted + 1`` (tokens committed this round).
        trimmed: ``[B]`` int64, drafts the uncapped chain accepted but the cap removed.
    """

    accepted: torch.Tensor
    tokens: torch.Tensor
    tau: torch.Tensor
    trimmed: torch.Tensor


# --------------------------------------------------------------------------- seeded uniforms
def _splitmix64_words(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser (Steele, Lea, Flood 2014), a bijective 64-bit mix, of every
    word of a uint64 array (numpy's uint64 arithmetic wraps modulo 2**64)."""
    z = z + np.uint64(_GOLDEN_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _hash_uniforms(seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """``H(seeds[b], positions[b, i], stream)`` of :func:`seeded_uniforms` for every pair,
    as whole-array operations: absorb seed, position and stream one splitmix64 mix each and
    keep the top 53 bits as a float64. ``seeds`` ``[B]`` int64, ``positions`` ``[B, n]`` int64
    ``>= 0``; returns ``[B, n]`` float64 on the CPU. An int64 read as uint64 is its value
    modulo 2**64 (two's complement)."""
    seed = np.ascontiguousarray(seeds.cpu().numpy()).view(np.uint64)
    position = np.ascontiguousarray(positions.cpu().numpy()).view(np.uint64).reshape(positions.shape)
    with np.errstate(over="ignore"):
        state = _splitmix64_words(seed.reshape(-1, 1))
        state = _splitmix64_words(state ^ position)
        state = _splitmix64_words(state ^ np.uint64(stream & _MASK64))
    return torch.from_numpy((state >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def _check_nonnegative_positions(positions: torch.Tensor) -> None:
    if bool((positions < 0).any()):
        idx = tuple(int(i) for i in (positions < 0).nonzero()[0])
        raise ValueError(f"positions: expected sequence positions >= 0, got {int(positions[idx])} at index {idx}")


def _check_seeded_uniforms(seeds, positions, stream) -> None:
    check_tensor("seeds", seeds, ndim=1, dtypes=(torch.int64,))
    check_tensor("positions", positions, shape=(seeds.shape[0], None), dtypes=(torch.int64,))
    check_same_device(seeds=seeds, positions=positions)
    _check_nonnegative_positions(positions)
    check_int("stream", stream, minimum=0)


def seeded_uniforms(seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """Counter-based uniforms ``u = H(seed, position, stream)`` (SPEC S5, seeded rows).

    ``H`` absorbs the seed, the position and the stream (each as a 64-bit word, negative
    seeds taken modulo 2**64) with one splitmix64 finaliser each, and maps the top 53 bits
    of the final state to ``[0, 1)``. The same triple always gives the same value, on
    every device and run; distinct triples give (pseudo-)independent values. Streams used
    by verification: ``ACCEPT_STREAM`` (0) for accept coins, ``FINAL_STREAM`` (1) for the
    emitted-token draw.

    Args:
        seeds: ``[B]`` int64 per-row seeds.
        positions: ``[B, n]`` int64 sequence positions, ``>= 0``.
        stream: int ``>= 0``.

    Returns:
        ``[B, n]`` float64 in ``[0, 1)`` on the device of ``seeds``.

    Raises:
        TypeError: wrong dtype, or ``stream`` not an int.
        ValueError: wrong rank or shape, devices differ, a negative position or stream.

    Example:
        >>> u = seeded_uniforms(torch.tensor([7]), torch.tensor([[0, 1]]), ACCEPT_STREAM)
        >>> bool(((u >= 0) & (u < 1)).all()), u.shape
        (True, torch.Size([1, 2]))
    """
    _check_seeded_uniforms(seeds, positions, stream)
    return _hash_uniforms(seeds, positions, stream).reshape(positions.shape).to(seeds.device)


def _check_seeded_verify_uniforms(seeds, positions, num_drafts) -> None:
    check_tensor("seeds", seeds, ndim=1, dtypes=(torch.int64,))
    check_tensor("positions", positions, shape=(seeds.shape[0],), dtypes=(torch.int64,))
    check_same_device(seeds=seeds, positions=positions)
    _check_nonnegative_positions(positions)
    check_int("num_drafts", num_drafts, minimum=0)


def seeded_verify_uniforms(seeds: torch.Tensor, positions: torch.Tensor, num_drafts: int) -> VerifyUniforms:
    """The uniforms of one verify round of seeded rows (SPEC S5).

    ``positions[b]`` is the sequence position of row ``b``'s first draft token. The coin of
    draft ``j`` (0-based) is ``H(seed, positions + j, ACCEPT_STREAM)``; the emitted-token
    uniform is ``H(seed, positions, FINAL_STREAM)``. A round commits at least one token, so
    the next round starts at a larger position and never reuses a consumed triple.

    Args:
        seeds: ``[B]`` int64.
        positions: ``[B]`` int64, ``>= 0``.
        num_drafts: ``l``, int ``>= 0``.

    Returns:
        :class:`VerifyUniforms` with ``accept [B, l]`` and ``final [B]`` float64.

    Raises:
        TypeError: wrong dtype or a non-int ``num_drafts``.
        ValueError: wrong shape, devices differ, a negative position or ``num_drafts``.

    Example:
        >>> coins = seeded_verify_uniforms(torch.tensor([1, 2]), torch.tensor([10, 4]), 3)
        >>> coins.accept.shape, coins.final.shape
        (torch.Size([2, 3]), torch.Size([2]))
    """
    _check_seeded_verify_uniforms(seeds, positions, num_drafts)
    offsets = torch.arange(num_drafts, dtype=torch.int64, device=positions.device)
    accept = seeded_uniforms(seeds, positions[:, None] + offsets, ACCEPT_STREAM)
    final = seeded_uniforms(seeds, positions[:, None], FINAL_STREAM)[:, 0]
    return VerifyUniforms(accept=accept, final=final)


# --------------------------------------------------------------------------- distributions
def _check_logits(name: str, logits: object, rows: int | None = None, steps: int | None = None) -> None:
    """``[B, n, V]`` float logits, no NaN/+inf, at least one finite logit per position."""
    check_tensor(name, logits, shape=(rows, steps, None), dtypes=FLOAT_DTYPES)
    if logits.shape[2] == 0:
        raise ValueError(f"{name}: expected a non-empty vocabulary axis, got shape {tuple(logits.shape)}")
    if all_finite(logits):  # the common case: no dead position either (it needs -inf)
        return
    check_finite(name, logits, allow_neg_inf=True)
    dead = (logits == -math.inf).all(dim=-1)
    if bool(dead.any()):
        idx = tuple(int(i) for i in dead.nonzero()[0])
        raise ValueError(f"{name}: expected at least one finite logit per position, position {idx} is all -inf")


def _check_distribution(name, logits, temperatures, greedy_mask) -> torch.Tensor:
    """Validate a logits/temperatures/mask triple; returns the clamped temperatures."""
    _check_logits(name, logits)
    rows = logits.shape[0]
    check_tensor("temperatures", temperatures, shape=(rows,), dtypes=FLOAT_DTYPES)
    check_tensor("greedy_mask", greedy_mask, shape=(rows,), dtypes=(torch.bool,))
    check_same_device(**{name: logits}, temperatures=temperatures, greedy_mask=greedy_mask)
    return clamp_temperature(temperatures)


def _step_laws(logits: torch.Tensor, temperatures: torch.Tensor, greedy_mask: torch.Tensor,
               truncation: Truncation | None = None) -> torch.Tensor:
    """float64 ``softmax(L / T)`` per position (truncated when ``truncation`` is given);
    one-hot lowest-index argmax on greedy rows."""
    def tempered(logits: torch.Tensor, temperatures: torch.Tensor, truncation: Truncation | None) -> torch.Tensor:
        logits64, temps64 = logits.to(torch.float64), temperatures.to(torch.float64)
        if truncation is None:
            scaled = logits64 / temps64[:, None, None]
        else:
            scaled = truncation.apply(logits64, temps64)
        return torch.softmax(scaled, dim=-1)

    laws = laws_by_rows(tempered, logits, temperatures, truncation)
    if bool(greedy_mask.any()):
        greedy = logits[greedy_mask]
        rows, steps, vocab = greedy.shape
        argmax = greedy_argmax(greedy.reshape(rows * steps, vocab)).reshape(rows, steps)
        laws[greedy_mask] = F.one_hot(argmax, vocab).to(torch.float64)
    return laws


def target_distribution(
    target_logits: torch.Tensor, temperatures: torch.Tensor, greedy_mask: torch.Tensor
) -> torch.Tensor:
    """Target laws ``p_j = softmax(target_j / T)`` at the verify positions (SPEC S5).

    ``T`` is clamped to ``1e-5`` (``sampling.clamp_temperature``); greedy rows get the
    one-hot law of the lowest-index argmax instead.

    Args:
        target_logits: ``[B, n, V]`` float tensor (any float dtype; ``-inf`` allowed).
        temperatures: ``[B]`` float, ``>= 0``.
        greedy_mask: ``[B]`` bool, True for greedy rows.

    Returns:
        ``[B, n, V]`` float64 probabilities.

    Raises:
        TypeError: wrong dtype.
        ValueError: wrong rank or shape, devices differ, NaN/+inf logits or an all -inf
            position, NaN or negative temperatures.

    Example:
        >>> target_distribution(torch.zeros(1, 1, 2), torch.ones(1), torch.tensor([False]))
        tensor([[[0.5000, 0.5000]]], dtype=torch.float64)
    """
    temps = _check_distribution("target_logits", target_logits, temperatures, greedy_mask)
    return _step_laws(target_logits, temps, greedy_mask)


def draft_distribution(
    draft_logits: torch.Tensor, temperatures: torch.Tensor, greedy_mask: torch.Tensor
) -> torch.Tensor:
    """Draft laws ``q_j = softmax(corrected_j / T)`` the drafts were drawn from (SPEC S5).

    Pass the corrected (Markov) logits of the same block pass that drew the tokens, not
    the base logits. Same temperature clamp and greedy one-hot rule as
    :func:`target_distribution`.

    Args:
        draft_logits: ``[B, l, V]`` float corrected logits.
        temperatures: ``[B]`` float, ``>= 0``.
        greedy_mask: ``[B]`` bool.

    Returns:
        ``[B, l, V]`` float64 probabilities.

    Raises:
        TypeError: wrong dtype.
        ValueError: as :func:`target_distribution`.

    Example:
        >>> draft_distribution(torch.tensor([[[0.0, 1.0]]]), torch.ones(1), torch.tensor([True]))
        tensor([[[0., 1.]]], dtype=torch.float64)
    """
    temps = _check_distribution("draft_logits", draft_logits, temperatures, greedy_mask)
    return _step_laws(draft_logits, temps, greedy_mask)


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    excess = (p - q).clamp(min=0)
    mass = excess.sum(dim=-1, keepdim=True)
    return torch.where(mass <= RESIDUAL_MASS_FLOOR, p, excess / mass.clamp(min=RESIDUAL_MASS_FLOOR))


def _check_residual(p, q) -> None:
    check_tensor("p", p, dtypes=FLOAT_DTYPES)
    check_tensor("q", q, shape=tuple(p.shape), dtypes=(p.dtype,))
    check_same_device(p=p, q=q)
    if p.dim() == 0 or p.shape[-1] == 0:
        raise ValueError(f"p: expected a non-empty last (vocabulary) axis, got shape {tuple(p.shape)}")
    for name, law in (("p", p), ("q", q)):
        check_finite(name, law)
        if bool((law < 0).any()):
            idx = tuple(int(i) for i in (law < 0).nonzero()[0])
            raise ValueError(f"{name}: expected probabilities >= 0, got {law[idx].item()} at index {idx}")


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The correction law after a reject, ``normalize(max(p - q, 0))`` (SPEC S5).

    If the residual mass ``sum(max(p - q, 0))`` is ``<= RESIDUAL_MASS_FLOOR`` (1e-12; the
    laws are normalised, so this is relative to a total of 1), the law is ``p`` itself.

    Args:
        p: ``[..., V]`` float target probabilities (normalised over the last axis).
        q: ``[..., V]`` draft probabilities, same shape and dtype.

    Returns:
        ``[..., V]`` probabilities in the dtype of ``p``.

    Raises:
        TypeError: not float tensors, or dtypes differ.
        ValueError: shapes or devices differ, empty last axis, NaN/inf or negative entries.

    Example:
        >>> residual_distribution(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.5, 0.3]))
        tensor([1., 0., 0.])
    """
    _check_residual(p, q)
    return _residual(p, q)


# --------------------------------------------------------------------------- verification
def _inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Token per row of ``probs [B, V]`` at ``uniforms [B]`` by inverse CDF, in float64.

    Picks the first token whose cumulative mass exceeds ``u``, so a zero-probability token
    (whose cumulative mass equals its predecessor's) is never picked. If ``u`` reaches the
    rounded total, the last positive-probability token is taken.
    """
    cdf = probs.to(torch.float64).cumsum(dim=-1)
    picked = torch.searchsorted(cdf, uniforms.to(torch.float64)[:, None].contiguous(), right=True)[:, 0]
    vocab = probs.shape[-1]
    last_positive = vocab - 1 - (probs > 0).flip(-1).to(torch.int64).argmax(dim=-1)
    return torch.minimum(picked, last_positive)


def _real_drafts(draft_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [B, l] int64 with every SENTINEL replaced by 0, real [B, l] bool)``: the ids
    are safe to index with; ``real`` marks the drafts before a row's trailing sentinels."""
    drafts = draft_tokens.to(torch.int64)
    real = drafts != SENTINEL
    return drafts.clamp(min=0), real


def _leading_true(flags: torch.Tensor) -> torch.Tensor:
    """Length of the all-True prefix of each row of ``flags [B, l]`` (int64 ``[B]``)."""
    return flags.to(torch.int64).cumprod(dim=1).sum(dim=1)


def _capped_lengths(cap, rows: int, num_drafts: int, device: torch.device) -> torch.Tensor:
    """Drafts each row may accept, ``min(l, max(c - 1, 0))``; ``l`` without a cap."""
    if cap is None:
        return torch.full((rows,), num_drafts, dtype=torch.int64, device=device)
    cap = torch.as_tensor(cap, device=device).to(torch.int64).expand(rows)
    return (cap - 1).clamp(min=0, max=num_drafts)


def _result(
    draft_tokens: torch.Tensor, raw: torch.Tensor, accepted: torch.Tensor, emitted: torch.Tensor
) -> VerifyResult:
    """Assemble committed tokens: accepted prefix, emitted token at ``accepted``, ``-1`` after."""
    rows, num_drafts = draft_tokens.shape
    slots = torch.arange(num_drafts + 1, device=draft_tokens.device)
    prefix = F.pad(draft_tokens.to(torch.int64), (0, 1), value=-1)
    tokens = torch.where(slots < accepted[:, None], prefix, -1)
    tokens = tokens.scatter(1, accepted[:, None], emitted[:, None])
    return VerifyResult(accepted=accepted, tokens=tokens, tau=accepted + 1, trimmed=raw - accepted)


def _check_draft_ids(draft_tokens: torch.Tensor, vocab: int) -> None:
    """Draft ids in ``[0, V)``, or trailing ``SENTINEL`` slots of a row with fewer drafts."""
    check_tensor("draft_tokens", draft_tokens, ndim=2, dtypes=INT_DTYPES)
    sentinel = draft_tokens == SENTINEL
    check_token_ids("draft_tokens", draft_tokens.masked_fill(sentinel, 0), vocab)
    if bool((sentinel[:, :-1] & ~sentinel[:, 1:]).any()):
        row = int((sentinel[:, :-1] & ~sentinel[:, 1:]).any(dim=1).nonzero()[0])
        raise ValueError(f"draft_tokens: expected {SENTINEL} sentinels only after a row's real drafts, row {row} "
                         f"is {draft_tokens[row].tolist()}")


def _check_cap(cap, draft_tokens: torch.Tensor) -> None:
    if cap is None:
        return
    if isinstance(cap, torch.Tensor):
        check_tensor("cap", cap, shape=(draft_tokens.shape[0],), dtypes=INT_DTYPES)
        check_same_device(draft_tokens=draft_tokens, cap=cap)
        if bool((cap < 0).any()):
            i = int((cap < 0).nonzero()[0])
            raise ValueError(f"cap: expected verify-length caps >= 0, got {int(cap[i])} at index {i}")
    else:
        check_int("cap", cap, minimum=0)


def _check_uniforms(uniforms, draft_tokens: torch.Tensor) -> None:
    if not isinstance(uniforms, VerifyUniforms):
        raise TypeError(f"uniforms: expected a VerifyUniforms, got {type(uniforms).__name__}")
    for name, value, shape in (
        ("uniforms.accept", uniforms.accept, tuple(draft_tokens.shape)),
        ("uniforms.final", uniforms.final, (draft_tokens.shape[0],)),
    ):
        check_tensor(name, value, shape=shape, dtypes=(torch.float64,))
        check_same_device(draft_tokens=draft_tokens, **{name: value})
        bad = torch.isnan(value) | (value < 0) | (value >= 1)
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(f"{name}: expected values in [0, 1), got {value[idx].item()} at index {idx}")


def _check_uniform_source(uniforms, generator, seeds, positions, draft_tokens: torch.Tensor) -> None:
    given = [name for name, v in (("uniforms", uniforms), ("generator", generator), ("seeds", seeds)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"{given[1]}: expected at most one uniform source, got {' and '.join(given)}")
    if (seeds is None) != (positions is None):
        missing = "positions" if positions is None else "seeds"
        raise ValueError(f"{missing}: expected seeds and positions together, got only one of them")
    if uniforms is not None:
        _check_uniforms(uniforms, draft_tokens)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator, got {type(generator).__name__}")
    if seeds is not None:
        check_tensor("seeds", seeds, shape=(draft_tokens.shape[0],), dtypes=(torch.int64,))
        _check_seeded_verify_uniforms(seeds, positions, draft_tokens.shape[1])
        check_same_device(draft_tokens=draft_tokens, seeds=seeds, positions=positions)


class ChainRule:
    """The steps of the chain rule in :func:`chain_verify`, one overridable method each
    (SPEC S5).

    An instance of this class is the SPEC rule; a subclass that overrides one method
    changes that step alone (validation, the uniforms and the result layout stay those of
    ``chain_verify``). Shapes: ``B`` rows, ``l`` drafts, ``V`` vocabulary; laws are float64.

    Example:
        >>> class ResampleFromTarget(ChainRule):  # the classic mistake: correction from p
        ...     def residual(self, p, q, rejected_token):
        ...         return p
    """

    def draft_law(
        self, draft_logits: torch.Tensor, temps: torch.Tensor, greedy_mask: torch.Tensor,
        truncation: Truncation | None = None,
    ) -> torch.Tensor:
        """q ``[B, l, V]``: ``softmax(draft_logits / T)`` (``temps [B]`` already clamped),
        truncated like the target when ``truncation`` is given (the drafter drew with the
        request's truncation), one-hot argmax for greedy rows."""
        return _step_laws(draft_logits, temps, greedy_mask, truncation)

    def accepts(self, coins: torch.Tensor, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
        """``[B, l]`` bool: draft ``j`` passes iff ``u_j * q_j(x_j) < p_j(x_j)`` (``coins``,
        ``p_x``, ``q_x``: ``[B, l]`` float64), a ``q`` rounded above 1 read as 1 (SPEC S5
        degenerate values; a ``q_j(x_j) = 0`` draft passes iff ``p_j(x_j) > 0``)."""
        return coins * q_x.clamp(max=1.0) < p_x

    def accept_limit(self, cap: int | torch.Tensor | None, rows: int, num_drafts: int,
                     device: torch.device) -> torch.Tensor:
        """``[B]`` int64 drafts each row may accept: ``min(l, max(c - 1, 0))``, ``l``
        without a cap."""
        return _capped_lengths(cap, rows, num_drafts, device)

    def residual(self, p: torch.Tensor, q: torch.Tensor, rejected_token: torch.Tensor) -> torch.Tensor:
        """The correction law ``[B, V]`` after a reject: ``normalize(max(p - q, 0))``, ``p``
        if that mass is ~0 (:func:`residual_distribution`); ``p``, ``q``: ``[B, V]`` at the
        stop, ``rejected_token [B]`` int64 the draft rejected there (not read by the SPEC
        rule)."""
        return _residual(p, q)

    def bonus_position(self, accepted: torch.Tensor) -> torch.Tensor:
        """``[B]`` int64 verify position whose ``p`` draws the bonus after ``accepted``
        drafts all passed: ``accepted`` (``p_{accepted + 1}`` in 1-based SPEC terms)."""
        return accepted

    def draw(self, law: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """``[B]`` int64 emitted token of each row of ``law [B, V]`` (float64) at
        ``uniforms [B]`` (float64 in ``[0, 1)``) by inverse CDF: the first token whose
        cumulative mass exceeds ``u``, so a zero-probability token is never drawn, even for a
        ``u`` of 0 or on a CDF boundary; past the rounded total, the last token with mass
        (SPEC S5 degenerate values)."""
        return _inverse_cdf(law, uniforms)


def _handed_over_law(draft_probs: torch.Tensor, draft_tokens: torch.Tensor, greedy_mask: torch.Tensor) -> torch.Tensor:
    """float64 q from handed-over probabilities; one-hot at the draft on greedy rows (a
    greedy draft is its argmax, whatever the probabilities say)."""
    q = draft_probs.to(torch.float64)
    if not bool(greedy_mask.any()):
        return q
    one_hot = F.one_hot(draft_tokens.to(torch.int64), q.shape[-1]).to(torch.float64)
    return torch.where(greedy_mask[:, None, None], one_hot, q)


def _check_draft_source(draft_logits, draft_probs, rows: int, num_drafts: int, vocab: int) -> None:
    if (draft_logits is None) == (draft_probs is None):
        raise ValueError("draft_logits: expected exactly one of draft_logits and draft_probs, got "
                         f"{'both' if draft_probs is not None else 'neither'}")
    if draft_logits is not None:
        _check_logits("draft_logits", draft_logits, rows, num_drafts)
        if draft_logits.shape[2] != vocab:
            raise ValueError(
                f"draft_logits: expected vocabulary size {vocab} (as target_logits), got {draft_logits.shape[2]}"
            )
        return
    check_tensor("draft_probs", draft_probs, shape=(rows, num_drafts, vocab), dtypes=FLOAT_DTYPES)
    check_finite("draft_probs", draft_probs)
    sums = draft_probs.to(torch.float64).sum(dim=-1)
    bad = (sums - 1).abs() > DRAFT_PROBS_SUM_TOLERANCE
    if draft_probs.numel() and bool(draft_probs.min() < 0):  # one reduction first: a law is never negative
        bad |= (draft_probs < 0).any(dim=-1)
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"draft_probs: expected laws (entries >= 0 summing to 1) at every position, position "
                         f"{idx} sums to {float(sums[idx])!r}")


def _check_chain_verify(draft_tokens, target_logits, draft_logits, temperatures, greedy_mask,
                        uniforms, generator, seeds, positions, cap, rule, truncation, draft_probs) -> torch.Tensor:
    """Validate ``chain_verify`` arguments; returns the clamped temperatures."""
    check_tensor("draft_tokens", draft_tokens, ndim=2, dtypes=INT_DTYPES)
    rows, num_drafts = draft_tokens.shape
    _check_logits("target_logits", target_logits, rows, num_drafts + 1)
    vocab = target_logits.shape[2]
    _check_draft_source(draft_logits, draft_probs, rows, num_drafts, vocab)
    if truncation is not None and not isinstance(truncation, Truncation):
        raise TypeError(f"truncation: expected a Truncation or None, got {type(truncation).__name__}")
    _check_draft_ids(draft_tokens, vocab)
    check_tensor("greedy_mask", greedy_mask, shape=(rows,), dtypes=(torch.bool,))
    check_tensor("temperatures", temperatures, shape=(rows,), dtypes=FLOAT_DTYPES)
    check_same_device(
        draft_tokens=draft_tokens, target_logits=target_logits, draft_logits=draft_logits,
        draft_probs=draft_probs, temperatures=temperatures, greedy_mask=greedy_mask,
    )
    temps = clamp_temperature(temperatures)
    _check_uniform_source(uniforms, generator, seeds, positions, draft_tokens)
    _check_cap(cap, draft_tokens)
    if rule is not None and not isinstance(rule, ChainRule):
        raise TypeError(f"rule: expected a ChainRule or None, got {type(rule).__name__}")
    return temps


def chain_verify(
    draft_tokens: torch.Tensor,
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    *,
    uniforms: VerifyUniforms | None = None,
    generator: torch.Generator | None = None,
    seeds: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    cap: int | torch.Tensor | None = None,
    rule: ChainRule | None = None,
    truncation: Truncation | None = None,
    draft_probs: torch.Tensor | None = None,
) -> VerifyResult:
    """Chain speculative sampling, one verify round per row (SPEC S5).

    Sampling rows: ``p_j = softmax(target_j / T)``, ``q_j = softmax(draft_j / T)`` (``T``
    clamped to 1e-5); draft ``x_j`` is accepted iff ``u_j * q_j(x_j) < p_j(x_j)``, the chain
    stops at the first reject. A reject at ``j`` emits a draw from
    :func:`residual_distribution` ``(p_j, q_j)``; a full accept emits the bonus from
    ``p_{l+1}``. Greedy rows use one-hot argmax laws (lowest index among ties), i.e. accept
    while ``x_j == argmax p_j`` and emit the argmax where the chain stops; their uniforms
    are drawn but have no effect. The emitted token is the inverse-CDF draw at
    ``uniforms.final``.

    Cap ``c``: the row verifies only its first ``l_c = min(l, max(c - 1, 0))`` drafts with
    the same coins, so ``accepted = min(raw, l_c)`` where ``raw`` is the uncapped count,
    ``trimmed = raw - accepted``, and the emitted token is what the row emits at position
    ``accepted``: the residual draw if it rejected there, else the bonus from
    ``p_{accepted + 1}`` (for greedy rows, the argmax there).

    Truncation: with ``truncation``, ``p_j`` is the renormalised truncated tempered law
    (the sets taken on ``softmax(target_j / T)``) and ``q_j`` the same truncation of
    ``softmax(draft_j / T)``; ``draft_probs`` instead hands over ``q`` as it is, the law
    the drafts were drawn from (``draft_logits`` is then None).

    Sentinels: a row with fewer drafts than ``l`` fills its trailing slots with
    :data:`SENTINEL` (-1); it verifies only its real drafts, exactly as under a cap of their
    count + 1 (a full accept emits the bonus from the position after them), and a sentinel
    is never accepted, emitted or used as an index. A ``q`` rounded above 1 is read as 1.

    Uniforms, from exactly one source: ``uniforms``; ``seeds`` with ``positions`` (see
    :func:`seeded_verify_uniforms`); else fresh ``torch.rand`` draws from ``generator``
    (the default generator when ``None``).

    Args:
        draft_tokens: ``[B, l]`` int64 (or int32) draft block ``x_1..x_l``, ids in
            ``[0, V)``, trailing ``-1`` sentinels allowed.
        target_logits: ``[B, l + 1, V]`` float target logits at the verify positions.
        draft_logits: ``[B, l, V]`` float corrected logits that drew ``draft_tokens``, or
            None with ``draft_probs``.
        temperatures: ``[B]`` float, ``>= 0``.
        greedy_mask: ``[B]`` bool, True for greedy rows.
        uniforms: optional :class:`VerifyUniforms` (``accept [B, l]``, ``final [B]``
            float64 in ``[0, 1)``).
        generator: optional ``torch.Generator`` on the inputs' device.
        seeds: optional ``[B]`` int64 per-row seeds (needs ``positions``).
        positions: optional ``[B]`` int64 position of each row's first draft token.
        cap: optional verify-length cap, an int ``>= 0`` or a ``[B]`` int tensor.
        rule: the steps of the rule, a :class:`ChainRule` (default ``ChainRule()``, the
            SPEC rule); a subclass replaces one step.
        truncation: optional :class:`Truncation` of the request.
        draft_probs: optional ``[B, l, V]`` float q (rows summing to 1, ``>= 0``) that
            drew the drafts, instead of ``draft_logits``; greedy rows still use one-hot q.

    Returns:
        :class:`VerifyResult` (``accepted``, ``tokens [B, l + 1]``, ``tau``, ``trimmed``).

    Raises:
        TypeError: wrong tensor dtype, ``uniforms`` not a VerifyUniforms, ``generator``
            not a Generator, ``cap`` of a wrong type, ``rule`` not a ChainRule.
        ValueError: wrong rank or shape, devices differ, token id out of range (or a
            sentinel before a real draft), NaN/+inf logits or an all -inf position, NaN,
            negative or infinite temperatures, uniforms outside
            ``[0, 1)``, more than one uniform source, ``seeds`` without ``positions`` (or
            the reverse), a negative position or cap, both or neither of ``draft_logits``
            and ``draft_probs``, ``draft_probs`` not a law.

    Example:
        >>> logits = torch.log(torch.tensor([[[0.5, 0.3, 0.2], [0.2, 0.2, 0.6]]]))
        >>> coins = VerifyUniforms(torch.tensor([[0.9]], dtype=torch.float64),
        ...                        torch.tensor([0.1], dtype=torch.float64))
        >>> r = chain_verify(torch.tensor([[1]]), logits, torch.log(torch.tensor([[[0.2, 0.5, 0.3]]])),
        ...                  torch.ones(1), torch.tensor([False]), uniforms=coins)
        >>> r.accepted, r.tokens
        (tensor([0]), tensor([[ 0, -1]]))
    """
    temps = _check_chain_verify(draft_tokens, target_logits, draft_logits, temperatures, greedy_mask,
                                uniforms, generator, seeds, positions, cap, rule, truncation, draft_probs)
    rule = ChainRule() if rule is None else rule
    rows, num_drafts = draft_tokens.shape
    device = draft_tokens.device
    if seeds is not None:
        uniforms = seeded_verify_uniforms(seeds, positions, num_drafts)
    elif uniforms is None:
        uniforms = VerifyUniforms(
            accept=torch.rand(rows, num_drafts, dtype=torch.float64, generator=generator, device=device),
            final=torch.rand(rows, dtype=torch.float64, generator=generator, device=device),
        )
    drafts, real = _real_drafts(draft_tokens)
    p = _step_laws(target_logits, temps, greedy_mask, truncation)
    if draft_probs is None:
        q = rule.draft_law(draft_logits, temps, greedy_mask, truncation)
    else:
        q = _handed_over_law(draft_probs, drafts, greedy_mask)
    p_x = p[:, :num_drafts].gather(-1, drafts[..., None])[..., 0]
    q_x = q.gather(-1, drafts[..., None])[..., 0]
    raw = _leading_true(rule.accepts(uniforms.accept, p_x, q_x) & real)
    # A row verifies its real drafts only: the first sentinel acts as a cap of their count + 1.
    limit = torch.minimum(rule.accept_limit(cap, rows, num_drafts, device), _leading_true(real))
    accepted = torch.minimum(raw, limit)
    row_ids = torch.arange(rows, device=device)
    # A row never rejects at position l; there q_stop is a zero row that only keeps the index in range.
    q_stop = (torch.where((accepted < num_drafts)[:, None], q[row_ids, accepted.clamp(max=num_drafts - 1)], 0.0)
              if num_drafts else q.new_zeros(rows, q.shape[-1]))
    rejected_token = F.pad(drafts, (0, 1))[row_ids, accepted]
    residual = rule.residual(p[row_ids, accepted], q_stop, rejected_token)
    rejected = (raw < limit)[:, None]
    law = torch.where(rejected, residual, p[row_ids, rule.bonus_position(accepted)])
    return _result(draft_tokens, raw, accepted, rule.draw(law, uniforms.final))


def _check_greedy_verify(draft_tokens, target_logits, cap) -> None:
    check_tensor("draft_tokens", draft_tokens, ndim=2, dtypes=INT_DTYPES)
    rows, num_drafts = draft_tokens.shape
    _check_logits("target_logits", target_logits, rows, num_drafts + 1)
    _check_draft_ids(draft_tokens, target_logits.shape[2])
    check_same_device(draft_tokens=draft_tokens, target_logits=target_logits)
    _check_cap(cap, draft_tokens)


def greedy_verify(
    draft_tokens: torch.Tensor, target_logits: torch.Tensor, *, cap: int | torch.Tensor | None = None
) -> VerifyResult:
    """Greedy verification (SPEC S5): accept while ``x_j == argmax target_j``.

    The emitted token is the target argmax (lowest index among ties) at the first mismatch,
    or after the last draft. With a cap ``c`` at most ``max(c - 1, 0)`` drafts are accepted
    and the emitted token is the argmax at the capped position. Trailing ``-1`` sentinels
    as in :func:`chain_verify` (never accepted, emitted or used as an index).

    Args:
        draft_tokens: ``[B, l]`` int64 (or int32), trailing ``-1`` sentinels allowed.
        target_logits: ``[B, l + 1, V]`` float (``-inf`` allowed).
        cap: optional int ``>= 0`` or ``[B]`` int tensor.

    Returns:
        :class:`VerifyResult`.

    Raises:
        TypeError: wrong dtype or ``cap`` type.
        ValueError: wrong rank or shape, devices differ, token id out of range, NaN/+inf
            logits or an all -inf position, negative cap.

    Example:
        >>> logits = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]])
        >>> greedy_verify(torch.tensor([[1, 1]]), logits).tokens
        tensor([[ 1,  0, -1]])
    """
    _check_greedy_verify(draft_tokens, target_logits, cap)
    rows, num_drafts = draft_tokens.shape
    vocab = target_logits.shape[2]
    best = greedy_argmax(target_logits.reshape(rows * (num_drafts + 1), vocab)).reshape(rows, num_drafts + 1)
    drafts, real = _real_drafts(draft_tokens)
    raw = _leading_true((drafts == best[:, :num_drafts]) & real)
    accepted = torch.minimum(raw, _capped_lengths(cap, rows, num_drafts, draft_tokens.device))
    emitted = best.gather(1, accepted[:, None])[:, 0]
    return _result(draft_tokens, raw, accepted, emitted)
