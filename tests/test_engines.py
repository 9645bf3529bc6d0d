"""The drift check (``dspark-conformance engines``, ``conformance.drift``): release choice,
the table, and the whole path -- pip's resolution, the install into a scratch directory, the
load check and the CPU gate subprocess -- against a local package index of toy wheels (no
network: ``PIP_NO_INDEX`` and ``PIP_FIND_LINKS``).

The toy engine ``toy-dspark-engine`` ships its own adapter (``toy_dspark_engine.adapter``)
offering the reference's ``MarkovBlock``: 1.0.0 is correct, 1.1.0 (the newest final release)
drops the Markov bias, 0.9.0's adapter does not load, 1.2.0rc1 is a pre-release (pip leaves it
out). The engine imports ``toy_dspark_extra``, which only its ``INSTALL_EXTRAS`` installs.
"""

import base64
import hashlib
import json
import shlex
import tempfile
import zipfile
from pathlib import Path

import pytest

from conformance import cli, drift
from conformance.drift import gate, index, table

#: The gate's selection in these tests: a few S2 cases, enough for PASS / FAIL, in seconds.
QUICK_GATE = ("-m", "not statistical", "-k", "test_S2_teacher_forcing and vanilla or test_S2_gamma_zero")

ADAPTER = '''
from importlib.metadata import version

import toy_dspark_extra  # noqa: F401 - the engine's extra, which only INSTALL_EXTRAS installs
from conformance import contract as c
from conformance.adapters import reference
from conformance.loading import AdapterLoadError


class NoBias(reference.MarkovBlock):
    def apply_block_logits(self, head, base_logits, token_ids, hidden):
        return base_logits.clone()


def make_adapter():
    release = version("toy-dspark-engine")
    if release == "0.9.0":
        raise AdapterLoadError("toy-dspark-engine 0.9.0: no DSpark module in this release\\nsecond line")
    block = NoBias() if release == "1.1.0" else reference.MarkovBlock()
    return c.Adapter(f"toy-engine=={release}", c.Conventions(), {c.MarkovBlock: block})
'''


