"""Suite runs that pay the interpreter's start-up once: a server imports torch and scipy.stats,
then forks one child per pytest command, which starts pytest as ``python -m pytest`` would. A
child imports the rest (pytest, the plugin, the suite, the adapter) itself, so the suite's
modules get pytest's assertion rewriting and fresh state, as in a fresh process; unlike one,
the children share the server's string-hash seed and end without ``atexit`` handlers.
Measured on the kill matrix: 8.9 s -> 3.8 s a mutant (mean of 11 run both ways in turn, 2
loaded cores).

:func:`preloaded_server` gives a stand-in for ``conformance.runner.run_suite`` in quiet runs
(the kill matrix's, ``runner.run_quietly``); the command, its environment and its
results.json are the runner's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from conformance import runner

#: The server: preloads, then for each JSON line ``{"argv", "env", "cwd"}`` on stdin forks a
#: child running ``argv`` (``[python, "-m", "pytest", ...]``) and answers its exit code.
_SERVER = """
import json, os, runpy, sys
import scipy.stats, torch

for line in sys.stdin:
    command = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.chdir(command["cwd"])
            os.environ.clear()
            os.environ.update(command["env"])
            _, _, module, *args = command["argv"]  # python -m MODULE ARGS
            sys.argv = [module, *args]
            code = 0
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


@contextmanager
def preloaded_server() -> Iterator[Callable[..., tuple[int, dict | None]]]:
    """A started server and its ``run_suite(cmd, json_path, *, quiet=True)``; the server ends
    with the context.

    Raises:
        ValueError: (from the returned function) a run that is not quiet (a child's output
            goes nowhere), or a command other than this interpreter's ``python -m MODULE``.
        RuntimeError: (from the returned function) the server has ended.
    """
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)

    def run_suite(cmd: list[str], json_path: Path, *, quiet: bool = False,
                  errors: list[str] | None = None) -> tuple[int, dict | None]:
        if not quiet or errors is not None:
            raise ValueError("quiet: the preloaded server runs quiet runs only")
        if cmd[:2] != [sys.executable, "-m"]:
            raise ValueError(f"cmd: expected this interpreter's 'python -m MODULE ...', got {cmd[:3]}")
        json_path.unlink(missing_ok=True)
        env = {**os.environ, **runner.PYTEST_ENV}
        server.stdin.write(json.dumps({"argv": cmd, "env": env, "cwd": os.getcwd()}) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        if not answer:
            raise RuntimeError(f"the preloaded server ended (exit {server.wait()})")
        returncode = int(answer)
        if not json_path.exists():
            return returncode, None
        return returncode, json.loads(json_path.read_text())

    try:
        yield run_suite
    finally:
        server.stdin.close()
        server.wait(timeout=60)
