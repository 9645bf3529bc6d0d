"""D1 (docs/conformance/dspark-mlx-findings.md): markov_rank 0 is not a clear configuration error.

SPEC S2: markov_rank <= 0 is a clear configuration error. dspark-mlx's DSparkMarkovHead(V, r)
passes r to MLX's nn.Embedding unchecked: r = 0 raises ZeroDivisionError and r = -1 a
ValueError "math domain error" from MLX's initialiser, neither naming the rank.

Run: PYTHONPATH=<dspark-mlx dir> python docs/conformance/dspark-mlx-repro/d1_rank_zero.py
"""
from dspark_mlx.model.heads import DSparkMarkovHead

for rank in (0, -1):
    try:
        DSparkMarkovHead(16, rank)
        print(f"rank {rank}: built (SPEC: a configuration error)")
    except Exception as exc:  # noqa: BLE001 - the point is which error comes out
        print(f"rank {rank}: {type(exc).__name__}: {exc}")
