"""Random Markov heads (SPEC S2) as weights in the reference layout (``conformance.contract``).

SPEC S2: ``W1`` is an embedding ``[V, r]``, ``W2`` a bias-free linear ``r -> V``; the gated
head adds ``Wg``, a linear ``d + r -> r`` with bias (its input is ``[h_k ; W1[prev]]``); the
rnn head adds one linear ``2r + d -> 3r`` with bias (input ``[s_{k-1} ; W1[prev] ; h_k]``).
A linear ``n -> m`` travels as ``weight [m, n]`` and ``bias [m]``.

Every weight is drawn iid ``N(0, scale^2)`` from the case's generator, one tensor after
another in the layout's order (``W1``, ``W2``, then the gate or cell's weight and bias), so
a seed names one head; ``tests/test_inputs.py`` pins the tensors of a set of seeds.
"""

from __future__ import annotations

import torch

from conformance.checks import check_choice, check_float, check_int

__all__ = ["MARKOV_HEAD_TYPES", "markov_head_state"]

MARKOV_HEAD_TYPES = ("vanilla", "gated", "rnn")


def _layout(head_type: str, vocab_size: int, rank: int, hidden_size: int | None) -> dict[str, tuple]:
    """The reference layout of a head, in drawing order: ``{name: shape}`` (SPEC S2).

    ``hidden_size`` (``d``) is read by the gated and rnn heads only.

    Raises:
        ValueError: unknown ``head_type``; ``vocab_size``, ``rank`` (or ``hidden_size`` of a
            gated / rnn head) < 1. TypeError: a size that is not an int.
    """
    check_choice("head_type", head_type, MARKOV_HEAD_TYPES)
    v = check_int("vocab_size", vocab_size, minimum=1)
    r = check_int("rank", rank, minimum=1)
    shapes = {"W1.weight": (v, r), "W2.weight": (v, r)}
    if head_type == "vanilla":
        return shapes
    d = check_int(f"hidden_size (of a {head_type} head)", hidden_size, minimum=1)
    if head_type == "gated":
        return {**shapes, "Wg.weight": (r, d + r), "Wg.bias": (r,)}
    return {**shapes, "Wz.weight": (3 * r, 2 * r + d), "Wz.bias": (3 * r,)}


def markov_head_state(
    head_type: str, vocab_size: int, rank: int, hidden_size: int | None, generator: torch.Generator,
    *, scale: float = 0.5,
) -> dict[str, torch.Tensor]:
    """Reference-layout float32 CPU weights of a random Markov head (SPEC S2).

    Args:
        head_type: ``"vanilla"``, ``"gated"`` or ``"rnn"``.
        vocab_size: ``V``; rank: ``r``; hidden_size: ``d`` (gated / rnn; ignored by vanilla).
        generator: CPU ``torch.Generator``; the weights are its next draws.
        scale: the weights' standard deviation (>= 0; 0.5 makes the bias matter at small V).
    Returns:
        ``{name: tensor}``: ``W1.weight [V, r]``, ``W2.weight [V, r]``, then ``Wg.weight [r, d + r]``,
        ``Wg.bias [r]`` (gated) or ``Wz.weight [3r, 2r + d]``, ``Wz.bias [3r]`` (rnn), in that order.
    Raises:
        TypeError / ValueError: naming the bad argument.

    Example:
        >>> state = markov_head_state("gated", 10, 4, 6, torch.Generator().manual_seed(0))
        >>> {name: tuple(t.shape) for name, t in state.items()}["Wg.weight"]
        (4, 10)
    """
    shapes = _layout(head_type, vocab_size, rank, hidden_size)
    scale = check_float("scale", scale, minimum=0.0)
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(f"generator: expected a CPU torch.Generator, got {generator!r}")
    return {name: torch.empty(shape).normal_(0.0, scale, generator=generator) for name, shape in shapes.items()}
