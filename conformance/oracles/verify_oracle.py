"""Independent oracles of chain verification (SPEC S5) for the S5 conformance tests.

Written from the SPEC text alone, in plain float64 (numpy) and exact rational arithmetic
(:mod:`fractions`); nothing here imports ``dspark_ref`` (STYLE habit 9).

* :func:`replay_round` replays one verify round of one row from its uniforms: accept
  ``x_j`` iff ``u_j * q_j(x_j) < p_j(x_j)``; after a reject, the residual
  ``normalize(max(p - q, 0))`` (``p`` when that mass is at most
  :data:`RESIDUAL_MASS_FLOOR`); after a full accept, the bonus from ``p_{l+1}``; the
  emitted token is the inverse-CDF draw at the ``final`` uniform; a cap ``c`` verifies only
  the first ``min(l, max(c - 1, 0))`` drafts with the same coins. Same uniforms, same
  decisions: this is the bit-parity oracle of the explicit-uniform path.
* :func:`greedy_round`: accept while ``x_j == argmax p_j`` (lowest index), emit the argmax.
* :func:`round_law`: the exact law of the tokens one round commits, enumerated over every
  draft path (draft tokens and accept/reject events) in :class:`~fractions.Fraction`.
* :func:`prefix_law`: the target's autoregressive law of the first ``n`` tokens.
* :func:`replay_rows`: :func:`replay_round` on every row of a batch of tensors;
  :class:`TinyChainLaws`: the exact laws of the tiny models of the S5 law cases
  (:class:`conformance.inputs.verify_rounds.TinyChainModels`); :func:`law_probs` and
  :func:`outcome_counts`: an exact round law and an IUT's committed tuples as the bins of a
  goodness-of-fit test.

Laws for the exact oracles are callables ``law(prefix) -> list[Fraction]`` over the
vocabulary, each summing to exactly 1 (build them with :func:`exact_law`).
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np
import torch

from conformance.oracles.laws import tempered_softmax64
from conformance.spec import RESIDUAL_MASS_FLOOR

__all__ = [
    "step_law",
    "residual_law",
    "residual_laws",
    "inverse_cdf",
    "replay_round",
    "greedy_round",
    "exact_law",
    "round_law",
    "prefix_law",
    "replay_rows",
    "TinyChainLaws",
    "law_probs",
    "outcome_counts",
]

Law = Callable[[tuple[int, ...]], Sequence[Fraction]]


def step_law(logits: Sequence[float], temperature: float, greedy: bool) -> np.ndarray:
    """float64 law of one position: ``softmax(L / max(T, 1e-5))``
    (:func:`~conformance.oracles.laws.tempered_softmax64`), or the one-hot law of the
    lowest-index argmax for a greedy row. ``-inf`` logits get probability 0."""
    logits = np.asarray(logits, dtype=np.float64)
    if greedy:
        law = np.zeros_like(logits)
        law[int(np.argmax(logits))] = 1.0  # np.argmax returns the first maximum
        return law
    return tempered_softmax64(torch.from_numpy(logits), temperature).numpy()


def residual_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``normalize(max(p - q, 0))``, or ``p`` when that mass is at most the floor."""
    excess = np.maximum(p - q, 0.0)
    mass = excess.sum()
    return p if mass <= RESIDUAL_MASS_FLOOR else excess / mass


