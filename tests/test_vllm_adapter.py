"""Tests of the vLLM adapter (``conformance/adapters/vllm``): loader, translation, wiring;
and of the speculators adapter (``conformance/adapters/speculators``), at the end.

The loader's machinery (version gate, stubs, error messages) and the translation helpers
are tested without vLLM. The rest needs the ``vllm`` wheel importable (``pip install
--no-deps --target DIR 'vllm==X'``, ``PYTHONPATH=DIR``, and ``TRITON_INTERPRET=1`` on CPU)
and is skipped, naming what is missing, otherwise. Conformance itself is the suite's job
(``dspark-conformance run --impl vllm``); here each capability is only wired up on small
cases. To add a case: one ``test_<topic>_*`` function, using the ``vllm`` fixture when it
needs the wheel.
"""

from __future__ import annotations

import inspect
import os
import pickle

import pytest
import torch

from conformance import contract as c
from conformance.adapters.vllm import engine_inputs, ledger, loader
from conformance.adapters.vllm.sampling import cache_is_processed, gumbel_kwargs
from conformance.adapters.versions import release_of
from conformance.loading import AdapterLoadError, load_adapter

V, RANK = 40, 6
CAPABILITIES = {c.StepSampler, c.MarkovBlock, c.DraftLayouts, c.ChainVerifier, c.GreedyVerifier, c.SpeculativeRound,
                c.SimulatedAcceptance, c.SimulatedAcceptanceBatch, c.TensorParallelRound}


@pytest.fixture(scope="module")
def vllm() -> loader.VLLMModules:
    """The loaded vLLM; skips (naming the missing piece) when the wheel or the interpreter is absent."""
    try:
        loader.installed_version()
    except AdapterLoadError as exc:
        pytest.skip(f"vllm not importable: {exc}")
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("vLLM's DSpark kernels are Triton-only: on CPU set TRITON_INTERPRET=1")
    return loader.load_vllm()


# --------------------------------------------------------------------------- loader, no vLLM
def test_loader_names_how_to_install_when_missing(monkeypatch):
    def missing(name):
        raise loader.PackageNotFoundError(name)

    monkeypatch.setattr(loader, "version", missing)
    with pytest.raises(AdapterLoadError, match=r"vllm: the package is not installed; .*pip install --no-deps"):
        loader.installed_version()


def test_loader_rejects_release_without_dspark(monkeypatch):
    monkeypatch.setattr(loader, "version", lambda name: "0.24.0")
    with pytest.raises(AdapterLoadError, match=r"vllm==0\.24\.0: DSpark needs vllm >= 0\.25\.0"):
        loader.installed_version()


def test_loader_import_error_names_version_module_and_missing_piece():
    with pytest.raises(AdapterLoadError, match=r"vllm==9\.9\.9: cannot import no_such_pkg_xyz\.mod: "
                                               r"missing 'no_such_pkg_xyz' .*_ENGINE_STUBS"):
        loader._import("9.9.9", "no_such_pkg_xyz.mod")


def test_loader_placeholder_call_names_the_stub():
    stub = loader._STUBS.module("vllm.v1.worker.gpu.spec_decode.dflash.speculator", {})
    with pytest.raises(loader.StubCalled, match=r"dflash\.speculator\.DFlashSpeculator is a stub .*backbone"):
        stub.DFlashSpeculator()


def test_loader_subclass_of_a_placeholder_cannot_be_instantiated():
    # DSparkSpeculator subclasses the stubbed DFlash base: building it the normal way must raise.
    base = loader._STUBS.module("vllm.v1.worker.gpu.spec_decode.dflash.speculator", {}).DFlashSpeculator
    sub = type(base)("DSparkSpeculator", (base,), {"__module__": "x"})
    with pytest.raises(loader.StubCalled):
        sub()


def test_loader_stub_values_are_real():
    logger_stub = loader._STUBS.module("vllm.logger", loader._STUB_VALUES["vllm.logger"]())
    assert logger_stub.init_logger("x").name == "x"
    compilation = loader._STUBS.module("vllm.config.compilation", loader._STUB_VALUES["vllm.config.compilation"]())
    assert compilation.CUDAGraphMode.NONE.name == "NONE"


def test_loader_libdevice_shim_only_under_the_interpreter(monkeypatch):
    import triton.language.extra.libdevice as libdevice

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert loader._libdevice() is libdevice
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    shim = loader._libdevice()
    assert shim is not libdevice and shim.log1p is not libdevice.log1p and shim.exp is libdevice.exp


def test_loader_missing_optional_module_says_why():
    modules = loader.VLLMModules("0.33.0", "/nowhere", {}, {"acceptance": "cannot import it"})
    assert "acceptance" not in modules
    with pytest.raises(KeyError, match=r"vllm==0\.33\.0 has no DSpark module 'acceptance' \(cannot import it\)"):
        modules["acceptance"]


