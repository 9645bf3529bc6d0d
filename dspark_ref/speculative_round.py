"""One speculative round with the reference's own parts (SPEC S9 "one round", S3, S5).

The drafter proposes a block from given base logits through the Markov head, drawing each
token from the request's law (``softmax`` of the corrected logits at ``T``, truncated by
the request's top-k / top-p / min-p), and hands the verifier the laws it drew from; the
verifier checks the block against given target logits by chain speculative sampling on
the request's truncated target law. Nothing else crosses the boundary, so the committed
tokens follow the truncated target law whatever the draft quality (SPEC S5 "Lossless").

Randomness: the draft's exponential noise and the verifier's coins are independent
streams. From a ``torch.Generator`` the drafter draws first and the verifier after it;
seeded rows draw the draft noise of step ``k`` from a generator seeded with
``H(seed, position + k, DRAFT_STREAM)`` (:func:`dspark_ref.verify.seeded_uniforms`'s hash;
``DRAFT_STREAM`` = 2) and the verifier's coins from streams 0 and 1, so a seeded row's
round depends on its seed, its position and its inputs only, never on the other rows.

Each step a variant may replace is one method of :class:`RoundParts`; a subclass that
overrides one changes that step alone.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor

from dspark_ref._checks import FLOAT_DTYPES, check_same_device, check_tensor
from dspark_ref.markov import MarkovHead, sample_block
from dspark_ref.sampling import Truncation, clamp_temperature, exponential_noise, laws_by_rows, sample_step
from dspark_ref.verify import VerifyResult, chain_verify, seeded_uniforms

__all__ = ["DRAFT_STREAM", "RoundResult", "RoundParts", "draft_and_verify"]

DRAFT_STREAM = 2
_SEED_MASK = (1 << 63) - 1


@dataclasses.dataclass(frozen=True)
class RoundResult:
    """One round (SPEC S9).

    Attributes:
        draft_tokens: ``[B, gamma]`` int64, the drafted block ``x_1..x_gamma``.
        draft_probs: ``[B, gamma, V]`` float32, the law each draft was drawn from, as handed
            to the verifier (one-hot on greedy rows).
        accepted: ``[B]`` int64 in ``[0, gamma]``.
        tokens: ``[B, gamma + 1]`` int64, the committed tokens (accepted drafts, then the
            correction or bonus), ``-1`` after them.
    """

    draft_tokens: Tensor
    draft_probs: Tensor
    accepted: Tensor
    tokens: Tensor


class RoundParts:
    """The steps of :func:`draft_and_verify`, one overridable method each (SPEC S9).

    Shapes: ``B`` rows, ``gamma`` drafts, ``V`` vocabulary. ``temps`` are clamped
    temperatures ``[B]`` float32, ``greedy_mask [B]`` bool, ``truncation`` a
    :class:`~dspark_ref.sampling.Truncation` or None.

    Example:
        >>> class FullSoftmaxHandoff(RoundParts):  # q untruncated while the draft truncates
        ...     def handoff(self, laws, corrected, temps, greedy_mask, truncation):
        ...         return torch.softmax(corrected / temps[:, None, None], dim=-1)
    """

    def draft_noise(self, rows: int, vocab: int, k: int, device: torch.device, generator: torch.Generator | None,
                    seeds: Tensor | None, positions: Tensor | None) -> Tensor:
        """Exp(1) noise ``[B, V]`` float32 for draft step ``k``: from ``generator``, or per
        seeded row from ``H(seed, position + k, DRAFT_STREAM)``."""
        if seeds is None:
            return exponential_noise((rows, vocab), generator=generator, device=device)
        keys = seeded_uniforms(seeds, (positions + k)[:, None], DRAFT_STREAM)[:, 0]
        noise = torch.empty(rows, vocab, dtype=torch.float32, device=device)
        for row, key in enumerate(keys.tolist()):
            row_generator = torch.Generator(device).manual_seed(int(key * 2.0**53) & _SEED_MASK)
            noise[row].exponential_(generator=row_generator)
        return noise

    def draft_law(self, step_logits: Tensor, temps: Tensor, truncation: Truncation | None) -> Tensor:
        """The law ``[B, V]`` float32 a sampling row draws from: ``softmax`` of the
        corrected logits at ``T``, truncated by the request (SPEC S3)."""
        def law(logits: Tensor, temps: Tensor, truncation: Truncation | None) -> Tensor:
            logits = logits.to(torch.float32)
            scaled = logits / temps[:, None] if truncation is None else truncation.apply(logits, temps)
            return torch.softmax(scaled, dim=-1)

        return laws_by_rows(law, step_logits, temps, truncation)

    def draft_token(self, step_logits: Tensor, law: Tensor, greedy_mask: Tensor, noise: Tensor) -> Tensor:
        """``[B]`` int64: the exponential race ``argmax law / E`` on sampling rows, the
        lowest-index argmax of ``step_logits`` on greedy rows (SPEC S3)."""
        # Each row is drawn on its own: the race runs on the sampling rows, the argmax on the
        # greedy rows only (a call over every row would give each row the same token).
        if bool(greedy_mask.all()):
            return sample_step(step_logits.to(torch.float32), torch.ones_like(law[:, 0]), greedy_mask, noise=noise)
        tokens = sample_step(law.log(), torch.ones_like(law[:, 0]), torch.zeros_like(greedy_mask), noise=noise)
        if bool(greedy_mask.any()):
            greedy_logits = step_logits[greedy_mask].to(torch.float32)
            tokens[greedy_mask] = sample_step(greedy_logits, torch.ones_like(greedy_logits[:, 0]),
                                              torch.ones_like(greedy_mask[greedy_mask]), noise=noise[greedy_mask])
        return tokens

    def handoff(self, laws: Tensor, corrected: Tensor, temps: Tensor, greedy_mask: Tensor,
                truncation: Truncation | None) -> Tensor:
        """The q ``[B, gamma, V]`` handed to the verifier: the laws the drafts were drawn
        from (``laws``, one-hot on greedy rows); ``corrected [B, gamma, V]`` and the
        request parameters are not read by the SPEC step."""
        return laws

    def verify(self, draft_tokens: Tensor, target_logits: Tensor, q: Tensor, temperatures: Tensor,
               greedy_mask: Tensor, truncation: Truncation | None, generator: torch.Generator | None,
               seeds: Tensor | None, positions: Tensor | None, draft_noise: Tensor) -> VerifyResult:
        """Chain speculative sampling of the block against the truncated target law with
        the handed-over ``q`` (SPEC S5), coins from ``generator`` or the seeded streams 0
        and 1; ``temperatures`` as the caller gave them (the verifier clamps);
        ``draft_noise [B, gamma, V]`` is not read by the SPEC step."""
        return chain_verify(draft_tokens, target_logits, None, temperatures, greedy_mask, generator=generator,
                            seeds=seeds, positions=positions, truncation=truncation, draft_probs=q)


def _check_round(base_logits, target_logits, temperatures, greedy_mask, truncation, seeds, positions, parts) -> None:
    check_tensor("base_logits", base_logits, ndim=3, dtypes=FLOAT_DTYPES)
    rows, gamma, vocab = base_logits.shape
    if gamma == 0:
        raise ValueError("base_logits: expected a block of gamma >= 1 positions, got shape "
                         f"{tuple(base_logits.shape)}")
    check_tensor("target_logits", target_logits, shape=(rows, gamma + 1, vocab), dtypes=FLOAT_DTYPES)
    check_tensor("temperatures", temperatures, shape=(rows,), dtypes=FLOAT_DTYPES)
    check_tensor("greedy_mask", greedy_mask, shape=(rows,), dtypes=(torch.bool,))
    check_same_device(base_logits=base_logits, target_logits=target_logits, temperatures=temperatures,
                      greedy_mask=greedy_mask, seeds=seeds, positions=positions)
    if (seeds is None) != (positions is None):
        raise ValueError("seeds: expected seeds and positions together, got only one of them")
    if truncation is not None and not isinstance(truncation, Truncation):
        raise TypeError(f"truncation: expected a Truncation or None, got {type(truncation).__name__}")
    if not isinstance(parts, RoundParts):
        raise TypeError(f"parts: expected a RoundParts, got {type(parts).__name__}")


@torch.no_grad()
def draft_and_verify(
    head: MarkovHead,
    base_logits: Tensor,
    first_prev: Tensor,
    hidden: Tensor | None,
    target_logits: Tensor,
    temperatures: Tensor,
    greedy_mask: Tensor,
    *,
    truncation: Truncation | None = None,
    generator: torch.Generator | None = None,
    seeds: Tensor | None = None,
    positions: Tensor | None = None,
    parts: RoundParts | None = None,
) -> RoundResult:
    """Draft one block and verify it, with the reference's drafter and verifier (SPEC S9).

    Draft step ``k``: corrected logits ``L_k`` (SPEC S2, ``prev_0 = first_prev``), the
    request's law ``softmax(L_k / T)`` truncated (SPEC S3), a token by exponential race
    (lowest-index argmax of ``L_k`` on greedy rows). Verify: :func:`chain_verify` of the
    block against ``target_logits`` with ``q`` = those laws and the same truncation on
    the target law (SPEC S5).

    Args:
        head: a ``MarkovHead`` (any dtype; its bias is added to float32 base logits).
        base_logits: ``[B, gamma, V]`` float base logits of the block.
        first_prev: ``[B]`` int64 anchor ``x0``.
        hidden: ``[B, gamma, d]`` hidden states (gated / rnn heads) or None.
        target_logits: ``[B, gamma + 1, V]`` float target logits at the verify positions.
        temperatures: ``[B]`` float, ``>= 0`` (clamped to 1e-5).
        greedy_mask: ``[B]`` bool, the rows the caller's greedy rule makes greedy.
        truncation: optional :class:`~dspark_ref.sampling.Truncation` of every row.
        generator: optional ``torch.Generator`` (default generator when None and unseeded).
        seeds: optional ``[B]`` int64 per-row seeds (with ``positions``).
        positions: optional ``[B]`` int64 sequence position of each row's first draft.
        parts: the steps, a :class:`RoundParts` (default: the SPEC steps).

    Returns:
        :class:`RoundResult`.

    Raises:
        TypeError / ValueError: bad shapes, dtypes, devices or values, naming the argument
            (including those :func:`~dspark_ref.markov.sample_block` and
            :func:`~dspark_ref.verify.chain_verify` raise).

    Example:
        >>> from dspark_ref.markov import VanillaMarkovHead
        >>> head = VanillaMarkovHead(5, 2, generator=torch.Generator().manual_seed(0))
        >>> r = draft_and_verify(head, torch.zeros(2, 3, 5), torch.tensor([0, 1]), None, torch.zeros(2, 4, 5),
        ...                       torch.ones(2), torch.tensor([True, False]), generator=torch.Generator().manual_seed(1))
        >>> r.draft_tokens.shape, r.tokens.shape, r.draft_probs.dtype
        (torch.Size([2, 3]), torch.Size([2, 4]), torch.float32)
    """
    parts = RoundParts() if parts is None else parts
    _check_round(base_logits, target_logits, temperatures, greedy_mask, truncation, seeds, positions, parts)
    rows, gamma, vocab = base_logits.shape
    temps = clamp_temperature(temperatures).to(torch.float32)
    laws, noises = [], []
    any_greedy = bool(greedy_mask.any())

    def sampler(step_logits: Tensor, k: int) -> Tensor:
        noise = parts.draft_noise(rows, vocab, k, base_logits.device, generator, seeds, positions)
        law = parts.draft_law(step_logits, temps, truncation)
        token = parts.draft_token(step_logits, law, greedy_mask, noise)
        laws.append(torch.where(greedy_mask[:, None], F.one_hot(token, vocab).to(law.dtype), law) if any_greedy
                    else law)
        noises.append(noise)
        return token

    block = sample_block(head, base_logits, first_prev, hidden, sampler)
    q = parts.handoff(torch.stack(laws, dim=1), block.corrected_logits, temps, greedy_mask, truncation)
    result = parts.verify(block.tokens, target_logits, q, temperatures, greedy_mask, truncation, generator, seeds,
                          positions, torch.stack(noises, dim=1))
    return RoundResult(draft_tokens=block.tokens, draft_probs=q, accepted=result.accepted, tokens=result.tokens)
