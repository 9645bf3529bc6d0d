"""Tests of the SGLang adapter (``conformance/adapters/sglang``): loader, build, wiring.

The loader's own machinery (version gate, stubs) is tested without SGLang. Everything
else needs the ``sglang`` wheel importable (``pip install --no-deps --target DIR
'sglang==X' msgspec`` and ``PYTHONPATH=DIR``) and is skipped, naming what is missing,
otherwise. Conformance itself is the suite's job (``pytest --dspark-impl sglang``); here
each capability is only wired up on small cases where SGLang and the reference agree
exactly. To add a case: one ``test_<topic>_*`` function using the ``sglang`` fixture.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from conformance import contract as c
from conformance.adapters import reference
from conformance.adapters.engine_import import is_stub
from conformance.adapters.sglang import (
    ledger,
    loader,
    make_adapter,
    make_blockwise_adapter,
    tensor_parallel,
    v0517,
    v0522,
)
from conformance.adapters.sglang import verify as sglang_verify
from conformance.adapters.sglang.engine_inputs import (
    TOP_K_ALL,
    draft_input,
    sampling_info,
    tp_sync_argument,
)
from conformance.loading import AdapterLoadError, load_adapter
from dspark_ref import confidence, markov, verify

FOLDED_CAPABILITIES = {
    c.StepSampler, c.NoiseStepSampler, c.MarkovBlock, c.DraftLayouts, c.FoldedDraft, c.FoldGate,
    c.ChainVerifier, c.TruncatedChainVerifier, c.GreedyVerifier, c.SimulatedAcceptance, c.Confidence,
    c.SpeculativeRound, c.ProductionScheduler, c.TensorParallelRound,
}
PHILOX_CAPABILITIES = {
    c.StepSampler, c.MarkovBlock, c.DraftLayouts, c.FoldedDraft, c.ChainVerifier, c.TruncatedChainVerifier,
    c.GreedyVerifier, c.SimulatedAcceptance, c.SimulatedBonus, c.Confidence, c.SpeculativeRound,
    c.ProductionScheduler, c.TensorParallelRound,
}
V, RANK, HIDDEN = 40, 6, 5


@pytest.fixture(scope="module")
def sglang() -> loader.SGLangModules:
    """The loaded SGLang; skips (naming the missing piece) when the wheel is not installed."""
    try:
        loader.installed_version()
    except AdapterLoadError as exc:
        pytest.skip(f"sglang not importable: {exc}")
    return loader.load_sglang()


@pytest.fixture(scope="module")
def adapter(sglang) -> c.Adapter:
    return make_adapter()


def _reference_head(head_type: str, seed: int = 1) -> markov.MarkovHead:
    config = {"markov_rank": RANK, "markov_head_type": head_type, "vocab_size": V, "hidden_size": HIDDEN}
    return markov.build_markov_head(config, scale=0.5, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- loader, no SGLang
@pytest.mark.parametrize(
    "version_text, generation",
    [("0.5.17", "folded"), ("0.5.21", "folded"), ("0.5.21.post1", "folded"), ("0.5.22", "philox"),
     ("0.5.23", "philox"), ("0.6.0rc1", "philox")],
)
def test_loader_generation_of_version(version_text, generation):
    assert loader.generation_of(version_text) == generation


def test_loader_rejects_release_without_dspark():
    with pytest.raises(AdapterLoadError, match=r"sglang==0\.5\.16: DSpark needs sglang >= 0\.5\.17"):
        loader.generation_of("0.5.16")


def test_loader_placeholder_call_names_the_stub():
    stub = loader._STUBS.module("sglang.srt.managers.schedule_batch", {}, strict=False)
    with pytest.raises(loader.StubCalled, match=r"schedule_batch\.ScheduleBatch is a stub .*annotations"):
        stub.ScheduleBatch()


def test_loader_strict_stub_has_only_its_names():
    stub = loader._STUBS.module("flashinfer.sampling", {"top_k_renorm_probs": None}, strict=True)
    assert stub.top_k_renorm_probs is None
    with pytest.raises(AttributeError, match="softmax"):
        stub.softmax  # noqa: B018  (SGLang's `try: from flashinfer.sampling import softmax`)


def test_loader_stubs_sgl_kernel_only_while_loading_and_only_fast_topk():
    # 0.5.17-0.5.20's spec_utils runs `from sgl_kernel import fast_topk` when CUDA is present.
    if importlib.util.find_spec("sgl_kernel") is not None:
        pytest.skip("sgl_kernel is installed: the loader uses the real one")
    with loader._missing_third_party_stubs():
        from sgl_kernel import fast_topk

        with pytest.raises(ImportError):
            from sgl_kernel import top_k_renorm_prob  # noqa: F401  (no other name is stubbed)
    assert "sgl_kernel" not in sys.modules
    with pytest.raises(loader.StubCalled, match=r"sgl_kernel\.fast_topk is a stub .*EAGLE tree top-k"):
        fast_topk(torch.zeros(1, 2), 1, dim=-1)


@pytest.mark.parametrize(
    "version_text, has_tp_sync, has_blockwise",
    [("0.5.17", False, False), ("0.5.18", False, False), ("0.5.19", True, False), ("0.5.21", True, False),
     ("0.5.22", True, False), ("0.5.23", True, True)],
)
def test_loader_modules_for_version_leave_out_later_modules(version_text, has_tp_sync, has_blockwise):
    names = loader.modules_for(version_text)
    assert ("tp_sync" in names, "blockwise" in names) == (has_tp_sync, has_blockwise)
    assert set(names) <= set(loader.DSPARK_MODULES[loader.generation_of(version_text)])


def test_loader_missing_module_names_its_first_release():
    modules = loader.SGLangModules("0.5.22", "philox", {})
    assert "blockwise" not in modules
    with pytest.raises(KeyError, match=r"sglang==0\.5\.22 has no DSpark module 'blockwise' \(first shipped in sglang 0\.5\.23\)"):
        modules["blockwise"]
    assert modules.release == (0, 5, 22)


def test_tp_sync_argument_is_empty_before_spec_tp_sync():
    assert tp_sync_argument(loader.SGLangModules("0.5.17", "folded", {})) == {}


def test_fold_gate_answers_the_old_free_memory_probe():
    module = types.SimpleNamespace(get_available_gpu_memory="stub")
    with v0517._free_memory_probe(module, 3.5):
        assert module.get_available_gpu_memory("cuda", 0) == 3.5
    assert module.get_available_gpu_memory == "stub"


def test_ledger_scopes_every_finding_by_release_range():
    assert ledger.LEDGER.expected_failures("0.5.16") == ()  # before DSpark: nothing confirmed there
    for version in ("0.5.21", "0.5.23"):
        pairs = [(e.test, d) for e in ledger.LEDGER.expected_failures(version) for d in e.devices]
        assert len(set(pairs)) == len(pairs)
    zero_noise = [e for e in ledger.LEDGER.expected_failures("0.5.21") if e.reason.startswith("F4")]
    assert zero_noise and all(e.devices == ("cpu",) for e in zero_noise)  # the CPU torch path only
    # F1's lost CUDA context: confirmed on CUDA only, never claimed on CPU
    caps = [e for e in ledger.LEDGER.expected_failures("0.5.23") if "per-row-chain-generator" in e.test]
    assert {(e.devices, e.loses_cuda_context) for e in caps} == {(("cpu",), False), (("cuda",), True)}
    hand = [e for e in ledger.LEDGER.expected_failures("0.5.23") if "S5/greedy/hand-cases" in e.test]
    assert {(e.devices, e.loses_cuda_context) for e in hand} == {(("cpu",), False), (("cuda",), True)}
    hand = [e for e in ledger.LEDGER.expected_failures("0.5.22") if "S5/greedy/hand-cases" in e.test]
    assert [(e.devices, e.loses_cuda_context) for e in hand] == [(("cpu", "cuda"), False)]  # not measured there
    later = ledger.LEDGER.expected_failures("0.5.24")
    newest = ledger.LEDGER.expected_failures(ledger.LEDGER.newest_measured["cpu"])
    assert {(e.test, e.devices) for e in later} == {(e.test, e.devices) for e in newest}
    assert all("carried forward from 0.5.23, not confirmed on 0.5.24" in e.reason for e in later)


# --------------------------------------------------------------------------- loader, with SGLang
def test_loader_imports_dspark_without_the_server(sglang):
    assert set(sglang.modules) == set(loader.modules_for(sglang.version))
    assert sglang.generation == loader.generation_of(loader.installed_version())
    # The package __init__ (the server) never ran: `sglang` is a bare package here ...
    assert getattr(sys.modules["sglang"], "__file__", None) is None
    # ... and the server's batch types are stubs, the DSpark modules real files.
    assert is_stub(sys.modules["sglang.srt.managers.schedule_batch"])
    assert sglang["heads"].__file__.endswith("sglang/srt/models/dspark.py")


def test_loader_imports_dspark_as_on_a_cuda_platform(sglang):
    # SGLang reads is_cuda() at import time; 0.5.17-0.5.20 then import sgl_kernel (stubbed).
    # A fresh process, so that this process's cached CPU-platform load stays as it is.
    script = textwrap.dedent("""
        from conformance.adapters.sglang import loader
        loader._PLATFORM_STUBS["sglang.srt.utils"]["is_cuda"] = lambda: True
        modules = loader.load_sglang()
        print(sorted(modules.modules) == sorted(loader.modules_for(modules.version)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]


def test_adapter_builds_for_installed_version(adapter, sglang):
    assert adapter.name == f"sglang=={sglang.version}"
    expected = FOLDED_CAPABILITIES if sglang.generation == "folded" else PHILOX_CAPABILITIES
    assert set(adapter.capabilities) == expected
    conventions = adapter.conventions
    assert (conventions.greedy_rule, conventions.top_k_ties, conventions.draft_truncates) == ("top_k", "lowest", False)


def test_sampling_info_carries_request_truncation_only_when_asked():
    top_k, temps = torch.tensor([1, 7, V, V + 3]), torch.tensor([0.5, 1.0, 2.0, 1.0])
    plain = sampling_info(temps, top_k)
    assert plain.top_ks.tolist() == [1, TOP_K_ALL, TOP_K_ALL, TOP_K_ALL]
    assert (plain.need_top_p_sampling, plain.need_min_p_sampling) == (False, False)
    info = sampling_info(temps, top_k, top_p=torch.tensor([1.0, 1.0, 0.5, 1.0]), min_p=torch.zeros(4), vocab_size=V)
    assert info.top_ks.tolist() == [1, 7, TOP_K_ALL, TOP_K_ALL]
    assert (info.need_top_k_sampling, info.need_top_p_sampling, info.need_min_p_sampling) == (True, True, False)
    assert (info.is_all_greedy, info.is_any_greedy) == (False, True)
    assert vars(draft_input(top_k, V)) == {"max_top_k": TOP_K_ALL, "uniform_top_k_value": None}
    assert vars(draft_input(torch.tensor([5, 5]), V)) == {"max_top_k": 5, "uniform_top_k_value": 5}


def test_loader_sampler_stub_carries_sglangs_own_top_p_renorm(sglang):
    sampler = sys.modules["sglang.srt.layers.sampler"]
    assert is_stub(sampler)
    renorm = sampler.top_p_normalize_probs_torch
    assert renorm.__code__.co_filename.endswith("sglang/srt/layers/sampler.py")
    probs = torch.tensor([[0.5, 0.3, 0.2]])
    torch.testing.assert_close(renorm(probs, torch.tensor([0.6])), torch.tensor([[0.625, 0.375, 0.0]]))


def test_adapter_loads_by_pinned_name(sglang):
    assert load_adapter(f"sglang=={sglang.version}").name == f"sglang=={sglang.version}"
    with pytest.raises(AdapterLoadError, match="installed version is"):
        load_adapter("sglang==0.0.1")


def test_blockwise_adapter_needs_blockwise_rejection(sglang):
    if "blockwise" not in sglang:
        with pytest.raises(AdapterLoadError, match=r"BlockwiseRejection .* first shipped in sglang 0\.5\.23"):
            make_blockwise_adapter()
    else:
        assert make_blockwise_adapter().name == f"sglang=={sglang.version}+blockwise"


# --------------------------------------------------------------------------- capability wiring
def test_step_sampler_greedy_rows_take_argmax_and_crop_padding(adapter):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, V + 8, generator=gen)
    logits[:, V:] = 100.0  # padded columns must never win
    top_k = torch.tensor([1, 1, 50, 50])
    tokens = adapter.get(c.StepSampler).sample(logits, torch.ones(4), top_k, V, gen)
    assert tokens.dtype == torch.int64
    assert bool((tokens < V).all())
    assert torch.equal(tokens[:2], logits[:2, :V].argmax(-1))


