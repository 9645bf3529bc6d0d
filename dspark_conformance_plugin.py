"""pytest's entry point for dspark-conformance (``pytest11``): it registers the suite's
plugin, ``conformance.plugin``, only in a run that asks for the suite.

pytest loads this module in every run of an environment where the wheel is installed, so it
imports nothing of the suite by itself. A run asks for the suite when its arguments (the
command line and ``addopts``) hold a ``--dspark-`` option, a path inside the suite's package
or a ``conformance.suite`` module name (``--pyargs``); ``dspark-conformance`` always passes
the options. Other runs (an engine team's own tests) never import the suite's ``conformance``
package through the plugin and get none of the suite's fixtures; which ``conformance`` a
project's own tests import, where the project has one too, is Python's choice by
``sys.path`` (docs/VENDORS.md section 7). A run that asks for the suite where another
``conformance`` comes first on ``sys.path`` is a usage error that names it
(``dspark-conformance`` refuses to start there too).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import pytest

__all__ = ["asks_for_the_suite", "shadowing_package"]

#: The directory this distribution installs its ``conformance`` package into.
SUITE_PACKAGE = Path(__file__).resolve().parent / "conformance"


def shadowing_package(search_path: Sequence[str] | None = None) -> Path | None:
    """Where the ``conformance`` that Python would import instead of the suite's lives, found
    without importing it: a package's directory or a module's file; None where the first
    ``conformance`` is the suite's, a copy of it (a checkout: a package with the suite's
    ``plugin.py`` and ``suite/``), or none at all.

    Args:
        search_path: the directories to look in, in order (default: ``sys.path`` and the
            import system's finders, as ``import conformance`` would).
    """
    if search_path is None:
        spec = importlib.util.find_spec("conformance")
    else:
        spec = importlib.machinery.PathFinder.find_spec("conformance", list(search_path))
    if spec is None or spec.origin is None:  # none, or a namespace portion: a regular package wins
        return None
    origin = Path(spec.origin).resolve()
    if origin.name != "__init__.py":
        return origin
    package = origin.parent
    if package == SUITE_PACKAGE or ((package / "plugin.py").is_file() and (package / "suite").is_dir()):
        return None
    return package


def asks_for_the_suite(args: Sequence[str]) -> bool:
    """Whether pytest arguments ask for the suite (module note)."""
    for arg in args:
        if arg.startswith(("--dspark-", "conformance.suite")):
            return True
        if not arg.startswith("-"):
            try:  # any text: an option's value (-k EXPR), a node id, a path
                path = Path(arg.split("::")[0]).resolve()
            except (OSError, ValueError):
                continue
            if path == SUITE_PACKAGE or SUITE_PACKAGE in path.parents:
                return True
    return False


@pytest.hookimpl(tryfirst=True)  # before the conftests load: theirs may import a `conformance` of their own
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    if not asks_for_the_suite(args):
        return
    shadow = shadowing_package()
    if shadow is not None:
        raise pytest.UsageError(f"dspark-conformance: {shadow} is imported as 'conformance' in place of the suite's "
                                "package: run the suite from another directory")
    early_config.pluginmanager.import_plugin("conformance.plugin")  # its options are added before the parse
