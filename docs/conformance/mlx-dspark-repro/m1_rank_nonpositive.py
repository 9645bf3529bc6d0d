"""M1 (docs/conformance/mlx-dspark-findings.md): markov_rank <= 0 silently drops the Markov head.

DSparkDrafter builds ``VanillaMarkov(config) if config.markov_rank > 0 else None``: a rank of 0
or -1 gives a drafter with no Markov head, no error, and its blocks are the plain argmax of
the base logits. SPEC S2: markov_rank <= 0 is a clear configuration error.

Run from a checkout: PYTHONPATH=<mlx-dspark dir>:. python docs/conformance/mlx-dspark-repro/m1_rank_nonpositive.py
"""
from _engine import drafter, mx

for rank in (0, -1):
    d = drafter(16, rank)
    block = d.sample_block(mx.zeros((3, 16)), first_prev_token=5)
    print(f"rank {rank}: built, markov_head = {d.markov_head}, block {block.tolist()} (SPEC: a configuration error)")
