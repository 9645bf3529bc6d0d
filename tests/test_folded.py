"""Reference tests for the folded draft sampler and its gate (SPEC S4).

CPU tests run the proposal body eagerly through ``replay``; tests marked ``gpu`` capture
and replay a real CUDA graph and skip cleanly without CUDA. The S4.7 byte example and
the AUTO margin are exact. Add a case by adding a test named ``test_s4_<case>``.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch

from dspark_ref import folded
from dspark_ref.folded import (
    GIB,
    FoldedDraftSampler,
    FoldingMode,
    eligible_for_folded,
    folded_buffer_bytes,
    resolve_folded_sampling,
    use_eager_accept,
)
from dspark_ref.markov import RNNMarkovHead, VanillaMarkovHead, apply_block_logits, sample_block
from dspark_ref.sampling import sample_step

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

NO_TOP_K = 1 << 30  # "no top-k cut" as SGLang stages it; -1 or 0 would be greedy under top_k <= 1

BUFFERS = ("base_logits", "first_prev", "hidden", "temperatures", "greedy_mask", "exp_noise", "out", "corrected_out")


def seeded(seed: int, device="cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def rnn_sampler(*, max_bs=4, gamma=3, vocab=64, hidden=5, lm_dtype=torch.float32, device="cpu", generator=None,
                **kwargs):
    head = RNNMarkovHead(vocab, 4, hidden, scale=0.5, generator=seeded(0)).to(device)
    return FoldedDraftSampler(
        head, max_bs=max_bs, gamma=gamma, vocab_size=vocab, lm_dtype=lm_dtype, device=device,
        generator=generator, **kwargs,
    )


def random_inputs(fs: FoldedDraftSampler, bs: int, seed: int = 1):
    gen = seeded(seed)
    base = torch.randn(bs, fs.gamma, fs.vocab_size, generator=gen).to(fs.device, fs.lm_dtype)
    first_prev = torch.randint(fs.vocab_size, (bs,), generator=gen).to(fs.device)
    hidden = torch.randn(bs, fs.gamma, fs.hidden_size, generator=gen).to(fs.device, fs.lm_dtype)
    return base, first_prev, hidden


def flat_sampler(*, max_bs=2, gamma=3, vocab=4096, device="cpu", generator=None):
    """A zero Markov head over zero base logits: sampling rows draw uniformly from V ids,
    greedy rows always take id 0 (lowest index among ties)."""
    head = VanillaMarkovHead(vocab, 2, scale=0.0).to(device)
    fs = FoldedDraftSampler(head, max_bs=max_bs, gamma=gamma, vocab_size=vocab, lm_dtype=torch.float32,
                            device=device, generator=generator)
    fs.load_inputs(torch.zeros(max_bs, gamma, vocab, device=device), torch.zeros(max_bs, dtype=torch.int64,
                                                                                  device=device))
    return fs


def teacher_forced(fs: FoldedDraftSampler, bs: int, base, first_prev, hidden, tokens):
    prev = torch.cat([first_prev[:, None], tokens[:, :-1]], dim=1)
    return apply_block_logits(fs.head, base, prev, hidden if fs.head.needs_hidden else None)


def block_is_consistent(fs: FoldedDraftSampler, bs: int, base, first_prev, hidden) -> bool:
    """S4.4/S4.6: the corrected logits in ``corrected_out`` are those the tokens in ``out``
    were drawn from (teacher forcing, exact up to the LM-head dtype's rounding)."""
    result = fs.outputs(bs)
    forced = teacher_forced(fs, bs, base, first_prev, hidden, result.tokens)
    return torch.equal(result.corrected_logits, forced.to(fs.lm_dtype))


# ------------------------------------------------------------------ S4.7 memory gate


def test_s4_7_buffer_bytes_deepseek_v4_example():
    need = folded_buffer_bytes(256, 5, 129_280, torch.bfloat16)
    assert 256 * 129_280 * 4 == 132_382_720 and 256 * 5 * 129_280 * 2 == 330_956_800
    assert need == 132_382_720 + 330_956_800
    assert folded_buffer_bytes(256, 5, 129_280, torch.float32) == 132_382_720 + 2 * 330_956_800


@pytest.fixture
def fresh_warnings(monkeypatch, caplog):
    monkeypatch.setattr(folded, "_warned_configs", set())
    caplog.set_level(logging.WARNING, logger="dspark_ref.folded")
    return caplog


def _gate(free_bytes, mode=FoldingMode.AUTO, rank=0, max_bs=256):
    return resolve_folded_sampling(mode, max_bs=max_bs, gamma=5, vocab_size=129_280, lm_dtype=torch.bfloat16,
                                   free_bytes=free_bytes, rank=rank)


def test_s4_7_auto_folds_at_exactly_one_gib_headroom(fresh_warnings):
    need = 132_382_720 + 330_956_800
    assert _gate(need + GIB) is True
    assert _gate(need + GIB + 1) is True
    assert fresh_warnings.records == []


def test_s4_7_auto_falls_back_below_headroom_with_one_warning(fresh_warnings):
    need = 132_382_720 + 330_956_800
    assert _gate(need + GIB - 1) is False
    assert _gate(0) is False  # same configuration: no second warning
    warnings = [r for r in fresh_warnings.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].name == "dspark_ref.folded" and "eager" in warnings[0].getMessage()
    assert _gate(0, max_bs=128) is False  # another configuration warns once more
    assert len([r for r in fresh_warnings.records if r.levelno == logging.WARNING]) == 2


def test_s4_7_fallback_warns_on_rank_zero_only(fresh_warnings):
    assert _gate(0, rank=1) is False
    assert fresh_warnings.records == []


def test_s4_7_off_never_folds_and_force_always_folds(fresh_warnings):
    assert _gate(10**15, FoldingMode.OFF) is False
    assert _gate(0, FoldingMode.FORCE) is True
    assert _gate(0, "force") is True and _gate(0, "OFF") is False
    assert fresh_warnings.records == []


def test_s4_7_default_mode_is_auto(fresh_warnings):
    kwargs = dict(max_bs=1, gamma=1, vocab_size=8, lm_dtype=torch.float32)
    assert resolve_folded_sampling(free_bytes=2 * GIB, **kwargs) is True
    assert resolve_folded_sampling(free_bytes=GIB, **kwargs) is False


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "sometimes"}, ValueError, "mode"),
        ({"mode": 1}, TypeError, "mode"),
        ({"free_bytes": -1}, ValueError, "free_bytes"),
        ({"free_bytes": 1.5e9}, TypeError, "free_bytes"),
        ({"rank": -1}, ValueError, "rank"),
        ({"max_bs": 0}, ValueError, "max_bs"),
        ({"gamma": 0}, ValueError, "gamma"),
        ({"vocab_size": 0}, ValueError, "vocab_size"),
        ({"lm_dtype": torch.int8}, TypeError, "lm_dtype"),
    ],
)
def test_s4_7_gate_rejects_bad_arguments(kwargs, error, match):
    args = dict(mode="auto", max_bs=8, gamma=5, vocab_size=100, lm_dtype=torch.bfloat16, free_bytes=GIB) | kwargs
    mode = args.pop("mode")
    with pytest.raises(error, match=match):
        resolve_folded_sampling(mode, **args)


