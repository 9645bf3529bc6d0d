"""Simulated acceptance (SPEC S6): benchmark mode without a real target verdict.

Benchmarks of the drafting path replace verification by a drawn acceptance length
``tau in [1, max_len]``. ``match-expected`` draws between the two integers around the
configured value so the long-run mean equals the (clamped) value; ``multinomial`` rounds a
clamped Normal draw. :class:`SimulatedVerifyExecutor` is the verify step of that mode: it
draws a fresh length for every row on EVERY step (the historical bug drew once and cached
it, so 4.7 ran as a constant 4) and writes the ``tau - 1`` "correct" drafts into a reused
buffer. :func:`simulated_bonus` draws the token that follows a simulated run of ``a``
accepted drafts from the target row at position ``a``.
"""

from __future__ import annotations

import math
import threading

import torch

from dspark_ref._checks import (
    FLOAT_DTYPES,
    INT_DTYPES,
    check_choice,
    check_float,
    check_int,
    check_same_device,
    check_tensor,
)
from dspark_ref.sampling import TEMPERATURE_FLOOR, sample_step

__all__ = ["SIMULATED_METHODS", "sample_simulated_acc_len", "sample_simulated_acc_lens", "SimulatedVerifyExecutor",
           "BonusRule", "simulated_bonus"]

SIMULATED_METHODS = ("match-expected", "multinomial")


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")


def _check_simulated(value, method, max_len, generator) -> None:
    check_float("value", value)
    check_choice("method", method, SIMULATED_METHODS)
    check_int("max_len", max_len, minimum=1)
    _check_generator(generator)


#: A float64 scalar per thread that the single draws fill in place: ``uniform_`` and
#: ``normal_`` give it the value of ``torch.rand(())`` and ``torch.randn(())`` without making
#: a tensor a draw (the S6 law cases draw 110,000-250,000 lengths one at a time; issue 45).
_SCRATCH = threading.local()


def _scalar() -> torch.Tensor:
    """This thread's float64 scalar on the CPU (made on its first use, as a normal tensor
    even inside ``torch.inference_mode``: an inference tensor could not be written outside)."""
    scalar = getattr(_SCRATCH, "scalar", None)
    if scalar is None:
        with torch.inference_mode(False):
            scalar = _SCRATCH.scalar = torch.empty((), dtype=torch.float64, device="cpu")
    return scalar


def _draw_acc_len(value: float, method: str, max_len: int, generator: torch.Generator | None) -> int:
    """One acceptance length; arguments already validated."""
    if method == "match-expected":
        clamped = min(max(value, 1.0), float(max_len))
        lower = math.floor(clamped)
        upper = lower + 1 if lower < max_len else lower
        coin = _scalar().uniform_(generator=generator).item()
        return upper if coin < clamped - lower else lower
    normal = value + _scalar().normal_(generator=generator).item()
    return int(round(min(max(normal, 1.0), float(max_len))))


#: torch's CPU ``normal_`` fills a float64 tensor of fewer than 16 values one value at a time,
#: by the scalar path (Box-Muller, the second value cached in the generator), and a larger one
#: 16 values at a time in another order; ``uniform_`` always goes one value at a time. Normals
#: drawn in chunks of this size are therefore those of as many scalar draws (pinned by
#: ``tests/test_simulated.py``).
_SERIAL_NORMALS = 15


def _draw_acc_lens_serially(value: float, method: str, max_len: int, rows: int,
                            generator: torch.Generator | None) -> torch.Tensor:
    """``[rows]`` int64 on the CPU: the lengths of ``rows`` successive :func:`_draw_acc_len`
    calls, drawn in a few tensor calls (the same values and the same generator state after);
    arguments already validated."""
    clamped = min(max(value, 1.0), float(max_len))
    if method == "match-expected":
        lower = math.floor(clamped)
        upper = lower + 1 if lower < max_len else lower
        coins = torch.rand(rows, dtype=torch.float64, generator=generator)
        return torch.where(coins < clamped - lower, upper, lower).to(torch.int64)
    normals = [torch.randn(min(_SERIAL_NORMALS, rows - start), dtype=torch.float64, generator=generator)
               for start in range(0, rows, _SERIAL_NORMALS)]
    normal = value + (torch.cat(normals) if normals else torch.empty(0, dtype=torch.float64))
    return normal.clamp(1.0, float(max_len)).round().to(torch.int64)