# --------------------------------------------------------------------------- translation, no vLLM
def test_sampling_constants_read_from_the_installed_file(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "sampling_params.py").write_text("_SAMPLING_EPS = 1e-5\n_MAX_TEMP = 1e-2\n")
    assert engine_inputs.sampling_constants(str(tmp_path), "x") == (1e-5, 1e-2)


def test_sampling_constants_missing_names_version(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "sampling_params.py").write_text("_SAMPLING_EPS = 1e-5\n")
    with pytest.raises(AdapterLoadError, match=r"vllm==y: sampling_params\.py defines no \['_MAX_TEMP'\]"):
        engine_inputs.sampling_constants(str(tmp_path), "y")


def test_request_temperatures_floor_before_greedy():
    # vLLM's SamplingParams: floor 0 < T < 1e-2 to 1e-2 first, then T < 1e-5 is greedy (state 0).
    got = engine_inputs.request_temperatures(torch.tensor([0.0, 1e-7, 1e-5, 5e-3, 1e-2, 0.7, 2.0]), 1e-5, 1e-2)
    assert got.dtype == torch.float32
    assert got.tolist() == pytest.approx([0.0, 1e-2, 1e-2, 1e-2, 1e-2, 0.7, 2.0])


@pytest.mark.parametrize("value, message", [(float("nan"), "finite"), (float("inf"), "finite"),
                                            (-0.5, "non-negative"), (2.5, r"in \[0, 2\]")])
def test_request_temperatures_rejects_as_vllm_does(value, message):
    with pytest.raises(ValueError, match=message):
        engine_inputs.request_temperatures(torch.tensor([1.0, value]), 1e-5, 1e-2)


def test_seeds_and_positions_follow_the_generator():
    a = engine_inputs.seeds_from(torch.Generator().manual_seed(3), 4, torch.device("cpu"))
    b = engine_inputs.seeds_from(torch.Generator().manual_seed(3), 4, torch.device("cpu"))
    assert torch.equal(a, b) and a.dtype == torch.int64 and bool((a >= 0).all())
    pos = engine_inputs.positions_from(torch.Generator().manual_seed(3), 4, torch.device("cpu"))
    assert bool((pos >= 1).all()) and bool((pos < 2**20).all())


def _gumbel_025(logits, expanded_idx_mapping, temperature, seed, pos, apply_temperature,
                output_processed_logits=None, output_processed_logits_col=None, use_fp64=False): ...


def _gumbel_028(logits, expanded_idx_mapping, temperature, seed, pos, apply_temperature,
                logits_cache=None, logits_cache_col=None, use_fp64=False): ...


def _gumbel_029(logits, expanded_idx_mapping, temperature, seed, pos, apply_temperature, is_drafting,
                logits_cache=None, logits_cache_col=None, use_fp64=False): ...


@pytest.mark.parametrize("fn, cache_name, drafting, processed", [
    (_gumbel_025, "output_processed_logits", False, True),
    (_gumbel_028, "logits_cache", False, False),
    (_gumbel_029, "logits_cache", True, False),
])
def test_gumbel_kwargs_follow_the_signature(fn, cache_name, drafting, processed):
    cache, col = torch.zeros(1), torch.zeros(())
    kwargs = gumbel_kwargs(fn, drafting=True, cache=cache, cache_col=col)
    assert kwargs[cache_name] is cache and ("is_drafting" in kwargs) == drafting
    inspect.signature(fn).bind(*range(5), **kwargs)  # the installed function accepts them
    assert cache_is_processed(fn) is processed


def test_gumbel_kwargs_without_a_cache_argument_is_an_error():
    def old(logits, expanded_idx_mapping, temperature, seed, pos, apply_temperature): ...

    with pytest.raises(TypeError, match="takes no logits cache"):
        gumbel_kwargs(old, drafting=True, cache=torch.zeros(1))


def test_ledger_scopes_every_finding_by_release_range():
    assert all(e.reason.startswith("V") for e in ledger.LEDGER.entries)
    assert ledger.LEDGER.expected_failures("0.24.0") == ()  # before DSpark: nothing confirmed there
    # a patch release inside the confirmed ranges inherits them, unmarked
    assert ledger.LEDGER.expected_failures("0.25.1") == ledger.LEDGER.expected_failures("0.25.0")
    # a release newer than the newest measured on a device carries that release's entries forward, marked
    later = ledger.LEDGER.expected_failures("9.9.9")
    for device, newest in ledger.LEDGER.newest_measured.items():
        measured = {e.test for e in ledger.LEDGER.expected_failures(newest) if device in e.devices}
        carried = [e for e in later if device in e.devices]
        assert {e.test for e in carried} == measured
        assert all(e.carried_forward_from == newest and "not confirmed on 9.9.9" in e.reason for e in carried)
    assert all(ledger.FINDINGS in e.reason for e in later)


