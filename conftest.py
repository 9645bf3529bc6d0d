"""Repo-root pytest wiring: register the conformance plugin for in-repo runs.

The ``pytest11`` entry point (``dspark_conformance_plugin``) registers it only in runs that
ask for the suite; the checkout's own tests use it in every run. pytest registers a plugin
module once, so a run where the entry point has registered it too is no error.
"""

pytest_plugins = ["conformance.plugin"]
