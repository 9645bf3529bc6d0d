"""The maintainers' power tools: the kill matrix (``kill_matrix``), the calibration of
every test over many base seeds (``calibration``, its numbers and report), and the power
replay of each statistical assertion at its declared effect (``replay``). They drive the
suite through quiet pytest runs (``conformance.runner``); mutants come from a checkout."""
