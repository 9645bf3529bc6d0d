"""Case keys and case seeds: where a conformance case's randomness comes from.

A case's **key** names it independently of where the suite lives (a checkout, a wheel in
site-packages, any working directory) and of the folder its test module sits in:

    <top-level package>/<module stem>.py::<test name>[<parameter id>]

e.g. ``conformance/test_sampling.py::test_S3_greedy_ties[S3/greedy/ties-StepSampler]``. It
is built from the test module's import name (its first and last components), the test
name and the parameter id, never from a file path; for the suite's modules it equals the
pytest node id of a checkout run from its root before the layout move, so committed
calibrations keep reproducing. Stems are unique within the suite (checked in ``tests/``).

A case's **seed** is ``derive_seed(base seed, key)`` (``--dspark-seed`` is the base).
"""

from __future__ import annotations

import hashlib

__all__ = ["case_key", "module_key", "derive_seed"]


def module_key(module_name: str) -> str:
    """``"conformance.suite.test_verify"`` -> ``"conformance/test_verify.py"``.

    Raises:
        ValueError: ``module_name`` empty or not a dotted import name.
    """
    parts = module_name.split(".") if isinstance(module_name, str) else []
    if not parts or not all(p.isidentifier() for p in parts):
        raise ValueError(f"module_name: expected a dotted import name like 'conformance.test_verify', "
                         f"got {module_name!r}")
    return f"{parts[0]}/{parts[-1]}.py"


def case_key(module_name: str, test_name: str) -> str:
    """The key of test ``test_name`` (with its ``[parameter id]``) of module ``module_name``.

    Raises:
        ValueError: a malformed module name, or an empty test name.
    """
    if not isinstance(test_name, str) or not test_name:
        raise ValueError(f"test_name: expected a non-empty test name, got {test_name!r}")
    return f"{module_key(module_name)}::{test_name}"


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
