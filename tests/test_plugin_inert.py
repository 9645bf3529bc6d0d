"""The installed plugin is inert in a foreign project (issue 12, STYLE 12).

A project that collects none of the suite's tests runs identically with and without the
plugin: nothing skipped (a folder named ``gpu`` is no marker of ours), no adapter, torch or
suite module imported, hypothesis's own default profile untouched, and no measurable cost
(the cheapest of several runs, in CPU seconds of the pytest process, within 0.3 s of the
cheapest without the plugin). CPU time, not wall time: under CI's load (two xdist workers on
two cores) wall time waits on the other worker, and the fastest of five wall-clock runs was
0.33 s apart with a plugin whose import costs 11 ms (``python -X importtime``). The costs a
plugin can add are CPU work (importing torch alone is over a second of it).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

FOREIGN_GPU_TEST = """
import sys

def test_plain_in_a_gpu_folder():
    assert True

def test_the_suite_was_not_imported():
    loaded = [m for m in ("torch", "dspark_ref", "conformance.contract", "conformance.loading") if m in sys.modules]
    assert loaded == []
"""
FOREIGN_HYPOTHESIS_TEST = """
import os
from hypothesis import given, settings, strategies as st

def test_hypothesis_default_profile():
    # Hypothesis picks its own "ci" profile where a CI variable is set; whichever it picked,
    # the run with the plugin must see the same one as the run without.
    with open(os.environ["FOREIGN_PROFILE_OUT"], "w") as out:
        out.write(repr(settings.default))

@given(st.integers())
def test_any_integer(x):
    assert isinstance(x, int)
"""
NO_PLUGIN = ("-p", "no:dspark_conformance")
RUNS = 5
MAX_OVERHEAD_S = 0.3


@pytest.fixture
def foreign(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(**{"tests/gpu/test_kernels": FOREIGN_GPU_TEST, "tests/test_props": FOREIGN_HYPOTHESIS_TEST})
    return pytester


def _outcomes(pytester: pytest.Pytester, *args: str) -> dict[str, int]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "tests", *args)
    return result.parseoutcomes()


def _profile(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    out = pytester.path / "profile.txt"
    monkeypatch.setenv("FOREIGN_PROFILE_OUT", str(out))
    assert _outcomes(pytester, *args) == {"passed": 4}
    return out.read_text()


def test_the_plugin_is_installed_here(pytester: pytest.Pytester):
    # Its options exist in a run that asks for the suite (one --dspark- option does), in no other.
    assert "--dspark-impl" in pytester.runpytest_subprocess("--dspark-device=cpu", "--help").stdout.str()
    assert "--dspark-impl" not in pytester.runpytest_subprocess("--help").stdout.str()
    assert "--dspark-impl" not in pytester.runpytest_subprocess("--dspark-device=cpu", "--help", *NO_PLUGIN).stdout.str()


def test_a_foreign_run_is_the_same_with_and_without_the_plugin(foreign, monkeypatch):
    with_plugin, without = _profile(foreign, monkeypatch), _profile(foreign, monkeypatch, *NO_PLUGIN)
    assert with_plugin == without


def test_a_foreign_run_costs_no_measurable_time(foreign, monkeypatch):
    monkeypatch.setenv("FOREIGN_PROFILE_OUT", str(foreign.path / "profile.txt"))

    def cpu_seconds(*args: str) -> float:
        """User + system CPU seconds of one pytest subprocess (waited for, so a child)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert _outcomes(foreign, *args) == {"passed": 4}
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    # Interleaved, so that contention from elsewhere on the machine hits both alike; the
    # cheapest run of each is the least disturbed.
    runs = [(cpu_seconds(), cpu_seconds(*NO_PLUGIN)) for _ in range(RUNS)]
    with_plugin, without = min(r[0] for r in runs), min(r[1] for r in runs)
    assert with_plugin - without < MAX_OVERHEAD_S, f"{with_plugin:.2f} CPU s with the plugin, {without:.2f} without"


def test_the_suites_markers_stay_out_of_a_foreign_strict_run(pytester: pytest.Pytester):
    """The generic names the suite marks its cases with (gpu, slow, statistical, ...) are
    registered by the suite's own conftest, not the plugin: a foreign --strict-markers run
    still rejects them, as it would without the package installed."""
    pytester.makepyfile(test_marked="import pytest\n\n@pytest.mark.slow\ndef test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*'slow' not found in `markers` configuration option*"])
    assert "latency_bound" not in pytester.runpytest_subprocess("--markers").stdout.str()