def test_markov_head_weights_translate(adapter):
    block = adapter.get(c.MarkovBlock)
    gen = torch.Generator().manual_seed(2)
    for head_type in ("vanilla", "gated", "rnn"):
        ref = _reference_head(head_type)
        head = block.load_head(head_type, ref.state_dict(), V, RANK, HIDDEN, torch.device("cpu"))
        base = torch.randn(3, 4, V, generator=gen)
        hidden = torch.randn(3, 4, HIDDEN, generator=gen)
        prev = torch.randint(0, V, (3, 4), generator=gen)
        expected = markov.apply_block_logits(ref, base, prev, hidden)
        torch.testing.assert_close(block.apply_block_logits(head, base, prev, hidden), expected)


def test_markov_head_rejects_keys_of_another_head(adapter):
    state = _reference_head("gated").state_dict()
    with pytest.raises(ValueError, match="state_dict: SGLang's VanillaMarkov takes"):
        adapter.get(c.MarkovBlock).load_head("vanilla", state, V, RANK, HIDDEN, torch.device("cpu"))


def test_markov_block_greedy_matches_reference(adapter):
    block = adapter.get(c.MarkovBlock)
    ref = _reference_head("rnn")
    head = block.load_head("rnn", ref.state_dict(), V, RANK, HIDDEN, torch.device("cpu"))
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(2, 5, V, generator=gen)
    hidden = torch.randn(2, 5, HIDDEN, generator=gen)
    anchor = torch.tensor([3, 7])
    greedy = torch.ones(2, dtype=torch.int64)
    tokens, corrected = block.sample_block(head, base, anchor, hidden, torch.ones(2), greedy, gen)
    expected = markov.sample_block(ref, base, anchor, hidden, lambda logits, k: logits.argmax(-1))
    assert torch.equal(tokens, expected.tokens)
    torch.testing.assert_close(corrected, expected.corrected_logits)


