"""How many of each row's drafts a row-by-row verifier checks (SPEC S5): the MLX engines verify
one request at a time and shorten a block by slicing its drafts (dspark-mlx's confidence gate
``d = d[:klen]``, mlx-dspark's confidence cut ``draft = draft[:keep]``), so their adapters
(``dspark_mlx/verify.py``, ``mlx_dspark/verify.py``) slice each row to :func:`verified_counts`.
"""

from __future__ import annotations

import torch

__all__ = ["verified_counts"]


def verified_counts(draft_tokens: torch.Tensor, cap: int | torch.Tensor | None) -> list[int]:
    """Per row of ``draft_tokens [B, gamma]`` (int64), how many drafts are verified: those before
    the first ``-1`` sentinel, at most ``max(cap - 1, 0)`` of them (``cap``: None, an int, or
    ``[B]`` integer, the contract's per-row cap on the committed tokens).

    Raises:
        ValueError: ``cap`` neither None, an int, nor a ``[B]`` integer tensor.
    """
    bs, width = draft_tokens.shape
    if width:
        counts = torch.where(draft_tokens < 0, torch.arange(width, device=draft_tokens.device), width).amin(dim=1)
        counts = counts.cpu().tolist()
    else:
        counts = [0] * bs
    if cap is None:
        return counts
    if isinstance(cap, torch.Tensor):
        if cap.shape != (bs,) or cap.dtype.is_floating_point:
            raise ValueError(f"cap: expected an int or a [B={bs}] integer tensor, got {cap.dtype} {tuple(cap.shape)}")
        caps = cap.cpu().tolist()
    elif isinstance(cap, int):
        caps = [cap] * bs
    else:
        raise ValueError(f"cap: expected an int or a [B] integer tensor, got {type(cap).__name__}")
    return [min(n, max(c - 1, 0)) for n, c in zip(counts, caps)]