# --------------------------------------------------------------------------- with vLLM
def test_adapter_builds_with_its_capabilities(vllm):
    adapter = load_adapter("vllm")
    assert adapter.name == f"vllm=={vllm.version}"
    # adaptive verification (ProductionScheduler) first shipped in 0.28.0; it needs CUDA before 0.33.0;
    # the confidence head ships from 0.28.0 too (0.25.0's model file skips its weights).
    release = release_of("vllm", vllm.version)
    from_0_28 = {c.ProductionScheduler, c.Confidence} if release >= (0, 28, 0) else set()
    assert set(adapter.capabilities) == CAPABILITIES | from_0_28
    # TensorParallelRound plans with adaptive verification from 0.28.0, so it needs CUDA where that does.
    pinning = {c.ProductionScheduler, c.TensorParallelRound}
    assert set(adapter.requirements) == (pinning if (0, 28, 0) <= release < (0, 33, 0) else set())
    assert adapter.conventions.greedy_rule == "temperature" and adapter.conventions.draft_truncates is False
    assert load_adapter(f"vllm=={vllm.version}").name == adapter.name


def test_adapter_version_pin_mismatch_names_the_installed_version(vllm):
    with pytest.raises(AdapterLoadError, match=rf"implementation 'vllm==0\.0\.1': installed version is 'vllm=={vllm.version}'"):
        load_adapter("vllm==0.0.1")


def _head(block):
    from dspark_ref import markov

    ref = markov.build_markov_head({"markov_rank": RANK, "markov_head_type": "vanilla", "vocab_size": V,
                                    "hidden_size": 5}, scale=0.5, generator=torch.Generator().manual_seed(1))
    return ref, block.load_head("vanilla", ref.state_dict(), V, RANK, 5, torch.device("cpu"))


def test_markov_sample_block_is_its_own_teacher_forcing(vllm):
    from conformance.adapters.vllm.markov import MarkovBlock

    block = MarkovBlock(vllm)
    ref, head = _head(block)
    gen = torch.Generator().manual_seed(0)
    base, first = torch.randn(3, 4, V, generator=gen), torch.tensor([1, 2, 3])
    tokens, corrected = block.sample_block(head, base, first, None, torch.tensor([1.0, 0.0, 0.5]),
                                           torch.full((3,), V), gen)
    prev = torch.cat([first[:, None], tokens[:, :-1]], dim=1)
    assert torch.equal(block.apply_block_logits(head, base, prev, None), corrected)
    expected = ref.apply_block_logits(base, prev) if hasattr(ref, "apply_block_logits") else None
    if expected is not None:
        torch.testing.assert_close(corrected, expected[1] if isinstance(expected, tuple) else expected)
    assert torch.equal(tokens[1], corrected[1].argmax(dim=-1))  # the greedy row


def test_markov_rejects_heads_vllm_lacks(vllm):
    from conformance.adapters.vllm.markov import MarkovBlock, recurrent_step

    with pytest.raises(NotImplementedError, match="ships the vanilla head"):
        MarkovBlock(vllm).load_head("gated", {}, V, RANK, 5, torch.device("cpu"))
    if recurrent_step(vllm)[0] is None:
        with pytest.raises(NotImplementedError, match="vanilla head only .*no recurrent Markov step"):
            MarkovBlock(vllm).load_head("rnn", {"W1.weight": torch.zeros(V, RANK), "W2.weight": torch.zeros(V, RANK)},
                                        V, RANK, 5, torch.device("cpu"))
    with pytest.raises(ValueError, match="markov_rank must be positive"):
        MarkovBlock(vllm).load_head("vanilla", {}, V, 0, 5, torch.device("cpu"))


def test_greedy_verify_hand_case(vllm):
    from conformance.adapters.vllm.verify import GreedyVerifier

    target = torch.tensor([[[0.0, 5, 1], [7, 1, 1], [0, 0, 3]]])
    verifier = GreedyVerifier(vllm)
    accepted, tokens = verifier.verify_greedy(torch.tensor([[1, 0]]), target)
    assert accepted.tolist() == [2] and tokens.tolist() == [[1, 0, 2]]
    accepted, tokens = verifier.verify_greedy(torch.tensor([[1, 0]]), target, cap=0)
    assert accepted.tolist() == [0] and tokens.tolist() == [[1, -1, -1]]


