"""The conformance tests, one module per SPEC topic (``test_<topic>.py``, the stem shared
with ``dspark_ref/<topic>.py`` and ``fixtures/mutants/<topic>.py``); shared inputs and
float64 oracles live in ``support``. Test modules never import each other."""
