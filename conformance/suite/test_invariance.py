"""SPEC S5 invariance and per-row verify caps.

* Batch invariance: seeded rows (``ChainVerifier`` with ``seeds``) and greedy rows
  (``GreedyVerifier``; greedy rows of a ``ChainVerifier`` batch, whatever the other rows
  draw) give bit-identical results alone, inside the whole batch, in a permuted batch and
  in chunks, with per-row temperatures, greedy flags and caps differing; a second call
  with the same seeds repeats the first.
* Near ties: greedy rows (``GreedyVerifier``; greedy rows of a ``ChainVerifier`` batch) whose
  maxima are float32 near ties that bfloat16 merges, and sampling rows whose first coin sits
  just below the float32 ``p(x) / q(x)`` of such logits, are bit-identical alone and in any
  batch and equal the float32 / float64 oracle: a lower-precision or batch-dependent
  reduction flips them.
* Inputs unmodified: every tensor handed to ``ChainVerifier``, ``GreedyVerifier``,
  ``TruncatedChainVerifier``, ``StepSampler``, ``NoiseStepSampler`` and ``MarkovBlock`` is
  snapshot before the call and compared bit for bit after it.
* Per-row caps (``cap`` an int64 ``[B]`` tensor): greedy rows exact against the argmax
  oracle, chain rows exact against the float64 replay with explicit uniforms, and, with
  a generator, rows whose drafts all pass (``p(x) > q(x)``) accept exactly
  ``min(l, max(c_b - 1, 0))``. An IUT without per-row caps raises ``NotImplementedError``
  (a skip naming the feature).

All cases are exact. To add a case: register it with ``case(...)`` next to its test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conformance.cases import case, case_id
from conformance.contract import (
    ChainVerifier,
    GreedyVerifier,
    MarkovBlock,
    NoiseStepSampler,
    StepSampler,
    TruncatedChainVerifier,
)
from conformance.inputs import NO_TOP_K_CUT, markov_head_state
from conformance.oracles import verify_oracle as oracle
from conformance.oracles.race_oracle import greedy_by_rule
from conformance.seeds import derive_seed

F64 = torch.float64
CHUNK = 7
# (temperature, top_k) row kinds: sampling at three temperatures, greedy under either rule.
ROW_KINDS = ((1.0, NO_TOP_K_CUT), (0.6, NO_TOP_K_CUT), (1.7, NO_TOP_K_CUT), (0.0, 1))


def _gen(case_seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(case_seed, "inputs"))


def _declared_greedy(adapter, temps: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    return greedy_by_rule(adapter.conventions.greedy_rule, temps, top_k)


def _chain_inputs(rows: int, l: int, vocab: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Drafts from q, targets near q (early rejects and full accepts), mixed row kinds."""
    draft_logits = 2 * torch.randn(rows, l, vocab, generator=gen)
    target = torch.cat([draft_logits + torch.randn(rows, l, vocab, generator=gen),
                        2 * torch.randn(rows, 1, vocab, generator=gen)], dim=1)
    drafts = torch.multinomial(torch.softmax(draft_logits.reshape(-1, vocab), -1), 1, generator=gen).reshape(rows, l)
    kinds = torch.randint(len(ROW_KINDS), (rows,), generator=gen)
    temps = torch.tensor([ROW_KINDS[k][0] for k in kinds.tolist()])
    top_k = torch.tensor([ROW_KINDS[k][1] for k in kinds.tolist()], dtype=torch.int64)
    return {"drafts": drafts, "target": target, "draft_logits": draft_logits, "temps": temps, "top_k": top_k}


def _caps(rows: int, l: int, gen: torch.Generator, low: int = 0) -> torch.Tensor:
    """``[rows]`` int64 caps in ``low..l+1``, each value present. The invariance cases use
    ``low = 1`` (cap 0 is the S5/cap cases' business), so an engine's cap-0 fault does not
    hide what they check."""
    caps = torch.randint(low, l + 2, (rows,), generator=gen)
    caps[: l + 2 - low] = torch.arange(low, l + 2)
    return caps


