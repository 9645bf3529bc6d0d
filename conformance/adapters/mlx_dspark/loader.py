"""Import mlx-dspark's DSpark modules without its package ``__init__``, mlx-lm or mlx-vlm.

mlx-dspark (PyPI ``mlx-dspark``, package ``mlx_dspark``) is a whole serving stack: its package
``__init__`` imports the calibration, DFlash, loading and server modules, which pull in
mlx-lm, mlx-vlm, huggingface_hub and transformers. The DSpark pieces live in modules that need
MLX alone, except for two import-time dependencies:

* ``mlx_dspark.model`` (the drafter: ``VanillaMarkov``, ``DSparkDrafter.sample_block`` /
  ``sample_block_probs`` / ``to_target_ids`` / ``widen_to_target`` / ``confidence_logits``,
  ``ConfidenceHead``) imports ``initialize_rope`` from mlx-vlm, for the drafter's attention
  layers;
* ``mlx_dspark.generate`` (``_sample_arr``, ``_spec_sample_accept``) imports
  ``mlx_dspark.dflash_model``, the DFlash drafter, which imports mlx-lm's mask, KV-cache, MLP
  and rope helpers.

So the loader serves ``mlx_dspark`` as a bare package (:class:`~conformance.adapters.
engine_import.WheelFinder`: no ``__init__`` runs) and stubs the mlx-lm / mlx-vlm modules those
two files import (``_STUBS``, each with its reason): none of them is called by a DSpark
function the adapter uses. The adapter builds its drafter with no attention layer
(``num_hidden_layers = 0``), so ``initialize_rope`` is never reached; a path that reaches a
stub raises :class:`~conformance.adapters.engine_import.StubCalled` naming it. Where mlx-lm /
mlx-vlm were already imported, their modules are used as they are.

MLX runs on Linux through its CPU build: ``mlx`` with ``mlx-cpu`` of the same version.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys

from conformance.adapters.engine_import import Stubs, WheelFinder, install_finder
from conformance.adapters.mlx_engine import MLXEngine, import_mlx, import_modules
from conformance.adapters.versions import installed_release
from conformance.loading import AdapterLoadError

__all__ = ["DIST", "MIN_VERSION", "INSTALL", "INSTALL_EXTRAS", "installed_version", "load_mlx_dspark"]

DIST = "mlx-dspark"
PACKAGE = "mlx_dspark"
#: The first release that ships every function the adapter calls, read from the code of each of
#: the 43 releases 0.0.1-0.20.3: before 0.8.0 ``DSparkDrafter.head_slice`` / ``set_draft_vocab_map`` /
#: ``to_target_ids`` / ``widen_to_target`` and ``DSparkConfig.logits_start`` / ``draft_vocab_size``
#: are missing (before 0.2.0 ``generate._sample_arr`` too); all 28 releases 0.8.0-0.20.3 ship them
#: with the same signatures. Runs confirmed 0.8.0, 0.14.0 and 0.20.3 (docs/conformance/mlx-dspark-findings.md).
MIN_VERSION = (0, 8, 0)
#: What the adapter needs beside ``pip install --no-deps`` of the engine: MLX and its CPU build
#: (the drift check, ``conformance.drift``, installs them with the engine).
INSTALL_EXTRAS: tuple[str, ...] = ("mlx", "mlx-cpu")
#: The smallest install that loads the DSpark modules (no mlx-lm, mlx-vlm, transformers).
INSTALL = ("pip install --no-deps --target DIR mlx-dspark==0.20.3 mlx==0.32.4 mlx-cpu==0.32.4, "
           "then PYTHONPATH=DIR")

#: Short name -> module of the installed package.
MODULES: dict[str, str] = {
    "config": f"{PACKAGE}.config",  # DSparkConfig
    "model": f"{PACKAGE}.model",  # VanillaMarkov, DSparkDrafter, ConfidenceHead
    "sampling": f"{PACKAGE}.sampling",  # truncate_probs, sample_probs
    "generate": f"{PACKAGE}.generate",  # _sample_arr, _spec_sample_accept
}

_MLX_LM = "mlx_dspark.dflash_model's DFlash drafter (not DSpark)"
#: Modules of mlx-lm / mlx-vlm that mlx-dspark's DSpark files import, with why they are not needed.
_STUBS: dict[str, str] = {
    "mlx_lm": "mlx-lm package (its __init__ imports transformers)",
    "mlx_lm.models": "mlx-lm model package",
    "mlx_lm.models.base": f"create_causal_mask, used by {_MLX_LM}",
    "mlx_lm.models.cache": f"KVCache / RotatingKVCache, used by {_MLX_LM}",
    "mlx_lm.models.qwen3": f"MLP, used by {_MLX_LM}",
    "mlx_lm.models.rope_utils": f"initialize_rope, used by {_MLX_LM}",
    "mlx_vlm": "mlx-vlm package (its __init__ imports transformers)",
    "mlx_vlm.models": "mlx-vlm model package",
    "mlx_vlm.models.rope_utils": "initialize_rope of the drafter's attention layers (the adapter builds none)",
}
_PACKAGES = ("mlx_lm", "mlx_lm.models", "mlx_vlm", "mlx_vlm.models")

_STUB_MAKER = Stubs("mlx-lm / mlx-vlm", lambda module: _STUBS.get(module, "stub"))


def installed_version() -> str:
    """The installed ``mlx-dspark`` version.

    Raises:
        AdapterLoadError: not installed, or older than :data:`MIN_VERSION` (the message gives
            the install line).
    """
    return installed_release(DIST, MIN_VERSION, INSTALL, requirement="the functions the adapter calls need")


def _install_stubs() -> None:
    """The mlx-lm / mlx-vlm stubs in ``sys.modules`` (a module already imported stays)."""
    for name in _STUBS:
        if name not in sys.modules:
            module = _STUB_MAKER.module(name, {})
            if name in _PACKAGES:
                module.__path__ = []  # a package with no submodule but the stubbed ones
            sys.modules[name] = module


@functools.cache
def load_mlx_dspark() -> MLXEngine:
    """Import MLX and mlx-dspark's DSpark modules (see the module note; cached: once per process).

    Raises:
        AdapterLoadError: mlx-dspark or MLX missing, or a DSpark module failing to import
            (names the module and gives the install line).
    """
    text = installed_version()
    mx = import_mlx(f"{DIST}=={text}", INSTALL)
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise AdapterLoadError(f"{DIST}=={text}: the package {PACKAGE} has no files; {INSTALL}")
        root = os.path.dirname(list(spec.submodule_search_locations)[0])
        install_finder(WheelFinder(PACKAGE, root, _STUB_MAKER, lambda name, path: None))
    _install_stubs()
    return MLXEngine(text, mx, import_modules(f"{DIST}=={text}", MODULES, INSTALL))