def sample_simulated_acc_len(
    value: float, method: str, max_len: int, *, generator: torch.Generator | None = None
) -> int:
    """Draw one simulated acceptance length ``tau in [1, max_len]`` (SPEC S6).

    ``match-expected``: clamp ``value`` into ``[1, max_len]``; ``lower = floor``, ``upper =
    lower + 1`` if ``lower < max_len`` else ``lower``; return ``upper`` with probability
    ``value - lower``, else ``lower``. The long-run mean is the clamped value.
    ``multinomial``: ``round(clamp(Normal(value, 1), 1, max_len))`` (half to even; the
    mean is not preserved).

    Args:
        value: target mean acceptance length, a finite real number.
        method: one of ``SIMULATED_METHODS``.
        max_len: int ``>= 1`` (``gamma + 1`` in the verify step).
        generator: optional CPU ``torch.Generator`` (default: the global generator).

    Returns:
        int in ``[1, max_len]``.

    Raises:
        TypeError: ``value`` not a real number, ``max_len`` not an int, ``generator`` not
            a Generator.
        ValueError: ``value`` NaN or infinite, ``max_len < 1``, or an unknown ``method``
            (the message lists the allowed values).

    Example:
        >>> sample_simulated_acc_len(4.7, "match-expected", 6,
        ...                          generator=torch.Generator().manual_seed(0)) in (4, 5)
        True
    """
    _check_simulated(value, method, max_len, generator)
    return _draw_acc_len(float(value), method, max_len, generator)