# ------------------------------------------------------------------ S4.5 eligibility


@pytest.mark.parametrize(
    ("all_greedy", "sampling_on", "eligible"),
    [(True, False, True), (True, True, True), (False, True, True), (False, False, False)],
)
def test_s4_5_eligibility(all_greedy, sampling_on, eligible):
    assert eligible_for_folded(all_greedy, sampling_on) is eligible


@pytest.mark.parametrize(
    ("folded_draft", "all_greedy", "eager"),
    [(True, True, False), (True, False, True), (False, True, True), (False, False, True)],
)
def test_s4_5_sampling_rows_after_folded_draft_take_eager_accept(folded_draft, all_greedy, eager):
    assert use_eager_accept(folded_draft, all_greedy) is eager


@pytest.mark.parametrize("fn", [eligible_for_folded, use_eager_accept])
def test_s4_5_rejects_non_bool_flags(fn):
    with pytest.raises(TypeError, match="expected a bool"):
        fn(1, True)


# ------------------------------------------------------------------ S4.1-S4.6 sampler (CPU)


def test_s4_1_static_buffers_shapes_and_dtypes():
    fs = rnn_sampler(max_bs=4, gamma=3, vocab=64, hidden=5, lm_dtype=torch.bfloat16,
                     confidence_fn=lambda h, p: torch.zeros(p.shape))
    expected = {
        "out": ((12,), torch.int64), "temperatures": ((4,), torch.float32), "greedy_mask": ((4,), torch.bool),
        "exp_noise": ((4, 64), torch.float32), "corrected_out": ((12, 64), torch.bfloat16),
        "confidence_out": ((4, 3), torch.float32), "base_logits": ((4, 3, 64), torch.bfloat16),
        "first_prev": ((4,), torch.int64), "hidden": ((4, 3, 5), torch.bfloat16),
    }
    for name, (shape, dtype) in expected.items():
        buf = getattr(fs, name)
        assert (tuple(buf.shape), buf.dtype) == (shape, dtype), name
    assert rnn_sampler().confidence_out is None


