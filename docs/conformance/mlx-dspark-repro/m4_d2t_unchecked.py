"""M4 (docs/conformance/mlx-dspark-findings.md): a reduced vocabulary's d2t map is not validated.

set_draft_vocab_map(offsets) builds ``arange(n) + offsets`` unchecked: a map one entry short
is accepted and the last draft id reads past its end (MLX gathers are unchecked), a map with a
target id outside [0, V) hands that id out as a draw, and two draft ids on one target id are
accepted. SPEC S1: a d2t of the wrong length, with an id outside [0, V) or with a duplicate
target id is a clear error.

Run from a checkout: PYTHONPATH=<mlx-dspark dir>:. python docs/conformance/mlx-dspark-repro/m4_d2t_unchecked.py
"""
from _engine import drafter, mx

V, V_D = 8, 4
good = [1, 3, 5, 7]  # target id of each draft id
for what, d2t in (("short", good[:-1]), ("out-of-range", good[:-1] + [V]), ("negative", good[:-1] + [-1]),
                  ("duplicate", good[:-1] + [1])):
    d = drafter(V, 2, draft_vocab_size=V_D)
    d.set_draft_vocab_map(mx.array(d2t) - mx.arange(len(d2t)))  # mlx-dspark takes offsets
    print(f"{what} d2t {d2t}: accepted; to_target_ids(arange({V_D})) = {d.to_target_ids(mx.arange(V_D)).tolist()}")