def test_folded_draft_requirement_is_declared_where_sglang_needs_cuda_torch(adapter, sglang):
    if sglang.generation == "folded":
        assert dict(adapter.requirements) == {}
        return
    assert dict(adapter.requirements) == {c.FoldedDraft: v0522.FOLDED_REQUIREMENT}
    assert v0522.FOLDED_REQUIREMENT.cuda_build
    why = adapter.unmet(c.FoldedDraft, "cpu")
    if torch.backends.cuda.is_built():
        assert why is None
    else:
        assert why.startswith("needs a CUDA build of torch") and why.endswith("before it sizes step_logits)")


def _folded_session(adapter, sglang, head, max_bs=4, gamma=3):
    if adapter.unmet(c.FoldedDraft, "cpu") is not None:
        pytest.skip(f"FoldedDraft of {adapter.name}: {adapter.unmet(c.FoldedDraft, 'cpu')}")
    return adapter.get(c.FoldedDraft).session(head, max_bs, gamma, V, torch.float32, torch.device("cpu"), 5)


def test_folded_session_replay_returns_views_of_sglangs_static_buffers(adapter, sglang):
    block = adapter.get(c.MarkovBlock)
    head = block.load_head("vanilla", _reference_head("vanilla").state_dict(), V, RANK, HIDDEN, torch.device("cpu"))
    session = _folded_session(adapter, sglang, head)
    gen = torch.Generator().manual_seed(8)
    base, anchor = torch.randn(4, 3, V, generator=gen), torch.tensor([1, 2, 3, 4])
    session.stage(4, None, None)
    session.load_inputs(base, anchor, None)
    session.capture()
    first = session.replay()
    kept = [t.clone() for t in first]
    session.load_inputs(base.flip(0), anchor.flip(0), None)
    second = session.replay()
    # SGLang's own `out` buffer, and its corrected / step logits buffer, behind both replays:
    sampler = session._sampler
    corrected_buffer = sampler.corrected_out if sglang.generation == "folded" else sampler.step_logits
    for got, buffer in ((first[0], sampler.out), (first[1], corrected_buffer)):
        assert got.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    assert [a.data_ptr() for a in first] == [b.data_ptr() for b in second]
    assert torch.equal(first[0], kept[0].flip(0)) and torch.equal(first[1], kept[1].flip(0))  # overwritten