def test_seeded_rows_repeat_and_explicit_uniforms_are_refused(vllm):
    from conformance.adapters.vllm.verify import ChainVerifier

    verifier = ChainVerifier(vllm)
    gen = torch.Generator().manual_seed(2)
    target, draft = torch.randn(4, 3, 8, generator=gen), torch.randn(4, 2, 8, generator=gen)
    drafts = torch.randint(0, 8, (4, 2), generator=gen)
    args = (drafts, target, draft, torch.ones(4), torch.full((4,), 8))
    seeded = dict(seeds=torch.tensor([1, 2, 3, 4]), positions=torch.tensor([5, 6, 7, 8]))
    first, again = verifier.verify(*args, **seeded), verifier.verify(*args, **seeded)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    with pytest.raises(NotImplementedError, match="explicit uniforms"):
        verifier.verify(*args, accept_uniforms=torch.rand(4, 2, dtype=torch.float64))


def test_round_hands_the_cache_to_the_verifier_and_repeats_when_seeded(vllm):
    from conformance.adapters.vllm.round import SpeculativeRound

    iut = SpeculativeRound(vllm)
    ref, _ = _head(iut._block)
    head = iut.load_head("vanilla", ref.state_dict(), V, RANK, 5, torch.device("cpu"), torch.float32)
    gen = torch.Generator().manual_seed(4)
    rows, gamma = 4, 3
    base, target = torch.randn(rows, gamma, V, generator=gen), torch.randn(rows, gamma + 1, V, generator=gen)
    temps = torch.tensor([1.0, 0.0, 0.7, 1.3])
    neutral = (torch.full((rows,), V), torch.ones(rows), torch.zeros(rows))
    seeded = dict(seeds=torch.tensor([9, 8, 7, 6]), positions=torch.tensor([3, 30, 300, 3000]))
    first = iut.round(head, base, torch.tensor([1, 2, 3, 4]), None, target, temps, *neutral, **seeded)
    again = iut.round(head, base, torch.tensor([1, 2, 3, 4]), None, target, temps, *neutral, **seeded)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    drafts, accepted, tokens, probs = first
    assert drafts.shape == (rows, gamma) and tokens.shape == (rows, gamma + 1)
    torch.testing.assert_close(probs.sum(-1), torch.ones(rows, gamma))
    assert torch.equal(probs[1].argmax(-1), drafts[1]) and bool((probs[1].max(-1).values == 1).all())
    assert torch.equal(tokens[:, :1].clamp(min=-1), tokens[:, :1])  # the first slot is always committed
    assert bool((tokens[:, 0] >= 0).all())
    with pytest.raises(NotImplementedError, match="top-k / top-p"):
        iut.round(head, base, torch.tensor([1, 2, 3, 4]), None, target, temps, torch.full((rows,), 2),
                  torch.ones(rows), torch.zeros(rows), **seeded)


def test_source_functions_compile_vllm_helpers_and_name_what_is_missing(tmp_path):
    (tmp_path / "m.py").write_text("class K:\n    @staticmethod\n    def a(x):\n        return K.b(x) + 1\n"
                                   "    @staticmethod\n    def b(x):\n        return 2 * x\n")
    helpers = loader.source_functions(str(tmp_path), "9.9", "m.py", ("a", "b"), class_name="K")
    assert helpers["a"](3) == 7
    with pytest.raises(AdapterLoadError, match=r"vllm==9\.9: m\.py:K defines no \['c'\]"):
        loader.source_functions(str(tmp_path), "9.9", "m.py", ("a", "c"), class_name="K")
    with pytest.raises(AdapterLoadError, match=r"vllm==9\.9: cannot read nope\.py"):
        loader.source_functions(str(tmp_path), "9.9", "nope.py", ("a",))


def test_simulated_rates_are_vllms_minimum_variance_schedule(vllm):
    from conformance.adapters.vllm.simulated import synthetic_rates

    rates = synthetic_rates(vllm, 4.7, 5, torch.device("cpu"))
    torch.testing.assert_close(rates, torch.tensor([1.0, 1.0, 1.0, 0.7, 0.0]))
    assert synthetic_rates(vllm, 6.0, 5, torch.device("cpu")).tolist() == [1.0] * 5
    with pytest.raises(ValueError, match=r"synthetic_acceptance_length must be in \[1, 6\], got 9\.5"):  # V6
        synthetic_rates(vllm, 9.5, 5, torch.device("cpu"))


def test_simulated_lengths_and_executor_through_the_synthetic_accept(vllm):
    from conformance.adapters.vllm.simulated import SimulatedAcceptance

    iut = SimulatedAcceptance(vllm)
    gen = torch.Generator().manual_seed(5)
    assert {iut.sample_acc_len(3.0, "match-expected", 6, gen) for _ in range(5)} == {3}
    assert {iut.sample_acc_len(3.5, "match-expected", 6, gen) for _ in range(30)} == {3, 4}
    executor = iut.executor(2.5, "match-expected", 3, seed=7)
    drafts = torch.tensor([[5, 6, 7], [8, 9, 10]], dtype=torch.int32)
    lengths = executor.step(drafts)
    assert lengths.dtype == torch.int64 and set(lengths.tolist()) <= {2, 3}
    slots = torch.arange(3)
    expected = torch.where(slots < (lengths - 1)[:, None], drafts.to(torch.int64), -1)
    assert torch.equal(executor.correct_drafts, expected)
    again = iut.executor(2.5, "match-expected", 3, seed=7).step(drafts)
    assert torch.equal(again, lengths)  # the executor's draws follow its seed


