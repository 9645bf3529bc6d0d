"""results/README.md is what results/index.py makes of the committed files (issue 44): a run
added, moved or removed without regenerating the index fails here."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("results_index", ROOT / "results" / "index.py")
index = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(index)


def test_committed_index_is_generated():
    assert (ROOT / "results" / "README.md").read_text() == index.render(), \
        "results/README.md is stale: run python results/index.py"


def test_every_run_file_is_listed():
    listed = index.render()
    files = [p for folder in ("conformance", "perf") for p in (ROOT / "results" / folder).rglob("*") if p.is_file()]
    assert files and all(f"]({p.relative_to(ROOT / 'results')})" in listed for p in files)


def test_index_follows_the_files(tmp_path: Path):
    """A new run shows with the verdict its results.json gives; a run without one is an error."""
    root = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "conformance" / "speculators", root / "conformance" / "speculators")
    payload = json.loads((root / "conformance" / "speculators" / "speculators-0.9.0-cpu.json").read_text())
    payload["tests"][0]["outcome"] = "failed"
    (root / "conformance" / "speculators" / "speculators-0.9.0-cpu-gate.json").write_text(json.dumps(payload))
    rows = {tuple(r[:5]) for r in index.conformance_rows(root)}
    assert rows == {("speculators", "0.9.0", "cpu", "run", "PASS"), ("speculators", "0.9.0", "cpu", "gate", "FAIL")}
    (root / "conformance" / "speculators" / "speculators-0.9.1-cpu.md").write_text("no header\n")
    try:
        index.conformance_rows(root)
    except ValueError as e:
        assert "speculators-0.9.1-cpu" in str(e)
    else:
        raise AssertionError("a run with nothing to read passed")


def test_a_run_that_left_only_its_console_log_is_listed_with_the_logs_verdict(tmp_path: Path):
    # A device call returns a limited number of files: a run may come back as its console log.
    root = tmp_path / "results"
    (root / "conformance" / "vllm").mkdir(parents=True)
    (root / "conformance" / "vllm" / "vllm-0.34.0-cuda-h100.log").write_text(
        "S2 Markov heads: 25/25 done\nDSpark conformance: impl=vllm==0.34.0 device=cuda seed=1 wall=2.0s\n"
        "section ...\noverall: FAIL\nFAILED S2/x: boom  replay: ...\n")
    assert [r[:5] for r in index.conformance_rows(root)] == [["vllm", "0.34.0", "cuda (h100)", "run", "FAIL (console log)"]]



def test_a_measurement_folder_is_listed_file_by_file_under_its_readme(tmp_path: Path):
    folder = tmp_path / "perf" / "h100-run"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text("{}")
    with pytest.raises(ValueError, match="h100-run: a measurement's folder has a README.md"):
        index.perf_documents(tmp_path)
    (folder / "README.md").write_text("# One H100 run\n")
    assert index.perf_documents(tmp_path) == [
        "- [h100-run/](perf/h100-run/README.md): One H100 run; [results.json](perf/h100-run/results.json)"]
