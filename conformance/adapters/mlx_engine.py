"""Load an MLX engine's DSpark modules: the record of what was loaded and the two imports that
can fail, shared by the MLX loaders (``dspark_mlx/loader.py``, ``mlx_dspark/loader.py``).

Each loader decides *which* modules it needs and whatever must happen before they import
(mlx-dspark serves its package bare and stubs mlx-lm / mlx-vlm; dspark-mlx needs nothing);
this module is the *how*: :func:`import_mlx` imports ``mlx.core`` and :func:`import_modules`
the engine's modules, each failure an :class:`~conformance.loading.AdapterLoadError` naming the
engine's release, the module and the install line.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
from collections.abc import Mapping

from conformance.loading import AdapterLoadError

__all__ = ["MLXEngine", "import_mlx", "import_modules"]


@dataclasses.dataclass(frozen=True)
class MLXEngine:
    """A loaded MLX engine: its ``version``, ``mx`` (``mlx.core``) and its DSpark modules by
    short name (``engine["verify"]``)."""

    version: str
    mx: types.ModuleType
    modules: dict[str, types.ModuleType]

    def __getitem__(self, name: str) -> types.ModuleType:
        return self.modules[name]


def import_mlx(engine: str, install: str) -> types.ModuleType:
    """``mlx.core``.

    Args:
        engine: the engine's release for the message, e.g. ``"dspark-mlx==0.1.0"``.
        install: the engine's install line, ending the message.

    Raises:
        AdapterLoadError: MLX does not import (on Linux it needs ``mlx-cpu`` of the same version).
    """
    try:
        return importlib.import_module("mlx.core")
    except ImportError as exc:
        raise AdapterLoadError(f"{engine}: MLX does not import ({exc}); on Linux MLX needs its CPU build "
                               f"(mlx-cpu of the same version as mlx): {install}") from exc


def import_modules(engine: str, modules: Mapping[str, str], install: str) -> dict[str, types.ModuleType]:
    """Short name -> imported module, for ``modules`` (short name -> dotted module name).

    Raises:
        AdapterLoadError: a module does not import (names ``engine``, the module and the error,
            then gives ``install``).
    """
    loaded = {}
    for short, name in modules.items():
        try:
            loaded[short] = importlib.import_module(name)
        except ImportError as exc:
            raise AdapterLoadError(f"{engine}: cannot import {name}: {exc}; {install}") from exc
    return loaded
