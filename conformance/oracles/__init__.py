"""The SPEC's oracles: what a conforming implementation returns, computed in float64 or exact
arithmetic from docs/SPEC.md alone, one module per SPEC topic (docs/architecture.md maps each
to its section). They import the SPEC's constants (:mod:`conformance.spec`) and the seeded
inputs (:mod:`conformance.inputs`), never ``dspark_ref`` nor the suite's tests
(``tests/test_layers.py``).
"""