def test_simulated_batch_is_one_synthetic_step_of_n_requests(vllm, monkeypatch):
    from conformance.adapters.vllm import simulated

    iut = simulated.SimulatedAcceptance(vllm)
    monkeypatch.setattr(simulated, "BATCH_ROWS", 16)  # 40 requests: chunks of 16, 16, 8
    lengths = iut.sample_acc_lens(3.5, "match-expected", 6, 40, torch.Generator().manual_seed(3))
    assert lengths.dtype == torch.int64 and lengths.shape == (40,) and set(lengths.tolist()) == {3, 4}
    again = iut.sample_acc_lens(3.5, "match-expected", 6, 40, torch.Generator().manual_seed(3))
    assert torch.equal(again, lengths)  # the draws follow the generator
    assert set(iut.sample_acc_lens(3.0, "match-expected", 6, 8, torch.Generator()).tolist()) == {3}
    with pytest.raises(ValueError, match="n: expected >= 1, got 0"):
        iut.sample_acc_lens(3.0, "match-expected", 6, 0, torch.Generator())
    with pytest.raises(NotImplementedError, match="no method selector"):
        iut.sample_acc_lens(3.0, "multinomial", 6, 8, torch.Generator())


@pytest.mark.parametrize("method", ["multinomial", "uniform"])
def test_simulated_methods_vllm_lacks_are_refused(vllm, method):
    from conformance.adapters.vllm.simulated import SimulatedAcceptance

    iut = SimulatedAcceptance(vllm)
    with pytest.raises(NotImplementedError, match="no method selector"):
        iut.sample_acc_len(3.0, method, 6, torch.Generator())
    with pytest.raises(NotImplementedError, match="no method selector"):
        iut.executor(3.0, method, 5, 0)


def test_confidence_is_vllms_head_where_it_ships(vllm):
    from conformance.adapters.vllm.confidence import Confidence, confidence_support

    if release_of("vllm", vllm.version) < (0, 28, 0):
        assert "DSparkConfidenceHead" in confidence_support(vllm)
        return
    assert confidence_support(vllm) is None
    iut = Confidence(vllm)
    gen = torch.Generator().manual_seed(6)
    hidden, markov = torch.randn(2, 3, 5, generator=gen), torch.randn(2, 3, 4, generator=gen)
    state = {"proj.weight": torch.randn(1, 9, generator=gen), "proj.bias": torch.randn(1, generator=gen)}
    out = iut.confidences(state, hidden, markov, None, checkpoint_gamma=7)
    expected = torch.sigmoid(torch.cat([hidden, markov], -1) @ state["proj.weight"][0] + state["proj.bias"])
    torch.testing.assert_close(out, expected)
    hidden_only = {"proj.weight": state["proj.weight"][:, :5], "proj.bias": state["proj.bias"]}
    torch.testing.assert_close(iut.confidences(hidden_only, hidden, None, None, checkpoint_gamma=3),
                               torch.sigmoid(hidden @ hidden_only["proj.weight"][0] + state["proj.bias"]))
    with pytest.raises(ValueError, match=r"proj\.weight \[1, 9\]"):
        iut.confidences(hidden_only, hidden, markov, None, checkpoint_gamma=3)
    with pytest.raises(NotImplementedError, match="fits no temperatures"):
        iut.confidences(state, hidden, markov, torch.ones(3), checkpoint_gamma=3)
    with pytest.raises(NotImplementedError, match="inline in its adaptive verification"):
        iut.prefix_survival(out)
    with pytest.raises(NotImplementedError, match="fits no temperatures"):
        iut.fit_sts(torch.zeros(4, 3), torch.zeros(4, 3, dtype=torch.bool))


# --------------------------------------------------------------------------- S5 tensor parallelism
class RecordingGroup:
    """A two-rank :class:`~conformance.contract.RankGroup` seen from ``rank``: ``broadcast``
    records each call; with ``replay`` (rank 0's recorded tensors) it overwrites the tensor
    with the next one, as the collective would on a rank other than 0; ``fail``: any call fails."""

    def __init__(self, rank: int = 0, replay: list[torch.Tensor] | None = None, fail: bool = False) -> None:
        self.rank, self.world_size, self.rank_in_group = rank, 2, rank
        self.replay, self.fail = replay, fail
        self.calls: list[tuple[torch.Tensor, int]] = []

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        assert not self.fail, "a collective before the NotImplementedError"
        if self.replay is not None:
            tensor.copy_(self.replay.pop(0))
        self.calls.append((tensor.clone(), src))