def test_s4_2_stage_sampling_params_clamps_and_applies_greedy_rule():
    fs = rnn_sampler(max_bs=5)
    temps = torch.tensor([0.0, 0.7, 2.0, 1e-6])
    fs.stage_sampling_params(4, temperatures=temps, top_k=torch.tensor([1, 2, 0, NO_TOP_K]))
    assert torch.equal(fs.temperatures, torch.tensor([1e-5, 0.7, 2.0, 1e-5, 1.0]))  # row 4 untouched
    assert fs.greedy_mask.tolist() == [True, False, True, False, True]  # greedy iff top_k <= 1
    fs.stage_sampling_params(3)  # no sampling info: greedy, T = 1
    assert torch.equal(fs.temperatures, torch.tensor([1.0, 1.0, 1.0, 1e-5, 1.0]))
    assert fs.greedy_mask.tolist() == [True, True, True, False, True]
    fs.stage_sampling_params(2, temperatures=[0.5, 0.25])  # no top_k: every row samples
    assert fs.temperatures[:2].tolist() == [0.5, 0.25] and fs.greedy_mask[:2].tolist() == [False, False]
    fs.stage_sampling_params(2, top_k=[2, 1])  # no temperatures: T = 1
    assert fs.temperatures[:2].tolist() == [1.0, 1.0] and fs.greedy_mask[:2].tolist() == [False, True]


@pytest.mark.parametrize("bs", [1, 3, 4])
def test_s4_6_greedy_rows_match_eager_and_corrected_logits_match_tokens(bs):
    fs = rnn_sampler(max_bs=4)
    base, first_prev, hidden = random_inputs(fs, bs)
    fs.load_inputs(base, first_prev, hidden)
    fs.stage_sampling_params(bs)
    result = fs.replay(bs)
    eager = sample_block(fs.head, base, first_prev, hidden, lambda logits, k: logits.argmax(-1))
    assert torch.equal(result.tokens, eager.tokens)
    assert torch.equal(result.corrected_logits, eager.corrected_logits)
    assert block_is_consistent(fs, bs, base, first_prev, hidden)


def test_s4_6_mixed_batch_equals_eager_with_the_same_noise_stream():
    # On CPU the in-place draw into exp_noise[:bs] and sample_step's fresh noise consume a
    # generator identically, so the same seed must give the same tokens on every row.
    fs = rnn_sampler(max_bs=4, generator=seeded(11))
    base, first_prev, hidden = random_inputs(fs, 4)
    temps, top_k = torch.tensor([0.5, 1.0, 1.0, 2.0]), torch.tensor([1, 50, NO_TOP_K, 1])
    fs.load_inputs(base, first_prev, hidden)
    fs.stage_sampling_params(4, temperatures=temps, top_k=top_k)
    result = fs.replay(4)
    gen = seeded(11)
    eager = sample_block(fs.head, base, first_prev, hidden,
                         lambda logits, k: sample_step(logits, temps, top_k <= 1, generator=gen))
    assert torch.equal(result.tokens, eager.tokens)
    assert torch.equal(result.corrected_logits, eager.corrected_logits)
    assert block_is_consistent(fs, 4, base, first_prev, hidden)


