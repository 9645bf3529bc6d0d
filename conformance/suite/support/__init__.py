"""Inputs and oracles shared by the conformance tests: seeded generators (``inputs``),
Markov-block inputs and the S2 float64 oracle (``blocks``), and the S5 replay oracle
(``verify_oracle``). None of it shares code with ``dspark_ref``."""
