"""Reference tests for the Markov heads, ``sample_block`` and teacher forcing (SPEC S2).

Hand-computed cases pin each head's formula; a float64 NumPy oracle (sharing no code
with ``dspark_ref.markov``) checks random heads; property tests check that teacher
forcing reproduces ``sample_block`` bit for bit. Add a case by adding a test named
``test_s2_<case>``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_ref.markov import (
    GatedMarkovHead,
    MarkovHead,
    RNNMarkovHead,
    VanillaMarkovHead,
    apply_block_logits,
    build_markov_head,
    sample_block,
)
from dspark_ref.sampling import sample_step

HEAD_TYPES = ("vanilla", "gated", "rnn")


def make_head(kind: str, vocab: int, rank: int, hidden: int, seed: int, scale: float = 0.5) -> MarkovHead:
    gen = torch.Generator().manual_seed(seed)
    if kind == "vanilla":
        return VanillaMarkovHead(vocab, rank, scale=scale, generator=gen)
    cls = GatedMarkovHead if kind == "gated" else RNNMarkovHead
    return cls(vocab, rank, hidden, scale=scale, generator=gen)


def argmax_sampler(logits, k):
    return logits.argmax(dim=-1)


def set_weights(head: MarkovHead, **weights) -> None:
    with torch.no_grad():
        for name, value in weights.items():
            module_name, _, attr = name.partition("_")
            getattr(getattr(head, module_name), attr or "weight").copy_(torch.tensor(value))


def prev_tokens(first_prev: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Teacher-forcing input ``[x0, x_0 .. x_{gamma-2}]``."""
    return torch.cat([first_prev[:, None], tokens[:, :-1]], dim=1)


# ---------------------------------------------------------------- hand-computed cases


