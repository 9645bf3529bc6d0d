"""Tests of the MLX adapters (``conformance/adapters/dspark_mlx``): loader and wiring.

The loaders' errors are tested without the engines. The rest needs the engine importable
(``pip install --no-deps --target DIR dspark-mlx==0.1.0 mlx==0.32.4 mlx-cpu==0.32.4``,
``PYTHONPATH=DIR``) and is skipped, naming the missing package, otherwise. Conformance itself
is the suite's job (``python -m conformance.cli run --impl dspark-mlx``); here each adapter is
loaded and one capability round-trips on a small case. To add a case: one ``test_<engine>_*``
function, using the engine's fixture when it needs the package.
"""

from __future__ import annotations

import pytest
import torch

from conformance import contract as c
from conformance.adapters.dspark_mlx import loader as dspark_mlx_loader
from conformance.loading import AdapterLoadError, load_adapter
from dspark_ref import markov

V, RANK = 12, 3


@pytest.fixture(scope="module")
def dspark_mlx():
    """The loaded dspark-mlx; skips naming the package when it (or MLX) does not load."""
    try:
        return dspark_mlx_loader.load_dspark_mlx()
    except AdapterLoadError as exc:
        pytest.skip(f"dspark-mlx not importable: {exc}")


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
    head = markov.VanillaMarkovHead(V, RANK, generator=gen)
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