def test_folded_session_runs_one_pass_per_replay(adapter, sglang):
    block = adapter.get(c.MarkovBlock)
    head = block.load_head("vanilla", _reference_head("vanilla").state_dict(), V, RANK, HIDDEN, torch.device("cpu"))
    if adapter.unmet(c.FoldedDraft, "cpu") is not None:
        with pytest.raises(c.Inconclusive, match="needs a CUDA build of torch"):
            adapter.get(c.FoldedDraft).session(head, 4, 3, V, torch.float32, torch.device("cpu"), 5)
        return
    session = adapter.get(c.FoldedDraft).session(head, 4, 3, V, torch.float32, torch.device("cpu"), 5)
    gen = torch.Generator().manual_seed(4)
    base, anchor = torch.randn(2, 3, V, generator=gen), torch.tensor([1, 2])
    session.stage(2, None, None)  # no sampling info: every row greedy
    session.load_inputs(base, anchor, None)
    session.capture()
    tokens, corrected = session.replay()
    eager, _ = block.sample_block(head, base, anchor, None, torch.ones(2), torch.ones(2, dtype=torch.int64), gen)
    assert torch.equal(tokens, eager)
    assert corrected.shape == (2, 3, V)
    assert (session.graph_replays, session.sample_block_calls) == (0, 1)


