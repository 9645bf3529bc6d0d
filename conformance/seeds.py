"""Case identity and case seeds: where a conformance case's randomness comes from (STYLE 16).

A case's identity is its **case id** alone, ``<section>/<family>/<detail>`` (e.g.
``S5/parity/random-V8-l4-T1``; ``conformance.cases``): the id of the :class:`~conformance.cases.Case`
record in the test's ``case`` parameter. Its seed, ``--case`` selection, replay line and
report key (results.json ``case``, report.md, junit's ``dspark_case`` property) come from it,
never from the module, test function or folder the case lives in, so a test keeps its seed
when it moves between modules or is renamed.

Rules, checked at collection by the plugin (``conformance.plugin``; a breach is a usage error):

* every suite test carries a registered ``Case`` in a ``case`` parameter: a test without one
  has no identity (nor SPEC clauses nor a place in the statistical budget);
* no two collected suite tests share a case id (one ``Case`` parametrizing two tests, or a
  test parametrized over a case and another axis): the error names both tests.

A case's **seed** is :func:`seed_of_case`: ``derive_seed(base seed, legacy key)`` for a case
that existed before case ids became the identity (so committed calibrations, kill matrices
and matrices reproduce bit for bit), ``derive_seed(base seed, case id)`` for any other.
The legacy key is the string seeds came from before: ``conformance/<module stem>.py::<test
name>[<case id>]`` (:func:`legacy_key`), frozen per case id in ``legacy_case_keys.json``
beside this module. The table was generated once from the collection of the commit that
introduced it, never written by hand::

    python -m conformance.seed_table --write   # refuses once the table exists: it is frozen
    python -m conformance.seed_table --check   # the table against today's collection

``--case`` still accepts a legacy key for one release (:func:`resolve_case`), with a
deprecation warning.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["derive_seed", "seed_of_case", "legacy_key", "legacy_keys", "resolve_case", "LEGACY_TABLE"]

#: Frozen ``{case id: legacy key}`` of the cases that existed before case ids became the identity.
LEGACY_TABLE = Path(__file__).resolve().parent / "legacy_case_keys.json"
_LEGACY_KEY_RE = re.compile(r"^[A-Za-z_]\w*/\w+\.py::\w+\[(?P<case_id>.+)\]$")


def derive_seed(base_seed: int, case_id: str) -> int:
    """A 63-bit seed for ``case_id``, stable across processes, platforms and Python
    versions (``hash()`` is salted per process; this is not).

    ``int.from_bytes(blake2b(f"{base_seed}\\0{case_id}", digest_size=8), "big") >> 1``.

    Raises:
        TypeError / ValueError: ``base_seed`` not an int in [0, 2^64), ``case_id`` not a
            non-empty string.

    Example:
        >>> derive_seed(0, "S3/race/uniform") == derive_seed(0, "S3/race/uniform")
        True
    """
    if isinstance(base_seed, bool) or not isinstance(base_seed, int):
        raise TypeError(f"base_seed: expected an int, got {type(base_seed).__name__}")
    if not 0 <= base_seed < 2**64:
        raise ValueError(f"base_seed: expected an int in [0, 2^64), got {base_seed}")
    if not isinstance(case_id, str):
        raise TypeError(f"case_id: expected a string, got {type(case_id).__name__}")
    if not case_id:
        raise ValueError("case_id: expected a non-empty case id, got ''")
    digest = hashlib.blake2b(f"{base_seed}\0{case_id}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@functools.cache
def legacy_keys() -> Mapping[str, str]:
    """The frozen table: ``{case id: legacy key}`` (read once from :data:`LEGACY_TABLE`).

    Raises:
        ValueError: an entry whose legacy key is malformed or does not end in ``[<its case id>]``.
    """
    table = json.loads(LEGACY_TABLE.read_text())
    for case_id, key in table.items():
        match = _LEGACY_KEY_RE.match(key)
        if match is None or match["case_id"] != case_id:
            raise ValueError(f"{LEGACY_TABLE.name}: entry {case_id!r}: expected a legacy key "
                             f"'conformance/<stem>.py::<test>[{case_id}]', got {key!r}")
    return table


@functools.cache
def _case_of_legacy_key() -> Mapping[str, str]:
    return {key: case_id for case_id, key in legacy_keys().items()}


def seed_of_case(base_seed: int, case_id: str) -> int:
    """The seed of case ``case_id`` under base seed ``base_seed`` (``--dspark-seed``):
    ``derive_seed(base_seed, legacy key)`` for a case of the frozen table,
    ``derive_seed(base_seed, case_id)`` for a newer one.

    Raises:
        TypeError / ValueError: as :func:`derive_seed`.
    """
    if not isinstance(case_id, str):
        raise TypeError(f"case_id: expected a string, got {type(case_id).__name__}")
    return derive_seed(base_seed, legacy_keys().get(case_id, case_id))


def resolve_case(name: str) -> tuple[str, bool]:
    """``--case`` argument -> ``(case id, deprecated)``: a legacy key of the table gives its
    case id and ``True``; anything else is taken as a case id (``False``).

    Raises:
        ValueError: ``name`` empty or not a string.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: expected a case id like 'S3/race/uniform', got {name!r}")
    case_id = _case_of_legacy_key().get(name)
    return (name, False) if case_id is None else (case_id, True)


def legacy_key(module_name: str, test_name: str) -> str:
    """The pre-case-id key of test ``test_name`` (with its ``[parameter id]``) of module
    ``module_name``: ``"conformance.suite.test_verify", "test_x[S5/a/b]"`` ->
    ``"conformance/test_verify.py::test_x[S5/a/b]"`` (first and last components of the
    import name). Used only to generate and check :data:`LEGACY_TABLE`.

    Raises:
        ValueError: ``module_name`` not a dotted import name, or an empty test name.
    """
    parts = module_name.split(".") if isinstance(module_name, str) else []
    if not parts or not all(p.isidentifier() for p in parts):
        raise ValueError(f"module_name: expected a dotted import name like 'conformance.test_verify', "
                         f"got {module_name!r}")
    if not isinstance(test_name, str) or not test_name:
        raise ValueError(f"test_name: expected a non-empty test name, got {test_name!r}")
    return f"{parts[0]}/{parts[-1]}.py::{test_name}"