def test_s4_4_exactly_one_sample_block_per_proposal(monkeypatch):
    calls = {"block": 0, "step": 0}

    def counting_block(*args, **kwargs):
        calls["block"] += 1
        return sample_block(*args, **kwargs)

    def counting_step(*args, **kwargs):
        calls["step"] += 1
        return sample_step(*args, **kwargs)

    monkeypatch.setattr(folded, "sample_block", counting_block)
    monkeypatch.setattr(folded, "sample_step", counting_step)
    fs = rnn_sampler(gamma=3)
    fs.load_inputs(*random_inputs(fs, 2))
    fs.replay(2)
    assert calls == {"block": 1, "step": 3}


class _DoublePassSampler(FoldedDraftSampler):
    """S10 bug: a second ``sample_block`` inside one proposal; tokens and corrected logits
    come from two independent samplings."""

    def propose_body(self, bs):
        super().propose_body(bs)
        tokens = self.out[: bs * self.gamma].clone()
        super().propose_body(bs)
        self.out[: bs * self.gamma].copy_(tokens)


def test_s4_4_consistency_check_catches_a_second_sample_block_pass():
    head = RNNMarkovHead(4096, 4, 5, scale=0.5, generator=seeded(0))
    kwargs = dict(max_bs=2, gamma=3, vocab_size=4096, lm_dtype=torch.float32, device="cpu")
    base = torch.zeros(2, 3, 4096)
    first_prev, hidden = torch.tensor([3, 4]), torch.randn(2, 3, 5, generator=seeded(1))
    for cls, consistent in ((FoldedDraftSampler, True), (_DoublePassSampler, False)):
        fs = cls(head, generator=seeded(2), **kwargs)
        fs.load_inputs(base, first_prev, hidden)
        fs.stage_sampling_params(2, temperatures=[1.0, 1.0], top_k=[NO_TOP_K, NO_TOP_K])
        fs.replay(2)
        assert block_is_consistent(fs, 2, base, first_prev, hidden) is consistent, cls.__name__


def test_s4_3_restaged_params_are_seen_on_the_next_replay():
    fs = flat_sampler()
    fs.stage_sampling_params(2)
    assert bool((fs.replay(2).tokens == 0).all())  # greedy on flat logits: lowest id
    fs.stage_sampling_params(2, temperatures=[1.0, 1.0], top_k=[NO_TOP_K, NO_TOP_K])
    sampled = fs.replay(2).tokens
    assert bool((sampled != 0).any())  # all six uniform draws hitting id 0: 4096**-6
    fs.stage_sampling_params(2, temperatures=[1.0, 1.0], top_k=[1, NO_TOP_K])
    mixed = fs.replay(2).tokens
    assert bool((mixed[0] == 0).all()) and bool((mixed[1] != 0).any())


def test_s4_3_fresh_noise_every_replay():
    fs = flat_sampler(generator=seeded(3))
    fs.stage_sampling_params(2, temperatures=[1.0, 1.0], top_k=[NO_TOP_K, NO_TOP_K])
    first = fs.replay(2).tokens.clone()
    noise = fs.exp_noise.clone()
    second = fs.replay(2).tokens.clone()
    assert not torch.equal(first, second)  # identical draws: probability 4096**-6
    assert not torch.equal(noise, fs.exp_noise)


def test_s4_1_buffers_are_never_reallocated():
    fs = rnn_sampler(max_bs=4, confidence_fn=lambda h, p: torch.zeros(p.shape))
    names = BUFFERS + ("confidence_out",)
    pointers = {name: getattr(fs, name).data_ptr() for name in names}
    for bs in (4, 1, 3):
        fs.load_inputs(*random_inputs(fs, bs, seed=bs))
        fs.stage_sampling_params(bs, temperatures=[0.9] * bs, top_k=[NO_TOP_K] * bs)
        fs.replay(bs)
    assert {name: getattr(fs, name).data_ptr() for name in names} == pointers


