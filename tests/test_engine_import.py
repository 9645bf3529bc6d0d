"""Tests of ``conformance.adapters.engine_import``: bare packages, stubs, the finder."""

import sys

import pytest

from conformance.adapters.engine_import import StubCalled, Stubs, WheelFinder, install_finder, is_stub

STUBS = Stubs("the toy engine", lambda module: f"why {module}")


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """A toy wheel ``toyeng`` whose package ``__init__`` would fail if it ran."""
    pkg = tmp_path / "toyeng" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "toyeng" / "__init__.py").write_text("raise RuntimeError('the engine ran')\n")
    (pkg / "__init__.py").write_text("raise RuntimeError('the engine ran')\n")
    (pkg / "kernel.py").write_text("from toyeng.server import Scheduler\nVALUE = 7\n")
    finder = WheelFinder("toyeng", str(tmp_path), STUBS,
                         lambda name, path: {"PORT": 1} if name == "toyeng.server" else None)
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    yield finder
    for name in [n for n in sys.modules if n == "toyeng" or n.startswith("toyeng.")]:
        del sys.modules[name]


def test_packages_are_bare_and_modules_real(wheel):
    from toyeng.sub import kernel

    assert kernel.VALUE == 7
    assert not hasattr(sys.modules["toyeng"], "__file__")  # no __init__ ran


def test_stub_keeps_values_and_placeholders_raise_with_the_reason(wheel):
    from toyeng import server
    from toyeng.sub import kernel

    assert server.PORT == 1 and is_stub(server) and not is_stub(kernel)
    with pytest.raises(StubCalled, match=r"toyeng\.server\.Scheduler is a stub of a module the toy engine "
                                         r"provides \(why toyeng\.server\)"):
        kernel.Scheduler()


def test_plain_package_runs_its_own_init_and_others_stay_bare(tmp_path, monkeypatch):
    helpers = tmp_path / "toyeng" / "helpers"
    helpers.mkdir(parents=True)
    (tmp_path / "toyeng" / "__init__.py").write_text("raise RuntimeError('the engine ran')\n")
    (helpers / "__init__.py").write_text("def random_uuid():\n    return 'u'\n")
    (helpers / "more.py").write_text("from toyeng.helpers import random_uuid\nVALUE = random_uuid()\n")
    finder = WheelFinder("toyeng", str(tmp_path), STUBS, lambda name, path: None, plain_packages={"toyeng.helpers"})
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    try:
        from toyeng.helpers import more

        assert more.VALUE == "u" and sys.modules["toyeng.helpers"].__file__.endswith("__init__.py")
        assert not hasattr(sys.modules["toyeng"], "__file__")  # the top package's __init__ never ran
    finally:
        for name in [n for n in sys.modules if n == "toyeng" or n.startswith("toyeng.")]:
            del sys.modules[name]


def test_strict_stub_has_only_its_names():
    stub = STUBS.module("x.y", {"a": 1}, strict=True)
    assert stub.a == 1
    with pytest.raises(AttributeError, match="'x.y' has no attribute 'b'"):
        stub.b  # noqa: B018


def test_install_finder_once_per_package(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    first, second = (WheelFinder("toyeng", "/nowhere", STUBS, lambda n, p: None) for _ in range(2))
    install_finder(first)
    install_finder(second)
    install_finder(WheelFinder("other", "/nowhere", STUBS, lambda n, p: None))
    assert sum(isinstance(f, WheelFinder) and f.package == "toyeng" for f in sys.meta_path) == 1
    assert sys.meta_path[1] is first
