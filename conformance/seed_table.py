"""The frozen legacy-key table (``conformance.seeds``): generated once, checked since.

    python -m conformance.seed_table --write   # generate it from a fresh collection; refuses once it exists
    python -m conformance.seed_table --check   # the table against today's collection

``--check`` fails on a table entry whose case id is no longer collected: a renamed case id
(its seed would silently change: rename it back, or accept the new seed on purpose and
drop the entry) or a removed case (drop its entry). A test moved to another module or
renamed since the table froze is no failure: its seed still comes from its entry.
"""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from .plugin import SUITE_PACKAGE, is_suite_item, item_case_id
from .seeds import LEGACY_TABLE, legacy_key, legacy_keys


def collect() -> list[tuple[str, str]]:
    """``(case id, legacy key)`` of every suite test a fresh collection finds, the legacy key
    as :func:`conformance.seeds.legacy_key` builds it from where the test sits today.

    Raises:
        RuntimeError: the collection failed (a duplicate case id, a test without a case).
    """
    found: list[tuple[str, str]] = []

    class _Collector:
        def pytest_collection_finish(self, session: pytest.Session) -> None:
            found.extend((item_case_id(item), legacy_key(item.module.__name__, item.name))
                         for item in session.items if is_suite_item(item))

    code = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "--pyargs", SUITE_PACKAGE], plugins=[_Collector()])
    if code != pytest.ExitCode.OK:
        raise RuntimeError(f"collecting {SUITE_PACKAGE} failed (pytest exit {int(code)})")
    return found


def problems(collected: list[tuple[str, str]]) -> list[str]:
    """The table's entries whose case id ``collected`` lacks, one line each."""
    ids = {case_id for case_id, _ in collected}
    return [f"{case_id}: in {LEGACY_TABLE.name} but no case has this id now (renamed: its seed changes; "
            "removed: drop the entry)" for case_id in sorted(set(legacy_keys()) - ids)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.seed_table", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="generate the table (once: refuses if it exists)")
    action.add_argument("--check", action="store_true", help="check the table against today's collection")
    args = parser.parse_args(argv)
    if args.write and LEGACY_TABLE.exists():
        print(f"{LEGACY_TABLE} exists and is frozen; delete it deliberately to regenerate", file=sys.stderr)
        return 1
    collected = collect()
    if args.write:
        LEGACY_TABLE.write_text(json.dumps(dict(sorted(collected)), indent=1) + "\n")
        print(f"wrote {len(collected)} cases to {LEGACY_TABLE}")
        return 0
    table = legacy_keys()
    moved = sum(1 for case_id, key in collected if case_id in table and table[case_id] != key)
    new = sum(1 for case_id, _ in collected if case_id not in table)
    print(f"{len(collected)} cases collected: {len(collected) - new} in the table ({moved} moved or renamed "
          f"since it froze, seeds kept), {new} new (seeded from their case id)")
    found = problems(collected)
    for line in found:
        print(f"  {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
