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

import re

import pytest
import torch

from conformance import contract as c
from conformance.adapters import versions
from conformance.adapters.dspark_mlx import loader as dspark_mlx_loader
from conformance.adapters.engine_import import StubCalled, is_stub
from conformance.adapters.mlx_dspark import loader as mlx_dspark_loader
from conformance.adapters.verified_drafts import verified_counts
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
#: Per engine: its loader, its cached load function, the release its install line pins, the
#: oldest release it accepts, the release just before it, and the requirement the error names.
_LOADERS = [
    pytest.param(dspark_mlx_loader, dspark_mlx_loader.load_dspark_mlx, "0.1.0", "0.1.0", "0.0.9", "DSpark needs",
                 id="dspark_mlx"),
    pytest.param(mlx_dspark_loader, mlx_dspark_loader.load_mlx_dspark, "0.20.3", "0.8.0", "0.7.0",
                 "the functions the adapter calls need", id="mlx_dspark"),
]


@pytest.mark.parametrize("loader, load, pinned, oldest, old, requirement", _LOADERS)
def test_missing_engine_names_the_install_line(loader, load, pinned, oldest, old, requirement, monkeypatch):
    def missing(name):
        raise versions.PackageNotFoundError(name)

    monkeypatch.setattr(versions, "version", missing)
    load.cache_clear()
    try:
        with pytest.raises(AdapterLoadError, match=rf"{loader.DIST}: the package is not installed; pip install "
                                                    rf"--no-deps --target DIR {loader.DIST}=={re.escape(pinned)} "
                                                    r"mlx==0\.32\.4 mlx-cpu==0\.32\.4"):
            load_adapter(loader.DIST)
    finally:
        load.cache_clear()


@pytest.mark.parametrize("loader, load, pinned, oldest, old, requirement", _LOADERS)
def test_engine_older_than_accepted_is_rejected(loader, load, pinned, oldest, old, requirement, monkeypatch):
    monkeypatch.setattr(versions, "version", lambda name: old)
    with pytest.raises(AdapterLoadError, match=rf"{loader.DIST}=={re.escape(old)}: {requirement} {loader.DIST} >= "
                                                rf"{re.escape(oldest)}; pip install"):
        loader.installed_version()


@pytest.mark.parametrize("loader, load, pinned, oldest, old, requirement", _LOADERS)
def test_oldest_accepted_release_loads_its_version(loader, load, pinned, oldest, old, requirement, monkeypatch):
    monkeypatch.setattr(versions, "version", lambda name: oldest)
    assert loader.installed_version() == oldest


def test_verified_counts_stop_at_the_sentinel_and_the_cap():
    drafts = torch.tensor([[2, 1, 0], [5, -1, 3], [2, 1, 3]])
    assert verified_counts(drafts, None) == [3, 1, 3]
    assert verified_counts(drafts, 2) == [1, 1, 1]  # cap c keeps max(c - 1, 0) drafts
    assert verified_counts(drafts, torch.tensor([4, 4, 0])) == [3, 1, 0]
    assert verified_counts(drafts[:, :0], 3) == [0, 0, 0]
    with pytest.raises(ValueError, match=r"cap: expected an int or a \[B=3\] integer tensor, got torch.float32"):
        verified_counts(drafts, torch.ones(3))
    with pytest.raises(ValueError, match="cap: expected an int or a \\[B\\] integer tensor, got float"):
        verified_counts(drafts, 2.0)


# --------------------------------------------------------------------------- an engine installed
@pytest.mark.parametrize("engine, dist, capabilities, convention, value", [
    pytest.param("dspark_mlx", "dspark-mlx", {c.StepSampler, c.MarkovBlock, c.ChainVerifier, c.GreedyVerifier,
                                              c.TruncatedChainVerifier, c.SpeculativeRound, c.Confidence},
                 "greedy_rule", "temperature", id="dspark_mlx"),
    pytest.param("mlx_dspark", "mlx-dspark", {c.StepSampler, c.TruncatedStepSampler, c.MarkovBlock, c.DraftLayouts,
                                              c.ChainVerifier, c.TruncatedChainVerifier, c.SpeculativeRound,
                                              c.Confidence},
                 "draft_vocabularies", ("target", "reduced"), id="mlx_dspark"),
])
def test_adapter_loads_with_its_capabilities(engine, dist, capabilities, convention, value, request):
    loaded = request.getfixturevalue(engine)
    adapter = load_adapter(f"{dist}=={loaded.version}")
    assert adapter.name == f"{dist}=={loaded.version}"
    assert set(adapter.capabilities) == capabilities
    assert getattr(adapter.conventions, convention) == value


# --------------------------------------------------------------------------- dspark-mlx installed
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


# --------------------------------------------------------------------------- mlx-dspark installed
def test_mlx_dspark_loads_without_mlx_lm_or_transformers(mlx_dspark):
    import sys

    assert is_stub(sys.modules["mlx_lm.models.cache"]) and is_stub(sys.modules["mlx_vlm.models.rope_utils"])
    assert "transformers" not in sys.modules
    with pytest.raises(StubCalled, match="mlx_vlm.models.rope_utils"):
        sys.modules["mlx_vlm.models.rope_utils"].initialize_rope(8)


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