def test_fold_gate_matches_spec_example(adapter, sglang):
    if sglang.generation == "philox":
        pytest.skip("0.5.22+ has no OFF/AUTO/FORCE folded-sampling gate")
    gate = adapter.get(c.FoldGate)
    need = 132_382_720 + 330_956_800  # SPEC S4.7: V=129,280, max_bs=256, gamma=5, bf16
    assert gate.buffer_bytes(256, 5, 129_280, torch.bfloat16) == need
    roomy = need + (1 << 30)
    assert [gate.folds_sampling(m, 256, 5, 129_280, torch.bfloat16, roomy) for m in ("off", "force")] == [False, True]
    if sglang.release < (0, 5, 18) and not torch.cuda.is_available():
        with pytest.raises(c.CannotRunHere, match=r"torch\.cuda\.current_device"):
            gate.folds_sampling("auto", 256, 5, 129_280, torch.bfloat16, roomy)
        return
    assert gate.folds_sampling("auto", 256, 5, 129_280, torch.bfloat16, roomy) is True
    assert gate.folds_sampling("auto", 256, 5, 129_280, torch.bfloat16, roomy - 1) is False


def test_greedy_verifier_matches_reference(adapter):
    gen = torch.Generator().manual_seed(5)
    target = torch.randn(3, 5, V, generator=gen)
    drafts = target[:, :4].argmax(-1)
    drafts[0, 1] = (drafts[0, 1] + 1) % V
    drafts[2, 3] = (drafts[2, 3] + 1) % V
    for cap in (None, 3):
        accepted, tokens = adapter.get(c.GreedyVerifier).verify_greedy(drafts, target, cap=cap)
        expected = verify.greedy_verify(drafts, target, cap=cap)
        assert torch.equal(accepted, expected.accepted)
        assert torch.equal(tokens, expected.tokens)