def _tp_inputs(slope: float, rows: int = 4, gamma: int = 4, seed: int = 0) -> dict:
    from dspark_ref import markov

    gen = torch.Generator().manual_seed(seed)
    head = markov.build_markov_head({"markov_rank": RANK, "markov_head_type": "vanilla", "vocab_size": V,
                                     "hidden_size": 5}, scale=0.5, generator=gen)
    base = torch.randn(rows, gamma, V, generator=gen)
    temps = torch.tensor([1.0, 0.0, 0.7, 1.3])[:rows]
    return {
        "head_type": "vanilla", "state_dict": head.state_dict(), "base_logits": base,
        "first_prev": torch.randint(V, (rows,), generator=gen), "hidden": None,
        "target_logits": base[:, :1] + torch.randn(rows, gamma + 1, V, generator=gen), "temperatures": temps,
        "top_k": torch.where(temps == 0, 1, V).to(torch.int64),
        "confidences": 0.35 + 0.65 * torch.rand(rows, gamma, generator=gen, dtype=torch.float64),
        "sps": [1.0 / (1.0 + slope * b) for b in range(1, rows * (gamma + 1) + 1)],
        "generator": torch.Generator().manual_seed(seed + 1), "seeds": torch.tensor([9, 8, 7, 6])[:rows],
        "positions": torch.tensor([3, 30, 300, 3000])[:rows],
    }


def _tp_round(tp, group, inputs):
    inputs = dict(inputs)
    return tp.tp_round(group, inputs.pop("head_type"), inputs.pop("state_dict"), **inputs)


def test_tensor_parallel_cost_curves_price_the_step_in_milliseconds():
    from conformance.adapters.vllm.tensor_parallel import cost_curves

    assert cost_curves([4.0, 2.0]) == ([(1, 0.0)], [(1, 250.0), (2, 500.0)])
    for bad in ([], [1.0, 0.0], [float("nan")]):
        with pytest.raises(ValueError, match="sps: expected finite positive steps per second"):
            cost_curves(bad)


def test_tensor_parallel_round_refuses_what_vllm_lacks_before_any_collective(vllm):
    tp = load_adapter("vllm").get(c.TensorParallelRound)
    gated = dict(_tp_inputs(0.02), head_type="gated")
    with pytest.raises(NotImplementedError, match="Markov head 'gated': vLLM .* ships the vanilla head"):
        _tp_round(tp, RecordingGroup(fail=True), gated)
    truncated = dict(_tp_inputs(0.02), top_k=torch.full((4,), 5))
    with pytest.raises(NotImplementedError, match="top-k on sampling rows"):
        _tp_round(tp, RecordingGroup(fail=True), truncated)


def test_tensor_parallel_round_agrees_through_vllms_cost_curve_broadcast(vllm):
    """Rank 0 broadcasts its cost curves (set_cost_curves) and nothing else; rank 1, with a
    10x steeper table and another generator, plans from rank 0's curves and computes rank 0's
    round; planning from its own table instead gives other verify lengths. 0.25.0: no
    adaptive verification, no collective, every row verifies gamma drafts."""
    from conformance.adapters.vllm.tensor_parallel import cost_curves

    adapter = load_adapter("vllm")
    if adapter.unmet(c.TensorParallelRound, "cpu") is not None and not torch.cuda.is_available():
        pytest.skip(f"vllm=={vllm.version}: {adapter.unmet(c.TensorParallelRound, 'cpu')}")
    tp = adapter.get(c.TensorParallelRound)
    rank0, rank1 = _tp_inputs(0.02), dict(_tp_inputs(0.2), generator=torch.Generator().manual_seed(99))
    group0 = RecordingGroup()
    first = _tp_round(tp, group0, rank0)
    rows, gamma = first[0].shape
    if "adaptive" not in vllm:
        assert group0.calls == [] and torch.equal(first[1], torch.full((rows,), gamma))
        return
    (size, src0), (data, src1) = group0.calls
    assert src0 == src1 == 0 and int(size) == data.numel()
    assert pickle.loads(data.numpy().tobytes()) == cost_curves(rank0["sps"])
    group1 = RecordingGroup(rank=1, replay=[t for t, _ in group0.calls])
    second = _tp_round(tp, group1, rank1)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    own = _tp_round(tp, RecordingGroup(), rank1)[1]
    assert not torch.equal(own, first[1]) and bool((own <= first[1]).all())


