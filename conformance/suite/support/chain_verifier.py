"""Harness of the S5 verifier cases: calling a ChainVerifier (or the IUT's MarkovBlock that
drafts for it) and checking the format of a round's result (SPEC S5 "Committed per round").

A call that the IUT refuses with ``NotImplementedError`` for the feature in use (explicit
uniforms, seeded rows, a kernel this device lacks) is a skip naming that feature.
"""

from __future__ import annotations

import pytest
import torch

from conformance.contract import MarkovBlock

__all__ = ["verify", "verify_explicit", "verify_seeded", "check_committed", "assert_rows", "iut_markov_drafts"]


def verify(iut, feature: str, device, drafts, target, draft_logits, temps, top_k, **kwargs):
    """``iut.verify`` on ``device`` (tensors moved there, keyword tensors too); returns CPU
    ``(accepted [B] int64, tokens [B, l+1] int64)``. ``feature``: what a skip names."""
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    try:
        accepted, tokens = iut.verify(drafts.to(device), target.to(device), draft_logits.to(device),
                                      temps.to(device), top_k.to(device), **kwargs)
    except NotImplementedError as exc:
        pytest.skip(f"ChainVerifier: {feature} not supported by this IUT ({exc})")
    return accepted.cpu(), tokens.cpu()


def verify_explicit(iut, device, drafts, target, draft_logits, temps, top_k, accept_u, final_u, cap=None):
    """:func:`verify` with explicit uniforms ``accept_u [B, l]``, ``final_u [B]`` (float64) and a cap."""
    return verify(iut, "explicit uniforms", device, drafts, target, draft_logits, temps, top_k,
                  accept_uniforms=accept_u, final_uniforms=final_u, cap=cap)


def verify_seeded(iut, device, drafts, target, draft_logits, temps, top_k, seeds, positions):
    """:func:`verify` with seeded rows: ``seeds [B]``, ``positions [B]`` int64."""
    return verify(iut, "seeded rows", device, drafts, target, draft_logits, temps, top_k,
                  seeds=seeds, positions=positions)


def check_committed(label: str, accepted, tokens, drafts, vocab: int) -> None:
    """Result format (SPEC S5): ``accepted[B]`` int64 in [0, l]; ``tokens[B, l+1]`` int64:
    the accepted draft prefix, one emitted token id < V, then -1.

    Raises:
        AssertionError: naming ``label``, the first bad row, its drafts and what came back.
    """
    rows, num_drafts = drafts.shape
    assert accepted.dtype == torch.int64 and tokens.dtype == torch.int64, (
        f"{label}: expected int64 accepted and tokens, got {accepted.dtype} and {tokens.dtype}"
    )
    assert tuple(accepted.shape) == (rows,) and tuple(tokens.shape) == (rows, num_drafts + 1), (
        f"{label}: expected accepted [{rows}] and tokens [{rows}, {num_drafts + 1}], got "
        f"{tuple(accepted.shape)} and {tuple(tokens.shape)}"
    )
    bad = (accepted < 0) | (accepted > num_drafts)
    assert not bool(bad.any()), (
        f"{label}: accepted outside [0, {num_drafts}] at row {int(bad.nonzero()[0])}: {accepted[bad][0].item()}"
    )
    slots = torch.arange(num_drafts + 1)
    padded = torch.cat([drafts.cpu(), torch.full((rows, 1), -1)], dim=1)
    emitted = tokens.gather(1, accepted[:, None])[:, 0]
    wrong = (
        ((slots < accepted[:, None]) & (tokens != padded)).any(dim=1)
        | ((slots > accepted[:, None]) & (tokens != -1)).any(dim=1)
        | (emitted < 0) | (emitted >= vocab)
    )
    if bool(wrong.any()):
        row = int(wrong.nonzero()[0])
        raise AssertionError(
            f"{label}: row {row} is not '<accepted drafts>, <one token < {vocab}>, -1...': drafts "
            f"{drafts[row].tolist()}, accepted {int(accepted[row])}, tokens {tokens[row].tolist()}"
        )


def assert_rows(label: str, what: str, accepted, tokens, expected: list[tuple[int, list[int]]]) -> None:
    """Row-by-row equality with an oracle's ``(accepted, committed tokens)``.

    Raises:
        AssertionError: naming ``label``, ``what`` and the first differing row.
    """
    for row, (exp_accepted, exp_tokens) in enumerate(expected):
        got = tokens[row, : int(accepted[row]) + 1].tolist()
        if int(accepted[row]) != exp_accepted or got != exp_tokens:
            raise AssertionError(
                f"{label}: {what}: row {row}: expected accepted {exp_accepted}, tokens {exp_tokens}; "
                f"got accepted {int(accepted[row])}, tokens {got}"
            )


def iut_markov_drafts(require, models, rows: int, anchor, temps, top_k, generator, device):
    """``(drafts [B, l], corrected logits [B, l, V])`` of ``rows`` rows drafted by the IUT's
    MarkovBlock with the vanilla head of ``models``
    (:class:`conformance.inputs.verify_rounds.TinyChainModels`) after ``anchor [B]``."""
    block = require(MarkovBlock)
    spec = models.spec
    head = block.load_head("vanilla", {k: v.to(device) for k, v in models.head_state.items()},
                           spec.vocab, models.MARKOV_RANK, models.HIDDEN_SIZE, device)
    base = models.base.to(device).expand(rows, -1, -1).contiguous()
    return block.sample_block(head, base, anchor, None, temps, top_k, generator)