def test_the_suite_collects_under_strict_markers(pytester: pytest.Pytester):
    from conformance.runner import PACKAGE_PARENT, SUITE_DIR

    result = pytester.runpytest_subprocess(str(SUITE_DIR / "test_simulated.py"), "-c", os.devnull,
                                           f"--rootdir={PACKAGE_PARENT}", "--strict-markers", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]


FOREIGN_OWN_PACKAGE_TEST = """
import conformance

def test_its_own_conformance_package():
    assert conformance.OURS
"""


def test_a_project_with_its_own_conformance_package_runs_without_the_plugin(pytester: pytest.Pytester):
    # pytester runs `python -m pytest` in the project, whose directory comes first on sys.path:
    # its own `conformance` shadows the suite's, which once stopped the whole run at the
    # plugin's import ("No module named 'conformance.plugin'").
    pytester.makepyfile(**{"conformance/__init__": "OURS = True\n", "tests/test_own": FOREIGN_OWN_PACKAGE_TEST})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "tests")
    result.assert_outcomes(passed=1)
    # Asked for the suite there, the run stops at once and names the package in the way.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dspark-impl=reference", "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*dspark-conformance: *conformance is imported as 'conformance' in place of the suite's*"])


FOREIGN_CONFTEST = "from conformance.helpers import double\n"
FOREIGN_FIXTURE_TEST = """
from conformance.helpers import double

def test_own_helper():
    assert double(2) == 4

def test_asks_for_a_fixture_it_never_defined(case_seed):
    pass
"""


def test_the_console_script_in_a_project_with_its_own_conformance_imports_the_projects(pytester: pytest.Pytester):
    # Trial of session 20: the `pytest` console script does not put the project's directory on
    # sys.path before plugins load, so the entry point imported the suite's `conformance` first
    # and the project's root conftest (`from conformance.helpers import ...`) failed to import;
    # and a test asking for an undefined `case_seed` got the suite's fixture.
    pytester.makepyfile(**{"conformance/__init__": "", "conformance/helpers": "def double(x):\n    return 2 * x\n",
                           "conftest": FOREIGN_CONFTEST, "tests/test_own": FOREIGN_FIXTURE_TEST})
    # As the `pytest` script runs: not pytester.run, whose PYTHONPATH starts with the project.
    console = "import sys, pytest; sys.path.pop(0); sys.exit(pytest.console_main())"
    proc = subprocess.run([sys.executable, "-c", console, "-p", "no:cacheprovider", "tests"], cwd=pytester.path,
                          capture_output=True, text=True)
    assert "1 passed, 1 error" in proc.stdout and "fixture 'case_seed' not found" in proc.stdout, proc.stdout


def test_shadowing_package_tells_a_foreign_conformance_from_the_suites(tmp_path):
    from dspark_conformance_plugin import SUITE_PACKAGE, shadowing_package

    foreign, module, namespace, checkout = (tmp_path / name for name in ("foreign", "module", "namespace", "checkout"))
    (foreign / "conformance").mkdir(parents=True)
    (foreign / "conformance" / "__init__.py").write_text("")
    module.mkdir()
    (module / "conformance.py").write_text("")
    (namespace / "conformance").mkdir(parents=True)  # no __init__.py: a regular package elsewhere wins
    (checkout / "conformance" / "suite").mkdir(parents=True)  # another copy of the suite
    for name in ("__init__.py", "plugin.py"):
        (checkout / "conformance" / name).write_text("")
    assert shadowing_package([str(foreign)]) == (foreign / "conformance").resolve()
    assert shadowing_package([str(module)]) == (module / "conformance.py").resolve()
    assert shadowing_package([str(namespace)]) is None
    assert shadowing_package([str(checkout)]) is None
    assert shadowing_package([str(tmp_path)]) is None
    assert shadowing_package([str(SUITE_PACKAGE.parent)]) is None
    assert shadowing_package() is None  # this run imports the suite's own


def test_a_run_asks_for_the_suite_only_by_its_options_paths_or_module_names(tmp_path):
    from dspark_conformance_plugin import SUITE_PACKAGE, asks_for_the_suite

    assert asks_for_the_suite(["--dspark-impl=reference"]) and asks_for_the_suite(["-q", "--dspark-device", "cuda"])
    assert asks_for_the_suite([str(SUITE_PACKAGE / "suite" / "test_verify_rule.py") + "::test_S5_x"])
    assert asks_for_the_suite(["--pyargs", "conformance.suite.test_verify_rule"])
    assert not asks_for_the_suite(["tests", "-k", "conformance and not slow", "-p", "no:cacheprovider"])
    assert not asks_for_the_suite([str(tmp_path / "conformance" / "suite"), "-k", "nul\0byte", "x" * 5000])