def test_s2_vanilla_hand_computed_block():
    head = VanillaMarkovHead(3, 2, scale=0.0)
    # bias(prev) = W2 @ W1[prev]: prev 0 -> [1, 3, 5], prev 1 -> [2, 4, 6], prev 2 -> [3, 7, 11].
    set_weights(head, W1=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], W2=[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    base = torch.tensor([[[0.0, 0.0, -10.0], [10.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    block = sample_block(head, base, torch.tensor([2]), None, argmax_sampler)
    assert block.tokens.tolist() == [[1, 0, 2]]
    assert block.tokens.dtype == torch.int64
    expected = torch.tensor([[[3.0, 7.0, 1.0], [12.0, 4.0, 6.0], [1.0, 3.0, 5.0]]])
    assert torch.equal(block.corrected_logits, expected)


def test_s2_gated_hand_computed_step():
    head = GatedMarkovHead(2, 1, 1, scale=0.0)
    # Wg acts on [h ; W1[prev]]: pre-gate = 1.0 * h + 0.5 * e - 1.0.
    set_weights(head, W1=[[2.0], [-1.0]], W2=[[1.0], [3.0]], Wg=[[1.0, 0.5]], Wg_bias=[-1.0])
    bias, state = head.step_bias(torch.tensor([0, 1]), torch.tensor([[0.5], [2.0]]), None)
    g0 = 1 / (1 + math.exp(-(0.5 + 1.0 - 1.0)))  # prev 0: e = 2, h = 0.5
    g1 = 1 / (1 + math.exp(-(2.0 - 0.5 - 1.0)))  # prev 1: e = -1, h = 2
    expected = torch.tensor([[g0 * 2.0, 3 * g0 * 2.0], [-g1, -3 * g1]])
    torch.testing.assert_close(bias, expected, rtol=1e-6, atol=1e-7)
    assert state is None and bias.dtype == torch.float32


def test_s2_rnn_hand_computed_two_steps():
    head = RNNMarkovHead(2, 1, 1, scale=0.0)
    # Rows of Wz: gate, candidate, output; columns act on [s ; e ; h].
    set_weights(
        head,
        W1=[[1.0], [-2.0]],
        W2=[[1.0], [-1.0]],
        Wz=[[0.5, 1.0, 0.0], [1.0, 0.0, 1.0], [2.0, 0.5, -1.0]],
        Wz_bias=[0.0, 0.1, 0.2],
    )
    hidden = torch.tensor([[[0.3], [-0.7]]])
    tokens = torch.tensor([[1, 0]])  # prev_0 = 1 (e = -2), prev_1 = 0 (e = 1)
    got = apply_block_logits(head, torch.zeros(1, 2, 2), tokens, hidden)

    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expected, s = [], 0.0
    for e, h in ((-2.0, 0.3), (1.0, -0.7)):
        gate, cand, out = 0.5 * s + 1.0 * e, s + h + 0.1, 2.0 * s + 0.5 * e - h + 0.2
        s = sig(gate) * s + (1 - sig(gate)) * math.tanh(cand)
        expected.append([math.tanh(out), -math.tanh(out)])
    torch.testing.assert_close(got, torch.tensor([expected]), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- float64 oracle


def oracle_block_logits(head: MarkovHead, base: np.ndarray, prev: np.ndarray, hidden) -> np.ndarray:
    """Independent float64 NumPy recomputation of SPEC S2's corrected logits."""
    w = {k: v.detach().double().numpy() for k, v in head.state_dict().items()}
    sigmoid = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    rows, gamma, _ = base.shape
    out = np.empty_like(base, dtype=np.float64)
    state = np.zeros((rows, head.rank))
    for k in range(gamma):
        e = w["W1.weight"][prev[:, k]]
        if isinstance(head, VanillaMarkovHead):
            feat = e
        elif isinstance(head, GatedMarkovHead):
            gate = sigmoid(np.concatenate([hidden[:, k], e], 1) @ w["Wg.weight"].T + w["Wg.bias"])
            feat = gate * e
        else:
            z = np.concatenate([state, e, hidden[:, k]], 1) @ w["Wz.weight"].T + w["Wz.bias"]
            r = head.rank
            keep = sigmoid(z[:, :r])
            state = keep * state + (1 - keep) * np.tanh(z[:, r : 2 * r])
            feat = np.tanh(z[:, 2 * r :])
        out[:, k] = base[:, k] + feat @ w["W2.weight"].T
    return out


shapes = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(HEAD_TYPES),
        "rows": st.integers(1, 4),
        "gamma": st.integers(1, 5),
        "vocab": st.integers(2, 40),
        "rank": st.integers(1, 8),
        "hidden": st.integers(1, 8),
        "seed": st.integers(0, 2**31 - 1),
    }
)


def random_block(p, base_dtype=torch.float32):
    gen = torch.Generator().manual_seed(p["seed"] + 1)
    base = torch.randn(p["rows"], p["gamma"], p["vocab"], generator=gen).to(base_dtype)
    hidden = torch.randn(p["rows"], p["gamma"], p["hidden"], generator=gen)
    first_prev = torch.randint(p["vocab"], (p["rows"],), generator=gen)
    return base, hidden, first_prev


@settings(max_examples=30, deadline=None)
@given(p=shapes)
def test_s2_corrected_logits_match_float64_oracle(p):
    head = make_head(p["kind"], p["vocab"], p["rank"], p["hidden"], p["seed"])
    base, hidden, _ = random_block(p)
    ids = torch.randint(p["vocab"], (p["rows"], p["gamma"]), generator=torch.Generator().manual_seed(p["seed"]))
    got = apply_block_logits(head, base, ids, hidden)
    want = oracle_block_logits(head, base.double().numpy(), ids.numpy(), hidden.double().numpy())
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- teacher forcing


@settings(max_examples=40, deadline=None)
@given(p=shapes, base_dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_s2_teacher_forcing_equals_sample_block_bit_for_bit(p, base_dtype):
    head = make_head(p["kind"], p["vocab"], p["rank"], p["hidden"], p["seed"])
    base, hidden, first_prev = random_block(p, base_dtype)
    gen = torch.Generator().manual_seed(p["seed"] + 2)
    greedy = torch.arange(p["rows"]) % 2 == 0
    temps = torch.full((p["rows"],), 0.8)
    block = sample_block(
        head, base, first_prev, hidden, lambda logits, k: sample_step(logits, temps, greedy, generator=gen)
    )
    forced = apply_block_logits(head, base, prev_tokens(first_prev, block.tokens), hidden)
    assert block.corrected_logits.dtype == forced.dtype == torch.float32
    assert torch.equal(block.corrected_logits, forced)


def test_s2_sampler_called_gamma_times_on_the_corrected_logits():
    head = make_head("rnn", 11, 3, 4, seed=5)
    p = dict(rows=3, gamma=4, vocab=11, hidden=4, seed=5)
    base, hidden, first_prev = random_block(p)
    seen = []

    def sampler(logits, k):
        seen.append((k, logits.clone()))
        return (logits.argmax(-1) + k) % 11  # not the argmax: the next step must follow it

    block = sample_block(head, base, first_prev, hidden, sampler)
    assert [k for k, _ in seen] == [0, 1, 2, 3]
    for k, logits in seen:
        assert torch.equal(logits, block.corrected_logits[:, k])
        assert torch.equal(block.tokens[:, k], (logits.argmax(-1) + k) % 11)


def test_s2_rnn_state_carries_but_markov_heads_are_first_order():
    p = dict(rows=1, gamma=3, vocab=13, hidden=4, seed=9)
    base, hidden, _ = random_block(p)
    ids_a = torch.tensor([[1, 5, 7]])
    ids_b = torch.tensor([[2, 5, 7]])  # only prev_0 (the anchor) differs
    for kind in HEAD_TYPES:
        head = make_head(kind, 13, 4, 4, seed=9)
        a = apply_block_logits(head, base, ids_a, hidden)
        b = apply_block_logits(head, base, ids_b, hidden)
        assert not torch.equal(a[:, 0], b[:, 0]), kind
        if kind == "rnn":
            assert not torch.allclose(a[:, 2], b[:, 2], rtol=0, atol=1e-6)
        else:
            assert torch.equal(a[:, 1:], b[:, 1:]), kind


def test_s2_gamma_zero_returns_empty_tokens_and_input_logits():
    head = make_head("gated", 7, 2, 3, seed=0)
    base = torch.randn(2, 0, 7)
    calls = []
    block = sample_block(head, base, torch.tensor([1, 2]), torch.zeros(2, 0, 3), lambda l, k: calls.append(k))
    assert block.tokens.shape == (2, 0) and block.tokens.dtype == torch.int64
    assert block.corrected_logits is base and calls == []
    assert apply_block_logits(head, base, torch.zeros(2, 0, dtype=torch.int64), torch.zeros(2, 0, 3)) is base


def test_s2_neg_inf_base_logits_are_allowed():
    head = make_head("vanilla", 5, 2, 0, seed=1)
    base = torch.zeros(1, 2, 5)
    base[..., 3:] = -math.inf
    block = sample_block(head, base, torch.tensor([0]), None, argmax_sampler)
    assert (block.tokens < 3).all()
    assert torch.isinf(block.corrected_logits[..., 3:]).all()


# ---------------------------------------------------------------- construction


@pytest.mark.parametrize("kind", HEAD_TYPES)
def test_s2_seeded_init_is_reproducible_and_leaves_global_rng_alone(kind):
    before = torch.get_rng_state()
    a = make_head(kind, 50, 4, 6, seed=3, scale=0.1)
    b = make_head(kind, 50, 4, 6, seed=3, scale=0.1)
    c = make_head(kind, 50, 4, 6, seed=4, scale=0.1)
    assert torch.equal(torch.get_rng_state(), before)
    for name, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[name]), name
    assert not torch.equal(a.W2.weight, c.W2.weight)
    std = float(torch.cat([p.detach().flatten() for p in a.parameters()]).std())
    assert 0.08 < std < 0.12


def test_s2_zero_scale_head_leaves_base_logits():
    head = make_head("rnn", 9, 3, 2, seed=0, scale=0.0)
    base = torch.randn(2, 3, 9)
    out = apply_block_logits(head, base, torch.zeros(2, 3, dtype=torch.int64), torch.randn(2, 3, 2))
    assert torch.equal(out, base)


@pytest.mark.parametrize(
    ("config", "cls"),
    [
        ({"markov_rank": 4, "vocab_size": 10}, VanillaMarkovHead),
        ({"markov_rank": 4, "vocab_size": 10, "markov_head_type": "vanilla"}, VanillaMarkovHead),
        ({"markov_rank": 4, "vocab_size": 10, "markov_head_type": "gated", "hidden_size": 6}, GatedMarkovHead),
        ({"markov_rank": 4, "vocab_size": 10, "markov_head_type": "rnn", "hidden_size": 6}, RNNMarkovHead),
    ],
)
def test_s2_build_markov_head_from_config(config, cls):
    head = build_markov_head(config, generator=torch.Generator().manual_seed(0))
    assert type(head) is cls
    assert (head.vocab_size, head.rank) == (10, 4)
    assert head.W1.weight.shape == (10, 4) and head.W2.weight.shape == (10, 4) and head.W2.bias is None
    if cls is GatedMarkovHead:
        assert head.Wg.weight.shape == (4, 6 + 4) and head.Wg.bias.shape == (4,)
    if cls is RNNMarkovHead:
        assert head.Wz.weight.shape == (12, 2 * 4 + 6)


@pytest.mark.parametrize("rank", [0, -1])
def test_s2_build_rejects_non_positive_markov_rank(rank):
    with pytest.raises(ValueError, match="markov_rank"):
        build_markov_head({"markov_rank": rank, "vocab_size": 10})


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"markov_rank": 4, "vocab_size": 10, "markov_head_type": "lstm"}, ValueError, "vanilla.*gated.*rnn"),
        ({"vocab_size": 10}, ValueError, "markov_rank"),
        ({"markov_rank": 4}, ValueError, "vocab_size"),
        ({"markov_rank": 4, "vocab_size": 10, "markov_head_type": "gated"}, ValueError, "hidden_size"),
        ({"markov_rank": 4.0, "vocab_size": 10}, TypeError, "markov_rank"),
        ([("markov_rank", 4)], TypeError, "config"),
    ],
)
def test_s2_build_rejects_bad_config(config, error, match):
    with pytest.raises(error, match=match):
        build_markov_head(config)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: VanillaMarkovHead(0, 4), ValueError, "vocab_size"),
        (lambda: VanillaMarkovHead(True, 4), TypeError, "vocab_size"),
        (lambda: VanillaMarkovHead(10, 0), ValueError, "rank"),
        (lambda: VanillaMarkovHead(10, 4, scale=-1.0), ValueError, "scale"),
        (lambda: VanillaMarkovHead(10, 4, scale=math.nan), ValueError, "scale"),
        (lambda: VanillaMarkovHead(10, 4, generator=123), TypeError, "generator"),
        (lambda: VanillaMarkovHead(10, 4, dtype=torch.int64), TypeError, "dtype"),
        (lambda: GatedMarkovHead(10, 4, 0), ValueError, "hidden_size"),
        (lambda: RNNMarkovHead(10, 4, None), TypeError, "hidden_size"),
    ],
)
def test_s2_head_constructor_rejects_bad_arguments(build, error, match):
    with pytest.raises(error, match=match):
        build()


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("kind", ["gated", "rnn"])
def test_s2_hidden_required_by_gated_and_rnn(kind):
    head = make_head(kind, 8, 2, 3, seed=0)
    with pytest.raises(ValueError, match="hidden"):
        sample_block(head, torch.zeros(1, 2, 8), torch.tensor([0]), None, argmax_sampler)
    with pytest.raises(ValueError, match="hidden"):
        apply_block_logits(head, torch.zeros(1, 2, 8), torch.zeros(1, 2, dtype=torch.int64), None)
    with pytest.raises(ValueError, match="hidden_k"):
        head.step_bias(torch.tensor([0]), None, head.init_state(1, "cpu"))


