"""Tests of the MLX adapters (``conformance/adapters/dspark_mlx``, ``conformance/adapters/mlx_dspark``):
loaders and wiring.

The loaders' errors are tested without the engines. The rest needs the engine importable
(``pip install --no-deps --target DIR dspark-mlx==0.1.0 mlx==0.32.4 mlx-cpu==0.32.4``, or the
same with ``mlx-dspark==0.20.3``; ``PYTHONPATH=DIR``) and is skipped, naming the missing package,
otherwise. Conformance itself is the suite's job (``python -m conformance.cli run --impl
dspark-mlx``); here each adapter is loaded and one capability round-trips on a small case. To
add a case: one ``test_<engine>_*`` function, using the engine's fixture when it needs the package.
"""

from __future__ import annotations

import pytest
import torch

from conformance import contract as c
from conformance.adapters.dspark_mlx import loader as dspark_mlx_loader
from conformance.adapters.engine_import import StubCalled, is_stub
from conformance.adapters.mlx_dspark import loader as mlx_dspark_loader
from conformance.loading import AdapterLoadError, load_adapter
from dspark_ref import markov

V, RANK = 12, 3
HEAD_SCALE = 2.0  # Markov biases as large as the base logits, so the conditioning decides draws


@pytest.fixture(scope="module")
def dspark_mlx():
    """The loaded dspark-mlx; skips naming the package when it is not installed (an installed
    one that fails to load is an error)."""
    try:
        dspark_mlx_loader.installed_version()
    except AdapterLoadError as exc:
        pytest.skip(f"dspark-mlx not installed: {exc}")
    return dspark_mlx_loader.load_dspark_mlx()


@pytest.fixture(scope="module")
def mlx_dspark():
    """The loaded mlx-dspark; skips naming the package when it is not installed (an installed
    one that fails to load is an error)."""
    try:
        mlx_dspark_loader.installed_version()
    except AdapterLoadError as exc:
        pytest.skip(f"mlx-dspark not installed: {exc}")
    return mlx_dspark_loader.load_mlx_dspark()


# --------------------------------------------------------------------------- no engine needed
def test_dspark_mlx_missing_names_the_install_line(monkeypatch):
    def missing(name):
        raise dspark_mlx_loader.PackageNotFoundError(name)

    monkeypatch.setattr(dspark_mlx_loader, "version", missing)
    dspark_mlx_loader.load_dspark_mlx.cache_clear()
    try:
        with pytest.raises(AdapterLoadError, match=r"dspark-mlx: the package is not installed; pip install "
                                                    r"--no-deps --target DIR dspark-mlx==0\.1\.0 mlx==0\.32\.4 "
                                                    r"mlx-cpu==0\.32\.4"):
            load_adapter("dspark-mlx")
    finally:
        dspark_mlx_loader.load_dspark_mlx.cache_clear()


def test_dspark_mlx_rejects_a_release_before_the_first(monkeypatch):
    monkeypatch.setattr(dspark_mlx_loader, "version", lambda name: "0.0.9")
    with pytest.raises(AdapterLoadError, match=r"dspark-mlx==0\.0\.9: DSpark needs dspark-mlx >= 0\.1\.0; pip install"):
        dspark_mlx_loader.installed_version()


# --------------------------------------------------------------------------- dspark-mlx installed
def test_dspark_mlx_adapter_loads_with_its_capabilities(dspark_mlx):
    adapter = load_adapter(f"dspark-mlx=={dspark_mlx.version}")
    assert adapter.name == f"dspark-mlx=={dspark_mlx.version}"
    assert set(adapter.capabilities) == {c.StepSampler, c.MarkovBlock, c.ChainVerifier, c.GreedyVerifier,
                                         c.TruncatedChainVerifier, c.SpeculativeRound, c.Confidence}
    assert adapter.conventions.greedy_rule == "temperature"


def test_dspark_mlx_greedy_verify_round_trips(dspark_mlx):
    verifier = load_adapter("dspark-mlx").get(c.GreedyVerifier)
    argmax = torch.tensor([[2, 1, 3, 4], [5, 0, 0, 0], [2, 1, 3, 4]])
    target = torch.nn.functional.one_hot(argmax, V).float() * 3
    drafts = torch.tensor([[2, 1, 0], [5, 0, -1], [2, 1, 3]])
    accepted, tokens = verifier.verify_greedy(drafts, target, cap=torch.tensor([4, 4, 2]))
    assert accepted.tolist() == [2, 2, 1]  # row 1 stops at its sentinel, row 2 at its cap (one draft)
    assert tokens.tolist() == [[2, 1, 3, -1], [5, 0, 0, -1], [2, 1, -1, -1]]


def test_dspark_mlx_markov_block_matches_the_reference_head(dspark_mlx):
    gen = torch.Generator().manual_seed(3)
    head = markov.VanillaMarkovHead(V, RANK, scale=HEAD_SCALE, generator=gen)
    state = {k: v.detach() for k, v in head.state_dict().items()}
    block = load_adapter("dspark-mlx").get(c.MarkovBlock)
    handle = block.load_head("vanilla", state, V, RANK, None, torch.device("cpu"))
    base = torch.randn(2, 4, V, generator=gen)
    prev = torch.randint(V, (2, 4), generator=gen)
    expected = markov.apply_block_logits(head, base, prev, None)
    torch.testing.assert_close(block.apply_block_logits(handle, base, prev, None), expected)
    tokens, corrected = block.sample_block(handle, base, prev[:, 0], None, torch.tensor([0.0, 0.0]),
                                           torch.tensor([1, 1]), gen)
    assert torch.equal(tokens, corrected.argmax(-1))  # greedy rows: the argmax of their own corrected logits
    teacher = torch.cat([prev[:, :1], tokens[:, :-1]], dim=1)
    torch.testing.assert_close(corrected, markov.apply_block_logits(head, base, teacher, None))


