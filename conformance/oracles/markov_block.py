"""The float64 oracle of SPEC S2's Markov heads: each head's corrected logits by teacher
forcing, with a running bound on a float32 evaluation's error; the SPEC S0 bound between two
evaluations of the same block (:func:`compare_block_logits`); the exact joint law of
``(x_0, x_1)`` by enumeration (:func:`joint_law`). Read by the S1, S2, S4 and S9 tests and
the S9 tau oracle. It shares no code with ``dspark_ref``.
"""

from __future__ import annotations

import torch

from conformance import numerics

__all__ = ["UNIT_ROUNDOFF", "NONLINEAR_ULPS", "COMPARE_SLICE_ELEMENTS", "oracle_block_logits", "compare_block_logits", "joint_law"]

#: Unit roundoff ``u`` of each dtype: round-to-nearest errs by at most ``u |x|``.
UNIT_ROUNDOFF = {
    torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8,
}
#: Error of a float32 sigmoid / tanh of its rounded input, in units of ``u`` (libm / SLEEF
#: give <= 3.5 ulp on (-1, 1); doubled).
NONLINEAR_ULPS = 8


#: Elements of ``[rows, gamma, V]`` per slice that :func:`compare_block_logits` evaluates and
#: compares at a time (2^24: each float64 intermediate 128 MiB), so that the production shapes
#: (B 256, gamma 7, V 151,936: 2.7e8 elements) fit beside the other workers' cases on one card.
COMPARE_SLICE_ELEMENTS = 2**24


def oracle_block_logits(head_type, state, base, prev, hidden, *, device=None):
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
    Evaluated in float64 on any device: another summation order moves it by about
    ``r 2^-53`` relative, ``2^-29`` of the float32 bound.

    Args:
        base: ``[B, gamma, V]``; prev: ``[B, gamma]`` ids ``[x0, x_0 ..]``; hidden:
            ``[B, gamma, d]`` or None (vanilla). Any device, any float dtype.
        device: where the float64 arithmetic runs and the results are returned (default:
            the CPU).
    Returns:
        ``(logits[B, gamma, V] f64, bound[B, gamma, V] f64)`` on ``device``.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    return _oracle(head_type, _float64_state(state, device), base, prev, hidden)


def _float64_state(state, device: torch.device) -> dict:
    """The head's weights in float64 on ``device``, and ``|W2|`` (``"|W2|"``) taken once."""
    sd = {name: t.detach().to(device, torch.float64) for name, t in state.items()}
    sd["|W2|"] = sd["W2.weight"].abs()
    return sd


def _oracle(head_type, sd, base, prev, hidden):
    """:func:`oracle_block_logits` on the float64 weights ``sd`` of :func:`_float64_state`,
    on their device."""
    u = UNIT_ROUNDOFF[torch.float32]
    w1, w2, w2_abs = sd["W1.weight"], sd["W2.weight"], sd["|W2|"]
    device = w1.device
    base, prev = base.detach().to(device, torch.float64), prev.to(device)
    hidden = None if hidden is None else hidden.detach().to(device, torch.float64)
    batch, gamma, _ = base.shape
    rank = w1.shape[1]
    s = torch.zeros(batch, rank, dtype=torch.float64, device=device)
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
        # rank u |f|.|w2| + df.|w2| as one product, |w2| taken once: the same sum in exact arithmetic (float64
        # moves it by < 1e-14 relative, far inside the doubling); at B 32, rank 256, V 151,936 on one CPU
        # thread this term took 2.7 s a step as two products, 0.3-0.5 s as one.
        dstep = (rank * u * f.abs() + df) @ w2_abs.T + u * step.abs()
        logits.append(step)
        bounds.append(2 * dstep)
    return torch.stack(logits, dim=1), torch.stack(bounds, dim=1)


def compare_block_logits(case, what, got, expected, head_type, state, base, prev, hidden) -> numerics.Comparison:
    """SPEC S0 comparison of two evaluations of the corrected logits of the same block.

    Both evaluate ``L`` of :func:`oracle_block_logits` for the same ``prev``, possibly in
    another order (one batched GEMM against step-by-step adds, a float64 accumulation):
    each is float32 arithmetic within that oracle's running bound ``B`` of the exact ``L``
    (the dot-product term holds for any summation order), then rounded into its result
    dtype, ``u_t |L|`` more for a dtype ``t`` other than float32 (a float32 result's last
    rounding is inside ``B``). By the triangle inequality

        ``|got - expected| <= 2 B + (u_got + u_expected) |L|``.

    On the S2 / S4 cases (r 8, weights 0.5 randn, V 64-1024) that is, per logit, a median
    of 2e-6 (vanilla) to 1e-4 (rnn: its worst-case bound grows through the recurrence) for
    float32 results and ~3e-3 (``u |L|``) for bf16 ones, while a second ``sample_block``
    pass moves logits by O(1) (2.6 to 5.4 there) wherever it drew another token (S4.4): the
    duplicate-pass mutant exceeds the bound 2e4 to 4e6 times (``tests/test_numerics.py``).
    Bit identity is recorded apart (:func:`conformance.numerics.compare`).

    The oracle and the comparison run on ``got``'s device, in slices of whole batch rows of
    at most :data:`COMPARE_SLICE_ELEMENTS` elements (a row's logits depend on that row only).

    Args:
        what: the two evaluations, in words (after the case id in a failure).
        got / expected: ``[B, gamma, V]``, any float dtype and device.
        head_type, state: the head (reference layout); base ``[B, gamma, V]``; prev
            ``[B, gamma]`` ids ``[x0, x_0 .. x_{gamma-2}]``; hidden ``[B, gamma, d]`` or None.
    Returns:
        The :class:`~conformance.numerics.Comparison`, not yet asserted (``numeric_check``).
    """
    name = f"{case.id}: {what}"
    sd = _float64_state(state, got.device)
    rounding = sum(UNIT_ROUNDOFF[t] for t in (got.dtype, expected.dtype) if t != torch.float32)
    batch = got.shape[0]
    rows = max(1, COMPARE_SLICE_ELEMENTS // max(1, got[:1].numel()))
    parts = []
    for start in range(0, max(batch, 1), rows):
        rows_of = slice(start, start + rows)
        exact, bound = _oracle(head_type, sd, base[rows_of], prev[rows_of],
                               None if hidden is None else hidden[rows_of])
        parts.append(numerics.compare(name, got[rows_of], expected[rows_of], 2 * bound + rounding * exact.abs()))
    return numerics.combine(name, parts)


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
    # torch.softmax, not laws.tempered_softmax64: that would move the last bits of 70% of rows, and the p-values with
    # them.
    p0 = torch.softmax(logits[0, 0] / temperature, dim=-1)
    p1 = torch.softmax(logits[:, 1] / temperature, dim=-1)
    return (p0[:, None] * p1).flatten()
