"""Oracles and harness shared by the conformance tests; the seeded inputs are
:mod:`conformance.inputs`. None of it shares code with ``dspark_ref``
(docs/architecture.md maps each module to its SPEC section)."""
