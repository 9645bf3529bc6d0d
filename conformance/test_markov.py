"""Conformance tests for SPEC S2: Markov heads, block sampling and teacher forcing.

Covers, through :class:`~conformance.contract.MarkovBlock` only:

* teacher forcing (``apply_block_logits``) against a float64 oracle of each head's formula
  (vanilla, gated, rnn) written below, within a derived float32 error bound;
* ``sample_block`` against the IUT's own teacher forcing: bit for bit, greedy rows take the
  argmax of the corrected logits they return (one pass: tokens and logits agree);
* the joint law of ``(x_0, x_1)`` of sampled blocks against the exact Markov-chain law
  (float64 enumeration over a small vocabulary), one chi-square per head;
* edge cases: ``gamma = 0``, gated / rnn heads without hidden states, ``markov_rank <= 0``.

The oracle and the chain law are also the reference of ``test_folded.py`` (SPEC S4).
Heads travel in the reference layout built by ``fixtures.generators.markov_head_state``.

To add a case: add ``case(...): parameters`` to the dict of its family below (each dict maps
a registered :class:`~conformance.cases.Case` to what its test reads).
"""

from __future__ import annotations

import pytest
import torch

from conformance import stats
from conformance.seeds import derive_seed
from conformance.cases import case, case_id
from conformance.contract import MarkovBlock
from fixtures.generators import markov_head_state

HEAD_TYPES = ("vanilla", "gated", "rnn")
#: "No top-k cut" as SGLang stages it; a row is sampling under either greedy rule with this
#: and a temperature >= 1e-5. Greedy rows use (T = 0, top_k = 1): greedy under both rules.
NO_TOP_K_CUT = 1 << 30
#: Unit roundoff ``u`` of each dtype: round-to-nearest errs by at most ``u |x|``.
UNIT_ROUNDOFF = {
    torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8,
}
#: Error of a float32 sigmoid / tanh of its rounded input, in units of ``u`` (libm / SLEEF
#: give <= 3.5 ulp on (-1, 1); doubled).
NONLINEAR_ULPS = 8


# ----------------------------------------------------------------------------- helpers
def sub_seed(case_seed: int, label: str) -> int:
    """An independent seed for one use inside a case (inputs, weights, a session)."""
    return derive_seed(case_seed, label)


def input_generator(case_seed: int) -> torch.Generator:
    """CPU generator for a case's inputs, independent of the IUT's ``case_generator`` stream."""
    return torch.Generator().manual_seed(sub_seed(case_seed, "inputs"))


def load_random_head(iut, head_type, *, vocab, rank, hidden_size, seed, device, scale=0.5):
    """A random head in the reference layout, loaded into the IUT: ``(handle, state_dict)``."""
    weights = torch.Generator().manual_seed(seed)
    state = markov_head_state(head_type, vocab, rank, hidden_size, weights, scale=scale)
    state = {name: tensor.to(device) for name, tensor in state.items()}
    return iut.load_head(head_type, state, vocab, rank, hidden_size, device), state


def random_block_inputs(head_type, *, batch, gamma, vocab, hidden_size, generator, device, scale=1.0):
    """``(base_logits[B, gamma, V] f32, first_prev[B] i64, hidden[B, gamma, d] | None)``."""
    base = scale * torch.randn(batch, gamma, vocab, generator=generator)
    first_prev = torch.randint(vocab, (batch,), generator=generator)
    hidden = torch.randn(batch, gamma, hidden_size, generator=generator) if head_type != "vanilla" else None
    return base.to(device), first_prev.to(device), None if hidden is None else hidden.to(device)


