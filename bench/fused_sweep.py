"""Tuning sweep of the fused race kernel (``dspark_ref/fused_sampling.py``) on CUDA.

Times ``fused_exponential_race`` as a CUDA-graph replay over ``tile`` x ``num_warps`` x
programs per SM (``splits = ceil(programs_per_sm * SMs / B)``), explicit and counter noise,
at ``V = 129,280`` float32 and ``B`` in 1, 64, 256, and writes every timing with its
``% roofline`` (logits + noise, or logits only, at the measured copy bandwidth) as JSON.
The defaults of ``fused_sampling`` (``splits_for``, ``num_warps = tile / 128``) should sit
at or near the best row; the sweep says where they do not.

Command line: ``python -m bench.fused_sweep OUT.json [--budget-s S]`` (stops adding
configurations after ``S`` seconds, default 60).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time

import torch

from dspark_ref.fused_sampling import fused_exponential_race, philox_state

from .common import GB, Timing, copy_bandwidth, graph_replay, median_ms

__all__ = ["CONFIGS", "main"]

VOCAB = 129_280
BATCHES = (64, 1, 256)
CONFIGS = tuple(itertools.product((512, 1024, 2048), (2, 4, 8), (4, 8, 16)))  # tile, warps, programs/SM


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fused_sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="output JSON path")
    parser.add_argument("--budget-s", type=float, default=60.0, help="stop starting configurations after this")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs CUDA")
    device = torch.device("cuda")
    timing = Timing(device, warmup_ms=5.0, rep_ms=20.0)
    copy = copy_bandwidth(timing, 1 << 30)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    start, rows = time.perf_counter(), []
    for batch in BATCHES:
        gen = torch.Generator(device).manual_seed(batch)
        logits = 3.0 * torch.randn(batch, VOCAB, generator=gen, device=device)
        temps = torch.full((batch,), 0.8, device=device)
        noise = torch.empty(batch, VOCAB, device=device).exponential_(generator=gen)
        state = philox_state(1, device)
        for (tile, warps, per_sm), counter in itertools.product(CONFIGS, (False, True)):
            if time.perf_counter() - start > args.budget_s:
                break
            splits = max(1, math.ceil(per_sm * sms / batch))
            kwargs = dict(tile=tile, splits=splits, num_warps=warps)
            if counter:
                call = lambda: fused_exponential_race(logits, temps, rng_state=state, **kwargs)  # noqa: E731
            else:
                call = lambda: fused_exponential_race(logits, temps, noise, **kwargs)  # noqa: E731
            nbytes = batch * VOCAB * 4 * (1 if counter else 2)
            row = {"B": batch, "tile": tile, "num_warps": warps, "programs_per_sm": per_sm, "splits": splits,
                   "noise": "counter" if counter else "explicit"}
            try:
                ms = median_ms(graph_replay(call, device), timing)
                row |= {"median_ms": ms, "pct_roofline": 100.0 * nbytes / (copy.gbs * GB) * 1e3 / ms}
            except Exception as exc:  # a configuration the compiler rejects is reported, not fatal
                row["error"] = f"{type(exc).__name__}: {exc}"[:200]
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.json, "w", encoding="utf-8") as handle:
        json.dump({"copy_gbs": copy.gbs, "sms": sms, "vocab": VOCAB, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
