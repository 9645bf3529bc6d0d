"""A pytest plugin for the scheduling tests (``-p tests.timeline_plugin --timeline=FILE``): each
xdist worker appends to FILE a line as each item starts and ends, and as the worker stops:
``<unix time> <worker id> start|end|stop <node id>``."""

import os
import time

import pytest


def pytest_addoption(parser):
    parser.addoption("--timeline", default=None, help="append the items' start and end times here")


def _log(config, event: str, nodeid: str = "-") -> None:
    path = config.getoption("--timeline")
    worker = getattr(config, "workerinput", {}).get("workerid")
    if path and worker:
        with open(path, "a") as log:  # one short write a line: whole lines from concurrent workers
            log.write(f"{time.time():.6f} {worker} {event} {nodeid}\n")
            log.flush()
            os.fsync(log.fileno())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _log(item.config, "start", item.nodeid)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    _log(item.config, "end", item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):  # before xdist's worker tells the controller it has finished
    _log(session.config, "stop")
