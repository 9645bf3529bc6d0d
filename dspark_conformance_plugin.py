"""pytest's entry point for dspark-conformance (``pytest11``): it registers the suite's
plugin, ``conformance.plugin``, unless another ``conformance`` comes first on ``sys.path``.

pytest loads this module in every run of an environment where the wheel is installed. A
project with a package of its own named ``conformance``, run with ``python -m pytest`` (which
puts the project's directory first on ``sys.path``), would have its package imported in place
of the suite's, and the import of ``conformance.plugin`` would stop the project's whole run.
There the plugin stays out and the report header says why: the project's tests run as they
would without the wheel. (``dspark-conformance`` checks the same before it starts pytest.)
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Sequence
from pathlib import Path

__all__ = ["shadowing_package"]

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


_SHADOW = shadowing_package()

if _SHADOW is None:
    pytest_plugins = ["conformance.plugin"]
else:

    def pytest_report_header(config) -> str:
        return (f"dspark-conformance: plugin not loaded: {_SHADOW} is imported as 'conformance' before "
                f"the suite's package (run the suite from another directory)")
