"""Tensor-parallel ranks as processes, for the SPEC S5 "Tensor parallelism" cases.

:class:`RankPool` keeps ``world_size`` Python processes (``python -m
conformance.suite.support.tp_ranks --rank R ...``), rank ``r`` in process ``r``, started at
its first case and reused by the next. For each case every rank joins a new
``torch.distributed`` process group (``gloo`` on CPU, ``nccl`` with rank ``r`` on ``cuda:r``:
the backend is a parameter, the code is the same) through a new file store in the case's own
temporary directory, loads the case's inputs, builds a new generator from its seed, and calls
the implementation's :class:`~conformance.contract.TensorParallelRound` (behind the boundary
checks); then it leaves the group. Each rank writes what it returned; the test compares the
ranks. :func:`run_ranks` runs one case on a given pool, or on a pool of its own.

Why a pool of long-lived processes: a rank process spends seconds importing torch, the suite
and the adapter (4 s a case on 2 loaded cores, 19 s of the CPU main job's 195 s case time),
and the round itself a fraction of one. A pool pays that once per pytest process (xdist
worker). The cheaper-looking alternatives are less safe: forking the pytest process copies
its torch thread pools and, on a GPU run, its initialised CUDA context, which a forked child
cannot use (NCCL ranks); forking from a clean preloaded server would still load the adapter
(an engine import: seconds) in every child and adds a process to manage. A long-lived rank
started by ``subprocess`` is a fresh interpreter exactly as before, owns its GPU for life,
and loads the adapter once per implementation name.

What a case shares with the case before it on the pool: the rank processes and their loaded
adapters (as the in-process cases share the adapter of the session). What is new in each
case: the process group, the file store, the inputs, the generator and the log. torch's
global generator runs on from case to case; a fresh process seeds it at random (this
torch's ``torch.initial_seed()`` differs from process to process), so no case could count
on its state before either.

Robustness: every collective has a timeout (``COLLECTIVE_TIMEOUT_S``), the whole group a
wall-clock limit; the ranks inherit the parent's import path and environment (the pool is
started anew when either has changed). A rank that raises writes the error
(``NotImplementedError``: kind ``"unsupported"``) and exits, as a one-case process did, so
a peer waiting in a collective sees it leave; a rank that fails, dies or hangs ends the whole
pool (the others are killed) and the next case starts a new one, so no case runs on a rank
that a failed case left behind. Each rank's output goes to ``tp_rank<R>.log`` in the case's
directory, whose tail a failure carries. The suite's session fixture closes its pool (the
ranks are killed; :func:`atexit` closes a pool left open), and a rank whose job pipe closes
exits by itself: a pytest process that ends without its teardown or ``atexit`` handlers
(killed, or a preloaded child's ``os._exit``) leaves no rank behind.

The NCCL path is the gloo path's code with ``cuda:r`` for rank ``r`` (set per case, as
before) and a new NCCL group per case in the same process; it runs only on two GPUs.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

__all__ = ["DistributedGroup", "RankFailure", "RankPool", "run_ranks"]

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


class RankPool:
    """Rank processes reused from case to case (see the module docstring); ``started`` counts
    the processes this pool has started. Not shared between processes: a forked child that
    inherits a pool starts its own."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen] = []
        self._logs: list[Any] = []  # each rank's start-up output (before its first case)
        self._key: tuple | None = None
        self._owner = os.getpid()
        self.started = 0
        atexit.register(self.close)

    @property
    def pids(self) -> list[int]:
        """The process ids of the ranks now running, rank 0 first; empty before the first
        case and after a failed one."""
        return [proc.pid for proc in self._procs if proc.poll() is None]

    def run(self, impl: str, backend: str, payload: dict[str, Any], workdir: Path, *, world_size: int = 2,
            timeout_s: float = 240.0) -> list[dict[str, Any]]:
        """One case on the pool; arguments, return value and errors as :func:`run_ranks`'s."""
        workdir = Path(workdir)
        inputs = workdir / "tp_inputs.pt"
        torch.save(payload, inputs)
        deadline = time.monotonic() + timeout_s  # the first case's limit includes the ranks' start-up
        procs = self._ready(backend, world_size)
        try:  # any way out but the ranks' outputs (a failure, a timeout, an interrupt) ends the pool
            for rank, proc in enumerate(procs):
                job = {"impl": impl, "store": str(workdir / "tp_store"), "inputs": str(inputs),
                       "out": str(workdir / f"tp_rank{rank}.pt"), "log": str(workdir / f"tp_rank{rank}.log")}
                try:
                    proc.stdin.write((json.dumps(job) + "\n").encode())
                except OSError:
                    pass  # a rank that died: its reply is an end of file, below
            replied = []
            for proc in procs:
                replied.append(_reply(proc, max(deadline, time.monotonic() + 1.0)))
                if replied[-1] is None:
                    break
            if None in replied:
                tails = [self._tail(rank, workdir, 1500) for rank in range(world_size)]
                raise RankFailure(f"tensor-parallel ranks still running after {timeout_s:.0f} s (a collective that "
                                  f"not every rank joined?); output tails: {tails}")
            results = []
            for rank, proc in enumerate(procs):
                out = workdir / f"tp_rank{rank}.pt"
                record = torch.load(out) if out.exists() else None
                if record is None or "error" in record:
                    kind = "unsupported" if record is not None and record.get("unsupported") else "error"
                    if record is not None:
                        detail = record["error"]
                    else:
                        detail = f"exit code {_exit_code(proc)}, output: {self._tail(rank, workdir, 2000)}"
                    raise RankFailure(f"rank {rank} of {world_size} ({backend}): {detail}", kind)
                results.append(record["outputs"])
        except BaseException:
            self.close()
            raise
        if not all(replied):
            self.close()  # a rank that wrote its outputs, then exited: the next case starts anew
        return results

    def close(self) -> None:
        """End the rank processes (a later :meth:`run` starts new ones); idempotent."""
        procs, logs, self._procs, self._logs, self._key = self._procs, self._logs, [], [], None
        if os.getpid() != self._owner:
            return  # a forked child's copy: the processes are its parent's
        for proc in procs:
            if proc.poll() is None:
                proc.kill()  # a rank between cases holds no state worth a graceful end
        for proc in procs:
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        for log in logs:
            log.close()

    def _ready(self, backend: str, world_size: int) -> list[subprocess.Popen]:
        """The pool's processes, started anew when absent, dead, of another backend, size,
        import path, environment or working directory, or inherited through a fork."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), OMP_NUM_THREADS="1")
        # pytest names the running test in the environment: a new name is no new environment
        key = (backend, world_size, os.getcwd(),
               tuple(sorted(item for item in env.items() if item[0] != "PYTEST_CURRENT_TEST")))
        if os.getpid() != self._owner:
            self._procs, self._logs, self._owner = [], [], os.getpid()
        if key == self._key and all(proc.poll() is None for proc in self._procs):
            return self._procs
        self.close()
        for rank in range(world_size):
            log = tempfile.TemporaryFile()
            self._logs.append(log)
            self._procs.append(subprocess.Popen(
                [sys.executable, "-m", __name__, "--backend", backend, "--rank", str(rank),
                 "--world-size", str(world_size)],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, bufsize=0,
            ))
            self.started += 1
        self._key = key
        return self._procs

    def _tail(self, rank: int, workdir: Path, chars: int) -> str:
        """Rank ``rank``'s output: its start-up output, then this case's."""
        text = ""
        if rank < len(self._logs):
            self._logs[rank].seek(0)
            text = self._logs[rank].read().decode(errors="replace")
        log = workdir / f"tp_rank{rank}.log"
        if log.exists():
            text += log.read_text(errors="replace")
        return text[-chars:]


def _reply(proc: subprocess.Popen, deadline: float) -> bool | None:
    """True when the rank answered its case, False when it exited (end of file), None at the deadline."""
    fd = proc.stdout.fileno()
    received = b""
    while b"\n" not in received:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        chunk = os.read(fd, 64)
        if not chunk:
            return False
        received += chunk
    return True


def _exit_code(proc: subprocess.Popen) -> int | None:
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def run_ranks(impl: str, backend: str, payload: dict[str, Any], workdir: Path, *, world_size: int = 2,
              timeout_s: float = 240.0, pool: RankPool | None = None) -> list[dict[str, Any]]:
    """Run one ``tp_round`` per rank in ``world_size`` processes; returns each rank's outputs.

    Args:
        impl: the ``--dspark-impl`` name of the implementation under test.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (rank ``r`` on ``cuda:r``).
        payload: ``{"shared": {...}, "local": [rank 0's {...}, rank 1's {...}, ..]}``: the
            ``tp_round`` arguments every rank gets, then each rank's own ``generator_seed``
            and ``sps``; CPU tensors.
        workdir: an empty directory of this case.
        world_size: number of ranks (>= 2).
        timeout_s: wall-clock limit for the whole group (with a pool's first case, or with
            no pool, the ranks' start-up included).
        pool: the :class:`RankPool` to run on, reused after this case unless the case failed;
            None: a pool of this case only, closed before returning.
    Returns:
        Per rank ``{"draft_tokens", "verify_lengths", "accepted", "tokens"}`` (CPU tensors).
    Raises:
        RankFailure: a rank raised, exited, timed out or wrote nothing (the pool's processes
            are then ended; its next case starts new ones).
    """
    if pool is not None:
        return pool.run(impl, backend, payload, workdir, world_size=world_size, timeout_s=timeout_s)
    own = RankPool()
    try:
        return own.run(impl, backend, payload, workdir, world_size=world_size, timeout_s=timeout_s)
    finally:
        own.close()
        atexit.unregister(own.close)


def _run_rank(args: argparse.Namespace, job: dict[str, str], adapters: dict[str, Any]) -> dict[str, Any]:
    """One case on this rank: ``adapters`` caches, by implementation name, the boundary-checked
    ``TensorParallelRound``."""
    import torch.distributed as dist

    from conformance.boundary import validating
    from conformance.contract import TensorParallelRound
    from conformance.loading import load_adapter

    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", args.rank)
        torch.cuda.set_device(device)
    payload = torch.load(job["inputs"])
    shared = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in payload["shared"].items()}
    local = payload["local"][args.rank]
    if job["impl"] not in adapters:
        adapters[job["impl"]] = validating(TensorParallelRound, load_adapter(job["impl"]).get(TensorParallelRound))
    impl = adapters[job["impl"]]
    dist.init_process_group(args.backend, init_method=f"file://{job['store']}", rank=args.rank,
                            world_size=args.world_size, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        generator = torch.Generator(device).manual_seed(local["generator_seed"])
        out = impl.tp_round(DistributedGroup(), shared.pop("head_type"), shared.pop("state_dict"), **shared,
                            sps=local["sps"], generator=generator)
        names = ("draft_tokens", "verify_lengths", "accepted", "tokens")
        return {name: value.detach().cpu() for name, value in zip(names, out)}
    finally:
        dist.destroy_process_group()


def _case(args: argparse.Namespace, job: dict[str, str], adapters: dict[str, Any]) -> bool:
    """Run one case with this process's output in the case's log; write its record; True
    when it wrote outputs."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(2)
    log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        torch.save({"outputs": _run_rank(args, job, adapters)}, job["out"])
        return True
    except NotImplementedError as exc:
        torch.save({"error": f"NotImplementedError: {exc}", "unsupported": True}, job["out"])
    except BaseException:  # noqa: BLE001 - every failure goes back to the test
        torch.save({"error": traceback.format_exc()[-3000:]}, job["out"])
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved, 1)
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)
    return False


def main(argv: list[str] | None = None) -> int:
    """One rank of a :class:`RankPool`: ``python -m conformance.suite.support.tp_ranks
    --backend gloo|nccl --rank R --world-size N`` reads one case a line on its standard input
    (JSON: ``impl``, ``store``, ``inputs``, ``out``, ``log``), writes the case's record to
    ``out`` and answers a line on its standard output; it exits 0 at the end of its input,
    1 after a case that wrote an error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    args = parser.parse_args(argv)
    jobs = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the IUT reads no cases
    os.close(devnull)
    os.dup2(2, 1)  # and writes no answers: its output goes with the rank's log
    adapters: dict[str, Any] = {}
    for line in jobs:
        ok = _case(args, json.loads(line), adapters)
        replies.write("done\n")
        replies.flush()
        if not ok:
            return 1  # leave: a peer waiting in a collective sees this rank go, as it did with one process a case
    return 0


if __name__ == "__main__":
    sys.exit(main())