def residual_laws(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """:func:`residual_law` of each row: ``p``, ``q`` ``[B, V]`` float64 CPU tensors -> ``[B, V]``."""
    return torch.stack([torch.from_numpy(residual_law(a.numpy(), b.numpy())) for a, b in zip(p, q)])


def inverse_cdf(law: np.ndarray, u: float) -> int:
    """The first token whose cumulative mass exceeds ``u`` (so never a zero-mass token);
    past the rounded total, the last token with positive mass."""
    index = int(np.searchsorted(np.cumsum(law), u, side="right"))
    return min(index, int(np.flatnonzero(law > 0)[-1]))


def replay_round(
    draft: Sequence[int],
    target_logits: np.ndarray,
    draft_logits: np.ndarray,
    temperature: float,
    greedy: bool,
    accept_u: Sequence[float],
    final_u: float,
    cap: int | None = None,
) -> tuple[int, list[int], int]:
    """One row's verify round from its uniforms (SPEC S5).

    Args:
        draft: the ``l`` draft tokens ``x_1..x_l``.
        target_logits: ``[l + 1, V]`` target logits at the verify positions.
        draft_logits: ``[l, V]`` corrected logits the drafts were drawn from.
        temperature: the row's temperature (clamped here); greedy: the row's rule.
        accept_u: ``[l]`` accept coins in ``[0, 1)``; final_u: the emitted-token uniform.
        cap: verify-length cap ``c`` or None.

    Returns:
        ``(accepted, committed tokens (accepted + 1 of them), raw uncapped accept count)``.
    """
    num_drafts = len(draft)
    p = [step_law(row, temperature, greedy) for row in target_logits]
    q = [step_law(row, temperature, greedy) for row in draft_logits]
    raw = 0
    while raw < num_drafts and accept_u[raw] * q[raw][draft[raw]] < p[raw][draft[raw]]:
        raw += 1
    limit = num_drafts if cap is None else min(num_drafts, max(cap - 1, 0))
    accepted = min(raw, limit)
    law = residual_law(p[accepted], q[accepted]) if raw < limit else p[accepted]
    return accepted, [int(x) for x in draft[:accepted]] + [inverse_cdf(law, final_u)], raw


def greedy_round(
    draft: Sequence[int], target_logits: np.ndarray, cap: int | None = None
) -> tuple[int, list[int], int]:
    """Greedy verification of one row: accept while ``x_j == argmax p_j`` (lowest index),
    emit the argmax at the (capped) stop. Returns ``(accepted, tokens, raw)``."""
    best = [int(np.argmax(np.asarray(row, dtype=np.float64))) for row in target_logits]
    num_drafts = len(draft)
    raw = 0
    while raw < num_drafts and int(draft[raw]) == best[raw]:
        raw += 1
    limit = num_drafts if cap is None else min(num_drafts, max(cap - 1, 0))
    accepted = min(raw, limit)
    return accepted, [int(x) for x in draft[:accepted]] + [best[accepted]], raw


def exact_law(probs: Sequence[float]) -> list[Fraction]:
    """float probabilities as exact fractions renormalised to sum to exactly 1."""
    values = [Fraction(float(v)) for v in probs]
    total = sum(values)
    return [v / total for v in values]


def round_law(num_drafts: int, target: Law, draft: Law) -> dict[tuple[int, ...], Fraction]:
    """Exact law of the tokens one chain-verify round commits (SPEC S5).

    ``target(prefix)`` is ``p_j`` given the drafted prefix ``x_1..x_{j-1}``
    (``len(prefix) = j - 1``, ``j = 1..l+1``); ``draft(prefix)`` is ``q_j``, the law the
    draft ``x_j`` is drawn from after that prefix (a Markov draft reads only the last token
    or the anchor). Enumerates every path: draft ``x`` with probability ``q(x)``, accepted
    with probability ``min(1, p(x) / q(x))``; a reject commits the prefix and a residual
    draw, a full accept the prefix and a bonus draw from ``p_{l+1}``.

    Returns:
        ``{committed tokens: probability}``; the length of a key is ``accepted + 1``.
    """
    law: dict[tuple[int, ...], Fraction] = {}

    def emit(prefix: tuple[int, ...], weight: Fraction, probs: Sequence[Fraction]) -> None:
        for token, prob in enumerate(probs):
            if prob:
                key = prefix + (token,)
                law[key] = law.get(key, Fraction(0)) + weight * prob

    def walk(prefix: tuple[int, ...], reach: Fraction) -> None:
        p = target(prefix)
        if len(prefix) == num_drafts:
            emit(prefix, reach, p)
            return
        q = draft(prefix)
        excess = [max(pi - qi, Fraction(0)) for pi, qi in zip(p, q)]
        mass = sum(excess)
        residual = p if mass == 0 else [e / mass for e in excess]
        for token, q_x in enumerate(q):
            if not q_x:
                continue
            accept = min(Fraction(1), p[token] / q_x)
            if accept < 1:
                emit(prefix, reach * q_x * (1 - accept), residual)
            if accept:
                walk(prefix + (token,), reach * q_x * accept)

    walk((), Fraction(1))
    return law


def prefix_law(length: int, vocab: int, target: Law) -> dict[tuple[int, ...], Fraction]:
    """The target's autoregressive law of its first ``length`` tokens:
    ``P(y_1..y_n) = prod_j target((y_1..y_{j-1}))[y_j]``."""
    law = {}
    for tokens in itertools.product(range(vocab), repeat=length):
        prob = Fraction(1)
        for j, token in enumerate(tokens):
            prob *= target(tokens[:j])[token]
        if prob:
            law[tokens] = prob
    return law


def replay_rows(drafts, target, draft_logits, temps, greedy: Sequence[bool], accept_u, final_u,
                cap: int | None = None) -> list[tuple[int, list[int], int]]:
    """:func:`replay_round` on every row: ``drafts [B, l]``, ``target [B, l+1, V]``,
    ``draft_logits [B, l, V]``, ``temps [B]``, ``accept_u [B, l]``, ``final_u [B]`` (CPU
    tensors, read in float64), ``greedy``: ``B`` bools. Returns ``[(accepted, tokens, raw)]``."""
    return [
        replay_round(
            drafts[b].tolist(), target[b].double().numpy(), draft_logits[b].double().numpy(),
            float(temps[b]), greedy[b], accept_u[b].tolist(), float(final_u[b]), cap,
        )
        for b in range(drafts.shape[0])
    ]


class TinyChainLaws:
    """Exact laws (memoised :class:`~fractions.Fraction` lists) of ``models``, a
    :class:`conformance.inputs.verify_rounds.TinyChainModels`: the target ``p(. | last two
    tokens)``, the draft ``q`` (its table, or base logits plus the vanilla head's bias
    ``W2(W1[prev])``, SPEC S2), each ``softmax(logits / T)`` in float64 made exact."""

    def __init__(self, models) -> None:
        self.models, self.spec = models, models.spec
        self.bias = None
        if models.head_state is not None:
            w1, w2 = models.head_state["W1.weight"].double(), models.head_state["W2.weight"].double()
            self.bias = w1 @ w2.T  # bias[prev] = W2(W1[prev]), SPEC S2 vanilla
        self._memo: dict = {}

    def _law(self, key, logits) -> list[Fraction]:
        if key not in self._memo:
            self._memo[key] = exact_law(step_law(logits, self.spec.temperature, False))
        return self._memo[key]

    def target_law(self, history: tuple[int, ...]) -> list[Fraction]:
        """p(. | history) with history = context + tokens so far (reads the last two)."""
        a, b = history[-2:]
        return self._law(("p", a, b), self.models.target[a, b].double().numpy())

    def draft_law(self, step: int, prev: int) -> list[Fraction]:
        """q at draft ``step`` (0-based) after token ``prev``."""
        if self.bias is not None:
            return self._law(("q", step, prev), (self.models.base[step].double() + self.bias[prev]).numpy())
        return self._law(("q", prev), self.models.draft[prev].double().numpy())

    def round_law(self, history: tuple[int, ...]) -> dict[tuple[int, ...], Fraction]:
        """Exact law of one round's committed tokens after ``history`` (anchor = last token)."""
        return round_law(
            self.spec.num_drafts,
            lambda prefix: self.target_law(history + prefix),
            lambda prefix: self.draft_law(len(prefix), (history + prefix)[-1]),
        )


def law_probs(law: dict) -> np.ndarray:
    """The probabilities of ``law``'s outcomes in key order, plus a probability-0 bin for
    anything outside its support (float64, summing to 1)."""
    probs = np.array([float(w) for w in law.values()] + [0.0])
    return probs / probs.sum()


def outcome_counts(law: dict, committed, vocab: int) -> np.ndarray:
    """int64 counts of the committed tuples ``committed [B, l+1]`` (int64 tensor, -1 padded)
    over the bins of :func:`law_probs` (a tuple outside ``law``'s support counts in the last)."""
    def code(tokens) -> int:
        return sum((int(t) + 1) * (vocab + 1) ** i for i, t in enumerate(tokens))

    index = {code(k): i for i, k in enumerate(law)}
    weights = (vocab + 1) ** np.arange(committed.shape[1], dtype=np.int64)
    codes, counts_ = np.unique(((committed.cpu().numpy() + 1) * weights).sum(axis=1), return_counts=True)
    counts = np.zeros(len(law) + 1, dtype=np.int64)
    for c, count in zip(codes.tolist(), counts_.tolist()):
        counts[index.get(c, len(law))] += count
    return counts
