"""The harness shared by the conformance tests: calling an IUT, skipping a capability it
lacks, checking a result's format, rank processes. The oracles are :mod:`conformance.oracles`,
the seeded inputs :mod:`conformance.inputs`, the SPEC's constants :mod:`conformance.spec`.
None of it shares code with ``dspark_ref`` (docs/architecture.md maps each module to its
SPEC section)."""
