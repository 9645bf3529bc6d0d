"""Argument checks of the suite's own public functions (statistics, reports, adapters).

One home for them in ``conformance``: the judge shares no code with the judged
(``dspark_ref``; STYLE habit 17, enforced by ``tests/test_layers.py``). Each error names
the argument, says what was expected and what was received:

* ``TypeError`` -- wrong Python type or tensor dtype;
* ``ValueError`` -- a bad value (out of range, NaN, not a choice), rank or shape.

To add a check: a ``check_<what>(name, value, ...)`` that returns the value it accepted.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import torch

__all__ = ["check_int", "check_float", "check_choice", "check_tensor"]


def check_int(name: str, value: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A Python ``int`` (a ``bool`` is refused) in ``[minimum, maximum]`` (bounds optional, inclusive).

    Raises:
        TypeError: not an int. ValueError: out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} ({value!r})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: expected an int <= {maximum}, got {value}")
    return value


def check_float(name: str, value: object, *, minimum: float | None = None, maximum: float | None = None) -> float:
    """A finite real number (``int`` or ``float``, not ``bool``) in ``[minimum, maximum]``; returned as float.

    Raises:
        TypeError: not a real number. ValueError: NaN, infinite or out of range.
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


def check_choice(name: str, value: object, choices: Iterable[object]) -> object:
    """``value`` is one of ``choices``.

    Raises:
        ValueError: listing the choices.
    """
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices!r}, got {value!r}")
    return value


def check_tensor(name: str, value: object, *, ndim: int | None = None,
                 shape: Sequence[int | None] | None = None,
                 dtypes: Sequence[torch.dtype] | None = None) -> torch.Tensor:
    """A ``torch.Tensor`` of rank ``ndim`` or of ``shape`` (a ``None`` entry matches any size)
    and of one of ``dtypes`` (each optional).

    Raises:
        TypeError: not a tensor, or a dtype not in ``dtypes``. ValueError: wrong rank or shape.
    """
    import torch  # here, not at the top: the reports check numbers without importing torch (3.9 s on an H100 host)

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if dtypes is not None and value.dtype not in tuple(dtypes):
        wanted = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name}: expected dtype {wanted}, got {value.dtype}")
    if shape is not None:
        ndim = len(shape)
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got {value.dim()}-D with shape {tuple(value.shape)}")
    if shape is not None and any(want is not None and want != got for want, got in zip(shape, value.shape)):
        wanted = tuple("*" if s is None else s for s in shape)
        raise ValueError(f"{name}: expected shape {wanted}, got {tuple(value.shape)}")
    return value