def test_chain_verifier_refuses_explicit_uniforms(adapter):
    with pytest.raises(NotImplementedError, match="explicit uniforms"):
        adapter.get(c.ChainVerifier).verify(
            torch.zeros(1, 2, dtype=torch.int64), torch.zeros(1, 3, V), torch.zeros(1, 2, V),
            torch.ones(1), torch.ones(1, dtype=torch.int64),
            accept_uniforms=torch.zeros(1, 2, dtype=torch.float64),
        )


def test_confidence_head_matches_reference(adapter):
    gen = torch.Generator().manual_seed(6)
    ref = confidence.ConfidenceHead(HIDDEN, markov_rank=RANK, generator=gen)
    hidden, features = torch.randn(2, 3, HIDDEN, generator=gen), torch.randn(2, 3, RANK, generator=gen)
    temperatures = torch.tensor([0.5, 1.0, 2.0])
    got = adapter.get(c.Confidence).confidences(
        ref.state_dict(), hidden, features, temperatures, checkpoint_gamma=5
    )
    torch.testing.assert_close(got, ref(hidden, features, temperatures))
    survival = adapter.get(c.Confidence).prefix_survival(got.unsqueeze(0))
    torch.testing.assert_close(survival, torch.cumprod(got, dim=-1).unsqueeze(0))


def test_simulated_acceptance_is_seeded_and_in_range(adapter):
    sim = adapter.get(c.SimulatedAcceptance)
    draws = [sim.sample_acc_len(4.7, "match-expected", 6, torch.Generator().manual_seed(s)) for s in range(40)]
    again = [sim.sample_acc_len(4.7, "match-expected", 6, torch.Generator().manual_seed(s)) for s in range(40)]
    assert draws == again and set(draws) == {4, 5}
    drafts = torch.arange(15).view(3, 5)
    executors = [sim.executor(4.7, "match-expected", 5, seed=9) for _ in range(2)]
    steps = [executor.step(drafts) for executor in executors]
    assert torch.equal(steps[0], steps[1]) and steps[0].shape == (3,)
    kept = torch.arange(5)[None, :] < steps[0][:, None] - 1
    assert torch.equal(executors[0].correct_drafts, torch.where(kept, drafts, -1))
    with pytest.raises(ValueError, match="simulate_acc_method"):
        sim.sample_acc_len(4.7, "mean", 6, torch.Generator())


# --------------------------------------------------------------------------- S9 one round
def _round_inputs(head_type: str, rows: int = 3, gamma: int = 4, seed: int = 7):
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, gamma, V, generator=gen) * 2
    hidden = torch.randn(rows, gamma, HIDDEN, generator=gen) if head_type != "vanilla" else None
    anchor = torch.randint(0, V, (rows,), generator=gen)
    return base, hidden, anchor, gen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("head_type", ["vanilla", "gated", "rnn"])
