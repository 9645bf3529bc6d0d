"""Import an engine's DSpark files from its installed wheel without running the engine.

Shared by the SGLang and vLLM loaders (``conformance/adapters/*/loader.py``), which decide
*what* is stubbed and why; this module is the *how*:

* :class:`WheelFinder` serves every package of one top-level name (``"sglang"``, ``"vllm"``)
  as a bare module whose ``__path__`` points at the wheel's files, so no package
  ``__init__`` (server, engine, compiled extensions) runs; plain modules are left to the
  normal path finder; modules the loader names are served as stubs, and packages it names
  as plain run their own ``__init__``.
* A stub (:meth:`Stubs.module`) holds the values the engine's files read at import time and
  hands out, for any other name, a placeholder class that raises :class:`StubCalled` when
  called, with the stub's reason: a DSpark path that really needs a stubbed piece fails
  loudly instead of running on an inert stand-in.
* :func:`import_engine_module` imports one DSpark module behind the finder, a failure an
  :class:`~conformance.loading.AdapterLoadError` naming the missing module or the stub called.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Collection, Mapping
from typing import Any

from conformance.loading import AdapterLoadError

__all__ = ["StubCalled", "Stubs", "WheelFinder", "import_engine_module", "install_finder", "is_stub"]


class StubCalled(RuntimeError):
    """The engine called a placeholder of a stubbed module (the message names the stub and
    why the module is stubbed)."""


class Stubs:
    """How one engine's stub modules are made and how their placeholders explain themselves.

    Args:
        provider: who really provides the stubbed modules, for the message (e.g.
            ``"SGLang's server or platform"``).
        reason_of: module name -> why it is stubbed (one phrase).
    """

    def __init__(self, provider: str, reason_of: Callable[[str], str]) -> None:
        self._provider = provider
        self._reason_of = reason_of

    def placeholder(self, module: str, name: str) -> type:
        """A stand-in class for ``module.name`` that raises :class:`StubCalled` when called."""
        stubs = self

        class _Meta(type):
            def __call__(cls, *args: Any, **kwargs: Any) -> Any:
                raise StubCalled(
                    f"{cls.__module__}.{cls.__qualname__} is a stub of a module {stubs._provider} provides "
                    f"({stubs._reason_of(cls.__module__)}); this DSpark path needs it"
                )

        return _Meta(name, (), {"__module__": module})

    def module(self, name: str, values: Mapping[str, Any], *, strict: bool = False) -> types.ModuleType:
        """A stub module ``name`` holding ``values``; any other public name is a placeholder
        (or, if ``strict``, an ``AttributeError``)."""
        return _StubModule(name, values, None if strict else self.placeholder)


class _StubModule(types.ModuleType):
    def __init__(self, name: str, values: Mapping[str, Any], placeholder: Callable[[str, str], type] | None) -> None:
        super().__init__(name)
        self.__dict__.update(values)
        self._placeholder = placeholder

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or self._placeholder is None or self._is_submodule(name):
            raise AttributeError(f"stub module {self.__name__!r} has no attribute {name!r}")
        stand_in = self._placeholder(self.__name__, name)
        setattr(self, name, stand_in)
        return stand_in

    def _is_submodule(self, name: str) -> bool:
        # ``from pkg import sub`` must import the real submodule, not get a placeholder.
        return any(
            os.path.exists(os.path.join(directory, name + suffix))
            for directory in getattr(self, "__path__", ())
            for suffix in ("", ".py")
        )


class _Loader(importlib.abc.Loader):
    def __init__(self, make: Callable[[str], types.ModuleType]) -> None:
        self._make = make

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = self._make(spec.name)
        if spec.submodule_search_locations is not None:
            module.__path__ = list(spec.submodule_search_locations)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: bare packages skip ``__init__``; stubs are complete."""


class WheelFinder(importlib.abc.MetaPathFinder):
    """Serves ``package`` (and its subpackages) from ``root`` as bare packages, and the
    modules ``stub_values`` names as stubs.

    Args:
        package: the top-level package name, e.g. ``"vllm"``.
        root: the directory holding that package (a ``site-packages`` or ``--target`` dir).
        stubs: how stub modules are made (:class:`Stubs`).
        stub_values: ``(module name, its path without suffix) -> values`` for a module that
            is stubbed, ``None`` for one that is not.
        plain_packages: packages whose ``__init__`` is plain Python (no engine import) and
            is run as it is, because the engine's files import names defined there.
    """

    def __init__(self, package: str, root: str, stubs: Stubs,
                 stub_values: Callable[[str, str], Mapping[str, Any] | None],
                 plain_packages: Collection[str] = ()) -> None:
        self.package = package
        self._root = root
        self._stubs = stubs
        self._stub_values = stub_values
        self._plain_packages = frozenset(plain_packages)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.package and not fullname.startswith(self.package + "."):
            return None
        directory = os.path.join(self._root, *fullname.split("."))
        is_package = os.path.isdir(directory)
        values = self._stub_values(fullname, directory)
        if fullname in self._plain_packages and values is None and is_package:
            return importlib.util.spec_from_file_location(
                fullname, os.path.join(directory, "__init__.py"), submodule_search_locations=[directory])
        if values is not None:
            loader = _Loader(lambda name: self._stubs.module(name, values))
        elif is_package:
            loader = _Loader(types.ModuleType)
        else:
            return None  # a real module: the path finder loads it from the parent's __path__
        spec = importlib.machinery.ModuleSpec(fullname, loader, is_package=is_package)
        spec.submodule_search_locations = [directory] if is_package else None
        return spec


def install_finder(finder: WheelFinder) -> None:
    """Put ``finder`` first on ``sys.meta_path`` unless a finder for its package is there."""
    if not any(isinstance(f, WheelFinder) and f.package == finder.package for f in sys.meta_path):
        sys.meta_path.insert(0, finder)


def is_stub(module: types.ModuleType) -> bool:
    """Whether ``module`` is a stub made by :meth:`Stubs.module`."""
    return isinstance(module, _StubModule)


def import_engine_module(engine: str, module_name: str, stub_hint: str) -> types.ModuleType:
    """``module_name`` imported (e.g. ``"vllm.v1.spec_decode.dspark"``).

    Args:
        engine: the engine's release for the message, e.g. ``"vllm==0.34.0"``.
        stub_hint: where a stub for a missing module goes (the loader's own table), ending
            the message of a failed import.

    Raises:
        AdapterLoadError: the import failed (names the missing module, then ``stub_hint``), or
            it called a stub's placeholder (:class:`StubCalled`).
    """
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise AdapterLoadError(f"{engine}: cannot import {module_name}: missing {missing!r} ({exc}). "
                               f"{stub_hint}") from exc
    except StubCalled as exc:
        raise AdapterLoadError(f"{engine}: importing {module_name} called a stub: {exc}") from exc
