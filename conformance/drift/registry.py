"""The engines the drift check (``dspark-conformance engines``) installs and gates.

One :class:`Engine` record per engine, in :data:`ENGINES`: adding an engine (the MLX
engines, say) is one record here, naming its package-index project, the ``--impl`` form of its
adapter and the adapter's ``INSTALL_EXTRAS`` constant (the packages its loader needs beyond
the engine's own files, installed beside it with ``--no-deps``).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence

__all__ = ["ENGINES", "Engine", "engine_named"]


@dataclasses.dataclass(frozen=True)
class Engine:
    """One engine of the drift check.

    Attributes:
        name: the name ``--engine``, ``--release`` and ``--path`` take and the table shows.
        distribution: the project on the package index (``pip install DISTRIBUTION==X``).
        impl: the adapter's ``--impl`` form (``conformance.loading``): a built-in adapter's
            name, which gets ``==X`` for a release (the adapter checks the installed version),
            or ``module:attr``, taken as it is.
        extras_from: ``module:ATTR`` of the adapter's ``INSTALL_EXTRAS``, a tuple of pip
            requirements; read only when the engine is checked (an adapter package may import
            what this machine lacks).
    """

    name: str
    distribution: str
    impl: str
    extras_from: str

    def install_extras(self) -> tuple[str, ...]:
        """The adapter's ``INSTALL_EXTRAS``.

        Raises:
            ImportError / AttributeError: the module named by ``extras_from`` does not import
                or lacks the attribute.
            TypeError: the constant is not a tuple of strings.
        """
        module, _, attr = self.extras_from.partition(":")
        extras = getattr(importlib.import_module(module), attr)
        if not (isinstance(extras, tuple) and all(isinstance(e, str) for e in extras)):
            raise TypeError(f"{self.extras_from}: expected a tuple of pip requirements, got {extras!r}")
        return extras

    def impl_for(self, version: str | None) -> str:
        """The ``--impl`` argument for ``version`` (None: a development tree, unchecked)."""
        builtin = ":" not in self.impl
        return f"{self.impl}=={version}" if builtin and version is not None else self.impl


ENGINES: tuple[Engine, ...] = (
    Engine("sglang", "sglang", "sglang", "conformance.adapters.sglang:INSTALL_EXTRAS"),
    Engine("vllm", "vllm", "vllm", "conformance.adapters.vllm:INSTALL_EXTRAS"),
    Engine("speculators", "speculators", "speculators", "conformance.adapters.speculators:INSTALL_EXTRAS"),
    Engine("dspark-mlx", "dspark-mlx", "dspark-mlx", "conformance.adapters.dspark_mlx:INSTALL_EXTRAS"),
    Engine("mlx-dspark", "mlx-dspark", "mlx-dspark", "conformance.adapters.mlx_dspark:INSTALL_EXTRAS"),
)


def engine_named(name: str, engines: Sequence[Engine]) -> Engine:
    """The engine called ``name``.

    Raises:
        ValueError: no such engine (the message lists the known ones).
    """
    for engine in engines:
        if engine.name == name:
            return engine
    raise ValueError(f"unknown engine {name!r}; expected one of {', '.join(e.name for e in engines)}")
