"""Repo-root pytest wiring: register the conformance plugin for in-repo runs.

An installed checkout (``pip install -e .``) already loads the plugin through its
``pytest11`` entry point; registering it twice is an error, so only a plain checkout on
``sys.path`` registers it here.
"""

from importlib.metadata import entry_points

if not any(ep.value == "dspark_conformance_plugin" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["conformance.plugin"]
