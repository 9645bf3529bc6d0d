"""The speculative decoding loop: draft -> schedule -> verify -> commit (SPEC S9).

Prefill: the target runs over the prompt and draws the first new token from its own law;
that token is the first anchor (paper Figure 1). Then each round, for every row:

1. draft: the backbone runs once over the block (anchor + ``gamma - 1`` masks, with the
   target's hidden state of the token before the anchor injected) and ``sample_block``
   draws ``gamma`` draft tokens ``x_1..x_gamma`` through the Markov head (SPEC S1-S3);
2. schedule (optional): the confidence head scores the block and ``schedule_prefixes``
   picks a verify length ``l <= gamma`` per row from an SPS curve (SPEC S7, S8), reading
   the confidences of this round's own block;
3. verify: one target pass over context + drafts gives the logits at the ``gamma + 1``
   verify slots (slot 0 is the anchor's position and predicts ``x_1``; slot ``j`` follows
   ``x_j``); ``chain_verify`` (``greedy_verify`` when greedy) accepts a prefix, capped at
   ``l`` drafts by ``cap = l + 1`` (SPEC S5);
4. commit: the accepted drafts and one target token (the correction, or the bonus after
   the last verified draft); that token is the next anchor.

Each step a variant may replace is one method of :class:`RoundSteps` (the draft sampler,
the proposal, the confidences the scheduler reads, the verify length, the q handed to the
verifier, the anchor, the commit, the reported ``tau``);
``speculative_generate(..., steps=...)`` runs the loop with a subclass of it.

Acceptance length: ``tau = accepted + 1`` tokens committed per round, counting slot 0; so
``1 <= tau <= l + 1 <= gamma + 1``. The draft block has ``gamma`` positions and yields
``gamma`` draft tokens; a perfect draft with block 2 verifies 3 slots and commits
2 accepted + 1 bonus: ``tau = 3``.

Rows advance at their own pace in one right-padded buffer: the target is causal, so the
tokens after a row's committed length never change its logits. Generation stops at
exactly ``max_new_tokens`` per row; a round that would overshoot commits only the tokens
still needed (its recorded ``tau`` is the verified one), and a finished row records
``tau = 0`` in later rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from dspark_ref._checks import INT_DTYPES, check_float, check_int, check_tensor, check_token_ids
from dspark_ref.markov import BlockSample, MarkovHead, StepSampler, sample_block
from dspark_ref.sampling import clamp_temperature, sample_step
from dspark_ref.scheduler import SPSCurve, schedule_prefixes
from dspark_ref.verify import VerifyResult, chain_verify, greedy_verify

__all__ = [
    "TargetModel", "DraftModel", "SpecResult", "RoundSteps", "speculative_generate", "autoregressive_generate",
]


class TargetModel(Protocol):
    """A causal LM: ``target(ids[B, n])`` returns ``.logits[B, n, V]`` (position ``t``
    predicts token ``t + 1``) and ``.hidden[B, n, d]``; e.g. ``tiny_models.TinyTargetLM``."""

    vocab_size: int

    def __call__(self, context_ids: Tensor): ...


class DraftModel(Protocol):
    """A DSpark drafter, e.g. ``tiny_models.TinyDSparkDraft``.

    ``block(context_hidden[B, d], anchor[B], gamma)`` returns ``.hidden[B, gamma, d]`` and
    ``.base_logits[B, gamma, V]``; ``markov_head`` is a ``MarkovHead``; with a scheduler,
    ``confidence_head`` is set and ``confidences(hidden, anchor, tokens) -> [B, gamma]``.
    """

    gamma: int
    markov_head: MarkovHead
    confidence_head: object

    def block(self, context_hidden: Tensor, anchor: Tensor, gamma: int): ...


@dataclass(frozen=True)
class SpecResult:
    """Output of ``speculative_generate`` (SPEC S9).

    Attributes:
        tokens: ``[B, max_new_tokens]`` int64 generated tokens (prompt excluded).
        accept_lengths: ``[B, rounds]`` int64 ``tau`` per round (``accepted + 1``, slot 0
            counted); 0 once the row has finished.
        verify_lengths: ``[B, rounds]`` int64 drafts sent to verification (``gamma``, or
            the scheduler's ``l``); 0 once the row has finished.
        rounds: number of draft-verify rounds run.
        draft_tokens: ``[B, rounds, gamma]`` int64 the block each round drafted (finished
            rows draft too; their blocks are not verified).
        confidences: ``[B, rounds, gamma]`` float64 the confidences the scheduler read each
            round, or None without a scheduler.
    """

    tokens: Tensor
    accept_lengths: Tensor
    verify_lengths: Tensor
    rounds: int
    draft_tokens: Tensor
    confidences: Tensor | None


class RoundSteps:
    """The steps of one round of :func:`speculative_generate`, one overridable method each
    (SPEC S9).

    An instance of this class is the reference round; a subclass that overrides one method
    changes that step alone (the rest of the loop, and the order of every random draw, stay
    as they are). Shapes: ``B`` rows, ``gamma`` drafts, ``V`` vocabulary, ``d`` hidden size.

    Example:
        >>> class NoBonus(RoundSteps):  # a variant that reports accepted drafts as tau
        ...     def reported_tau(self, result, active):
        ...         return torch.where(active, result.accepted, 0)
    """

    def draft_sampler(self, temps: Tensor, greedy_mask: Tensor,
                      generator: torch.Generator | None) -> StepSampler:
        """The sampler ``sample_block`` calls at every draft step: ``sample_step`` with
        ``temps [B]`` float32 (already clamped), ``greedy_mask [B]`` bool and fresh noise
        from ``generator`` (SPEC S3)."""

        def sampler(step_logits: Tensor, k: int) -> Tensor:
            return sample_step(step_logits, temps, greedy_mask, generator=generator)

        return sampler

    def propose(self, draft: DraftModel, context_hidden: Tensor, anchor: Tensor, gamma: int,
                sampler: StepSampler) -> tuple[object, BlockSample]:
        """One backbone pass (``draft.block(context_hidden [B, d], anchor [B], gamma)``, with
        ``.hidden [B, gamma, d]`` and ``.base_logits [B, gamma, V]``) and one ``sample_block``
        pass over it (SPEC S1, S2): ``(block, BlockSample(tokens [B, gamma] int64,
        corrected_logits [B, gamma, V] float32))``."""
        block = draft.block(context_hidden, anchor, gamma)
        return block, sample_block(draft.markov_head, block.base_logits, anchor, block.hidden, sampler)

    def scheduler_confidences(self, draft: DraftModel, block: object, anchor: Tensor,
                              drafted: BlockSample) -> Tensor:
        """``[B, gamma]`` float64 confidences the prefix scheduler reads this round: the
        draft's confidences of this round's own block (SPEC S7, S8), ``draft.confidences(
        block.hidden, anchor, drafted.tokens)``."""
        return draft.confidences(block.hidden, anchor, drafted.tokens).double()

    def verify_limit(self, draft: DraftModel, confidences: Tensor | None, active: Tensor, gamma: int,
                     scheduler: SPSCurve | None) -> Tensor:
        """``[B]`` int64 drafts each row verifies this round: ``gamma`` without a scheduler;
        else the prefix scheduler's lengths (SPEC S8) on ``confidences [B, gamma]`` (from
        :meth:`scheduler_confidences`; None without a scheduler), over the ``active [B]`` rows
        only (finished rows leave the batch the scheduler sees; they get 0)."""
        limit = torch.full(active.shape, gamma, dtype=torch.int64, device=active.device)
        if scheduler is None:
            return limit
        limit = torch.zeros_like(limit)
        limit[active] = schedule_prefixes(confidences[active], scheduler)
        return limit

    def verifier_q_logits(self, block: object, drafted: BlockSample) -> Tensor:
        """The logits ``[B, gamma, V]`` whose tempered softmax the verifier takes as q: the
        corrected logits that drew the tokens (SPEC S5, S9)."""
        return drafted.corrected_logits

    def anchor(self, seq: Tensor, lengths: Tensor) -> Tensor:
        """The draft's anchor ``[B]`` int64: the last committed token of each row of
        ``seq [B, n]`` (``lengths [B]`` committed tokens per row)."""
        return seq.gather(1, (lengths - 1)[:, None])[:, 0]

    def commit(self, result: VerifyResult, limit: Tensor, active: Tensor, lengths: Tensor,
               end: int) -> tuple[Tensor, Tensor]:
        """``(committed [B], context_pos [B])`` int64: the tokens each row commits (``tau``,
        never past ``end``; 0 for finished rows) and the position whose target hidden state
        feeds the next draft (the token before the next anchor). ``limit [B]``: the drafts
        each row verified; ``active [B]`` bool: unfinished rows."""
        committed = torch.where(active, torch.minimum(result.tau, end - lengths), 0)
        return committed, lengths - 1 + result.accepted

    def reported_tau(self, result: VerifyResult, active: Tensor) -> Tensor:
        """The acceptance length recorded for the round, ``[B]`` int64: ``tau =
        accepted + 1`` (slot 0 counted), 0 for finished rows."""
        return torch.where(active, result.tau, 0)


@torch.no_grad()
def speculative_generate(
    target: TargetModel,
    draft: DraftModel,
    prompt: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    greedy: bool = False,
    gamma: int | None = None,
    scheduler: SPSCurve | None = None,
    generator: torch.Generator | None = None,
    steps: RoundSteps | None = None,
) -> SpecResult:
    """Generate with DSpark speculative decoding (SPEC S9; module note for the round).

    Greedy (``greedy=True``): draft and target take argmaxes (lowest index among ties) and
    the output equals ``autoregressive_generate(..., greedy=True)`` token for token. Sampling:
    ``T`` is clamped to ``1e-5`` (SPEC S3); the output law equals autoregressive sampling
    from ``softmax(target_logits / T)``, whatever the draft and the scheduler.

    Args:
        target: a ``TargetModel`` (e.g. ``TinyTargetLM``).
        draft: a ``DraftModel`` over the same vocabulary.
        prompt: ``[B, n]`` (or ``[n]``, one row) int64 / int32 ids, ``n >= 1``.
        max_new_tokens: tokens to generate per row, ``>= 1`` (the first comes from prefill).
        temperature: ``T >= 0``, finite; ignored when ``greedy``.
        greedy: greedy decoding for every row.
        gamma: draft tokens per round, ``1 <= gamma <= draft.gamma`` (default ``draft.gamma``).
        scheduler: the SPS curve of the prefix scheduler (``schedule_prefixes``: a callable
            ``sps(B)`` or a table ``sps[B - 1]``) to cap verify lengths; needs a draft with
            a confidence head. ``None`` verifies all ``gamma`` drafts.
        generator: ``torch.Generator`` for every random draw (default: the global RNG).
        steps: the round's steps, a :class:`RoundSteps` (default: ``RoundSteps()``, the
            reference round); a subclass replaces one step.

    Returns:
        ``SpecResult(tokens[B, max_new_tokens], accept_lengths, verify_lengths, rounds)``.

    Raises:
        TypeError: a model not matching its protocol, wrong dtypes or Python types,
            ``steps`` not a ``RoundSteps``.
        ValueError: wrong rank or empty prompt, ids out of range, vocabularies differ,
            ``max_new_tokens < 1``, NaN / negative / infinite ``temperature``, ``gamma``
            outside ``[1, draft.gamma]``, a scheduler without a confidence head; SPS table
            errors come from ``schedule_prefixes``.

    Example:
        >>> from dspark_ref.tiny_models import TinyTargetLM, TinyDSparkDraft
        >>> lm = TinyTargetLM(5, 8, generator=torch.Generator().manual_seed(0))
        >>> dr = TinyDSparkDraft(lm, gamma=2, generator=torch.Generator().manual_seed(1))
        >>> out = speculative_generate(lm, dr, torch.tensor([1, 2]), 6, greedy=True)
        >>> out.tokens.shape, bool((out.accept_lengths <= 3).all())
        (torch.Size([1, 6]), True)
    """
    prompt, gamma = _check_generate(target, draft, prompt, max_new_tokens, temperature, greedy,
                                    gamma, scheduler, generator, steps)
    steps = RoundSteps() if steps is None else steps
    rows, prompt_len = prompt.shape
    device = prompt.device
    temps = clamp_temperature(torch.full((rows,), float(temperature), device=device))
    greedy_mask = torch.full((rows,), greedy, device=device)
    end = prompt_len + max_new_tokens
    seq = torch.zeros(rows, end + gamma, dtype=torch.int64, device=device)
    seq[:, :prompt_len] = prompt

    prefill = target(prompt)
    seq[:, prompt_len] = sample_step(prefill.logits[:, -1], temps, greedy_mask, generator=generator)
    lengths = torch.full((rows,), prompt_len + 1, dtype=torch.int64, device=device)
    context_hidden = prefill.hidden[:, -1]
    row_ids = torch.arange(rows, device=device)
    slots = torch.arange(gamma + 1, device=device)
    sampler = steps.draft_sampler(temps, greedy_mask, generator)

    taus, verified, blocks, read = [], [], [], []
    while bool((lengths < end).any()):
        active = lengths < end
        # 1. draft
        anchor = steps.anchor(seq, lengths)
        block, drafted = steps.propose(draft, context_hidden, anchor, gamma, sampler)

        # 2. schedule
        confidences = None if scheduler is None else steps.scheduler_confidences(draft, block, anchor, drafted)
        limit = steps.verify_limit(draft, confidences, active, gamma, scheduler)

        # 3. verify
        seq[row_ids[:, None], lengths[:, None] + slots[:gamma]] = drafted.tokens
        out = target(seq[:, : int(lengths.max()) + gamma])
        verify_slots = lengths[:, None] - 1 + slots
        target_logits = out.logits[row_ids[:, None], verify_slots]
        cap = limit + 1  # verifies min(gamma, limit) drafts: no cap when limit = gamma
        if greedy:
            result = greedy_verify(drafted.tokens, target_logits, cap=cap)
        else:
            result = chain_verify(drafted.tokens, target_logits, steps.verifier_q_logits(block, drafted),
                                  temps, greedy_mask, generator=generator, cap=cap)

        # 4. commit, never past max_new_tokens; the next anchor is the committed target
        # token, and the draft sees the target's hidden state of the token before it
        committed, context_pos = steps.commit(result, limit, active, lengths, end)
        rows_w, slots_w = (slots < committed[:, None]).nonzero(as_tuple=True)
        seq[rows_w, lengths[rows_w] + slots_w] = result.tokens[rows_w, slots_w]
        context_hidden = out.hidden[row_ids, context_pos]
        lengths = lengths + committed
        taus.append(steps.reported_tau(result, active))
        verified.append(torch.where(active, limit, 0))
        blocks.append(drafted.tokens)
        read.append(confidences)

    return SpecResult(
        seq[:, prompt_len:end], _per_round(taus, rows, device), _per_round(verified, rows, device), len(taus),
        _per_round(blocks, rows, device, gamma),
        None if scheduler is None else _per_round(read, rows, device, gamma, dtype=torch.float64),
    )


def _per_round(values: list[Tensor], rows: int, device: torch.device, *width: int,
               dtype: torch.dtype = torch.int64) -> Tensor:
    """Stack per-round ``[B, *width]`` values into ``[B, rounds, *width]`` (``rounds = 0`` when
    no round ran)."""
    if not values:
        return torch.zeros(rows, 0, *width, dtype=dtype, device=device)
    return torch.stack(values, dim=1)


@torch.no_grad()
def autoregressive_generate(
    target: TargetModel,
    prompt: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Plain autoregressive decoding, the baseline speculative decoding must match (SPEC S9).

    Each step runs the target over the whole sequence and draws the next token with
    ``sample_step`` (argmax when ``greedy``, else ``softmax(L / T)``, ``T`` clamped to 1e-5).

    Args:
        target, prompt, max_new_tokens, temperature, greedy, generator: as
            ``speculative_generate``.
    Returns:
        ``[B, max_new_tokens]`` int64.
    Raises:
        TypeError / ValueError: as ``speculative_generate``.

    Example:
        >>> from dspark_ref.tiny_models import TinyTargetLM
        >>> lm = TinyTargetLM(5, 8, generator=torch.Generator().manual_seed(0))
        >>> autoregressive_generate(lm, torch.tensor([1, 2]), 4, greedy=True).shape
        torch.Size([1, 4])
    """
    prompt = _check_common(target, prompt, max_new_tokens, temperature, greedy, generator)
    rows = prompt.shape[0]
    temps = clamp_temperature(torch.full((rows,), float(temperature), device=prompt.device))
    greedy_mask = torch.full((rows,), greedy, device=prompt.device)
    seq = prompt.long()
    for _ in range(max_new_tokens):
        next_ids = sample_step(target(seq).logits[:, -1], temps, greedy_mask, generator=generator)
        seq = torch.cat([seq, next_ids[:, None]], dim=1)
    return seq[:, prompt.shape[1]:]


