"""Import dspark-mlx's DSpark modules (MLX, NumPy) and check the installed release.

dspark-mlx (PyPI ``dspark-mlx``, package ``dspark_mlx``) keeps its DSpark recipe in plain
modules that import only MLX and NumPy: ``recipe`` (the block sampler), ``verify`` (greedy and
sampled acceptance), ``model.heads`` (the Markov and confidence heads) and ``loop`` (the
greedy single-request loop). Its package ``__init__`` imports the host loaders too, but those
import mlx-lm lazily, so ``import dspark_mlx`` needs MLX and NumPy alone: no stub.

MLX runs on Linux through its CPU build: ``mlx`` with ``mlx-cpu`` of the same version.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import types
from importlib.metadata import PackageNotFoundError, version

from conformance.adapters.versions import release_of
from conformance.loading import AdapterLoadError

__all__ = ["DIST", "MIN_VERSION", "INSTALL", "INSTALL_EXTRAS", "DSparkMLX", "installed_version",
           "load_dspark_mlx"]

DIST = "dspark-mlx"
MIN_VERSION = (0, 1, 0)  # the first release
#: What the adapter needs beside ``pip install --no-deps`` of the engine: MLX and its CPU build
#: (the drift check, ``conformance.drift``, installs them with the engine).
INSTALL_EXTRAS: tuple[str, ...] = ("mlx", "mlx-cpu")
#: The smallest install that loads the DSpark modules (no mlx-lm, mlx-vlm or transformers).
INSTALL = ("pip install --no-deps --target DIR dspark-mlx==0.1.0 mlx==0.32.4 mlx-cpu==0.32.4, "
           "then PYTHONPATH=DIR")

#: Short name -> module of the installed package.
MODULES: dict[str, str] = {
    "recipe": "dspark_mlx.recipe",  # sample, draft_block_decode
    "verify": "dspark_mlx.verify",  # greedy_accept, speculative_sample_accept
    "heads": "dspark_mlx.model.heads",  # DSparkMarkovHead, DSparkConfidenceHead
    "loop": "dspark_mlx.loop",  # generate_eager
}


@dataclasses.dataclass(frozen=True)
class DSparkMLX:
    """The loaded dspark-mlx: its ``version``, ``mx`` (``mlx.core``), ``nn`` (``mlx.nn``) and
    the DSpark modules of :data:`MODULES` by short name (``modules["recipe"]``)."""

    version: str
    mx: types.ModuleType
    nn: types.ModuleType
    modules: dict[str, types.ModuleType]

    def __getitem__(self, name: str) -> types.ModuleType:
        return self.modules[name]


def installed_version() -> str:
    """The installed ``dspark-mlx`` version.

    Raises:
        AdapterLoadError: not installed, or older than :data:`MIN_VERSION` (the message gives
            the install line).
    """
    try:
        text = version(DIST)
    except PackageNotFoundError as exc:
        raise AdapterLoadError(f"{DIST}: the package is not installed; {INSTALL}") from exc
    if release_of(DIST, text) < MIN_VERSION:
        raise AdapterLoadError(f"{DIST}=={text}: DSpark needs {DIST} >= {'.'.join(map(str, MIN_VERSION))}; {INSTALL}")
    return text


@functools.cache
def load_dspark_mlx() -> DSparkMLX:
    """Import MLX and dspark-mlx's DSpark modules (cached: once per process).

    Raises:
        AdapterLoadError: dspark-mlx or MLX missing or failing to import (names the module and
            gives the install line).
    """
    text = installed_version()
    try:
        mx = importlib.import_module("mlx.core")
        nn = importlib.import_module("mlx.nn")
    except ImportError as exc:
        raise AdapterLoadError(f"{DIST}=={text}: MLX does not import ({exc}); on Linux MLX needs its CPU build "
                               f"(mlx-cpu of the same version as mlx): {INSTALL}") from exc
    modules = {}
    for short, name in MODULES.items():
        try:
            modules[short] = importlib.import_module(name)
        except ImportError as exc:
            raise AdapterLoadError(f"{DIST}=={text}: cannot import {name}: {exc}; {INSTALL}") from exc
    return DSparkMLX(text, mx, nn, modules)
