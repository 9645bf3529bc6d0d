"""The drift check, ``dspark-conformance engines``: each supported engine's newest release
(or a pinned one, or a development tree) installed out of the way, its adapter loaded and
its CPU gate run, one table for all (engine teams and the suite's CI run it to see a new
release, or a change of their own, drift from its adapter).

Modules: :mod:`.registry` (the engines), :mod:`.index` (which release), :mod:`.gate`
(install, load, gate for one engine), :mod:`.check` (all engines), :mod:`.table` (the table
and the exit code), :mod:`.probe` (the load check's process).
"""

from .check import check_engines, dry_run
from .index import IndexLookupError, Release, choose_release, newest_release
from .registry import ENGINES, Engine, engine_named
from .table import EngineResult, exit_code, format_table, write_tables

__all__ = ["ENGINES", "Engine", "EngineResult", "IndexLookupError", "Release", "check_engines", "choose_release",
           "dry_run", "engine_named", "exit_code", "format_table", "newest_release", "write_tables"]