def _wheel(folder: Path, distribution: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of ``files`` (path -> text), with its metadata and RECORD."""
    stem = f"{distribution.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
            archive.writestr(name, data)
        archive.writestr(f"{info}/RECORD", "\n".join(record + [f"{info}/RECORD,,"]) + "\n")
    return path


ENGINE_FILES = {"toy_dspark_engine/__init__.py": "import toy_dspark_extra  # noqa: F401\n",
                "toy_dspark_engine/adapter.py": ADAPTER}


@pytest.fixture
def toy_index(tmp_path, monkeypatch):
    """A local package index (pip's ``--find-links``) with the toy engine's releases and its
    extra, the only index pip sees; and the toy engine's registry record."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for release in ("0.9.0", "1.0.0", "1.1.0", "1.2.0rc1"):
        _wheel(wheels, "toy-dspark-engine", release, ENGINE_FILES)
    _wheel(wheels, "toy-dspark-extra", "1.0", {"toy_dspark_extra/__init__.py": ""})
    for name, value in {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_CONFIG_FILE": "/dev/null",
                        "PIP_DISABLE_PIP_VERSION_CHECK": "1"}.items():
        monkeypatch.setenv(name, value)
    extras = tmp_path / "registry"
    extras.mkdir()
    (extras / "toy_engine_extras.py").write_text('INSTALL_EXTRAS = ("toy-dspark-extra",)\n')
    monkeypatch.syspath_prepend(str(extras))
    return drift.Engine("toy", "toy-dspark-engine", "toy_dspark_engine.adapter:make_adapter",
                        "toy_engine_extras:INSTALL_EXTRAS")


def _check(engine, tmp_path, **options):
    options = {"pins": {}, "paths": {}, **options}
    return drift.check_engines([engine], report_dir=tmp_path / "report", workers="0", pytest_args=QUICK_GATE,
                               **options)


# ------------------------------------------------------------------ end to end, on the toy index
def test_newest_release_is_pips_choice_and_its_failures_are_listed(toy_index, tmp_path):
    assert index.newest_release("toy-dspark-engine") == "1.1.0"  # 1.2.0rc1 is a pre-release
    [result] = _check(toy_index, tmp_path)
    assert (result.release, result.origin, result.loads) == ("1.1.0", "newest on index", True)
    assert result.verdict == "FAIL" and result.exit_code == cli.EXIT_FAIL
    assert result.capabilities == ["MarkovBlock"] and result.unavailable == {}
    assert result.unexplained and all(case.startswith("S2/") for case in result.unexplained)
    payload = json.loads((tmp_path / "report" / "toy-1.1.0" / "results.json").read_text())
    assert payload["impl"] == "toy-engine==1.1.0"


def test_release_whose_adapter_does_not_load_fails_without_a_gate(toy_index, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(drift, "ENGINES", (toy_index,))
    report = tmp_path / "report"
    code = cli.main(["engines", "--release", "toy==0.9.0", "--report", str(report)])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAIL, out
    row = next(line for line in out.splitlines() if line.split()[:3] == ["toy", "0.9.0", "(pinned)"])
    assert row.split()[3] == "no:", out
    assert "no: toy-dspark-engine 0.9.0: no DSpark module in this release " in row  # the adapter's own error
    assert row.split()[-4:] == ["-", "ERROR", "-", str(report / "toy-0.9.0")], out
    record = json.loads((report / table.JSON_FILE).read_text())
    assert record["exit_code"] == cli.EXIT_FAIL
    assert record["engines"][0]["load_error"] == "toy-dspark-engine 0.9.0: no DSpark module in this release"
    assert "| toy | 0.9.0 (pinned) | no: " in (report / table.MARKDOWN_FILE).read_text()
    assert not (report / "toy-0.9.0" / "results.json").exists()  # no gate ran


def test_development_tree_gets_the_extras_and_loads_from_its_path(toy_index, tmp_path):
    tree = tmp_path / "tree"
    with zipfile.ZipFile(next((tmp_path / "wheels").glob("toy_dspark_engine-1.0.0-*.whl"))) as wheel:
        wheel.extractall(tree)  # the package and its dist-info, as a build leaves them
    [result] = _check(toy_index, tmp_path, paths={"toy": tree})
    assert (result.release, result.origin, result.verdict) == (f"path {tree}", "path", "PASS")
    assert "toy-dspark-extra" in (tmp_path / "report" / "toy-path" / gate.INSTALL_LOG).read_text()


def test_release_missing_from_the_index_is_an_install_error(toy_index, tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    [result] = _check(toy_index, tmp_path, pins={"toy": "7.0"})
    assert (result.exit_code, result.verdict, result.loads) == (cli.EXIT_INFRA, "ERROR", None)
    assert result.error.startswith("pip install failed: ERROR: ") and "toy-dspark-engine==7.0" in result.error
    assert "toy-dspark-engine==7.0" in (tmp_path / "report" / "toy-7.0" / gate.INSTALL_LOG).read_text()
    assert list(scratch.iterdir()) == []  # the scratch directory is gone
    lines = []
    _check(toy_index, tmp_path, pins={"toy": "7.0"}, keep=True, log=lines.append)
    [kept] = scratch.iterdir()
    assert lines[-1] == f"scratch directories kept: {kept}"


def test_project_missing_from_the_index_is_an_infrastructure_error(toy_index, tmp_path):
    missing = drift.Engine("ghost", "ghost-dspark-engine", "ghost", "toy_engine_extras:INSTALL_EXTRAS")
    [result] = _check(missing, tmp_path)
    assert (result.exit_code, result.verdict, result.report) == (cli.EXIT_INFRA, "ERROR", "")
    assert "ghost-dspark-engine: pip found no release (ERROR: " in result.error


def test_dry_run_installs_nothing_and_prints_the_commands(toy_index, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(drift, "ENGINES", (toy_index,))
    code = cli.main(["engines", "--dry-run", "--report", str(tmp_path / "report")])
    out = capsys.readouterr().out
    assert code == cli.EXIT_PASS, out
    assert out.splitlines()[0] == "toy 1.1.0 (newest on index)"
    assert "toy-dspark-engine==1.1.0 toy-dspark-extra" in out and "TRITON_INTERPRET=1" in out
    assert "run --impl toy_dspark_engine.adapter:make_adapter --workers 1" in out
    assert not (tmp_path / "report").exists()


# ------------------------------------------------------------------ release choice
def _engine(name="e"):
    return drift.Engine(name, f"{name}-dist", name, "conformance.adapters.speculators:INSTALL_EXTRAS")


def test_release_choice_path_then_pin_then_index():
    engine, asked = _engine(), []
    newest = lambda dist: asked.append(dist) or "2.0"  # noqa: E731
    assert drift.choose_release(engine, pins={}, paths={}, newest=newest).version == "2.0" and asked == ["e-dist"]
    pinned = drift.choose_release(engine, pins={"e": "1.0-rc1"}, paths={}, newest=newest)
    assert (pinned.origin, pinned.version, pinned.label) == ("pinned", "1.0rc1", "1.0rc1")  # normalized
    tree = drift.choose_release(engine, pins={}, paths={"e": Path("/src/e")}, newest=newest)
    assert (tree.origin, tree.version, tree.label) == ("path", None, "path /src/e")
    assert asked == ["e-dist"]  # a pin or a path asks no index
    with pytest.raises(ValueError, match="both --release and --path"):
        drift.choose_release(engine, pins={"e": "1"}, paths={"e": Path("/x")}, newest=newest)
    with pytest.raises(ValueError, match="--release e: expected a PEP 440 version, got 'latest'"):
        drift.choose_release(engine, pins={"e": "latest"}, paths={}, newest=newest)


def test_release_in_pip_report_matches_the_normalized_name():
    report = {"version": "1", "install": [{"metadata": {"name": "Other", "version": "9"}},
                                          {"metadata": {"name": "Toy_Engine", "version": "1.10.0"}}]}
    assert index.release_in_report(report, "toy-engine") == "1.10.0"
    with pytest.raises(index.IndexLookupError, match="names no release of absent"):
        index.release_in_report(report, "absent")


def test_builtin_adapters_check_the_installed_version():
    assert _engine("vllm").impl_for("0.34.0") == "vllm==0.34.0" and _engine("vllm").impl_for(None) == "vllm"
    plugin = drift.Engine("x", "x", "pkg.mod:make", "m:A")
    assert plugin.impl_for("1.0") == "pkg.mod:make"


def test_registry_extras_are_the_adapters_constants():
    assert {e.name: e.install_extras() for e in drift.ENGINES} == {
        "sglang": ("msgspec",), "vllm": ("regex",), "speculators": (), "dspark-mlx": ("mlx", "mlx-cpu"),
        "mlx-dspark": ("mlx", "mlx-cpu")}


# ------------------------------------------------------------------ table and exit code
def _result(**fields):
    base = dict(engine="vllm", release="0.34.0", origin="newest on index", report="r/vllm-0.34.0", exit_code=0,
                verdict="PASS", loads=True, capabilities=["A", "B", "C"])
    return table.EngineResult(**{**base, **fields})


def test_table_names_unavailable_capabilities_load_errors_and_unexplained_failures():
    results = [
        _result(unavailable={"C": "no module named 'regex'"}, cannot_run_here={"B": "cuda only"}),
        _result(engine="sglang", release="0.5.24", report="r/sglang-0.5.24", exit_code=1, verdict="FAIL",
                unexplained=["S5::a", "S5::b"]),
        table.EngineResult("speculators", "1.0", "pinned", "r/s", exit_code=1, loads=False, load_error="no module"),
        table.EngineResult("mlx-dspark", "2.0", "pinned", "r/m", exit_code=1, loads=False, load_error="x" * 80),
        table.EngineResult("mlx", "?", "newest on index", "", exit_code=3, error="pip found no release"),
    ]
    lines = drift.format_table(results).splitlines()
    assert lines[0].split() == ["engine", "release", "loads", "capabilities", "verdict", "unexplained", "failures",
                                "report"]
    assert "3 (did not load: C) (cannot run here: B)" in lines[2] and lines[2].split()[-3:] == ["PASS", "0", "r/vllm-0.34.0"]
    assert lines[3].split()[-3:] == ["FAIL", "2", "r/sglang-0.5.24"]
    assert "no: no module" in lines[4] and lines[4].split()[-4:] == ["-", "ERROR", "-", "r/s"]
    assert f"no: {'x' * 57}... " in lines[5]  # cut in the cell, whole in the notes
    assert lines[6].split() == ["mlx", "?", "(newest", "on", "index)", "-", "-", "ERROR", "-", "-"]
    assert lines[7:] == ["  mlx: pip found no release", "  speculators: does not load: no module",
                         f"  mlx-dspark: does not load: {'x' * 80}", "  vllm: C did not load: no module named 'regex'",
                         "  sglang: unexplained failure: S5::a",
                         "  sglang: unexplained failure: S5::b"]


def test_result_from_results_json_counts_only_what_the_ledger_does_not_explain():
    payload = {"overall": "FAIL", "capabilities": ["A"], "unavailable": {"B": "b did not import"},
               "cannot_run_here": {"A": "why"}, "tests": [
        {"case": c, "outcome": o} for c, o in [("p", "passed"), ("x", "xfailed"), ("f", "failed"), ("s", "skipped"),
                                               ("xp", "xpassed"), ("e", "error"), ("i", "inconclusive")]]}
    result = table.EngineResult.from_results(payload, engine="e", release="1", origin="pinned", report="r",
                                             exit_code=1)
    assert result.unexplained == ["f", "xp", "e"] and result.loads
    assert result.unavailable == {"B": "b did not import"} and result.cannot_run_here == {"A": "why"}


@pytest.mark.parametrize(("codes", "expected"), [
    ([0, 0], 0), ([0, 2], 2), ([2, 3], 3), ([3, 1, 2], 1), ([], 3)])
def test_exit_code_is_the_worst_by_the_clis_precedence(codes, expected):
    assert drift.exit_code([_result(exit_code=code) for code in codes]) == expected


def test_markdown_and_json_tables(tmp_path):
    results = [_result(unexplained=["S1::a|b"], exit_code=1, verdict="FAIL")]
    drift.write_tables(results, tmp_path / "out")
    record = json.loads((tmp_path / "out" / table.JSON_FILE).read_text())
    assert record["exit_code"] == 1 and record["engines"][0]["unexplained"] == ["S1::a|b"]
    markdown = (tmp_path / "out" / table.MARKDOWN_FILE).read_text().splitlines()
    assert markdown[2] == "| engine | release | loads | capabilities | verdict | unexplained failures | report |"
    assert markdown[4] == "| vllm | 0.34.0 (newest on index) | yes | 3 | FAIL | 1 | r/vllm-0.34.0 |"
    assert markdown[-1] == "- vllm: unexplained failure: S1::a\\|b"


# ------------------------------------------------------------------ usage errors (exit 3)
@pytest.mark.parametrize(("argv", "message"), [
    (["--engine", "nope"], "--engine: unknown engine 'nope'"),
    (["--engine", "vllm", "--release", "sglang==1"], "--release: 'sglang' is not a checked engine"),
    (["--release", "vllm"], "expected ENGINE==VERSION"),
    (["--path", "vllm=/does/not/exist"], "not a directory"),
    (["--release", "vllm==1", "--path", "vllm=."], "--release and --path both name 'vllm'"),
    (["--release", "vllm==latest"], "argument --release: expected a PEP 440 version after '==', got 'vllm==latest'"),
])
def test_usage_errors_exit_3_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["engines", "--dry-run", *argv])
    assert exit_.value.code == cli.EXIT_INFRA and message in capsys.readouterr().err


def test_drift_workflow_runs_the_check_with_options_the_cli_accepts():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((Path(__file__).resolve().parents[1] / "CI" / "github" / "drift.yml").read_text())
    assert {"schedule", "workflow_dispatch"} <= set(workflow[True])  # YAML reads 'on' as True
    [line] = [line for step in workflow["jobs"]["drift"]["steps"] for line in step.get("run", "").splitlines()
              if line.startswith("dspark-conformance ")]
    args = cli.build_parser().parse_args(shlex.split(line.replace("$ARGS", ""))[1:])  # exit 3 on a bad option
    assert (args.command, args.report) == ("engines", Path("drift-report"))
