"""Row-wise work done once per distinct row (issue 45).

A statistical case hands the reference one request repeated over 10^5 rows or more, or a
few requests so repeated (a drafter's step ``k`` splits them by the tokens drawn before):
the truncation sets, the softmax and the laws of a row depend on that row alone, so the
reference computes them on one row of each group of bit-identical rows and copies them
out. The result is the same, bit for bit, as computing every row: each row's inputs equal
its group's first row's bit for bit (checked in full before use), and the functions
applied are row by row (no value of one row reaches another). Only CPU tensors are grouped
(a GPU computes every row at once anyway); a batch of mostly distinct rows, or a small one,
is computed as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["distinct_rows", "rowwise"]

#: Batches smaller than this are computed as they are: grouping would not pay.
MIN_ROWS = 4096
#: Rows of more elements are computed as they are: checking that a row equals its group's
#: first row reads as many bytes as a softmax does, which costs little per element on rows
#: that fill the vector registers (the softmax of [B, 8] float32 rows costs ten times more
#: per element than that of [B, 64] rows on a 2-core AVX-512 machine).
MAX_WIDTH = 32
#: Groups looked for at most; rows outside them (at most ``1 / TAIL_FRACTION`` of the
#: batch) are computed one by one.
MOST_GROUPS = 16
TAIL_FRACTION = 64

_INTEGER_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(tensor: Tensor) -> Tensor:
    """``[B, W]`` integer view of ``tensor [B, ...]``'s bits (one column per element)."""
    flat = tensor.reshape(tensor.shape[0], -1)
    if flat.dtype == torch.bool:
        return flat.to(torch.uint8)
    return flat.view(_INTEGER_VIEW[flat.element_size()]) if flat.is_floating_point() else flat


def distinct_rows(rows: Tensor, *params: Tensor | None) -> tuple[Tensor, Tensor] | None:
    """Groups of bit-identical rows of ``rows [B, ...]`` together with ``params`` (each
    ``[B, ...]`` or None): ``(first [m], index [B])`` int64 with every row equal, bit for bit,
    to row ``first[index[b]]`` in ``rows`` and in each param, ``m`` much smaller than ``B``;
    None when that is not so (a small batch, a batch of mostly distinct rows, a non-CPU
    batch)."""
    n = rows.shape[0]
    if n < MIN_ROWS or rows.device.type != "cpu" or rows.dim() == 0 or rows[0].numel() > MAX_WIDTH:
        return None
    # A parameter equal on every row (the common case) groups nothing: left out.
    columns = [_bits(rows)] + [bits for bits in (_bits(p) for p in params if p is not None)
                               if not torch.equal(bits, bits[:1].expand_as(bits))]
    # One grouping key from a few columns of each tensor (wrapping int64 arithmetic): rows
    # that share it but differ elsewhere make the full check below fail (no grouping).
    key = torch.zeros(n, dtype=torch.int64)
    for bits in columns:
        width = bits.shape[1]
        for j in sorted({0, width - 1}):
            key = key * 1_000_003 + bits[:, j]
    index = torch.zeros(n, dtype=torch.int64)
    free = torch.ones(n, dtype=torch.bool)
    firsts: list[int] = []
    left, middle = n, n // 2
    while left > n // TAIL_FRACTION:
        if len(firsts) == MOST_GROUPS:
            return None
        # A free row from the middle on: a large group holds it whatever the order of the rows.
        after = free[middle:]
        start = middle + int(after.to(torch.uint8).argmax()) if bool(after.any()) else \
            int(free.to(torch.uint8).argmax())
        same = (key == key[start]) & free
        count = int(same.sum())
        if not firsts and count < n // (2 * MOST_GROUPS):
            return None  # the row in the middle has few equals: mostly distinct rows
        index = torch.where(same, len(firsts), index)
        firsts.append(start)
        free &= ~same
        left -= count
    tail = free.nonzero()[:, 0]
    index[tail] = len(firsts) + torch.arange(tail.shape[0])
    first = torch.cat([torch.tensor(firsts, dtype=torch.int64), tail])
    if not all(torch.equal(bits, bits[first].index_select(0, index)) for bits in columns):
        return None
    return first, index


def rowwise(fn: Callable[..., Tensor], rows: Tensor, *params: Tensor | None) -> Tensor:
    """``fn(rows, *params)`` for a row-by-row ``fn`` (row ``b`` of its ``[B, ...]`` result
    depends on row ``b`` of ``rows`` and of each param only), computed on one row of each
    group of :func:`distinct_rows` and copied out; ``fn`` itself when the rows do not group."""
    groups = distinct_rows(rows, *params)
    if groups is None:
        return fn(rows, *params)
    first, index = groups
    return fn(rows[first], *(None if p is None else p[first] for p in params)).index_select(0, index)
