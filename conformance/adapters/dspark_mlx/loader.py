"""Import dspark-mlx's DSpark modules (MLX, NumPy) and check the installed release.

dspark-mlx (PyPI ``dspark-mlx``, package ``dspark_mlx``) keeps its DSpark recipe in plain
modules that import only MLX and NumPy: ``recipe`` (the block sampler), ``verify`` (greedy and
sampled acceptance), ``model.heads`` (the Markov and confidence heads) and ``loop`` (the
greedy single-request loop). Its package ``__init__`` imports the host loaders too, but those
import mlx-lm lazily, so ``import dspark_mlx`` needs MLX and NumPy alone: no stub.

MLX runs on Linux through its CPU build: ``mlx`` with ``mlx-cpu`` of the same version.
"""

from __future__ import annotations

import functools

from conformance.adapters.mlx_engine import MLXEngine, import_mlx, import_modules
from conformance.adapters.versions import installed_release

__all__ = ["DIST", "MIN_VERSION", "INSTALL", "INSTALL_EXTRAS", "installed_version", "load_dspark_mlx"]

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


def installed_version() -> str:
    """The installed ``dspark-mlx`` version.

    Raises:
        AdapterLoadError: not installed, or older than :data:`MIN_VERSION` (the message gives
            the install line).
    """
    return installed_release(DIST, MIN_VERSION, INSTALL, requirement="DSpark needs")


@functools.cache
def load_dspark_mlx() -> MLXEngine:
    """Import MLX and dspark-mlx's DSpark modules (cached: once per process).

    Raises:
        AdapterLoadError: dspark-mlx or MLX missing or failing to import (names the module and
            gives the install line).
    """
    text = installed_version()
    mx = import_mlx(f"{DIST}=={text}", INSTALL)
    return MLXEngine(text, mx, import_modules(f"{DIST}=={text}", MODULES, INSTALL))