def test_tensor_parallel_round_is_the_seeded_round_at_full_length(vllm):
    """With every row at gamma drafts (a flat table admits them all) the TP round is the
    SpeculativeRound with the same request seeds and positions: same drafts, same verify."""
    adapter = load_adapter("vllm")
    if adapter.unmet(c.TensorParallelRound, "cpu") is not None and not torch.cuda.is_available():
        pytest.skip(f"vllm=={vllm.version}: {adapter.unmet(c.TensorParallelRound, 'cpu')}")
    inputs = _tp_inputs(0.0)
    drafts, lengths, accepted, tokens = _tp_round(adapter.get(c.TensorParallelRound), RecordingGroup(), inputs)
    rows, gamma = drafts.shape
    assert torch.equal(lengths, torch.full((rows,), gamma))
    iut = adapter.get(c.SpeculativeRound)
    vocab, rank = inputs["state_dict"]["W1.weight"].shape
    head = iut.load_head("vanilla", inputs["state_dict"], vocab, rank, None, torch.device("cpu"), torch.float32)
    expected = iut.round(head, inputs["base_logits"], inputs["first_prev"], None, inputs["target_logits"],
                         inputs["temperatures"], torch.full((rows,), vocab), torch.ones(rows), torch.zeros(rows),
                         seeds=inputs["seeds"], positions=inputs["positions"])
    assert torch.equal(drafts, expected[0]) and torch.equal(accepted, expected[1]) and torch.equal(tokens, expected[2])


# --------------------------------------------------------------------------- speculators
def test_speculators_missing_names_how_to_install(monkeypatch):
    from conformance.adapters import speculators

    def missing(name):
        raise speculators.PackageNotFoundError(name)

    monkeypatch.setattr(speculators, "version", missing)
    with pytest.raises(AdapterLoadError, match=r"speculators: the package is not installed; pip install --no-deps"):
        speculators.installed_version()