def test_s4_6_bf16_lm_head_corrected_out_is_the_rounded_eager_logits():
    fs = rnn_sampler(lm_dtype=torch.bfloat16, generator=seeded(4))
    base, first_prev, hidden = random_inputs(fs, 3)
    fs.load_inputs(base, first_prev, hidden)
    fs.stage_sampling_params(3, temperatures=[1.0, 0.5, 1.0], top_k=[1, NO_TOP_K, NO_TOP_K])
    result = fs.replay(3)
    assert result.corrected_logits.dtype == torch.bfloat16
    assert block_is_consistent(fs, 3, base, first_prev, hidden)
    greedy = sample_block(fs.head, base[:1], first_prev[:1], hidden[:1], lambda logits, k: logits.argmax(-1))
    assert torch.equal(result.tokens[:1], greedy.tokens)


def test_s4_1_confidence_output_sees_the_drawn_prefix():
    seen = {}

    def confidence_fn(hidden, prev_tokens):
        seen["hidden"], seen["prev"] = hidden.clone(), prev_tokens.clone()
        return torch.sigmoid(hidden.sum(-1) + prev_tokens.float())

    head = VanillaMarkovHead(64, 4, scale=0.5, generator=seeded(0))
    fs = FoldedDraftSampler(head, max_bs=4, gamma=3, vocab_size=64, lm_dtype=torch.float32, device="cpu",
                            hidden_size=5, confidence_fn=confidence_fn, generator=seeded(5))
    base, first_prev, hidden = random_inputs(fs, 2)
    fs.load_inputs(base, first_prev, hidden)
    fs.stage_sampling_params(2, temperatures=[1.0, 1.0], top_k=[NO_TOP_K, NO_TOP_K])
    result = fs.replay(2)
    assert torch.equal(seen["hidden"], hidden)
    assert torch.equal(seen["prev"], torch.cat([first_prev[:, None], result.tokens[:, :-1]], dim=1))
    assert torch.equal(result.confidence, torch.sigmoid(hidden.sum(-1) + seen["prev"].float()))


# ------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"gamma": 0}, ValueError, "gamma"),
        ({"max_bs": 0}, ValueError, "max_bs"),
        ({"vocab_size": 65}, ValueError, "vocab_size"),
        ({"lm_dtype": torch.int32}, TypeError, "lm_dtype"),
        ({"head": torch.nn.Linear(2, 2)}, TypeError, "head"),
        ({"hidden_size": 6}, ValueError, "hidden_size"),
        ({"confidence_fn": "sigmoid"}, TypeError, "confidence_fn"),
        ({"generator": 5}, TypeError, "generator"),
        ({"device": "meta"}, ValueError, "head"),
    ],
)
def test_s4_sampler_constructor_rejects_bad_arguments(kwargs, error, match):
    args = dict(head=RNNMarkovHead(64, 4, 5), max_bs=4, gamma=3, vocab_size=64, lm_dtype=torch.float32,
                device="cpu") | kwargs
    head = args.pop("head")
    with pytest.raises(error, match=match):
        FoldedDraftSampler(head, **args)


def test_s4_confidence_needs_a_hidden_size():
    with pytest.raises(ValueError, match="hidden_size"):
        FoldedDraftSampler(VanillaMarkovHead(8, 2), max_bs=2, gamma=2, vocab_size=8, lm_dtype=torch.float32,
                           device="cpu", confidence_fn=lambda h, p: p.float())


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"bs": 0}, ValueError, "bs"),
        ({"bs": 5}, ValueError, "bs"),
        ({"bs": 2, "temperatures": [1.0, math.nan]}, ValueError, "temperatures"),
        ({"bs": 2, "temperatures": [1.0, -1.0]}, ValueError, "temperatures"),
        ({"bs": 2, "temperatures": [1.0]}, ValueError, "temperatures"),
        ({"bs": 2, "temperatures": torch.tensor([1, 2])}, TypeError, "temperatures"),
        ({"bs": 2, "top_k": torch.tensor([1.0, 2.0])}, TypeError, "top_k"),
        ({"bs": 2, "top_k": [1, 2, 3]}, ValueError, "top_k"),
    ],
)
def test_s4_2_stage_rejects_bad_params(params, error, match):
    fs = rnn_sampler(max_bs=4)
    with pytest.raises(error, match=match):
        fs.stage_sampling_params(**params)


def _good_inputs():
    fs = rnn_sampler(max_bs=4)
    base, first_prev, hidden = random_inputs(fs, 2)
    return fs, dict(base_logits=base, first_prev=first_prev, hidden=hidden)


