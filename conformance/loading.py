"""Resolve ``--dspark-impl`` into an :class:`~conformance.contract.Adapter`.

Accepted forms:

* a built-in name: ``reference`` (the bundled ``dspark_ref``), ``sglang``, ``vllm``,
  ``speculators``, ``dspark-mlx`` and ``mlx-dspark`` (the installed PyPI packages), ``mutant:<id>``
  (a known-bug variant from ``fixtures/mutants`` of a checkout: the mutants are not part of the wheel, and are found by module name, like any
  third-party adapter, so the suite never imports them statically);
* ``package.module:attr``, where ``attr`` is an ``Adapter`` or a zero-argument callable
  returning one;
* the name of an entry point in the group ``dspark_conformance.adapters`` (how an engine
  ships its adapter as a plugin, like a pytest plugin).

``NAME==X`` (a built-in engine or an entry point) also checks that the loaded adapter is
named ``...==X``, i.e. that release ``X`` is the one installed.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from .contract import Adapter

ENTRY_POINT_GROUP = "dspark_conformance.adapters"
#: The mutant registry of a checkout (``fixtures/mutants``), resolved by name.
MUTANTS_MODULE = "fixtures.mutants"

_BUILTINS = {
    "reference": "conformance.adapters.reference:make_adapter",
    "sglang": "conformance.adapters.sglang:make_adapter",
    "vllm": "conformance.adapters.vllm:make_adapter",
    "speculators": "conformance.adapters.speculators:make_adapter",
    "dspark-mlx": "conformance.adapters.dspark_mlx:make_adapter",
    "mlx-dspark": "conformance.adapters.mlx_dspark:make_adapter",
}


class AdapterLoadError(RuntimeError):
    """The adapter named by ``--dspark-impl`` could not be loaded (message says why)."""


def _resolve_object(target: str) -> object:
    """The object ``module:attr`` names, called if it is a factory.

    Raises:
        AdapterLoadError: the module fails to import (whatever it raises: a third-party
            module's failure is a load error, not a crash of the run), lacks ``attr``, or the
            factory raises.
    """
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AdapterLoadError(f"implementation {target!r}: cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - any failure of a third-party module's import is a load error
        raise AdapterLoadError(f"implementation {target!r}: importing {module_name!r} raised "
                               f"{type(exc).__name__}: {exc}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        raise AdapterLoadError(f"implementation {target!r}: {module_name} has no attribute {attr!r}") from exc
    return _called(target, attr, obj)


def _called(spec: str, attr: str, obj: object) -> object:
    """``obj`` itself if it is an Adapter or not callable, else what the factory returns."""
    if not callable(obj) or isinstance(obj, Adapter):
        return obj
    try:
        return obj()
    except Exception as exc:  # noqa: BLE001 - any failure of a third-party factory is a load error
        raise AdapterLoadError(f"implementation {spec!r}: {attr}() raised {type(exc).__name__}: {exc}") from exc


def _checked(spec: str, obj: object) -> Adapter:
    if not isinstance(obj, Adapter):
        raise AdapterLoadError(
            f"implementation {spec!r}: expected a conformance.contract.Adapter, got {type(obj).__name__}"
        )
    return obj


def mutants_module():
    """The checkout's mutant registry module (``fixtures.mutants``).

    Raises:
        AdapterLoadError: not importable (an installed wheel has no mutants: install a
            checkout of dspark-conformance, where ``fixtures/`` sits beside ``conformance/``).
    """
    try:
        return importlib.import_module(MUTANTS_MODULE)
    except ModuleNotFoundError as exc:
        if not (MUTANTS_MODULE + ".").startswith(f"{exc.name}."):  # a missing import inside the mutants
            raise
        raise AdapterLoadError(
            f"the mutant fixtures ({MUTANTS_MODULE}) are not importable; the mutants ship with a checkout of "
            "dspark-conformance, not with the wheel: install the checkout itself (pip install -e CHECKOUT), or "
            "put a directory holding a copy of the checkout's fixtures/ (not the checkout's root: its "
            "conformance/ would shadow the wheel's) on PYTHONPATH") from exc


def _with_version(spec: str, version: str, obj: object) -> object:
    """``obj`` (the loaded adapter) once ``NAME==version`` holds, i.e. its name ends in
    ``==version``; ``obj`` whatever its name when no version was asked.

    Raises:
        AdapterLoadError: the adapter's name carries no version, or another one.
    """
    if not version:
        return obj
    installed = getattr(obj, "name", "")
    name = spec.partition("==")[0]
    if "==" not in installed:
        raise AdapterLoadError(f"implementation {spec!r}: {name!r} has no version to check (its adapter is named "
                               f"{installed!r}); use {name!r}")
    if installed.split("==")[-1] != version:
        raise AdapterLoadError(f"implementation {spec!r}: installed version is {installed!r}")
    return obj


def load_adapter(spec: str) -> Adapter:
    """Load the adapter named by ``spec`` (see the module docstring for the forms).

    Raises:
        AdapterLoadError: unknown name, import failure, or an object that is not an Adapter.
    """
    if spec.startswith("mutant:"):
        try:
            adapter = mutants_module().make_mutant(spec.removeprefix("mutant:"))
        except (AdapterLoadError, ValueError) as exc:
            raise AdapterLoadError(f"implementation {spec!r}: {exc}") from exc
        return _checked(spec, adapter)
    if ":" in spec:
        return _checked(spec, _resolve_object(spec))
    name, _, version = spec.partition("==")
    if name in _BUILTINS:
        return _checked(spec, _with_version(spec, version, _resolve_object(_BUILTINS[name])))
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if found:
        ep = found[0]
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - an installed plugin's broken entry point is a load error
            raise AdapterLoadError(f"implementation {spec!r}: the entry point {ep.name} = {ep.value} of "
                                   f"{ENTRY_POINT_GROUP} does not load: {type(exc).__name__}: {exc}") from exc
        return _checked(spec, _with_version(spec, version, _called(spec, ep.attr or ep.value, obj)))
    known = sorted(_BUILTINS) + ["mutant:<id>"] + sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    raise AdapterLoadError(
        f"implementation {spec!r}: unknown implementation; expected one of {known} or 'module:attr'"
    )
