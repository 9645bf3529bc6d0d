"""Argument validation shared by every public entry point of ``dspark_ref``.

Each public function validates all of its arguments in one private ``_check_*`` helper
before doing any work, using the functions below. Errors name the argument, say what was
expected and what was received:

* ``TypeError``  -- wrong Python type or wrong tensor dtype;
* ``ValueError`` -- wrong rank, shape, device mismatch, or a bad value (NaN, out of range).
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch

__all__ = [
    "check_tensor",
    "check_same_device",
    "check_int",
    "check_float",
    "check_finite",
    "all_finite",
    "check_token_ids",
    "check_choice",
]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INT_DTYPES = (torch.int64, torch.int32)


def _fmt_dtypes(dtypes: Sequence[torch.dtype]) -> str:
    return " or ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    name: str,
    value: object,
    *,
    ndim: int | None = None,
    shape: Sequence[int | None] | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
) -> torch.Tensor:
    """Check that ``value`` is a tensor of the given rank, shape and dtype.

    ``shape`` entries that are ``None`` match any size. Returns ``value`` for chaining.

    Raises:
        TypeError: ``value`` is not a tensor, or its dtype is not in ``dtypes``.
        ValueError: wrong rank or shape.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if dtypes is not None and value.dtype not in tuple(dtypes):
        raise TypeError(f"{name}: expected dtype {_fmt_dtypes(dtypes)}, got {value.dtype}")
    if shape is not None:
        ndim = len(shape)
    if ndim is not None and value.dim() != ndim:
        raise ValueError(
            f"{name}: expected a {ndim}-D tensor, got {value.dim()}-D with shape {tuple(value.shape)}"
        )
    if shape is not None:
        for axis, (want, got) in enumerate(zip(shape, value.shape)):
            if want is not None and want != got:
                want_str = tuple("*" if s is None else s for s in shape)
                raise ValueError(
                    f"{name}: expected shape {want_str}, got {tuple(value.shape)} (axis {axis})"
                )
    return value


def check_same_device(**tensors: torch.Tensor | None) -> None:
    """Check that all given (non-None) tensors live on one device.

    Raises:
        ValueError: naming the first argument whose device differs.
    """
    items = [(k, t) for k, t in tensors.items() if t is not None]
    if not items:
        return
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(
                f"{name}: expected device {first.device} (same as {first_name}), got {t.device}"
            )


def check_int(name: str, value: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Check a Python integer (bools rejected) against an inclusive range.

    Raises:
        TypeError: not an int.
        ValueError: outside ``[minimum, maximum]``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} ({value!r})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: expected an int <= {maximum}, got {value}")
    return value


def check_float(
    name: str, value: object, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """Check a finite real number against an inclusive range; returns it as float.

    Raises:
        TypeError: not a real number.
        ValueError: NaN, infinite, or outside ``[minimum, maximum]``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected a number >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: expected a number <= {maximum}, got {value}")
    return value


def all_finite(value: torch.Tensor) -> bool:
    """Whether every value of the float tensor ``value`` is finite, by one reduction: a NaN or
    an infinity makes the sum NaN or infinite. False can also mean a sum that overflowed:
    callers then check element by element."""
    return bool(torch.isfinite(value.sum()))


def check_finite(name: str, value: torch.Tensor, *, allow_neg_inf: bool = False) -> None:
    """Reject NaN (and +inf; -inf too unless ``allow_neg_inf``, as masked logits use it).

    Raises:
        ValueError: naming the argument and the first offending index.
    """
    if value.is_floating_point() and all_finite(value):
        return
    bad = torch.isnan(value) | (value == math.inf)
    if not allow_neg_inf:
        bad |= value == -math.inf
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name}: expected finite values, got {value[idx].item()} at index {idx}")


def check_token_ids(name: str, value: torch.Tensor, vocab_size: int) -> None:
    """Check an integer tensor of token ids lies in ``[0, vocab_size)``.

    Raises:
        TypeError: not int64/int32.
        ValueError: an id out of range (the first one is named).
    """
    check_tensor(name, value, dtypes=INT_DTYPES)
    if value.numel() == 0:
        return
    bad = (value < 0) | (value >= vocab_size)
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name}: expected token ids in [0, {vocab_size}), got {int(value[idx])} at index {idx}"
        )


def check_choice(name: str, value: object, choices: Iterable[object]) -> None:
    """Check ``value`` is one of ``choices``.

    Raises:
        ValueError: listing the allowed values.
    """
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices!r}, got {value!r}")
