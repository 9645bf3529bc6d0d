"""Helpers shared by the S5 conformance tests: input generators, logits from given laws,
the ChainVerifier call (CPU outputs; an unsupported feature is a skip), the result-format
check of SPEC S5 and the tests' own inverse-CDF draft sampler.

Used by :mod:`conformance.test_verify` and :mod:`conformance.test_verify_lossless`; not a
test module (pytest collects ``test_*.py`` only), and no test module imports another.
"""

from __future__ import annotations

import pytest
import torch

__all__ = [
    "F64",
    "TOP_K_OFF",
    "check_committed",
    "input_generator",
    "inverse_cdf_draws",
    "logits_of",
    "verify",
    "verify_seeded",
]

F64 = torch.float64  # dtype of uniforms, laws and oracle inputs built by the tests
TOP_K_OFF = 1 << 30  # SGLang's TOP_K_ALL: top-k off, so a row's rule rests on its temperature


def input_generator(case_seed: int) -> torch.Generator:
    """CPU generator for building inputs (fixtures.generators work on CPU), seeded with
    ``case_seed``."""
    return torch.Generator().manual_seed(case_seed)


def logits_of(*laws) -> torch.Tensor:
    """float32 logits ``[n, V]`` whose softmax at T = 1 is each given law (0 -> -inf).

    ``laws``: ``n`` sequences of ``V`` probabilities (one law gives ``[1, V]``).
    """
    return torch.log(torch.tensor(laws, dtype=F64)).float()


def verify(iut, feature: str, device, drafts, target, draft_logits, temps, top_k, **kwargs):
    """``iut.verify`` on ``device`` with CPU outputs; an IUT raising NotImplementedError
    for the ``feature`` in use (explicit uniforms, seeded rows, a kernel this device lacks)
    is a skip naming it.

    Inputs (any device; moved to ``device``): ``drafts [B, l]`` int64, ``target [B, l+1, V]``
    and ``draft_logits [B, l, V]`` logits, ``temps [B]`` float32, ``top_k [B]`` int64;
    tensor keyword arguments (uniforms, seeds, positions) are moved too, others (``cap``,
    ``generator``) passed as they are. Returns ``(accepted [B] int64, tokens [B, l+1]
    int64)`` on the CPU.
    """
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    try:
        accepted, tokens = iut.verify(drafts.to(device), target.to(device), draft_logits.to(device),
                                      temps.to(device), top_k.to(device), **kwargs)
    except NotImplementedError as exc:
        pytest.skip(f"ChainVerifier: {feature} not supported by this IUT ({exc})")
    return accepted.cpu(), tokens.cpu()


def verify_seeded(iut, device, drafts, target, draft_logits, temps, top_k, seeds, positions):
    """:func:`verify` with seeded rows: per-row ``seeds [B]`` and ``positions [B]`` int64
    (skip if the IUT has no seeded rows). Returns ``(accepted [B], tokens [B, l+1])`` int64 on the CPU."""
    return verify(iut, "seeded rows", device, drafts, target, draft_logits, temps, top_k,
                  seeds=seeds, positions=positions)


def check_committed(case_id_: str, accepted, tokens, drafts, vocab: int) -> None:
    """Result format (SPEC S5): ``accepted[B]`` int64 in [0, l]; ``tokens[B, l+1]`` int64:
    the accepted draft prefix, one emitted token id < V, then -1.

    ``accepted`` and ``tokens`` on the CPU; ``drafts [B, l]`` int64 (moved to the CPU here).
    """
    rows, num_drafts = drafts.shape
    assert accepted.dtype == torch.int64 and tokens.dtype == torch.int64, (
        f"{case_id_}: expected int64 accepted and tokens, got {accepted.dtype} and {tokens.dtype}"
    )
    assert tuple(accepted.shape) == (rows,) and tuple(tokens.shape) == (rows, num_drafts + 1), (
        f"{case_id_}: expected accepted [{rows}] and tokens [{rows}, {num_drafts + 1}], got "
        f"{tuple(accepted.shape)} and {tuple(tokens.shape)}"
    )
    bad = (accepted < 0) | (accepted > num_drafts)
    assert not bool(bad.any()), (
        f"{case_id_}: accepted outside [0, {num_drafts}] at row {int(bad.nonzero()[0])}: {accepted[bad][0].item()}"
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
            f"{case_id_}: row {row} is not '<accepted drafts>, <one token < {vocab}>, -1...': drafts "
            f"{drafts[row].tolist()}, accepted {int(accepted[row])}, tokens {tokens[row].tolist()}"
        )


def inverse_cdf_draws(laws: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The test's own draft sampler: token per row of ``laws [B, V]`` at ``uniforms [B]``.

    ``laws`` and ``uniforms`` float64 on one device; returns ``[B]`` int64 token ids, the
    first ``v`` with ``cdf[v] > u`` (clamped to ``V - 1`` against rounding of the CDF).
    """
    cdf = laws.cumsum(-1)
    return torch.searchsorted(cdf, uniforms[:, None].contiguous(), right=True)[:, 0].clamp(max=laws.shape[-1] - 1)