def _has_members(obj: object, names: tuple[str, ...]) -> bool:
    # Not isinstance(obj, Protocol): since Python 3.12 that looks attributes up statically
    # and misses nn.Module submodules (``draft.markov_head`` lives in ``_modules``).
    return all(hasattr(obj, name) for name in names)


def _check_common(target, prompt, max_new_tokens, temperature, greedy, generator) -> Tensor:
    """Validate the arguments shared with the baseline; returns the prompt as ``[B, n]`` int64."""
    if not _has_members(target, ("vocab_size", "__call__")):
        raise TypeError(
            f"target: expected a TargetModel (callable with vocab_size), got {type(target).__name__}"
        )
    check_int("target.vocab_size", target.vocab_size, minimum=1)
    check_tensor("prompt", prompt, dtypes=INT_DTYPES)
    if prompt.dim() not in (1, 2):
        raise ValueError(f"prompt: expected a [B, n] or [n] tensor, got shape {tuple(prompt.shape)}")
    prompt = prompt if prompt.dim() == 2 else prompt[None]
    if prompt.numel() == 0:
        raise ValueError(f"prompt: expected at least one row and one token, got shape {tuple(prompt.shape)}")
    check_token_ids("prompt", prompt, target.vocab_size)
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    check_float("temperature", temperature, minimum=0.0)
    if not isinstance(greedy, bool):
        raise TypeError(f"greedy: expected a bool, got {type(greedy).__name__}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator: expected a torch.Generator or None, got {type(generator).__name__}"
        )
    return prompt.long()