def test_speculative_round_greedy_matches_reference(adapter, head_type, dtype):
    ref_head = _reference_head(head_type)
    ours, theirs = adapter.get(c.SpeculativeRound), reference.SpeculativeRound()
    head = ours.load_head(head_type, ref_head.state_dict(), V, RANK, HIDDEN, torch.device("cpu"), dtype)
    ref = theirs.load_head(head_type, ref_head.state_dict(), V, RANK, HIDDEN, torch.device("cpu"), dtype)
    base, hidden, anchor, gen = _round_inputs(head_type)
    rows, gamma = base.shape[:2]
    # A target that agrees with the greedy draft up to a row-dependent position.
    drafted = theirs.round(ref, base, anchor, hidden, torch.zeros(rows, gamma + 1, V), torch.ones(rows),
                           torch.ones(rows, dtype=torch.int64), torch.ones(rows), torch.zeros(rows))[0]
    target = torch.randn(rows, gamma + 1, V, generator=gen)
    for row, agree in enumerate((0, 2, gamma)):
        target[row, torch.arange(agree), drafted[row, :agree]] = 10.0
    args = (target, torch.ones(rows), torch.ones(rows, dtype=torch.int64), torch.ones(rows), torch.zeros(rows))
    got = ours.round(head, base, anchor, hidden, *args, generator=torch.Generator().manual_seed(1))
    expected = theirs.round(ref, base, anchor, hidden, *args, generator=torch.Generator().manual_seed(1))
    for name, a, b in zip(("draft_tokens", "accepted", "tokens", "draft_probs"), got, expected):
        assert torch.equal(a, b.to(a.dtype)), name
    assert got[1].tolist() == [0, 2, gamma]


def test_speculative_round_refuses_seeded_rows(adapter):
    head = adapter.get(c.SpeculativeRound).load_head(
        "vanilla", _reference_head("vanilla").state_dict(), V, RANK, HIDDEN, torch.device("cpu"), torch.float32
    )
    with pytest.raises(NotImplementedError, match="seeded rows"):
        adapter.get(c.SpeculativeRound).round(
            head, torch.zeros(1, 2, V), torch.zeros(1, dtype=torch.int64), None, torch.zeros(1, 3, V), torch.ones(1),
            torch.ones(1, dtype=torch.int64), torch.ones(1), torch.zeros(1), seeds=torch.zeros(1, dtype=torch.int64),
            positions=torch.zeros(1, dtype=torch.int64),
        )


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="SGLang's chain kernel needs TRITON_INTERPRET=1 on CPU")
def test_speculative_round_hands_over_the_law_of_its_draft(adapter, sglang):
    """Sampling rows: the q SGLang hands its verifier is softmax(corrected / T) of the drawn
    tokens (teacher forcing through SGLang's MarkovBlock); greedy rows one-hot."""
    round_, block = adapter.get(c.SpeculativeRound), adapter.get(c.MarkovBlock)
    ref_head = _reference_head("gated")
    head = round_.load_head("gated", ref_head.state_dict(), V, RANK, HIDDEN, torch.device("cpu"), torch.float32)
    base, hidden, anchor, gen = _round_inputs("gated")
    temps, top_k = torch.tensor([0.7, 1.0, 1.5]), torch.tensor([1, 5, V])
    target = torch.randn(3, base.shape[1] + 1, V, generator=gen)
    args = (head, base, anchor, hidden, target, temps, top_k, torch.ones(3), torch.zeros(3))
    if sglang_verify._renorm_kernels_missing(sglang):  # 0.5.17 without sgl_kernel
        with pytest.raises(NotImplementedError, match="no torch fallback before 0.5.18"):
            round_.round(*args, generator=gen)
        return
    drafts, accepted, tokens, q = round_.round(*args, generator=gen)
    prev = torch.cat([anchor[:, None], drafts[:, :-1]], dim=1)
    corrected = block.apply_block_logits(head, base, prev, hidden)
    law = torch.softmax(corrected / temps[:, None, None], dim=-1)
    torch.testing.assert_close(q[1:], law[1:])  # top_k = 5 does not reach the drafter
    assert torch.equal(q[0], torch.nn.functional.one_hot(drafts[0], V).float())
    assert torch.equal(drafts[0], corrected[0].argmax(-1))
    assert bool((tokens[torch.arange(3), accepted] >= 0).all())


# --------------------------------------------------------------------------- S5 tensor parallelism
class RecordingGroup:
    """A two-rank :class:`~conformance.contract.RankGroup` seen from rank 0: ``broadcast``
    records each call (rank 0's values stay as they are) and fails where ``fail`` says."""

    def __init__(self, fail: bool = False) -> None:
        self.rank, self.world_size, self.rank_in_group = 0, 2, 0
        self.fail = fail
        self.calls: list[tuple[torch.Tensor, int]] = []

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        assert not self.fail, "a collective before the NotImplementedError"
        self.calls.append((tensor.clone(), src))