def _block_args():
    head = make_head("gated", 8, 2, 3, seed=0)
    return dict(head=head, base_logits=torch.zeros(2, 3, 8), first_prev=torch.tensor([0, 7]),
                hidden=torch.zeros(2, 3, 3), sampler=argmax_sampler)


def _nan_logits():
    base = torch.zeros(2, 3, 8)
    base[1, 2, 5] = math.nan
    return base


@pytest.mark.parametrize(
    ("override", "error", "match"),
    [
        ({"head": torch.nn.Linear(2, 2)}, TypeError, "head"),
        ({"base_logits": torch.zeros(2, 8)}, ValueError, "base_logits"),
        ({"base_logits": torch.zeros(2, 3, 8, dtype=torch.int64)}, TypeError, "base_logits"),
        ({"base_logits": torch.zeros(2, 3, 9)}, ValueError, "base_logits"),
        ({"base_logits": _nan_logits()}, ValueError, "base_logits"),
        ({"first_prev": torch.tensor([0, 1, 2])}, ValueError, "first_prev"),
        ({"first_prev": torch.tensor([[0, 1]])}, ValueError, "first_prev"),
        ({"first_prev": torch.tensor([0.0, 1.0])}, TypeError, "first_prev"),
        ({"first_prev": torch.tensor([0, 8])}, ValueError, "first_prev"),
        ({"first_prev": torch.tensor([-1, 0])}, ValueError, "first_prev"),
        ({"hidden": torch.zeros(2, 3, 4)}, ValueError, "hidden"),
        ({"hidden": torch.zeros(2, 4, 3)}, ValueError, "hidden"),
        ({"hidden": torch.zeros(2, 3, 3, dtype=torch.int64)}, TypeError, "hidden"),
        ({"sampler": "argmax"}, TypeError, "sampler"),
        ({"sampler": lambda l, k: l.argmax(-1)[:1]}, ValueError, "sampler output at step 0"),
        ({"sampler": lambda l, k: l.argmax(-1).int()}, TypeError, "sampler output"),
    ],
)
def test_s2_sample_block_rejects_bad_inputs(override, error, match):
    args = _block_args() | override
    with pytest.raises(error, match=match):
        sample_block(**args)


@pytest.mark.parametrize(
    ("token_ids", "error"),
    [
        (torch.zeros(2, 2, dtype=torch.int64), ValueError),
        (torch.zeros(2, 3), TypeError),
        (torch.full((2, 3), 8), ValueError),
    ],
)
def test_s2_apply_block_logits_rejects_bad_token_ids(token_ids, error):
    args = _block_args()
    with pytest.raises(error, match="token_ids"):
        apply_block_logits(args["head"], args["base_logits"], token_ids, args["hidden"])
