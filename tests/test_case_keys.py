"""Case keys and seeds do not depend on where the suite lives (issues 12 and 13).

A case's seed is ``derive_seed(base, key)`` and its key is built from the test module's
import name, never from a path (``conformance/seeds.py``). Checked here:

* the keys of every collected case equal the committed list (docs/calibration/case-keys.txt,
  written before the layout move), from the checkout root and from another directory, so
  the committed calibration, kill matrix and matrices reproduce; a new case is added to the
  list on purpose;
* every case a committed calibration record names is still collected;
* a few seeds are pinned;
* from a wheel installed non-editable (a venv, another working directory) the keys are the
  same, and one statistical case gives the same p-values as in the checkout.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from conformance.seeds import case_key, derive_seed, module_key

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = ROOT / "docs" / "calibration"
COMMITTED_KEYS = sorted(filter(None, (CALIBRATION / "case-keys.txt").read_text().splitlines()))
LIST_KEYS = """
import sys, pytest
from conformance.plugin import is_suite_item, item_key
class Keys:
    def pytest_collection_finish(self, session):
        for item in session.items:
            if is_suite_item(item):
                print("KEY", item_key(item))
sys.exit(pytest.main(["--co", "-q", "-p", "no:cacheprovider", "--pyargs", "conformance.suite"], plugins=[Keys()]))
"""
STAT_CASE = "conformance/test_simulated.py::test_S6_match_expected_law[S6/match-expected/4.7-max6]"


def _keys(python: str, cwd: Path) -> list[str]:
    proc = subprocess.run([python, "-c", LIST_KEYS], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return sorted(line[4:] for line in proc.stdout.splitlines() if line.startswith("KEY "))


def test_module_key_uses_the_import_name_only():
    assert module_key("conformance.suite.test_verify") == module_key("conformance.test_verify") \
        == "conformance/test_verify.py"
    assert case_key("conformance.suite.test_x", "test_S3_a[b/c]") == "conformance/test_x.py::test_S3_a[b/c]"
    for bad in ("", "a..b", "conformance/test_x.py"):
        with pytest.raises(ValueError, match="module_name"):
            module_key(bad)
    with pytest.raises(ValueError, match="test_name"):
        case_key("conformance.test_x", "")


def test_pinned_seeds():
    # int.from_bytes(hashlib.blake2b(f"{base}\0{key}".encode(), digest_size=8).digest(), "big") >> 1,
    # computed with hashlib alone.
    assert derive_seed(20260, "conformance/test_sampling.py::test_S3_greedy_ties[S3/greedy/ties-StepSampler]") \
        == 7098433576606060907
    assert derive_seed(1, STAT_CASE) == 4426855338381372834
    assert derive_seed(0, "S3/race/uniform") == 1205360600513370085


@pytest.mark.parametrize("where", ["root", "elsewhere"])
def test_collected_keys_equal_the_committed_list(where, tmp_path):
    keys = _keys(sys.executable, ROOT if where == "root" else tmp_path)
    assert keys == COMMITTED_KEYS, (
        f"added: {sorted(set(keys) - set(COMMITTED_KEYS))[:5]}, gone: {sorted(set(COMMITTED_KEYS) - set(keys))[:5]}; "
        "a moved test must keep its key; a new case is appended to docs/calibration/case-keys.txt")


def test_committed_calibration_names_only_collected_cases():
    named = set()
    with gzip.open(CALIBRATION / "runs.jsonl.gz", "rt") as f:
        for line in f:
            named.update(json.loads(line).get("tests", {}))
    assert named and named <= set(COMMITTED_KEYS), sorted(named - set(COMMITTED_KEYS))[:5]


def _stat_pvalues(cli: list[str], cwd: Path, report: Path) -> list[float]:
    proc = subprocess.run([*cli, "run", "--workers", "0", "--seed", "1", "--case", STAT_CASE, "--report", str(report)],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    tests = json.loads((report / "results.json").read_text())["tests"]
    assert [t["case"] for t in tests] == [STAT_CASE]
    return [s["p_value"] for s in tests[0]["stats"]]


@pytest.mark.slow
def _lend_site_packages(python: str) -> None:
    """Put this interpreter's site-packages on the path of the venv of ``python``, after its
    own: ``system_site_packages`` lends the base interpreter's, which lacks this venv's torch.
    Plain path lines, so the editable install's hooks there stay off (``fixtures`` and the
    checkout's ``conformance`` stay unimportable) and the wheel's copy comes first."""
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    lent = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(own, "_lent_by_the_test.pth").write_text("".join(f"{path}\n" for path in sorted(lent)))


def test_an_installed_wheel_has_the_same_keys_and_seeds(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                    "-w", str(wheels)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("dspark_conformance-*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    if sys.prefix != sys.base_prefix:  # this pytest runs in a venv: lend its packages (torch) too
        _lend_site_packages(python)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    where = subprocess.run([python, "-c", "import conformance, sys; print(conformance.__file__)"], cwd=elsewhere,
                           capture_output=True, text=True, check=True).stdout
    assert str(env_dir) in where, where  # the wheel's copy, not the checkout's
    assert subprocess.run([python, "-c", "import fixtures.mutants"], cwd=elsewhere,
                          capture_output=True).returncode != 0  # fixtures is not installed
    assert _keys(python, elsewhere) == COMMITTED_KEYS
    installed = _stat_pvalues([python, "-m", "conformance.cli"], elsewhere, tmp_path / "installed")
    checkout = _stat_pvalues([sys.executable, "-m", "conformance.cli"], ROOT, tmp_path / "checkout")
    assert installed == checkout and installed