def _rows(x: dict, index) -> dict:
    return {k: v[index] for k, v in x.items()}


def _call(what: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on CPU outputs; NotImplementedError is a skip naming ``what``."""
    try:
        out = fn(*args, **kwargs)
    except NotImplementedError as exc:
        pytest.skip(f"{what} not supported by this IUT ({exc})")
    return tuple(t.cpu() for t in out)


def _on(device, x: dict) -> dict:
    return {k: v.to(device) for k, v in x.items()}


def _assert_same(label: str, got: tuple, want: tuple, rows) -> None:
    for name, g, w in zip(("accepted", "tokens"), got, want):
        if not torch.equal(g, w):
            bad = (g != w).reshape(g.shape[0], -1).any(dim=1).nonzero().flatten()
            raise AssertionError(
                f"{label}: {name} differ at rows {[int(rows[int(i)]) for i in bad[:8]]} (batch rows): got "
                f"{g[bad[:2]].tolist()}, expected {w[bad[:2]].tolist()}"
            )


# --------------------------------------------------------------------------- batch invariance
SEEDED_CASES = {
    case("S5/invariance/seeded-rows-any-batch", "seeded rows, mixed T / greedy flags: whole batch = each row alone = "
         "permuted = chunks of 7 = a second call (bit-identical)", ("S5.invariance", "S5.seeded", "S5.mixed")): False,
    case("S5/invariance/seeded-rows-any-batch-per-row-caps", "the same with per-row caps 1..l+1",
         ("S5.invariance", "S5.seeded", "S5.cap")): True,
}


@pytest.mark.parametrize("case", SEEDED_CASES, ids=case_id)
def test_S5_seeded_rows_batch_invariant(case, require, dspark_device, case_seed):
    iut = require(ChainVerifier)
    gen, rows, l, vocab = _gen(case_seed), 40, 4, 10
    x = _chain_inputs(rows, l, vocab, gen)
    x["seeds"] = torch.randint(0, 2**62, (rows,), generator=gen)
    x["positions"] = torch.randint(0, 10**6, (rows,), generator=gen)
    if SEEDED_CASES[case]:
        x["cap"] = _caps(rows, l, gen, low=1)
    feature = "seeded rows" + (" with per-row caps" if "cap" in x else "")

    def verify(part: dict):
        part = _on(dspark_device, part)
        return _call(f"ChainVerifier: {feature}", iut.verify, part["drafts"], part["target"], part["draft_logits"],
                     part["temps"], part["top_k"], seeds=part["seeds"], positions=part["positions"],
                     cap=part.get("cap"))

    _check_invariance(case.id, verify, x, gen)


GREEDY_CASES = {
    case("S5/invariance/greedy-rows-any-batch", "GreedyVerifier: whole batch = each row alone = permuted = chunks "
         "(bit-identical)", ("S5.invariance", "S5.greedy-verify")): False,
    case("S5/invariance/greedy-rows-any-batch-per-row-caps", "the same with per-row caps 1..l+1, each row "
         "against the argmax oracle",
         ("S5.invariance", "S5.greedy-verify", "S5.cap")): True,
}


@pytest.mark.parametrize("case", GREEDY_CASES, ids=case_id)
def test_S5_greedy_rows_batch_invariant(case, require, dspark_device, case_seed):
    iut = require(GreedyVerifier)
    gen, rows, l, vocab = _gen(case_seed), 40, 5, 12
    target = torch.randint(0, 3, (rows, l + 1, vocab), generator=gen).float()  # ties: the lowest id
    best = torch.from_numpy(np.argmax(target.numpy(), axis=-1))  # the first maximum
    drafts = torch.where(torch.rand(rows, l, generator=gen) < 0.8, best[:, :l], torch.randint(vocab, (rows, l), generator=gen))
    x = {"drafts": drafts, "target": target}
    if GREEDY_CASES[case]:
        x["cap"] = _caps(rows, l, gen, low=1)

    def verify(part: dict):
        part = _on(dspark_device, part)
        return _call(f"GreedyVerifier{': per-row caps' if 'cap' in part else ''}", iut.verify_greedy, part["drafts"],
                     part["target"], part.get("cap"))

    _check_invariance(case.id, verify, x, gen)
    accepted, tokens = verify(x)
    for b in range(rows):
        cap = None if "cap" not in x else int(x["cap"][b])
        exp_acc, exp_tokens, _ = oracle.greedy_round(drafts[b].tolist(), target[b].numpy(), cap)
        got = tokens[b, : int(accepted[b]) + 1].tolist()
        assert (int(accepted[b]), got) == (exp_acc, exp_tokens), (
            f"{case.id}: row {b} (cap {cap}): expected {exp_acc}, {exp_tokens}; got {int(accepted[b])}, {got}"
        )


def _check_invariance(label: str, verify, x: dict, gen: torch.Generator) -> None:
    """Whole batch against each row alone, a permutation, chunks, and a second call."""
    rows = x["drafts"].shape[0]
    whole = verify(x)
    _assert_same(f"{label}: a second call", verify(x), whole, range(rows))
    alone = [verify(_rows(x, slice(b, b + 1))) for b in range(rows)]
    _assert_same(f"{label}: each row alone vs in the batch", tuple(torch.cat(parts) for parts in zip(*alone)),
                 whole, range(rows))
    perm = torch.randperm(rows, generator=gen)
    permuted = verify(_rows(x, perm))
    _assert_same(f"{label}: permuted batch", permuted, tuple(t[perm] for t in whole), perm.tolist())
    chunks = [verify(_rows(x, slice(s, s + CHUNK))) for s in range(0, rows, CHUNK)]
    _assert_same(f"{label}: chunks of {CHUNK}", tuple(torch.cat(parts) for parts in zip(*chunks)), whole, range(rows))


MIXED_GREEDY = case("S5/invariance/greedy-rows-in-mixed-chain-batch", "ChainVerifier with a generator: greedy rows "
                    "give the same result alone and among sampling rows, in any order (bit-identical)",
                    ("S5.invariance", "S5.mixed", "S5.greedy-verify"))


@pytest.mark.parametrize("case", [MIXED_GREEDY], ids=case_id)
def test_S5_greedy_rows_in_mixed_chain_batch(case, require, dspark_adapter, dspark_device, case_seed, case_generator):
    iut = require(ChainVerifier)
    gen, rows, l, vocab = _gen(case_seed), 48, 4, 10
    x = _chain_inputs(rows, l, vocab, gen)
    x["target"] = torch.randint(0, 3, x["target"].shape, generator=gen).float()  # greedy ties
    greedy = _declared_greedy(dspark_adapter, x["temps"], x["top_k"])
    assert 0 < int(greedy.sum()) < rows, f"{case.id}: case design: greedy rows {int(greedy.sum())} of {rows}"

    def verify(part: dict):
        part = _on(dspark_device, part)
        return _call("ChainVerifier", iut.verify, part["drafts"], part["target"], part["draft_logits"], part["temps"],
                     part["top_k"], generator=case_generator)

    ids = greedy.nonzero().flatten()
    whole = tuple(t[ids] for t in verify(x))
    alone = verify(_rows(x, ids))
    _assert_same(f"{case.id}: greedy rows alone vs among sampling rows", alone, whole, ids.tolist())
    perm = torch.randperm(rows, generator=gen)
    permuted = verify(_rows(x, perm))
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(rows)
    _assert_same(f"{case.id}: permuted batch", tuple(t[inverse[ids]] for t in permuted), whole, ids.tolist())
    for b, row in enumerate(ids.tolist()):
        exp_acc, exp_tokens, _ = oracle.greedy_round(x["drafts"][row].tolist(), x["target"][row].numpy())
        got = whole[1][b, : int(whole[0][b]) + 1].tolist()
        assert (int(whole[0][b]), got) == (exp_acc, exp_tokens), (
            f"{case.id}: greedy row {row}: expected {exp_acc}, {exp_tokens}; got {int(whole[0][b])}, {got}"
        )


# --------------------------------------------------------------------------- near ties
#: bfloat16 keeps 8 significant bits: on [2, 4) its spacing is 2^-6, so the float32 logit
#: ``NEAR_TIE_TOP + NEAR_TIE_GAP`` (a quarter of that spacing above the bfloat16 value
#: ``NEAR_TIE_TOP``) rounds back to it, and every other logit here is a multiple of 1/8 in
#: [-2, 2), which bfloat16 holds exactly: only the near tie moves under a bfloat16 cast.
NEAR_TIE_TOP = 3.0
NEAR_TIE_GAP = 2.0**-8
#: Relative distance of a boundary coin below the float32 ratio ``p(x) / q(x)``: far above
#: float32 rounding (~1e-6), far below what a bfloat16 cast of the near tie moves the ratio
#: (>= 2^-8 (1 - p(x)) / T, checked per row).
COIN_MARGIN = 2.0**-12
# (temperature, top_k) of the near-tie cases: powers of two, so L / T stays exact.
NEAR_TIE_KINDS = ((1.0, NO_TOP_K_CUT), (0.5, NO_TOP_K_CUT), (0.0, 1))


def _near_tie_logits(rows: int, positions: int, vocab: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits [rows, positions, vocab] f32, winner [rows, positions] i64)``: at every position a
    pair of ids ``i < j`` with ``L_i = NEAR_TIE_TOP`` and ``L_j = NEAR_TIE_TOP + NEAR_TIE_GAP``, the
    rest multiples of 1/8 in [-2, 2). The float32 argmax is ``j`` (the winner); in bfloat16 the
    two tie and the lowest-index argmax is ``i``: a lower-precision argmax flips to ``i``."""
    logits = torch.randint(-16, 16, (rows, positions, vocab), generator=gen).float() / 8
    pairs = torch.stack([torch.randperm(vocab, generator=gen)[:2] for _ in range(rows * positions)])
    low, high = pairs.sort(dim=1).values.reshape(rows, positions, 2).unbind(-1)
    logits.scatter_(-1, low[..., None], NEAR_TIE_TOP)
    logits.scatter_(-1, high[..., None], NEAR_TIE_TOP + NEAR_TIE_GAP)
    assert torch.equal(logits.argmax(-1), high) and torch.equal(logits.bfloat16().float().argmax(-1), low), (
        "case design: the float32 argmax must be the near tie's higher id and the bfloat16 one its lower id"
    )
    return logits, high


NEAR_TIE_GREEDY = case("S5/invariance/greedy-near-ties-any-batch", "GreedyVerifier on near ties that bfloat16 merges "
                       "(float32 argmax the higher id, bfloat16 the lower): whole batch = each row alone = permuted = "
                       "chunks, each row against the float32 argmax", ("S5.invariance", "S5.greedy-verify"))


@pytest.mark.parametrize("case", [NEAR_TIE_GREEDY], ids=case_id)
def test_S5_greedy_near_ties_batch_invariant(case, require, dspark_device, case_seed):
    """Every position's maximum is a near tie (:func:`_near_tie_logits`); drafts follow the
    float32 argmax 80% of the time, so long accepted runs and the bonus both meet a near tie.
    A verifier whose argmax runs in a lower precision, or one that changes with the batch,
    disagrees with itself alone or with the argmax oracle."""
    iut = require(GreedyVerifier)
    gen, rows, l, vocab = _gen(case_seed), 40, 4, 12
    target, best = _near_tie_logits(rows, l + 1, vocab, gen)
    drafts = torch.where(torch.rand(rows, l, generator=gen) < 0.8, best[:, :l], torch.randint(vocab, (rows, l),
                                                                                              generator=gen))
    x = {"drafts": drafts, "target": target}

    def verify(part: dict):
        part = _on(dspark_device, part)
        return _call("GreedyVerifier", iut.verify_greedy, part["drafts"], part["target"], None)

    _check_invariance(case.id, verify, x, gen)
    accepted, tokens = verify(x)
    for b in range(rows):
        exp_acc, exp_tokens, _ = oracle.greedy_round(drafts[b].tolist(), target[b].double().numpy())
        got = tokens[b, : int(accepted[b]) + 1].tolist()
        assert (int(accepted[b]), got) == (exp_acc, exp_tokens), (
            f"{case.id}: row {b}: expected {exp_acc}, {exp_tokens} (float32 argmax of near ties); got "
            f"{int(accepted[b])}, {got}"
        )


NEAR_TIE_CHAIN = case("S5/invariance/near-ties-mixed-chain-explicit", "ChainVerifier, explicit uniforms, greedy and "
                      "sampling rows on near ties that bfloat16 merges, each sampling row's first coin just below its "
                      "float32 p(x) / q(x): whole batch = each row alone = permuted = chunks = the float64 replay",
                      ("S5.invariance", "S5.mixed", "S5.greedy-verify"))


def _near_tie_chain_inputs(adapter, rows: int, l: int, vocab: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Near-tie target logits (:func:`_near_tie_logits`); draft logits multiples of 1/8, the
    first draft of a sampling row the near tie's winner with draft logit ``NEAR_TIE_TOP + 1``
    (so ``q(x) > p(x)``), its coin ``COIN_MARGIN`` below ``p(x) / q(x)`` (float64 of the float32
    logits): accepted in float32, rejected once the near tie is rounded to bfloat16 (checked)."""
    target, best = _near_tie_logits(rows, l + 1, vocab, gen)
    draft_logits = torch.randint(-16, 16, (rows, l, vocab), generator=gen).float() / 8
    kinds = torch.arange(rows) % len(NEAR_TIE_KINDS)
    temps = torch.tensor([NEAR_TIE_KINDS[k][0] for k in kinds.tolist()])
    top_k = torch.tensor([NEAR_TIE_KINDS[k][1] for k in kinds.tolist()], dtype=torch.int64)
    greedy = _declared_greedy(adapter, temps, top_k)
    drafts = torch.where(torch.rand(rows, l, generator=gen) < 0.8, best[:, :l], torch.randint(vocab, (rows, l),
                                                                                              generator=gen))
    drafts[~greedy, 0] = best[~greedy, 0]
    draft_logits[~greedy, 0] = draft_logits[~greedy, 0].scatter(-1, best[~greedy, :1], NEAR_TIE_TOP + 1)
    coins = torch.rand(rows, l, dtype=F64, generator=gen)
    for b in (~greedy).nonzero().flatten().tolist():
        x, temp = int(drafts[b, 0]), float(temps[b])

        def ratio(t: torch.Tensor) -> float:
            p = oracle.step_law(t[b, 0].double().numpy(), temp, False)
            return float(p[x] / oracle.step_law(draft_logits[b, 0].double().numpy(), temp, False)[x])

        exact, rounded = ratio(target), ratio(target.bfloat16().float())
        coins[b, 0] = exact * (1 - COIN_MARGIN)
        assert rounded < exact * (1 - 2 * COIN_MARGIN) and exact < 1, (
            f"case design: row {b}: p(x) / q(x) = {exact} in float32, {rounded} in bfloat16; the coin must split them"
        )
    return {"drafts": drafts, "target": target, "draft_logits": draft_logits, "temps": temps, "top_k": top_k,
            "accept_uniforms": coins, "final_uniforms": torch.rand(rows, dtype=F64, generator=gen)}


@pytest.mark.parametrize("case", [NEAR_TIE_CHAIN], ids=case_id)
def test_S5_chain_near_ties_batch_invariant(case, require, dspark_adapter, dspark_device, case_seed):
    """Greedy rows meet a near tie at every position; each sampling row accepts its first
    draft by a relative margin of ``COIN_MARGIN`` that a bfloat16 rounding of the near tie
    reverses. Exact against the float64 replay (SPEC S0: explicit uniforms fix the result)."""
    iut = require(ChainVerifier)
    gen, rows, l, vocab = _gen(case_seed), 42, 2, 12
    x = _near_tie_chain_inputs(dspark_adapter, rows, l, vocab, gen)

    def verify(part: dict):
        part = _on(dspark_device, part)
        return _call("ChainVerifier: explicit uniforms", iut.verify, part["drafts"], part["target"],
                     part["draft_logits"], part["temps"], part["top_k"], accept_uniforms=part["accept_uniforms"],
                     final_uniforms=part["final_uniforms"])

    _check_invariance(case.id, verify, x, gen)
    accepted, tokens = verify(x)
    greedy = _declared_greedy(dspark_adapter, x["temps"], x["top_k"])
    for b in range(rows):
        args = (x["drafts"][b].tolist(), x["target"][b].double().numpy())
        if bool(greedy[b]):
            exp_acc, exp_tokens, _ = oracle.greedy_round(*args)
        else:
            exp_acc, exp_tokens, _ = oracle.replay_round(*args, x["draft_logits"][b].double().numpy(),
                                                         float(x["temps"][b]), False,
                                                         x["accept_uniforms"][b].tolist(),
                                                         float(x["final_uniforms"][b]))
        got = tokens[b, : int(accepted[b]) + 1].tolist()
        assert (int(accepted[b]), got) == (exp_acc, exp_tokens), (
            f"{case.id}: row {b} (T {float(x['temps'][b])}, greedy {bool(greedy[b])}): expected {exp_acc}, "
            f"{exp_tokens}; got {int(accepted[b])}, {got}"
        )


# --------------------------------------------------------------------------- per-row caps
CAP_EXPLICIT = case("S5/cap/per-row-chain-explicit", "explicit uniforms, per-row caps 0..l+1 in one batch of mixed "
                    "rows: each row equals the float64 replay under its own cap", ("S5.cap", "S5.mixed"))


@pytest.mark.parametrize("case", [CAP_EXPLICIT], ids=case_id)
def test_S5_per_row_caps_explicit(case, require, dspark_adapter, dspark_device, case_seed):
    iut = require(ChainVerifier)
    gen, rows, l, vocab = _gen(case_seed), 120, 4, 8
    x = _chain_inputs(rows, l, vocab, gen)
    caps = _caps(rows, l, gen)
    coins = torch.rand(rows, l, dtype=F64, generator=gen)
    finals = torch.rand(rows, dtype=F64, generator=gen)
    d = _on(dspark_device, x)
    accepted, tokens = _call("ChainVerifier: explicit uniforms with per-row caps", iut.verify, d["drafts"], d["target"],
                             d["draft_logits"], d["temps"], d["top_k"], accept_uniforms=coins.to(dspark_device),
                             final_uniforms=finals.to(dspark_device), cap=caps.to(dspark_device))
    greedy = _declared_greedy(dspark_adapter, x["temps"], x["top_k"])
    for b in range(rows):
        args = (x["drafts"][b].tolist(), x["target"][b].double().numpy())
        cap = int(caps[b])
        if bool(greedy[b]):
            exp_acc, exp_tokens, _ = oracle.greedy_round(*args, cap)
        else:
            exp_acc, exp_tokens, _ = oracle.replay_round(*args, x["draft_logits"][b].double().numpy(),
                                                         float(x["temps"][b]), False, coins[b].tolist(),
                                                         float(finals[b]), cap)
        got = tokens[b, : int(accepted[b]) + 1].tolist()
        assert (int(accepted[b]), got) == (exp_acc, exp_tokens), (
            f"{case.id}: row {b} (cap {cap}, T {float(x['temps'][b])}, greedy {bool(greedy[b])}): expected "
            f"{exp_acc}, {exp_tokens}; got {int(accepted[b])}, {got}"
        )


CAP_GENERATOR = case("S5/cap/per-row-chain-generator", "generator uniforms, drafts that always pass (p(x) > q(x)), "
                     "per-row caps 0..l+1: accepted = min(l, max(c - 1, 0)) row by row, exactly", ("S5.cap",))


@pytest.mark.parametrize("case", [CAP_GENERATOR], ids=case_id)
def test_S5_per_row_caps_generator(case, require, dspark_device, case_seed, case_generator):
    """Target logits are the draft logits plus 1 at each drafted token, so ``u q(x) < p(x)``
    for every coin: the raw count is ``l`` and the capped count is the cap's limit.
    A cap taken from one row for all rows, or ignored, shows at once."""
    iut = require(ChainVerifier)
    gen, rows, l, vocab = _gen(case_seed), 60, 4, 8
    x = _chain_inputs(rows, l, vocab, gen)
    x["temps"], x["top_k"] = torch.ones(rows), torch.full((rows,), NO_TOP_K_CUT)
    x["target"][:, :l] = x["draft_logits"] + torch.nn.functional.one_hot(x["drafts"], vocab).float()
    caps = _caps(rows, l, gen)
    d = _on(dspark_device, x)
    accepted, tokens = _call("ChainVerifier: per-row caps", iut.verify, d["drafts"], d["target"], d["draft_logits"],
                             d["temps"], d["top_k"], generator=case_generator, cap=caps.to(dspark_device))
    limit = (caps - 1).clamp(0, l)
    assert torch.equal(accepted, limit), (
        f"{case.id}: expected accepted = min(l, max(c - 1, 0)) = {limit[:12].tolist()}... for caps "
        f"{caps[:12].tolist()}..., got {accepted[:12].tolist()}..."
    )
    prefix = torch.where(torch.arange(l) < limit[:, None], tokens[:, :l] == x["drafts"], True).all(dim=1)
    assert bool(prefix.all()), f"{case.id}: rows {(~prefix).nonzero().flatten()[:8].tolist()} changed their accepted drafts"


# --------------------------------------------------------------------------- inputs unmodified
def _snapshot(values: dict) -> dict:
    return {k: v.detach().clone() for k, v in values.items() if isinstance(v, torch.Tensor)}


def _assert_unmodified(label: str, before: dict, after: dict) -> None:
    changed = [k for k, v in before.items()
               if not (v.shape == after[k].shape and v.dtype == after[k].dtype
                       and torch.equal(torch.nan_to_num(v.cpu(), nan=7.0), torch.nan_to_num(after[k].cpu(), nan=7.0)))]
    assert not changed, f"{label}: inputs modified in place: {changed}"


UNMODIFIED_CASES = {
    case(f"S5/invariance/inputs-unmodified-{name}", f"{name}: every input tensor bit-identical after the call "
         "(logits, probabilities, sampling parameters, uniforms, caps)", ("S5.invariance",)): name
    for name in ("chain", "chain-explicit", "greedy", "truncated-chain", "step-sampler", "noise-step-sampler",
                 "markov-block")
}


def _inputs_for(name: str, gen: torch.Generator) -> tuple[type, dict]:
    rows, l, vocab = 24, 3, 16
    x = _chain_inputs(rows, l, vocab, gen)
    x["target"][:, :, 0] = -math.inf
    if name in ("chain", "chain-explicit"):
        x["cap"] = _caps(rows, l, gen, low=1)
        if name == "chain-explicit":
            x["accept_uniforms"] = torch.rand(rows, l, dtype=F64, generator=gen)
            x["final_uniforms"] = torch.rand(rows, dtype=F64, generator=gen)
        return ChainVerifier, x
    if name == "greedy":
        return GreedyVerifier, {"drafts": x["drafts"], "target": x["target"], "cap": _caps(rows, l, gen, low=1)}
    if name == "truncated-chain":
        probs = torch.softmax(x["draft_logits"], dim=-1)
        return TruncatedChainVerifier, {"drafts": x["drafts"], "target": x["target"], "draft_probs": probs,
                                        "temps": x["temps"].clamp(min=0.3), "top_k": torch.full((rows,), 5),
                                        "top_p": torch.full((rows,), 0.9), "min_p": torch.full((rows,), 0.05)}
    logits = x["target"][:, 0].contiguous()
    if name in ("step-sampler", "noise-step-sampler"):
        step = {"logits": logits, "temps": x["temps"], "top_k": x["top_k"]}
        if name == "noise-step-sampler":
            step["noise"] = torch.empty(rows, vocab).exponential_(generator=gen)
            return NoiseStepSampler, step
        return StepSampler, step
    return MarkovBlock, {"base": 2 * torch.randn(rows, l, vocab, generator=gen), "prev": torch.randint(vocab, (rows,),
                         generator=gen), "temps": x["temps"], "top_k": x["top_k"],
                         "state": markov_head_state("vanilla", vocab, 4, 8, gen, scale=0.5)}


@pytest.mark.parametrize("case", UNMODIFIED_CASES, ids=case_id)
def test_S5_inputs_not_modified_in_place(case, require, dspark_device, case_seed, case_generator):
    name = UNMODIFIED_CASES[case]
    capability, x = _inputs_for(name, _gen(case_seed))
    iut = require(capability)
    state = x.pop("state", None)
    x = _on(dspark_device, x)
    before = _snapshot(x)
    state_on = None if state is None else {k: v.to(dspark_device) for k, v in state.items()}
    state_before = None if state_on is None else _snapshot(state_on)
    what = f"{capability.__name__} ({name})"
    if capability is ChainVerifier:
        extra = {k: x[k] for k in ("cap", "accept_uniforms", "final_uniforms") if k in x}
        if "accept_uniforms" not in extra:
            extra["generator"] = case_generator
        _call(what, iut.verify, x["drafts"], x["target"], x["draft_logits"], x["temps"], x["top_k"], **extra)
    elif capability is GreedyVerifier:
        _call(what, iut.verify_greedy, x["drafts"], x["target"], x["cap"])
    elif capability is TruncatedChainVerifier:
        _call(what, iut.verify_truncated, x["drafts"], x["target"], x["draft_probs"], x["temps"], x["top_k"],
              x["top_p"], x["min_p"], case_generator)
    elif capability is StepSampler:
        _call(what, lambda *a: (iut.sample(*a),), x["logits"], x["temps"], x["top_k"], x["logits"].shape[1],
              case_generator)
    elif capability is NoiseStepSampler:
        _call(what, lambda *a: (iut.sample_with_noise(*a),), x["logits"], x["temps"], x["top_k"], x["noise"])
    else:
        vocab = x["base"].shape[-1]
        head = iut.load_head("vanilla", state_on, vocab, 4, 8, dspark_device)
        tokens, _ = _call(what, iut.sample_block, head, x["base"], x["prev"], None, x["temps"], x["top_k"],
                          case_generator)
        forced = torch.cat([x["prev"][:, None], tokens[:, :-1].to(dspark_device)], dim=1)
        before["forced"], x["forced"] = forced.clone(), forced
        _call(what, lambda *a: (iut.apply_block_logits(*a),), head, x["base"], forced, None)
        _assert_unmodified(f"{case.id}: head weights", state_before, state_on)
    _assert_unmodified(case.id, before, x)