def sample_simulated_acc_lens(
    value: float, method: str, max_len: int, n: int, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Draw ``n`` independent simulated acceptance lengths at once (SPEC S6; the contract's
    ``SimulatedAcceptanceBatch``): each of the law of :func:`sample_simulated_acc_len`.

    ``match-expected``: ``upper`` where a float64 uniform is ``< value - lower``, else
    ``lower``; ``multinomial``: ``round(clamp(value + Normal(0, 1), 1, max_len))`` (half to
    even), one float64 draw per length.

    Args:
        value, method, max_len, generator: as for :func:`sample_simulated_acc_len`.
        n: how many lengths, an int ``>= 1``.

    Returns:
        ``[n]`` int64 on the CPU, in ``[1, max_len]``.

    Raises:
        TypeError / ValueError: as :func:`sample_simulated_acc_len`; ``n`` not an int ``>= 1``.

    Example:
        >>> sample_simulated_acc_lens(3.0, "match-expected", 6, 4).tolist()
        [3, 3, 3, 3]
    """
    _check_simulated(value, method, max_len, generator)
    check_int("n", n, minimum=1)
    clamped = min(max(float(value), 1.0), float(max_len))
    if method == "match-expected":
        lower = math.floor(clamped)
        upper = lower + 1 if lower < max_len else lower
        coins = torch.rand(n, dtype=torch.float64, generator=generator)
        return torch.where(coins < clamped - lower, upper, lower).to(torch.int64)
    normal = float(value) + torch.randn(n, dtype=torch.float64, generator=generator)
    return normal.clamp(1.0, float(max_len)).round().to(torch.int64)


class SimulatedVerifyExecutor:
    """The verify step of simulated-acceptance benchmarks (SPEC S6).

    Each :meth:`step` draws a fresh length ``tau`` per row with ``max_len = gamma + 1`` and
    writes the first ``tau - 1`` drafts of the row ("correct drafts") into :attr:`buffer`,
    ``-1`` after them. The buffer is reused across steps and rebuilt only when the batch
    outgrows its capacity or the dtype or device of the drafts changes
    (:attr:`rebuilds` counts the builds).

    Args:
        value: target mean acceptance length (finite).
        method: one of ``SIMULATED_METHODS``.
        gamma: draft block length, int ``>= 0``.
        generator: optional CPU ``torch.Generator`` for the draws.

    Raises:
        TypeError / ValueError: as :func:`sample_simulated_acc_len`; ``gamma`` not an int
            or negative.

    Example:
        >>> executor = SimulatedVerifyExecutor(4.7, "match-expected", 5,
        ...                                    generator=torch.Generator().manual_seed(0))
        >>> lengths = executor.step(torch.arange(10).reshape(2, 5))
        >>> lengths.dtype, bool(((lengths == 4) | (lengths == 5)).all())
        (torch.int64, True)
    """

    def __init__(
        self, value: float, method: str, gamma: int, *, generator: torch.Generator | None = None
    ) -> None:
        check_int("gamma", gamma, minimum=0)
        _check_simulated(value, method, gamma + 1, generator)
        self.value = float(value)
        self.method = method
        self.gamma = gamma
        self.generator = generator
        self.buffer: torch.Tensor | None = None
        self.rebuilds = 0
        self._rows = 0

    @property
    def correct_drafts(self) -> torch.Tensor | None:
        """``[B, gamma]`` view of :attr:`buffer` written by the last step (None before one)."""
        return None if self.buffer is None else self.buffer[: self._rows]

    def _check_step(self, draft_tokens) -> None:
        check_tensor("draft_tokens", draft_tokens, shape=(None, self.gamma), dtypes=INT_DTYPES)

    def _reserve(self, draft_tokens: torch.Tensor) -> torch.Tensor:
        """The first ``B`` buffer rows, rebuilding on a larger batch, new dtype or device."""
        rows = draft_tokens.shape[0]
        stale = (
            self.buffer is None
            or self.buffer.shape[0] < rows
            or self.buffer.dtype != draft_tokens.dtype
            or self.buffer.device != draft_tokens.device
        )
        if stale:
            self.buffer = torch.empty(rows, self.gamma, dtype=draft_tokens.dtype, device=draft_tokens.device)
            self.rebuilds += 1
        self._rows = rows
        return self.buffer[:rows]

    def draw_lengths(self, rows: int) -> torch.Tensor:
        """The acceptance lengths of one step: ``[rows]`` int64 on the CPU, one fresh
        :func:`sample_simulated_acc_len` draw per row with ``max_len = gamma + 1`` (SPEC
        S6). Called by :meth:`step` before the buffer is reserved; a subclass may override
        it."""
        return _draw_acc_lens_serially(self.value, self.method, self.gamma + 1, rows, self.generator)

    def step(self, draft_tokens: torch.Tensor) -> torch.Tensor:
        """Simulate one verify step over a batch of draft blocks (SPEC S6).

        Args:
            draft_tokens: ``[B, gamma]`` int64 (or int32) drafts.

        Returns:
            ``[B]`` int64 acceptance lengths in ``[1, gamma + 1]``, on the drafts' device,
            drawn afresh on every call.

        Raises:
            TypeError: not an int tensor.
            ValueError: not ``[B, gamma]``.
        """
        self._check_step(draft_tokens)
        # Copied without waiting on the device: the host values are staged before the copy returns.
        lengths = self.draw_lengths(draft_tokens.shape[0]).to(draft_tokens.device, non_blocking=True)
        slots = torch.arange(self.gamma, device=draft_tokens.device)
        correct = slots < (lengths - 1)[:, None]
        self._reserve(draft_tokens).copy_(torch.where(correct, draft_tokens, -1))
        return lengths


class BonusRule:
    """The two choices of :func:`simulated_bonus`, one overridable method each (SPEC S6):
    which target row the bonus is drawn from, and at which temperatures. An instance is the
    SPEC's rule (row ``a``, the request's temperature); a subclass changes one choice."""

    def position(self, accepted: torch.Tensor, positions: int) -> torch.Tensor:
        """The target row of each request (``positions = gamma + 1`` rows): its accepted
        count ``a`` (``[B]`` int64)."""
        return accepted

    def temperatures(self, temperatures: torch.Tensor) -> torch.Tensor:
        """The temperatures the bonus is drawn at: the request's own (``[B]`` float32)."""
        return temperatures


