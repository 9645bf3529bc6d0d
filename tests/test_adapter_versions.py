"""An engine's release as the loaders read it (conformance/adapters/versions.py)."""

from __future__ import annotations

import pytest

from conformance.adapters.sglang import loader as sglang_loader
from conformance.adapters.versions import release_of
from conformance.loading import AdapterLoadError


@pytest.mark.parametrize("text, release", [
    ("0.33.0", (0, 33, 0)), ("0.29.1rc2", (0, 29, 1)), ("0.25.0+cu129", (0, 25, 0)), ("1.0", (1, 0, 0)),
    ("0.5.23rc1", (0, 5, 23)), ("0.5.17.post1", (0, 5, 17)), ("0.26.0.dev12+g1a2b3c", (0, 26, 0)),
])
def test_release_of_reads_a_pep440_release(text, release):
    assert release_of("vllm", text) == release


@pytest.mark.parametrize("text", ["", "latest", "0.5.x", None])
def test_release_of_rejects_what_is_not_a_version(text):
    with pytest.raises(AdapterLoadError, match=r"^sglang==.*: not a PEP 440 version"):
        release_of("sglang", text)


def test_sglang_pre_releases_count_as_their_release():
    # A release candidate ships its release's modules, not a later one's: before, the digits of
    # "23rc1" were joined into patch 231, so 0.5.22rc1 read as newer than 0.5.23 and 0.5.16rc1
    # as a DSpark release.
    assert "blockwise" not in sglang_loader.modules_for("0.5.22rc1")
    assert "blockwise" in sglang_loader.modules_for("0.5.23rc1")
    with pytest.raises(AdapterLoadError, match="DSpark needs sglang >= 0.5.17"):
        sglang_loader.generation_of("0.5.16rc1")
    assert sglang_loader.SGLangModules("0.5.23rc1", "philox", {}).release == (0, 5, 23)