def test_dspark_mlx_step_sampler_draws_from_the_suite_generator(dspark_mlx):
    sampler = load_adapter("dspark-mlx").get(c.StepSampler)
    logits = torch.zeros(64, V)
    temps, top_k = torch.ones(64), torch.full((64,), V)
    draw = lambda seed: sampler.sample(logits, temps, top_k, V, torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(draw(5), draw(5))
    assert not torch.equal(draw(5), draw(6))


# --------------------------------------------------------------------------- mlx-dspark, no engine needed
def test_mlx_dspark_missing_names_the_install_line(monkeypatch):
    def missing(name):
        raise mlx_dspark_loader.PackageNotFoundError(name)

    monkeypatch.setattr(mlx_dspark_loader, "version", missing)
    mlx_dspark_loader.load_mlx_dspark.cache_clear()
    try:
        with pytest.raises(AdapterLoadError, match=r"mlx-dspark: the package is not installed; pip install "
                                                    r"--no-deps --target DIR mlx-dspark==0\.20\.3 mlx==0\.32\.4 "
                                                    r"mlx-cpu==0\.32\.4"):
            load_adapter("mlx-dspark")
    finally:
        mlx_dspark_loader.load_mlx_dspark.cache_clear()


def test_mlx_dspark_rejects_a_release_before_the_one_read(monkeypatch):
    monkeypatch.setattr(mlx_dspark_loader, "version", lambda name: "0.19.0")
    with pytest.raises(AdapterLoadError, match=r"mlx-dspark==0\.19\.0: the adapter reads mlx-dspark >= 0\.20\.3"):
        mlx_dspark_loader.installed_version()


# --------------------------------------------------------------------------- mlx-dspark installed
def test_mlx_dspark_loads_without_mlx_lm_or_transformers(mlx_dspark):
    import sys

    assert is_stub(sys.modules["mlx_lm.models.cache"]) and is_stub(sys.modules["mlx_vlm.models.rope_utils"])
    assert "transformers" not in sys.modules
    with pytest.raises(StubCalled, match="mlx_vlm.models.rope_utils"):
        sys.modules["mlx_vlm.models.rope_utils"].initialize_rope(8)


def test_mlx_dspark_adapter_loads_with_its_capabilities(mlx_dspark):
    adapter = load_adapter(f"mlx-dspark=={mlx_dspark.version}")
    assert adapter.name == f"mlx-dspark=={mlx_dspark.version}"
    assert set(adapter.capabilities) == {c.StepSampler, c.TruncatedStepSampler, c.MarkovBlock, c.DraftLayouts,
                                         c.ChainVerifier, c.TruncatedChainVerifier, c.SpeculativeRound, c.Confidence}
    assert adapter.conventions.draft_vocabularies == ("target", "reduced")


def test_mlx_dspark_greedy_block_matches_the_reference_head(mlx_dspark):
    gen = torch.Generator().manual_seed(4)
    head = markov.VanillaMarkovHead(V, RANK, scale=HEAD_SCALE, generator=gen)
    state = {k: v.detach() for k, v in head.state_dict().items()}
    block = load_adapter("mlx-dspark").get(c.MarkovBlock)
    handle = block.load_head("vanilla", state, V, RANK, None, torch.device("cpu"))
    base = torch.randn(3, 4, V, generator=gen)
    first = torch.randint(V, (3,), generator=gen)
    tokens, corrected = block.sample_block(handle, base, first, None, torch.zeros(3), torch.ones(3, dtype=torch.long),
                                           gen)
    teacher = torch.cat([first[:, None], tokens[:, :-1]], dim=1)
    expected = markov.apply_block_logits(head, base, teacher, None)
    torch.testing.assert_close(corrected, expected)
    assert torch.equal(tokens, expected.argmax(-1))  # sample_block's own argmax, step by step


def test_mlx_dspark_reduced_vocabulary_maps_draws_to_target_ids(mlx_dspark):
    gen = torch.Generator().manual_seed(5)
    d2t = torch.tensor([1, 4, 6, 9])
    state = {"W1.weight": torch.randn(V, RANK, generator=gen), "W2.weight": torch.randn(4, RANK, generator=gen)}
    layouts = load_adapter("mlx-dspark").get(c.DraftLayouts)
    tokens, corrected = layouts.draft_block("vanilla", state, torch.randn(2, 3, 4, generator=gen), torch.tensor([0, 2]),
                                            None, torch.tensor([0.0, 1.0]), torch.tensor([1, V]), gen,
                                            layout="anchor-first", vocab_size=V, d2t=d2t)
    assert set(tokens.flatten().tolist()) <= set(d2t.tolist())
    off_map = torch.ones(V, dtype=torch.bool)
    off_map[d2t] = False
    assert bool(torch.isinf(corrected[..., off_map]).all()) and bool(torch.isfinite(corrected[..., d2t]).all())