@pytest.mark.parametrize("head_type", ["vanilla", "gated", "rnn"])
def test_speculators_sample_block_is_its_own_teacher_forcing(head_type):
    from conformance.adapters import speculators
    from dspark_ref import markov

    try:
        speculators.installed_version()
    except AdapterLoadError as exc:
        pytest.skip(f"speculators not importable: {exc}")
    block = speculators.MarkovBlock(speculators.load_model_definitions())
    ref = markov.build_markov_head({"markov_rank": RANK, "markov_head_type": head_type, "vocab_size": V,
                                    "hidden_size": 5}, scale=0.5, generator=torch.Generator().manual_seed(1))
    head = block.load_head(head_type, ref.state_dict(), V, RANK, 5, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    base, hidden = torch.randn(3, 4, V, generator=gen), torch.randn(3, 4, 5, generator=gen)
    tokens, corrected = block.sample_block(head, base, torch.tensor([1, 2, 3]), hidden, torch.ones(3),
                                           torch.tensor([1, V, V]), gen)
    prev = torch.cat([torch.tensor([[1], [2], [3]]), tokens[:, :-1]], dim=1)
    torch.testing.assert_close(block.apply_block_logits(head, base, prev, hidden), corrected)
    assert torch.equal(tokens[0], corrected[0].argmax(dim=-1))


# --------------------------------------------------------------------------- 0.34.0 paths, capability loss
def _toy_wheel(tmp_path, files: dict[str, str]) -> str:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_unavailable_names_a_shipped_module_that_failed_and_ignores_one_not_shipped(tmp_path):
    from conformance.adapters import vllm as adapter

    adaptive = "vllm/v1/worker/gpu/spec_decode/adaptive_verification.py"
    model = "vllm/model_executor/models/qwen3_dspark.py"
    failed = {"adaptive": "cannot import it: missing 'regex'", "dspark_model": "cannot import it"}
    root = _toy_wheel(tmp_path / "a", {adaptive: "", model: "class DSparkConfidenceHead:\n    pass\n"})
    lost = adapter.unavailable(loader.VLLMModules("0.33.0", root, {}, failed))
    assert set(lost) == {c.ProductionScheduler, c.TensorParallelRound, c.Confidence}
    assert "adaptive_verification" in lost[c.ProductionScheduler] and "missing 'regex'" in lost[c.ProductionScheduler]
    assert f"pip install --target DIR {' '.join(loader.INSTALL_EXTRAS)}" in lost[c.TensorParallelRound]
    # A model file without the confidence head (0.25.0) is no loss of Confidence.
    root = _toy_wheel(tmp_path / "b", {adaptive: "", model: "class Other:\n    pass\n"})
    assert set(adapter.unavailable(loader.VLLMModules("0.25.0", root, {}, failed))) == {
        c.ProductionScheduler, c.TensorParallelRound}
    assert adapter.unavailable(loader.VLLMModules("0.33.0", root, {}, {})) == {}


def test_loader_ships_and_defines_read_the_wheel_without_importing(tmp_path):
    root = _toy_wheel(tmp_path, {"vllm/a/b.py": "X = 1\ndef f():\n    pass\n", "vllm/a/pkg/__init__.py": ""})
    assert loader.ships(root, "vllm.a.b") and loader.ships(root, "vllm.a.pkg") and not loader.ships(root, "vllm.a.c")
    assert loader.defines_name(root, "vllm.a.b", "X") and loader.defines_name(root, "vllm.a.b", "f")
    assert not loader.defines_name(root, "vllm.a.b", "g") and not loader.defines_name(root, "vllm.a.c", "X")


def test_install_hint_names_the_extras():
    assert loader.INSTALL_HINT.format(version="X").startswith("pip install --no-deps --target DIR 'vllm==X' ")
    assert all(extra in loader.INSTALL_HINT for extra in loader.INSTALL_EXTRAS)


def test_rates_helper_is_taken_from_the_first_file_defining_it(tmp_path):
    from conformance.adapters.vllm.simulated import _RATES_FILES, _first_definition

    helper = "def unconditional_to_conditional_rates(r):\n    return [{0}] * len(r)\n"
    root = _toy_wheel(tmp_path / "new", {_RATES_FILES[0]: helper.format(1), _RATES_FILES[1]: helper.format(2)})
    assert _first_definition(root, "9.9", _RATES_FILES, "unconditional_to_conditional_rates")([0.5]) == [1]
    root = _toy_wheel(tmp_path / "old", {_RATES_FILES[0]: "X = 1\n", _RATES_FILES[1]: helper.format(2)})
    assert _first_definition(root, "9.9", _RATES_FILES, "unconditional_to_conditional_rates")([0.5]) == [2]
    with pytest.raises(AdapterLoadError, match=r"vllm==9\.9: no file defines unconditional_to_conditional_rates"):
        _first_definition(str(tmp_path / "none"), "9.9", _RATES_FILES, "unconditional_to_conditional_rates")


_HIDDEN_REGEX_RUN = """
import json, sys
sys.modules["regex"] = None  # the package pip install --no-deps leaves out
from conformance.adapters import vllm as adapter
adapter_obj = adapter.make_adapter()
print(json.dumps({{"offered": sorted(k.__name__ for k in adapter_obj.capabilities),
                  "unavailable": {{k.__name__: v for k, v in adapter_obj.unavailable.items()}}}}))
"""


def test_adaptive_module_that_cannot_import_is_unavailable_not_silently_absent(vllm):
    import json
    import subprocess
    import sys

    if not loader.ships(vllm.root, loader.OPTIONAL_MODULES["adaptive"]):
        pytest.skip(f"vllm=={vllm.version} ships no adaptive verification")
    if "regex" not in str(vllm.missing) and "adaptive" not in vllm.modules:
        pytest.skip("adaptive verification fails here for another reason")
    run = subprocess.run([sys.executable, "-c", _HIDDEN_REGEX_RUN.format()], capture_output=True, text=True,
                         env=os.environ, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    if "adaptive" in vllm.modules and "ProductionScheduler" in result["offered"]:
        pytest.skip(f"vllm=={vllm.version}'s adaptive verification does not need regex")
    for name in ("ProductionScheduler", "TensorParallelRound"):
        assert name not in result["offered"]
        why = result["unavailable"].get(name, "")
        assert "adaptive_verification" in why and "regex" in why and "pip install" in why, result


def test_markov_rnn_head_is_the_reference_rnn_head_where_vllm_ships_one(vllm):
    from dspark_ref import markov

    from conformance.adapters.vllm.markov import MarkovBlock, recurrent_step

    if recurrent_step(vllm)[0] is None:
        pytest.skip(f"vllm=={vllm.version}: {recurrent_step(vllm)[1]}")
    block, d = MarkovBlock(vllm), 5
    ref = markov.build_markov_head({"markov_rank": RANK, "markov_head_type": "rnn", "vocab_size": V,
                                    "hidden_size": d}, scale=0.5, generator=torch.Generator().manual_seed(1))
    head = block.load_head("rnn", ref.state_dict(), V, RANK, d, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    base, hidden, first = torch.randn(3, 4, V, generator=gen), torch.randn(3, 4, d, generator=gen), torch.tensor([1, 2, 3])
    tokens, corrected = block.sample_block(head, base, first, hidden, torch.tensor([1.0, 0.0, 0.5]),
                                           torch.full((3,), V), gen)
    prev = torch.cat([first[:, None], tokens[:, :-1]], dim=1)
    torch.testing.assert_close(corrected, markov.apply_block_logits(ref, base, prev, hidden))
    assert torch.equal(block.apply_block_logits(head, base, prev, hidden), corrected)
    assert torch.equal(tokens[1], corrected[1].argmax(dim=-1))  # the greedy row
    # The state carries across the block: a vanilla loop over the same W1 / W2 differs.
    vanilla = block.apply_block_logits(type(head)(head.w1, head.w2), base, prev, None)
    assert not torch.allclose(vanilla, corrected)
