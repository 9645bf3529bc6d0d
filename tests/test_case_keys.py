"""Case identity and seeds (issues 12, 13 and 41, STYLE 16): a case is its case id.

A case's seed is ``seed_of_case(base, case id)``: ``derive_seed(base, legacy key)`` for the
cases of the frozen table (``conformance/legacy_case_keys.json``), ``derive_seed(base, case
id)`` for newer ones (``conformance/seeds.py``). Checked here:

* the table holds exactly the committed legacy keys (results/calibration/case-keys.txt, written
  before the layout move, the keys committed calibrations name), and every case of a fresh
  collection, from the checkout root and from another directory, has the seed of its legacy
  key for several base seeds (bit for bit), a newer case that of its case id;
* every case a committed calibration record names is still collected;
* a few seeds are pinned;
* a test moved to another module (and renamed) keeps its seed; a duplicate case id and a
  suite test without a case are collection errors; ``--dspark-case`` selects by case id and,
  deprecated, by legacy key, and suggests the closest case id (pytester, on a copy of the
  package whose suite holds only the test modules written here);
* from a wheel installed non-editable (a venv, another working directory) the case ids and
  seeds are the same, and one statistical case gives the same p-values as in the checkout.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.seeds import LEGACY_TABLE, derive_seed, legacy_key, legacy_keys, resolve_case, seed_of_case

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = ROOT / "results" / "calibration"
COMMITTED_KEYS = sorted(filter(None, (CALIBRATION / "case-keys.txt").read_text().splitlines()))
#: The committed keys by case id, read from the list itself (independent of the JSON table).
COMMITTED_BY_ID = {re.fullmatch(r".*\[(.+)\]", key)[1]: key for key in COMMITTED_KEYS}
BASE_SEEDS = (0, 1, 20260, 2**64 - 1)
LIST_CASES = f"""
import sys, pytest
from conformance.plugin import is_suite_item, item_case_id
from conformance.seeds import legacy_key, seed_of_case
class Cases:
    def pytest_collection_finish(self, session):
        for item in session.items:
            if is_suite_item(item):
                case_id = item_case_id(item)
                seeds = [seed_of_case(base, case_id) for base in {BASE_SEEDS}]
                print("CASE", case_id, legacy_key(item.module.__name__, item.name), *seeds, sep="\\t")
