"""A pytest plugin for the interrupt tests (``-p tests.interrupted_teardown``): a SIGINT that
lands in pytest's session teardown, where xdist tears down its workers. Registered at the end
of configuration, so that its ``pytest_sessionfinish`` is called before the suite's plain
implementations (pluggy calls the last registered first)."""

import pytest


class _InterruptedTeardown:
    def pytest_sessionfinish(self):
        raise KeyboardInterrupt


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.pluginmanager.register(_InterruptedTeardown(), "interrupted_teardown")