def _tp_inputs(rows: int = 3, gamma: int = 4):
    base, hidden, anchor, gen = _round_inputs("gated", rows, gamma)
    return {
        "head_type": "gated", "state_dict": _reference_head("gated").state_dict(), "base_logits": base,
        "first_prev": anchor, "hidden": hidden, "target_logits": torch.randn(rows, gamma + 1, V, generator=gen),
        "temperatures": torch.zeros(rows), "top_k": torch.ones(rows, dtype=torch.int64),
        "confidences": torch.rand(rows, gamma, generator=gen, dtype=torch.float64),
        "sps": [1.0 / (1.0 + 0.05 * b) for b in range(1, rows * (gamma + 1) + 1)],
        "generator": torch.Generator().manual_seed(3), "seeds": torch.zeros(rows, dtype=torch.int64),
        "positions": torch.full((rows,), 17, dtype=torch.int64),
    }


@pytest.mark.parametrize("version_text", ["0.5.17", "0.5.18"])
def test_tensor_parallel_round_is_a_named_skip_without_spec_tp_sync(version_text):
    """0.5.17-0.5.18 ship no SpecTpSync: NotImplementedError naming that (the suite's skip),
    raised before any collective so that no rank waits for the other."""
    modules = loader.SGLangModules(version_text, "folded", {})
    tp = tensor_parallel.TensorParallelRound(modules, v0517.draft_block)
    inputs = _tp_inputs()
    group = RecordingGroup(fail=True)
    missing = rf"sglang=={version_text} ships no SpecTpSync .*first shipped in 0\.5\.19"
    with pytest.raises(NotImplementedError, match=missing):
        tp.tp_round(group, inputs.pop("head_type"), inputs.pop("state_dict"), **inputs)


def test_tensor_parallel_round_is_offered_with_sglangs_spec_tp_sync(adapter, sglang):
    tp = adapter.get(c.TensorParallelRound)
    assert isinstance(tp, tensor_parallel.TensorParallelRound)
    if "tp_sync" not in sglang:
        with pytest.raises(NotImplementedError, match="ships no SpecTpSync"):
            tp.tp_sync(RecordingGroup())
        return
    sync = tp.tp_sync(RecordingGroup())
    assert isinstance(sync, sglang["tp_sync"].SpecTpSync)
    assert sync.enabled(sglang["tp_sync"].SpecTpSyncSite.DSPARK_PLAN)  # SGLANG_SPEC_TP_SYNC=all by default


def test_tensor_parallel_round_broadcasts_draft_plan_and_accept_from_rank_0(adapter, sglang):
    """A greedy round on rank 0 of two: SGLang broadcasts each draft step's tokens, the plan's
    verify lengths (anchor counted) and the accept's three tensors, all from rank 0."""
    if "tp_sync" not in sglang:
        pytest.skip(f"sglang=={sglang.version} ships no SpecTpSync")
    inputs, group = _tp_inputs(), RecordingGroup()
    drafts, lengths, accepted, tokens = adapter.get(c.TensorParallelRound).tp_round(
        group, inputs.pop("head_type"), inputs.pop("state_dict"), **inputs
    )
    rows, gamma = drafts.shape
    assert len(group.calls) == gamma + 1 + 3 and {src for _, src in group.calls} == {0}
    assert torch.equal(torch.stack([t for t, _ in group.calls[:gamma]], dim=1).to(torch.int64), drafts)
    assert torch.equal(group.calls[gamma][0].to(torch.int64), lengths + 1)
    assert torch.equal(group.calls[gamma + 1][0].to(torch.int64), accepted)
    assert bool(((0 <= lengths) & (lengths <= gamma) & (accepted <= lengths)).all())
    assert bool((tokens[torch.arange(rows), accepted] >= 0).all())
