"""A pytest plugin for the interrupt tests (``-p tests.stalling_case``): in an xdist worker,
every case first touches ``$DSPARK_STALL_FILE``, then computes for ``STALL_S`` seconds, as a
long statistical case holds its worker (in torch, in short calls)."""

import os
import time
from pathlib import Path

import torch

STALL_S = 600


def pytest_runtest_call(item):
    if hasattr(item.config, "workerinput"):
        Path(os.environ["DSPARK_STALL_FILE"]).touch()
        end = time.monotonic() + STALL_S
        x = torch.ones(256, 256)
        while time.monotonic() < end:
            x = torch.tanh(x @ x)
