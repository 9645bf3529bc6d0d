"""Tensor-parallel ranks as processes, for the SPEC S5 "Tensor parallelism" cases.

:func:`run_ranks` starts ``world_size`` Python processes (``python -m
conformance.suite.support.tp_ranks``), each of which joins one ``torch.distributed`` process
group (``gloo`` on CPU, ``nccl`` with one GPU per rank: the backend is a parameter, the code
is the same), loads the implementation under test by its ``--dspark-impl`` name, and calls
its :class:`~conformance.contract.TensorParallelRound` (behind the boundary checks) on the
inputs the test saved. Each rank writes what it returned; the test compares the ranks.

Robustness: the group meets through a file store in the case's own temporary directory
(no port to pick, nothing shared between concurrent xdist workers); every collective has a
timeout; the children inherit the parent's import path; a rank that fails or hangs is
killed, the others too, and the failure carries each rank's error or output tail.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

__all__ = ["DistributedGroup", "RankFailure", "run_ranks"]

COLLECTIVE_TIMEOUT_S = 60


class RankFailure(RuntimeError):
    """A rank process failed, hung or wrote no result; ``kind`` is ``"unsupported"`` when the
    IUT raised ``NotImplementedError`` (the test skips), ``"error"`` otherwise."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


class DistributedGroup:
    """A :class:`~conformance.contract.RankGroup` over the default ``torch.distributed`` group."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.rank_in_group = self.rank

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        self._dist.broadcast(tensor, src=src)


def run_ranks(impl: str, backend: str, payload: dict[str, Any], workdir: Path, *, world_size: int = 2,
              timeout_s: float = 240.0) -> list[dict[str, Any]]:
    """Run one ``tp_round`` per rank in ``world_size`` processes; returns each rank's outputs.

    Args:
        impl: the ``--dspark-impl`` name of the implementation under test.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (rank ``r`` on ``cuda:r``).
        payload: ``{"shared": {...}, "local": [rank 0's {...}, rank 1's {...}, ..]}``: the
            ``tp_round`` arguments every rank gets, then each rank's own ``generator_seed``
            and ``sps``; CPU tensors.
        workdir: an empty directory of this case.
        world_size: number of ranks (>= 2).
        timeout_s: wall-clock limit for the whole group.
    Returns:
        Per rank ``{"draft_tokens", "verify_lengths", "accepted", "tokens"}`` (CPU tensors).
    Raises:
        RankFailure: a rank raised, exited non-zero, timed out or wrote nothing.
    """
    workdir = Path(workdir)
    inputs = workdir / "tp_inputs.pt"
    torch.save(payload, inputs)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", __name__, "--impl", impl, "--backend", backend, "--rank", str(rank),
             "--world-size", str(world_size), "--store", str(workdir / "tp_store"), "--inputs", str(inputs),
             "--out", str(workdir / f"tp_rank{rank}.pt")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for rank in range(world_size)
    ]
    deadline = time.monotonic() + timeout_s
    logs: list[str] = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        tails = [(proc.communicate()[0] or "")[-1500:] for proc in procs]
        raise RankFailure(f"tensor-parallel ranks still running after {timeout_s:.0f} s (a collective that not "
                          f"every rank joined?); output tails: {tails}") from None
    results = []
    for rank, (proc, log) in enumerate(zip(procs, logs)):
        out = workdir / f"tp_rank{rank}.pt"
        record = torch.load(out) if out.exists() else None
        if record is None or "error" in record:
            kind = "unsupported" if record is not None and record.get("unsupported") else "error"
            detail = record["error"] if record is not None else f"exit code {proc.returncode}, output: {log[-2000:]}"
            raise RankFailure(f"rank {rank} of {world_size} ({backend}): {detail}", kind)
        results.append(record["outputs"])
    return results


def _run_rank(args: argparse.Namespace) -> dict[str, Any]:
    import torch.distributed as dist

    from conformance.boundary import validating
    from conformance.contract import TensorParallelRound
    from conformance.loading import load_adapter

    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", args.rank)
        torch.cuda.set_device(device)
    payload = torch.load(args.inputs)
    shared = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in payload["shared"].items()}
    local = payload["local"][args.rank]
    impl = validating(TensorParallelRound, load_adapter(args.impl).get(TensorParallelRound))
    dist.init_process_group(args.backend, init_method=f"file://{args.store}", rank=args.rank,
                            world_size=args.world_size, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        generator = torch.Generator(device).manual_seed(local["generator_seed"])
        out = impl.tp_round(DistributedGroup(), shared.pop("head_type"), shared.pop("state_dict"), **shared,
                            sps=local["sps"], generator=generator)
        names = ("draft_tokens", "verify_lengths", "accepted", "tokens")
        return {name: value.detach().cpu() for name, value in zip(names, out)}
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """One rank: ``python -m conformance.suite.support.tp_ranks --impl NAME --backend gloo|nccl
    --rank R --world-size N --store PATH --inputs PATH --out PATH``; exit 0 when it wrote its
    outputs, 1 when it wrote an error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--impl", "--backend", "--store", "--inputs", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        torch.save({"outputs": _run_rank(args)}, args.out)
        return 0
    except NotImplementedError as exc:
        torch.save({"error": f"NotImplementedError: {exc}", "unsupported": True}, args.out)
    except BaseException:  # noqa: BLE001 - every failure goes back to the test
        torch.save({"error": traceback.format_exc()[-3000:]}, args.out)
    return 1


if __name__ == "__main__":
    sys.exit(main())