def _check_generate(target, draft, prompt, max_new_tokens, temperature, greedy, gamma, scheduler,
                    generator, steps) -> tuple[Tensor, int]:
    """Validate ``speculative_generate``; returns the ``[B, n]`` int64 prompt and ``gamma``."""
    prompt = _check_common(target, prompt, max_new_tokens, temperature, greedy, generator)
    if not _has_members(draft, ("gamma", "markov_head", "confidence_head", "block")):
        raise TypeError(
            f"draft: expected a DraftModel (gamma, markov_head, block), got {type(draft).__name__}"
        )
    if not isinstance(draft.markov_head, MarkovHead):
        raise TypeError(f"draft.markov_head: expected a MarkovHead, got {type(draft.markov_head).__name__}")
    if draft.markov_head.vocab_size != target.vocab_size:
        raise ValueError(
            f"draft: expected vocab_size {target.vocab_size} (as target), got {draft.markov_head.vocab_size}"
        )
    draft_gamma = check_int("draft.gamma", draft.gamma, minimum=1)
    gamma = draft_gamma if gamma is None else check_int("gamma", gamma, minimum=1, maximum=draft_gamma)
    if scheduler is not None:
        if isinstance(scheduler, (str, bytes)) or not (
            callable(scheduler) or isinstance(scheduler, (Sequence, torch.Tensor))
        ):
            raise TypeError(f"scheduler: expected an SPS curve (callable or table) or None, got "
                            f"{type(scheduler).__name__}")
        if draft.confidence_head is None:
            raise ValueError("scheduler: expected a draft with a confidence head (the prefix scheduler "
                             "needs confidences), got draft.confidence_head = None")
    if steps is not None and not isinstance(steps, RoundSteps):
        raise TypeError(f"steps: expected a RoundSteps or None, got {type(steps).__name__}")
    return prompt, gamma