@pytest.mark.parametrize(
    ("override", "error", "match"),
    [
        ({"base_logits": torch.zeros(2, 3, 64, dtype=torch.bfloat16)}, TypeError, "base_logits"),
        ({"base_logits": torch.zeros(2, 2, 64)}, ValueError, "base_logits"),
        ({"base_logits": torch.zeros(5, 3, 64)}, ValueError, "bs"),
        ({"first_prev": torch.tensor([0, 64])}, ValueError, "first_prev"),
        ({"first_prev": torch.tensor([0])}, ValueError, "first_prev"),
        ({"hidden": None}, ValueError, "hidden"),
        ({"hidden": torch.zeros(2, 3, 4)}, ValueError, "hidden"),
    ],
)
def test_s4_load_inputs_rejects_bad_inputs(override, error, match):
    fs, args = _good_inputs()
    with pytest.raises(error, match=match):
        fs.load_inputs(**(args | override))


@pytest.mark.parametrize("bs", [0, 5, 2.0])
def test_s4_replay_rejects_bad_batch_size(bs):
    with pytest.raises((ValueError, TypeError), match="bs"):
        rnn_sampler(max_bs=4).replay(bs)


# ------------------------------------------------------------------ GPU: CUDA graph


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("custom_generator", [False, True])
def test_s4_3_gpu_graph_replay_draws_fresh_noise(custom_generator):
    generator = seeded(7, "cuda") if custom_generator else None
    fs = flat_sampler(device="cuda", generator=generator)
    fs.stage_sampling_params(2, temperatures=[1.0, 1.0], top_k=[NO_TOP_K, NO_TOP_K])
    fs.capture(2)
    first = fs.replay(2).tokens.clone()
    noise = fs.exp_noise.clone()
    second = fs.replay(2).tokens.clone()
    torch.cuda.synchronize()
    assert not torch.equal(first, second)  # identical draws: probability 4096**-6
    assert not torch.equal(noise, fs.exp_noise)