sys.exit(pytest.main(["--co", "-q", "-p", "no:cacheprovider", "--pyargs", "conformance.suite"], plugins=[Cases()]))
"""
STAT_CASE = "S6/match-expected/4.7-max6"
STAT_LEGACY_KEY = "conformance/test_simulated.py::test_S6_match_expected_law[S6/match-expected/4.7-max6]"


def _installed_env() -> dict[str, str]:
    """This process's environment less ``PYTHONPATH``: a checkout on it would be imported ahead
    of an installed wheel (``python -m bench verdict`` runs the test command with the side's
    checkout there)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _cases(python: str, cwd: Path, pythonpath: Path | None = None) -> list[tuple[str, str, list[int]]]:
    """``(case id, legacy key from where the test sits, [seed per BASE_SEEDS])`` of a fresh collection
    (``pythonpath``: the checkout to import, not an installed copy)."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)} if pythonpath else _installed_env()
    proc = subprocess.run([python, "-c", LIST_CASES], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [line.split("\t")[1:] for line in proc.stdout.splitlines() if line.startswith("CASE\t")]
    return sorted((case_id, key, [int(s) for s in seeds]) for case_id, key, *seeds in rows)


def test_legacy_key_uses_the_import_name_only():
    assert legacy_key("conformance.suite.test_verify", "test_S3_a[b/c]") == legacy_key("conformance.test_verify",
                                                                                        "test_S3_a[b/c]") \
        == "conformance/test_verify.py::test_S3_a[b/c]"
    for bad in ("", "a..b", "conformance/test_x.py"):
        with pytest.raises(ValueError, match="module_name"):
            legacy_key(bad, "test_x")
    with pytest.raises(ValueError, match="test_name"):
        legacy_key("conformance.test_x", "")


def test_pinned_seeds():
    # int.from_bytes(hashlib.blake2b(f"{base}\0{key}".encode(), digest_size=8).digest(), "big") >> 1,
    # computed with hashlib alone.
    assert derive_seed(20260, "conformance/test_sampling.py::test_S3_greedy_ties[S3/greedy/ties-StepSampler]") \
        == 7098433576606060907
    assert derive_seed(1, STAT_LEGACY_KEY) == 4426855338381372834
    assert derive_seed(0, "S3/race/uniform") == 1205360600513370085
    # A case of the table keeps its legacy key's seed; any other case id is seeded by itself.
    assert seed_of_case(20260, "S3/greedy/ties-StepSampler") == 7098433576606060907
    assert seed_of_case(1, STAT_CASE) == 4426855338381372834
    assert seed_of_case(0, "S3/race/uniform") == 1205360600513370085


def test_the_table_holds_the_committed_legacy_keys():
    assert dict(legacy_keys()) == COMMITTED_BY_ID and len(COMMITTED_BY_ID) == len(COMMITTED_KEYS) == 332


def test_resolve_case_maps_a_legacy_key_to_its_case_id():
    assert resolve_case(STAT_LEGACY_KEY) == (STAT_CASE, True)
    assert resolve_case(STAT_CASE) == (STAT_CASE, False)
    assert resolve_case("S9/not/in-the-table") == ("S9/not/in-the-table", False)
    with pytest.raises(ValueError, match="^name:"):
        resolve_case("")


@pytest.fixture(scope="module")
def checkout_cases() -> list[tuple[str, str, list[int]]]:
    """:func:`_cases` of the checkout, collected from its root (once: the wheel's test compares with it)."""
    return _cases(sys.executable, ROOT, ROOT)


@pytest.mark.parametrize("where", ["root", "elsewhere"])
def test_every_collected_case_keeps_the_seed_of_its_legacy_key(where, tmp_path, request):
    cases = request.getfixturevalue("checkout_cases") if where == "root" else _cases(sys.executable, tmp_path, ROOT)
    ids = [case_id for case_id, _, _ in cases]
    assert len(ids) == len(set(ids)), "a duplicate case id must be a collection error"
    assert set(COMMITTED_BY_ID) <= set(ids), (
        f"gone: {sorted(set(COMMITTED_BY_ID) - set(ids))[:5]}: a case id of the legacy table must stay collected "
        "(a renamed case id changes its seed)")
    for case_id, fresh_key, seeds in cases:
        assert seeds == [derive_seed(base, COMMITTED_BY_ID.get(case_id, case_id)) for base in BASE_SEEDS], case_id
        if fresh_key in COMMITTED_BY_ID.values():  # the test still sits where its legacy key says
            assert seeds == [derive_seed(base, fresh_key) for base in BASE_SEEDS], fresh_key


def test_committed_calibration_names_only_collected_cases():
    named = set()
    with gzip.open(CALIBRATION / "runs.jsonl.gz", "rt") as f:
        for line in f:
            named.update(json.loads(line).get("tests", {}))
    assert named and named <= set(COMMITTED_KEYS), sorted(named - set(COMMITTED_KEYS))[:5]


# ----------------------------------------------------------------------------- moved, duplicate, --case
SHARED_CASES = """
from conformance.cases import case

NEW = case("S6/moved/new-case", "a case newer than the legacy table", ["S6.match-expected"])
LEGACY = case("S6/match-expected/4.7-max6", "a case of the legacy table", ["S6.match-expected"])
"""
SEEDED_TEST = """
import pytest
from conformance.cases import case_id
from conformance.suite.support.moved_cases import NEW, LEGACY

@pytest.mark.parametrize("case", [NEW, LEGACY], ids=case_id)
def {name}(case, case_seed):
    print(f"SEED {{case.id}} {{case_seed}}")
"""


@pytest.fixture
def suite_copy(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A copy of the ``conformance`` package, first on the path, whose suite holds no test
    module: the tests write theirs (real suite modules, ``conformance.suite.test_*``)."""
    def no_suite_tests(folder: str, names: list[str]) -> list[str]:
        here = Path(folder) == ROOT / "conformance" / "suite"
        return [n for n in names if n == "__pycache__" or (here and n.startswith("test_"))]

    shutil.copytree(ROOT / "conformance", pytester.path / "conformance", ignore=no_suite_tests)
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")  # registers the plugin
    pytester.makepyfile(**{"conformance/suite/support/moved_cases": SHARED_CASES})
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path), str(ROOT)]))
    # As the suite's runner runs it (conformance/runner.py): no plugin of this environment but
    # the suite's (here from the conftest); hypothesis alone costs ~2 s a run.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return pytester


def _seeds(pytester: pytest.Pytester, *args: str) -> dict[str, int]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "--dspark-seed=7", "conformance/suite",
                                           *args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:] + result.stderr.str()[-3000:]
    return {case_id: int(seed) for case_id, seed in re.findall(r"SEED (\S+) (\d+)", result.stdout.str())}


def test_a_case_moved_to_another_module_keeps_its_seed(suite_copy):
    suite = suite_copy.path / "conformance" / "suite"
    (suite / "test_before.py").write_text(SEEDED_TEST.format(name="test_S6_probe"))
    before = _seeds(suite_copy)
    (suite / "test_before.py").unlink()
    (suite / "test_after_the_move.py").write_text(SEEDED_TEST.format(name="test_S6_probe_renamed"))
    after = _seeds(suite_copy)
    assert before == after == {"S6/moved/new-case": derive_seed(7, "S6/moved/new-case"),
                               STAT_CASE: derive_seed(7, STAT_LEGACY_KEY)}


def test_a_duplicate_case_id_is_a_collection_error_naming_both_tests(suite_copy):
    suite = suite_copy.path / "conformance" / "suite"
    (suite / "test_one.py").write_text(SEEDED_TEST.format(name="test_S6_first"))
    (suite / "test_two.py").write_text(SEEDED_TEST.format(name="test_S6_second"))
    result = suite_copy.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "conformance/suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-3000:]
    result.stderr.fnmatch_lines([
        "*case id 'S6/moved/new-case' is used by two tests, conformance/suite/test_one.py::test_S6_first"
        "[[]S6/moved/new-case[]] and conformance/suite/test_two.py::test_S6_second[[]S6/moved/new-case[]]*"])


def test_a_suite_test_without_a_case_is_a_collection_error(suite_copy):
    (suite_copy.path / "conformance" / "suite" / "test_plain.py").write_text("def test_S6_plain():\n    pass\n")
    result = suite_copy.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "conformance/suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-3000:]
    result.stderr.fnmatch_lines(["*conformance/suite/test_plain.py::test_S6_plain: a suite test is parametrized by a "
                                 "conformance.cases.Case*"])


def test_case_selects_by_case_id_and_by_legacy_key(suite_copy):
    (suite_copy.path / "conformance" / "suite" / "test_moved.py").write_text(SEEDED_TEST.format(name="test_S6_x"))

    def run(*names: str) -> pytest.RunResult:
        return suite_copy.runpytest_subprocess("-p", "no:cacheprovider", "-s", "--dspark-seed=7", "conformance/suite",
                                               "--junitxml=junit.xml", "--dspark-report-json=results.json",
                                               *(f"--dspark-case={name}" for name in names))

    for name in (STAT_CASE, STAT_LEGACY_KEY):
        result = run(name)
        result.assert_outcomes(passed=1, deselected=1)
        assert re.findall(r"SEED \S+ \d+", result.stdout.str()) == [f"SEED {STAT_CASE} {derive_seed(7, STAT_LEGACY_KEY)}"]
        deprecated = f"--dspark-case {STAT_LEGACY_KEY!r}: keys with a module and test name are deprecated"
        assert (deprecated in result.stdout.str()) == (name == STAT_LEGACY_KEY), result.stdout.str()
        # Reports name the case by its case id: results.json, its replay line, junit's property.
        [record] = json.loads((suite_copy.path / "results.json").read_text())["tests"]
        assert (record["case"], record["section"]) == (STAT_CASE, "S6")
        assert record["replay"].endswith(f"--seed 7 --case {STAT_CASE}")
        props = [p.get("value") for p in ET.parse(suite_copy.path / "junit.xml").iter("property")
                 if p.get("name") == "dspark_case"]
        assert props == [STAT_CASE]
    result = run("S6/moved/new-cas")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no collected case has the case id 'S6/moved/new-cas'; did you mean "
                                 "'S6/moved/new-case'?*"])
    result = run("conformance/suite/test_moved.py::test_S6_x[S6/moved/new-case]")  # a pytest node id
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*did you mean 'S6/moved/new-case'?*"])


def test_the_table_tool_refuses_to_rewrite_the_frozen_table():
    proc = subprocess.run([sys.executable, "-m", "conformance.seed_table", "--write"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "frozen" in proc.stderr, proc.stdout + proc.stderr
    assert LEGACY_TABLE.exists()


#: The wheel's statistical case runs at this factor on its sample sizes: equal p-values need the
#: same seeds and draws, not the power of the full budget (about 1,240 draws instead of 124,000).
STAT_BUDGET = "0.01"


def _stat_pvalues(cli: list[str], cwd: Path, report: Path) -> list[float]:
    proc = subprocess.run([*cli, "run", "--workers", "0", "--seed", "1", "--case", STAT_CASE, "--budget", STAT_BUDGET,
                           "--report", str(report)], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=_installed_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    tests = json.loads((report / "results.json").read_text())["tests"]
    assert [t["case"] for t in tests] == [STAT_CASE]
    return [s["p_value"] for s in tests[0]["stats"]]


def _lend_site_packages(python: str) -> None:
    """Put this interpreter's site-packages on the path of the venv of ``python``, after its
    own: ``system_site_packages`` lends the base interpreter's, which lacks this venv's torch.
    Plain path lines, so the editable install's hooks there stay off (``fixtures`` and the
    checkout's ``conformance`` stay unimportable) and the wheel's copy comes first."""
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    lent = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(own, "_lent_by_the_test.pth").write_text("".join(f"{path}\n" for path in sorted(lent)))


@pytest.mark.slow
def test_an_installed_wheel_has_the_same_case_ids_and_seeds(tmp_path, checkout_cases):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                    "-w", str(wheels)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("dspark_conformance-*.whl")
    env_dir = tmp_path / "venv"
    # No pip of its own (ensurepip takes ~10 s): this interpreter's pip installs into it (pip --python).
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    if sys.prefix != sys.base_prefix:  # this pytest runs in a venv: lend its packages (torch) too
        _lend_site_packages(python)
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=300, env=_installed_env())
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    where = subprocess.run([python, "-c", "import conformance, sys; print(conformance.__file__)"], cwd=elsewhere,
                           capture_output=True, text=True, check=True, env=_installed_env()).stdout
    assert str(env_dir) in where, where  # the wheel's copy, not the checkout's
    assert subprocess.run([python, "-c", "import fixtures.mutants"], cwd=elsewhere, capture_output=True,
                          env=_installed_env()).returncode != 0  # fixtures is not installed
    assert _cases(python, elsewhere) == checkout_cases
    installed = _stat_pvalues([python, "-m", "conformance.cli"], elsewhere, tmp_path / "installed")
    checkout = _stat_pvalues([sys.executable, "-m", "conformance.cli"], ROOT, tmp_path / "checkout")
    assert installed == checkout and installed