def repeat_rows(tensor: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """``n`` copies of a one-row tensor ``[1, ...]`` as ``[n, ...]`` (None stays None)."""
    return None if tensor is None else tensor.expand(n, *tensor.shape[1:]).contiguous()


def prev_tokens(first_prev: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Teacher-forcing inputs ``[x0, x_0 .. x_{gamma-2}]`` of a drawn block ``tokens[B, gamma]``."""
    return torch.cat([first_prev[:, None], tokens[:, :-1]], dim=1)


def row_params(greedy: list[bool], temperature: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(temperatures[B] f32, top_k[B] i64)``: greedy rows (T = 0, top_k = 1), the others
    sampling at ``temperature`` with no top-k cut (the same rows under either greedy rule)."""
    greedy_t = torch.tensor(greedy)
    temps = torch.where(greedy_t, 0.0, temperature).to(torch.float32)
    top_k = torch.where(greedy_t, 1, NO_TOP_K_CUT).to(torch.int64)
    return temps.to(device), top_k.to(device)


def check_block_shapes(case, tokens, corrected, batch, gamma, vocab):
    assert tokens.dtype == torch.int64 and tuple(tokens.shape) == (batch, gamma), (
        f"{case.id}: expected tokens int64 [{batch}, {gamma}], got {tokens.dtype} {tuple(tokens.shape)}"
    )
    assert tuple(corrected.shape) == (batch, gamma, vocab), (
        f"{case.id}: expected corrected logits [{batch}, {gamma}, {vocab}], got {tuple(corrected.shape)}"
    )
    assert bool(((tokens >= 0) & (tokens < vocab)).all()), f"{case.id}: token ids outside [0, {vocab})"


def check_greedy_rows(case, tokens, logits, rows, what="corrected logits"):
    """Greedy rows took the argmax (lowest index on ties) of ``logits`` at every step."""
    argmax = logits[rows].argmax(dim=-1)
    bad = (tokens[rows] != argmax).nonzero()
    assert bad.numel() == 0, (
        f"{case.id}: greedy row {rows[int(bad[0, 0])]} step {int(bad[0, 1])} drew token "
        f"{int(tokens[rows][tuple(bad[0])])}, but the argmax of its {what} is {int(argmax[tuple(bad[0])])}"
    )


# ----------------------------------------------------------------------------- float64 oracle
def oracle_block_logits(head_type, state, base, prev, hidden):
    """SPEC S2 corrected logits in float64 and a bound on a float32 evaluation's error.

    ``L_k = U_k + W2 f_k`` with ``f_k = W1[prev_k]`` (vanilla), ``g * W1[prev_k]`` with
    ``g = sigmoid(Wg [h_k ; W1[prev_k]] + bg)`` (gated), or ``tanh(out)`` where
    ``(gate, cand, out) = Wz [s_{k-1} ; W1[prev_k] ; h_k] + bz``, ``s_k = sigmoid(gate)
    s_{k-1} + (1 - sigmoid(gate)) tanh(cand)``, ``s_0 = 0`` (rnn). Weights in the reference
    layout: ``W1.weight [V, r]``, ``W2.weight [V, r]``, ``Wg.weight [r, d + r]``,
    ``Wz.weight [3r, 2r + d]`` (+ biases).

    The bound is a first-order running error bound of float32 arithmetic (``u = 2^-24``):
    an n-term dot product errs by ``n u |w|.|x|`` (Higham, Thm 3.5) plus ``|w|.dx`` from
    its inputs' errors ``dx``; sigmoid and tanh pass input errors on times their derivative
    (``s(1 - s)``, ``1 - t^2``) plus ``NONLINEAR_ULPS u`` of their own; products and sums
    add ``u`` of their result. Derivatives and magnitudes are taken at the float64 values
    and the total is doubled (second-order terms). Inputs (weights, base logits, hidden
    states) are exact. The rnn state's error is carried through the recurrence, so the
    bound grows with the block; keep rnn weights near ``1/sqrt(fan-in)`` for long blocks.

    Args:
        base: ``[B, gamma, V]``; prev: ``[B, gamma]`` ids ``[x0, x_0 ..]``; hidden:
            ``[B, gamma, d]`` or None (vanilla). Any device, any float dtype.
    Returns:
        ``(logits[B, gamma, V] f64, bound[B, gamma, V] f64)`` on the CPU.
    """
    u = UNIT_ROUNDOFF[torch.float32]
    sd = {name: t.detach().to("cpu", torch.float64) for name, t in state.items()}
    w1, w2 = sd["W1.weight"], sd["W2.weight"]
    base, prev = base.detach().to("cpu", torch.float64), prev.cpu()
    hidden = None if hidden is None else hidden.detach().to("cpu", torch.float64)
    batch, gamma, _ = base.shape
    rank = w1.shape[1]
    s = torch.zeros(batch, rank, dtype=torch.float64)
    ds = torch.zeros_like(s)
    logits, bounds = [], []
    for k in range(gamma):
        e = w1[prev[:, k]]
        if head_type == "vanilla":
            f, df = e, torch.zeros_like(e)
        elif head_type == "gated":
            wg, bg = sd["Wg.weight"], sd["Wg.bias"]
            x = torch.cat([hidden[:, k], e], dim=-1)
            a = x @ wg.T + bg
            da = (x.shape[-1] + 1) * u * (x.abs() @ wg.abs().T + bg.abs())
            g = torch.sigmoid(a)
            dg = g * (1 - g) * da + NONLINEAR_ULPS * u
            f = g * e
            df = e.abs() * dg + u * f.abs()
        else:
            wz, bz = sd["Wz.weight"], sd["Wz.bias"]
            z = torch.cat([s, e, hidden[:, k]], dim=-1)
            pre = z @ wz.T + bz
            dpre = (z.shape[-1] + 1) * u * (z.abs() @ wz.abs().T + bz.abs()) + ds @ wz[:, :rank].abs().T
            (gate, cand, out), (dgate, dcand, dout) = pre.chunk(3, dim=-1), dpre.chunk(3, dim=-1)
            keep, c = torch.sigmoid(gate), torch.tanh(cand)
            dkeep = keep * (1 - keep) * dgate + NONLINEAR_ULPS * u
            dc = (1 - c**2) * dcand + NONLINEAR_ULPS * u
            s_next = keep * s + (1 - keep) * c
            ds = ((s.abs() + c.abs()) * dkeep + keep * ds + (1 - keep) * dc
                  + 3 * u * ((keep * s).abs() + ((1 - keep) * c).abs()))
            s = s_next
            f = torch.tanh(out)
            df = (1 - f**2) * dout + NONLINEAR_ULPS * u
        step = base[:, k] + f @ w2.T
        dstep = rank * u * (f.abs() @ w2.abs().T) + df @ w2.abs().T + u * step.abs()
        logits.append(step)
        bounds.append(2 * dstep)
    return torch.stack(logits, dim=1), torch.stack(bounds, dim=1)


def joint_law(head_type, state, base, anchor, hidden, temperature):
    """Exact float64 law of ``(x_0, x_1)`` of a block drawn from one row at ``temperature``.

    Args: ``base[1, gamma >= 2, V]``, ``anchor`` an int, ``hidden[1, gamma, d]`` or None.
    Returns: ``[V * V]`` probabilities, index ``x_0 * V + x_1``:
    ``softmax(L_0 / T)[x_0] * softmax(L_1(x_0) / T)[x_1]`` with ``L_1(x_0)`` the step-1 logits
    after drawing ``x_0`` (the rnn state after step 0 does not depend on ``x_0``).
    """
    vocab = base.shape[-1]
    prev = torch.stack([torch.full((vocab,), anchor), torch.arange(vocab)], dim=1)
    rows_hidden = None if hidden is None else hidden[:, :2].expand(vocab, -1, -1)
    logits, _ = oracle_block_logits(head_type, state, base[:, :2].expand(vocab, -1, -1), prev, rows_hidden)
    p0 = torch.softmax(logits[0, 0] / temperature, dim=-1)
    p1 = torch.softmax(logits[:, 1] / temperature, dim=-1)
    return (p0[:, None] * p1).flatten()


def assert_within_oracle(case, got, expected, bound, what):
    """``|got - expected| <= bound + u_out |expected|`` (``u_out``: rounding into got's dtype)."""
    got = got.detach().to("cpu", torch.float64)
    if got.dtype != torch.float32:
        bound = bound + UNIT_ROUNDOFF.get(got.dtype, 0.0) * expected.abs()
    error = (got - expected).abs()
    worst = int(torch.argmax(error - bound))
    assert bool((error <= bound).all()), (
        f"{case.id}: {what} differ from the float64 SPEC S2 formula beyond the float32 error "
        f"bound at flat index {worst}: got {got.flatten()[worst].item()!r}, expected "
        f"{expected.flatten()[worst].item()!r} (bound {bound.flatten()[worst].item():.3g})"
    )


# ----------------------------------------------------------------------------- oracle cases
# case -> (head type, batch, gamma, V, r, d, base dtype, weight scale)
ORACLE_CASES = {
    case("S2/oracle/vanilla", "teacher forcing = W2(W1[prev]) + U in float64, float32 bound",
         ["S2.vanilla", "S2.teacher-forcing"]): ("vanilla", 5, 4, 50, 8, 6, torch.float32, 0.5),
    case("S2/oracle/gated", "teacher forcing = W2(sigmoid(Wg [h; W1[prev]] + bg) * W1[prev]) + U",
         ["S2.gated", "S2.teacher-forcing"]): ("gated", 5, 4, 50, 8, 6, torch.float32, 0.5),
    case("S2/oracle/rnn", "teacher forcing through the rnn cell, state carried, s_0 = 0",
         ["S2.rnn", "S2.teacher-forcing"]): ("rnn", 5, 4, 50, 8, 6, torch.float32, 0.5),
    # Weights near 1/sqrt(fan-in): the worst-case bound grows with the rnn state's
    # Jacobian over the block, so larger weights would make it too loose to mean anything.
    case("S2/oracle/rnn-block7", "rnn head, gamma 7, V 1000, r 32, d 24",
         ["S2.rnn", "S2.teacher-forcing"]): ("rnn", 3, 7, 1000, 32, 24, torch.float32, 0.15),
    case("S2/oracle/gated-bf16-base", "bf16 base logits: bias not rounded away (float32 bound "
         "plus one rounding into the output dtype)",
         ["S2.gated", "S2.teacher-forcing"]): ("gated", 4, 5, 300, 16, 12, torch.bfloat16, 0.5),
}


@pytest.mark.parametrize("case", ORACLE_CASES, ids=case_id)
def test_S2_teacher_forcing_matches_float64_oracle(case, require, case_seed, dspark_device):
    iut = require(MarkovBlock)
    head_type, batch, gamma, vocab, rank, d, dtype, scale = ORACLE_CASES[case]
    gen = input_generator(case_seed)
    head, state = load_random_head(iut, head_type, vocab=vocab, rank=rank, hidden_size=d,
                                   seed=sub_seed(case_seed, "head"), device=dspark_device, scale=scale)
    base, _, hidden = random_block_inputs(head_type, batch=batch, gamma=gamma, vocab=vocab, hidden_size=d,
                                          generator=gen, device=dspark_device, scale=2.0)
    base = base.to(dtype)
    prev = torch.randint(vocab, (batch, gamma), generator=gen).to(dspark_device)

    got = iut.apply_block_logits(head, base, prev, hidden)

    assert tuple(got.shape) == (batch, gamma, vocab), (
        f"{case.id}: expected corrected logits [{batch}, {gamma}, {vocab}], got {tuple(got.shape)}"
    )
    expected, bound = oracle_block_logits(head_type, state, base, prev, hidden)
    assert_within_oracle(case, got, expected, bound, "teacher-forced corrected logits")


# ----------------------------------------------------------------------------- teacher forcing
# case -> (head type, base dtype)
TEACHER_CASES = {
    case("S2/teacher-forcing/vanilla-mixed", "sample_block = apply_block_logits of its tokens, "
         "greedy rows take the argmax", ["S2.vanilla", "S2.sample-block", "S2.teacher-forcing"]):
        ("vanilla", torch.float32),
    case("S2/teacher-forcing/gated-mixed", "as vanilla-mixed, gated head",
         ["S2.gated", "S2.sample-block", "S2.teacher-forcing"]): ("gated", torch.float32),
    case("S2/teacher-forcing/rnn-mixed", "as vanilla-mixed, rnn head (state carried)",
         ["S2.rnn", "S2.sample-block", "S2.teacher-forcing"]): ("rnn", torch.float32),
    case("S2/teacher-forcing/rnn-bf16-base", "bf16 base logits: the two paths still agree bit for bit",
         ["S2.rnn", "S2.sample-block", "S2.teacher-forcing"]): ("rnn", torch.bfloat16),
}


@pytest.mark.parametrize("case", TEACHER_CASES, ids=case_id)
def test_S2_sample_block_equals_teacher_forcing(case, require, case_seed, case_generator, dspark_device):
    iut = require(MarkovBlock)
    head_type, dtype = TEACHER_CASES[case]
    batch, gamma, vocab, rank, d = 6, 5, 64, 8, 6
    greedy = [True, False, True, False, False, True]
    head, _ = load_random_head(iut, head_type, vocab=vocab, rank=rank, hidden_size=d,
                               seed=sub_seed(case_seed, "head"), device=dspark_device)
    base, first_prev, hidden = random_block_inputs(
        head_type, batch=batch, gamma=gamma, vocab=vocab, hidden_size=d,
        generator=input_generator(case_seed), device=dspark_device,
    )
    base = base.to(dtype)
    temps, top_k = row_params(greedy, 0.9, dspark_device)

    tokens, corrected = iut.sample_block(head, base, first_prev, hidden, temps, top_k, case_generator)

    check_block_shapes(case, tokens, corrected, batch, gamma, vocab)
    forced = iut.apply_block_logits(head, base, prev_tokens(first_prev, tokens), hidden).detach()
    assert forced.dtype == corrected.dtype and torch.equal(forced, corrected), (
        f"{case.id}: apply_block_logits of the drawn tokens differs from sample_block's corrected "
        f"logits (max |diff| {float((forced.double() - corrected.double()).abs().max()):.3g}); the "
        f"tokens and the logits do not come from one pass with prev_k = x_(k-1)"
    )
    check_greedy_rows(case, tokens, corrected, [i for i, g in enumerate(greedy) if g])


# ----------------------------------------------------------------------------- block law
# case -> head type
LAW_CASES = {
    case(f"S2/block-law/{head_type}-T0.8",
         f"joint law of (x_0, x_1) from sample_block equals the exact Markov chain ({head_type})",
         ["S2.sample-block", f"S2.{head_type}"], statistical=1): head_type
    for head_type in HEAD_TYPES
}
LAW_VOCAB, LAW_RANK, LAW_HIDDEN, LAW_TEMPERATURE = 8, 4, 4, 0.8
#: Weight scale of the law cases' heads: large enough that the bias moves the law by far
#: more than the detectable TV (a constant bias or a frozen rnn state is then visible).
LAW_HEAD_SCALE = 0.8


def law_setup(iut, head_type, case_seed, device):
    """One row's inputs for the law cases and the exact law of its ``(x_0, x_1)``."""
    head, state = load_random_head(iut, head_type, vocab=LAW_VOCAB, rank=LAW_RANK, hidden_size=LAW_HIDDEN,
                                   seed=sub_seed(case_seed, "head"), device=device, scale=LAW_HEAD_SCALE)
    base, anchor, hidden = random_block_inputs(head_type, batch=1, gamma=2, vocab=LAW_VOCAB,
                                               hidden_size=LAW_HIDDEN, generator=input_generator(case_seed),
                                               device=device)
    law = joint_law(head_type, state, base, int(anchor), hidden, LAW_TEMPERATURE)
    return head, base, anchor, hidden, law


def pair_counts(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """Counts of ``x_0 * V + x_1`` over the rows of ``tokens[n, >= 2]``."""
    return torch.bincount((tokens[:, 0] * vocab + tokens[:, 1]).cpu(), minlength=vocab * vocab)


@pytest.mark.statistical
@pytest.mark.parametrize("case", LAW_CASES, ids=case_id)
def test_S2_block_law_matches_markov_chain(case, require, case_seed, case_generator, dspark_device, stat_check):
    iut = require(MarkovBlock)
    head_type = LAW_CASES[case]
    head, base, anchor, hidden, law = law_setup(iut, head_type, case_seed, dspark_device)
    n = stats.sample_size_for_tv(law)
    temps = torch.full((n,), LAW_TEMPERATURE, device=dspark_device)
    top_k = torch.full((n,), NO_TOP_K_CUT, dtype=torch.int64, device=dspark_device)
    rows = [repeat_rows(t, n) for t in (base, anchor, hidden)]

    tokens, _ = iut.sample_block(head, *rows, temps, top_k, case_generator)

    stat_check(stats.goodness_of_fit(pair_counts(tokens, LAW_VOCAB), law, name=case.id))


# ----------------------------------------------------------------------------- edge cases
EDGE_GAMMA_ZERO = {
    case(f"S2/edge/gamma-zero-{head_type}", "gamma = 0: empty tokens, the input logits unchanged",
         ["S2.edge"]): head_type
    for head_type in ("vanilla", "rnn")
}


@pytest.mark.parametrize("case", EDGE_GAMMA_ZERO, ids=case_id)
def test_S2_gamma_zero_returns_empty_block(case, require, case_seed, case_generator, dspark_device):
    iut = require(MarkovBlock)
    head_type = EDGE_GAMMA_ZERO[case]
    batch, vocab, d = 3, 16, 4
    head, _ = load_random_head(iut, head_type, vocab=vocab, rank=4, hidden_size=d,
                               seed=sub_seed(case_seed, "head"), device=dspark_device)
    base, first_prev, hidden = random_block_inputs(head_type, batch=batch, gamma=0, vocab=vocab, hidden_size=d,
                                                   generator=input_generator(case_seed), device=dspark_device)
    temps, top_k = row_params([False] * batch, 1.0, dspark_device)

    tokens, corrected = iut.sample_block(head, base, first_prev, hidden, temps, top_k, case_generator)
    forced = iut.apply_block_logits(head, base, first_prev.new_empty((batch, 0)), hidden)

    assert tuple(tokens.shape) == (batch, 0), f"{case.id}: expected tokens [{batch}, 0], got {tuple(tokens.shape)}"
    for what, logits in (("sample_block", corrected), ("apply_block_logits", forced)):
        assert tuple(logits.shape) == (batch, 0, vocab), (
            f"{case.id}: {what} expected logits [{batch}, 0, {vocab}] (the input), got {tuple(logits.shape)}"
        )


EDGE_NO_HIDDEN = {
    case(f"S2/edge/no-hidden-{head_type}", f"a {head_type} head without hidden states is a clear error",
         ["S2.edge"]): head_type
    for head_type in ("gated", "rnn")
}


@pytest.mark.parametrize("case", EDGE_NO_HIDDEN, ids=case_id)
def test_S2_hidden_states_required(case, require, case_seed, case_generator, dspark_device):
    iut = require(MarkovBlock)
    head_type = EDGE_NO_HIDDEN[case]
    batch, gamma, vocab, d = 2, 3, 16, 4
    head, _ = load_random_head(iut, head_type, vocab=vocab, rank=4, hidden_size=d,
                               seed=sub_seed(case_seed, "head"), device=dspark_device)
    base, first_prev, _ = random_block_inputs(head_type, batch=batch, gamma=gamma, vocab=vocab, hidden_size=d,
                                              generator=input_generator(case_seed), device=dspark_device)
    temps, top_k = row_params([False] * batch, 1.0, dspark_device)

    with pytest.raises((ValueError, TypeError)):
        iut.sample_block(head, base, first_prev, None, temps, top_k, case_generator)
    with pytest.raises((ValueError, TypeError)):
        iut.apply_block_logits(head, base, prev_tokens(first_prev, base.argmax(-1)), None)


EDGE_RANK = {
    case("S2/edge/rank-nonpositive", "markov_rank 0 or -1 is a configuration error (ValueError)",
         ["S2.edge"]): (0, -1),
}


@pytest.mark.parametrize("case", EDGE_RANK, ids=case_id)
def test_S2_nonpositive_rank_is_a_configuration_error(case, require, dspark_device):
    iut = require(MarkovBlock)
    vocab = 16
    empty = {"W1.weight": torch.zeros(vocab, 0, device=dspark_device),
             "W2.weight": torch.zeros(vocab, 0, device=dspark_device)}
    for rank in EDGE_RANK[case]:
        with pytest.raises(ValueError):
            iut.load_head("vanilla", empty, vocab, rank, 4, dspark_device)