@pytest.mark.gpu
@needs_cuda
def test_s4_3_gpu_restaged_params_are_seen_by_the_graph():
    fs = flat_sampler(device="cuda")
    fs.stage_sampling_params(2)
    fs.capture(2)
    fs.stage_sampling_params(2)
    assert bool((fs.replay(2).tokens == 0).all())
    fs.stage_sampling_params(2, temperatures=[1.0, 1.0], top_k=[NO_TOP_K, NO_TOP_K])
    assert bool((fs.replay(2).tokens != 0).any())
    fs.stage_sampling_params(2, temperatures=[1.0, 1.0], top_k=[1, 1])
    assert bool((fs.replay(2).tokens == 0).all())


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("lm_dtype", [torch.float32, torch.bfloat16])
def test_s4_6_gpu_graph_matches_eager(lm_dtype):
    fs = rnn_sampler(max_bs=4, vocab=1024, lm_dtype=lm_dtype, device="cuda")
    pointers = {name: getattr(fs, name).data_ptr() for name in BUFFERS}
    fs.capture(4)
    base, first_prev, hidden = random_inputs(fs, 4, seed=8)
    fs.load_inputs(base, first_prev, hidden)
    fs.stage_sampling_params(4, temperatures=[0.0, 1.0, 0.7, 1.0], top_k=[1, NO_TOP_K, 40, 1])
    result = fs.replay(4)
    torch.cuda.synchronize()
    assert result.corrected_logits.dtype == lm_dtype
    assert block_is_consistent(fs, 4, base, first_prev, hidden)
    greedy = sample_block(fs.head, base, first_prev, hidden, lambda logits, k: logits.argmax(-1))
    assert torch.equal(result.tokens[[0, 3]], greedy.tokens[[0, 3]])
    assert {name: getattr(fs, name).data_ptr() for name in BUFFERS} == pointers


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("gamma", "vocab"), [(5, 129_280), (7, 151_936)])
def test_s4_6_gpu_production_shapes_bf16(gamma, vocab):
    head = VanillaMarkovHead(vocab, 256, scale=0.02, generator=seeded(0)).cuda()
    fs = FoldedDraftSampler(head, max_bs=8, gamma=gamma, vocab_size=vocab, lm_dtype=torch.bfloat16, device="cuda")
    fs.capture(8)
    gen = seeded(9)
    base = torch.randn(8, gamma, vocab, generator=gen).to("cuda", torch.bfloat16)
    first_prev = torch.randint(vocab, (8,), generator=gen).cuda()
    fs.load_inputs(base, first_prev)
    fs.stage_sampling_params(8, temperatures=[0.0, 1.0] * 4, top_k=[1, NO_TOP_K] * 4)
    result = fs.replay(8)
    torch.cuda.synchronize()
    assert bool((result.tokens < vocab).all())
    assert block_is_consistent(fs, 8, base, first_prev, None)
    greedy = sample_block(head, base, first_prev, None, lambda logits, k: logits.argmax(-1))
    assert torch.equal(result.tokens[0::2], greedy.tokens[0::2])


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("lm_dtype", [torch.float32, torch.bfloat16])
def test_s4_gpu_every_batch_size_restaged_between_replays(lm_dtype):
    """Graphs for bs = 1..max_bs; per bs: greedy replay == eager greedy, then a restaged
    sampling replay whose corrected_out is the teacher forcing of its own tokens (S4.2, S4.4)."""
    max_bs, gamma, vocab = 6, 4, 1024
    fs = rnn_sampler(max_bs=max_bs, gamma=gamma, vocab=vocab, lm_dtype=lm_dtype, device="cuda",
                     generator=seeded(3, "cuda"))
    gen = seeded(11)
    base = (3 * torch.randn(max_bs, gamma, vocab, generator=gen)).to("cuda", lm_dtype)
    anchor = torch.randint(vocab, (max_bs,), generator=gen).cuda()
    hidden = torch.randn(max_bs, gamma, 5, generator=gen).to("cuda", lm_dtype)
    fs.load_inputs(base, anchor, hidden)
    for bs in range(1, max_bs + 1):
        fs.stage_sampling_params(bs)
        fs.capture(bs)
    for bs in range(1, max_bs + 1):
        fs.stage_sampling_params(bs)
        greedy = fs.replay(bs).tokens.clone()
        eager = sample_block(fs.head, base[:bs], anchor[:bs], hidden[:bs], lambda logits, k: logits.argmax(-1))
        assert torch.equal(greedy, eager.tokens), f"bs={bs}: greedy replay differs from eager greedy"
        fs.stage_sampling_params(bs, temperatures=[1.5] * bs, top_k=[NO_TOP_K] * bs)
        out = fs.replay(bs)
        prev = torch.cat([anchor[:bs, None], out.tokens[:, :-1]], dim=1)
        forced = apply_block_logits(fs.head, base[:bs], prev, hidden[:bs]).to(lm_dtype)
        assert torch.equal(out.corrected_logits, forced), f"bs={bs}: corrected_out is not the tokens' teacher forcing"
        assert not torch.equal(out.tokens, greedy), f"bs={bs}: restaged sampling rows replayed the greedy block"


@pytest.mark.gpu
@needs_cuda
def test_s4_gpu_no_memory_growth_over_1000_replays():
    fs = rnn_sampler(max_bs=4, device="cuda", generator=seeded(5, "cuda"))
    fs.stage_sampling_params(4, temperatures=[1.0] * 4, top_k=[NO_TOP_K] * 4)
    fs.capture(4)
    fs.replay(4)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(1000):
        fs.replay(4)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("lm_dtype", [torch.float32, torch.bfloat16])
def test_s4_gpu_static_buffers_match_the_byte_formula(lm_dtype):
    """exp_noise + corrected_out hold exactly folded_buffer_bytes (SPEC S4.7) on the GPU."""
    max_bs, gamma, vocab = 8, 5, 129_280
    fs = FoldedDraftSampler(VanillaMarkovHead(vocab, 4).cuda(), max_bs=max_bs, gamma=gamma, vocab_size=vocab,
                            lm_dtype=lm_dtype, device="cuda")
    held = fs.exp_noise.nbytes + fs.corrected_out.nbytes
    assert held == folded_buffer_bytes(max_bs, gamma, vocab, lm_dtype)
