"""Benchmarks of the reference DSpark kernels (not timed tests): ``python -m bench``.

* ``step`` (:mod:`bench.step_sampler`): one exponential-race step, reference Triton vs
  eager torch vs SGLang vs the HBM roofline from the measured copy bandwidth;
* ``folded`` (:mod:`bench.folded`): one drafted block, CUDA-graph replay vs eager;
* ``throughput`` (:mod:`bench.throughput`): draws per second feeding the chi-square tests
  and the time of one ``stats.goodness_of_fit`` call;
* ``tiers`` (in :mod:`bench.__main__`): wall time of the CPU and GPU test tiers.

Timing, rows, the table and the JSON record live in :mod:`bench.common`.
"""