_BONUS_RULE = BonusRule()


def simulated_bonus(
    target_logits: torch.Tensor,
    accepted: torch.Tensor,
    temperatures: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    rule: BonusRule | None = None,
) -> torch.Tensor:
    """The bonus token after a simulated run of ``a`` accepted drafts (SPEC S6).

    Drawn from the target row at position ``a`` (``target_logits[r, a]``): its argmax
    (lowest index on ties) for rows with ``T < 1e-5`` (the SPEC's ``T -> 0``), otherwise a
    draw from ``softmax(L / T)`` by exponential race (SPEC S3) with noise from ``generator``.

    Args:
        target_logits: ``[B, gamma + 1, V]`` float target logits at the verify positions.
        accepted: ``[B]`` int64/int32 simulated accepted counts ``a`` in ``[0, gamma]``.
        temperatures: ``[B]`` float temperatures (``>= 0``).
        generator: the noise source of the sampling rows (None: torch's default).
        rule: a :class:`BonusRule` (default ``BonusRule()``, the SPEC's).

    Returns:
        ``[B]`` int64 token ids in ``[0, V)``, on the logits' device.

    Raises:
        TypeError: wrong tensor types / dtypes, ``rule`` not a BonusRule.
        ValueError: wrong shapes or devices, ``accepted`` outside ``[0, gamma]``, negative or
            NaN temperatures.

    Example:
        >>> logits = torch.tensor([[[0.0, 2.0], [3.0, 1.0]]])
        >>> simulated_bonus(logits, torch.tensor([1]), torch.tensor([0.0]))
        tensor([0])
    """
    if rule is not None and not isinstance(rule, BonusRule):
        raise TypeError(f"rule: expected a BonusRule or None, got {type(rule).__name__}")
    rule = _BONUS_RULE if rule is None else rule
    _check_bonus(target_logits, accepted, temperatures)
    rows = torch.arange(target_logits.shape[0], device=target_logits.device)
    logits = target_logits[rows, rule.position(accepted.long(), target_logits.shape[1])].float()
    temps = rule.temperatures(temperatures.float())
    return sample_step(logits, temps, temps < TEMPERATURE_FLOOR, generator=generator)


def _check_bonus(target_logits: torch.Tensor, accepted: torch.Tensor, temperatures: torch.Tensor) -> None:
    check_tensor("target_logits", target_logits, ndim=3, dtypes=FLOAT_DTYPES)
    rows, positions, _ = target_logits.shape
    check_tensor("accepted", accepted, shape=(rows,), dtypes=INT_DTYPES)
    check_tensor("temperatures", temperatures, shape=(rows,), dtypes=FLOAT_DTYPES)
    check_same_device(target_logits=target_logits, accepted=accepted, temperatures=temperatures)
    if rows and (int(accepted.min()) < 0 or int(accepted.max()) >= positions):
        raise ValueError(f"accepted: expected counts in [0, {positions - 1}] (gamma = target positions - 1), "
                         f"got {accepted.tolist()}")
    if bool(torch.isnan(temperatures).any()) or (rows and float(temperatures.min()) < 0):
        raise ValueError(f"temperatures: expected values >= 0, got {temperatures.tolist()}")
