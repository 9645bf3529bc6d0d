"""The HTML report (conformance/report/html.py): a self-contained page from a synthetic payload.

Checked with and without matplotlib (its absence simulated by blocking the import): no
external resources, the matrix numbers of ``report.summarize``, one embedded PNG per
record with observed / expected bins, non-passing tests with replay commands, the kill
matrix and calibration when their JSON files sit beside results.json, and bad input.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
import sys

import pytest
from hypothesis import given, settings, strategies as st

from conformance.report import html as html_report, matrix as report

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)
IMG = re.compile(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _stat(name, *, observed=None, expected=None, passed=True, p_value=0.4):
    return {
        "name": name, "null": "counts ~ Multinomial(n, probs)", "statistic_name": "chi-square (Pearson)",
        "statistic": 3.2, "p_value": p_value, "alpha": 5e-6, "n": 1000, "effect_name": "TV(observed, probs)",
        "effect": 0.004, "effect_ci_upper": 0.02, "min_effect": 0.01, "power_at_min_effect": 0.999,
        "passed": passed, "observed": observed, "expected": expected,
    }


def _test(key, section, outcome, *, stats=(), reason="", duration=0.5):
    return {"case": key, "nodeid": key, "section": section, "outcome": outcome, "duration_s": duration,
            "reason": reason, "stats": list(stats),
            "replay": f"dspark-conformance run --impl reference --device cpu --seed 1 --case '{key}'"}


def _payload():
    sampler = _stat("S3/law/flat-T1", observed=[240.0, 260.0, 250.0, 250.0], expected=[250.0] * 4)
    lengths = _stat("S6/multinomial/3.0-max6/law", observed=[60.0, 240.0, 400.0, 240.0, 55.0, 5.0],
                    expected=[61.0, 242.0, 383.0, 242.0, 61.0, 11.0])
    binomial = _stat("S6/match-expected/4.7-max6/p-upper")
    binomial["statistic_name"] = "successes"
    return {
        "impl": "reference", "description": "synthetic", "capabilities": ["StepSampler"], "device": "cpu",
        "base_seed": 20260, "wall_s": 12.5,
        "tests": [
            _test("conformance/test_sampling.py::test_S3_law[flat-T1]", "S3", "passed", stats=[sampler]),
            _test("conformance/test_sampling.py::test_S3_greedy[x]", "S3", "failed",
                  reason="Traceback\nAssertionError: S3/greedy/x: token 7 <script>alert(1)</script>", duration=1.25),
            _test("conformance/test_sampling.py::test_S3_tiled[gpu]", "S3", "skipped",
                  reason="gpu tier: CUDA is not available"),
            _test("conformance/test_simulated.py::test_S6_multinomial_law[3.0]", "S6", "passed", stats=[lengths]),
            _test("conformance/test_simulated.py::test_S6_match_expected_law[4.7]", "S6", "passed", stats=[binomial]),
            _test("conformance/test_confidence.py::test_S7_prefix_survival[x]", "S7", "passed"),
        ],
    }


PLOTTED = ("S3/law/flat-T1", "S6/multinomial/3.0-max6/law")


@pytest.fixture
def no_matplotlib(monkeypatch):
    """Simulate a machine without the [plots] extra: ``import matplotlib`` raises ImportError."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)


def _matrix_row(page: str, section: str) -> list[str]:
    row = re.search(rf"<tr><td>{section}</td>(.*?)</tr>", page)
    assert row, f"no matrix row for {section}"
    return re.findall(r'<td class="num">([^<]*)</td>', row.group(1))


def _check_common(page: str, payload: dict) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not EXTERNAL.search(page), EXTERNAL.search(page).group(0)
    assert "<link" not in page and "<script" not in page  # CSS inline, no JS at all
    for row in report.summarize(payload["tests"]):
        expected = [str(row.counts[o]) for o in report.OUTCOMES]
        expected += ["-" if row.min_p is None else f"{row.min_p:.2g}", row.bit_identity, f"{row.seconds:.1f}"]
        assert _matrix_row(page, row.section) == expected
    assert 'class="badge big FAIL">FAIL<' in page  # the failed S3 test makes the run FAIL
    failed = payload["tests"][1]
    assert html.escape(failed["replay"]) in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # reasons are escaped, never markup
    assert "gpu tier: CUDA is not available" in page
    for name in ("S3/law/flat-T1", "S6/multinomial/3.0-max6/law", "S6/match-expected/4.7-max6/p-upper"):
        assert name in page  # every statistical record in the table


def test_page_with_plots_is_self_contained_with_one_png_per_binned_record(tmp_path):
    pytest.importorskip("matplotlib")
    payload = _payload()

    path = html_report.write_html(payload, tmp_path)

    page = path.read_text(encoding="utf-8")
    assert path == tmp_path / "report.html"
    _check_common(page, payload)
    images = IMG.findall(page)
    assert len(images) == len(PLOTTED) == page.count("<img")
    assert all(base64.b64decode(data).startswith(PNG_MAGIC) for data in images)
    assert html_report.PLOTS_HINT not in page
    sampler_at = page.index('id="stat-0"')
    acceptance_at = page.index("Acceptance-length distributions")
    assert sampler_at < acceptance_at < page.index('id="stat-1"')  # the S6 law is plotted as a length law
    assert 'href="#stat-0"' in page and 'href="#stat-2"' not in page  # only binned records link to a plot
    unavailable = page[page.index('id="unavailable"'):]
    assert "S6/match-expected/4.7-max6/p-upper" in unavailable  # a binomial test has no frequency vector
    assert "reliability diagram (S7)" in unavailable and "1 S7 case ran (0 skipped)" in unavailable
    assert "scheduler (S8)" in unavailable
    assert 'href="#plots"' in page and 'href="#mutants"' not in page  # the nav names only sections present


def test_plots_drawn_by_a_pool_are_the_same_page(monkeypatch):
    """From ``_POOL_FROM`` binned records on, forked processes draw the figures (89 of them took
    28 s in one process after a GPU run's verdict): the page is the same bytes, in order."""
    pytest.importorskip("matplotlib")
    payload = _payload()
    payload["tests"].append(_test("conformance/test_sampling.py::test_S3_law[skew]", "S3", "passed", stats=[
        _stat("S3/law/skew", observed=[400.0, 100.0, 250.0, 250.0], expected=[250.0] * 4, passed=False)]))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(html_report, "_POOL_FROM", 2)
    pooled = html_report.render_html(payload)
    monkeypatch.setattr(html_report, "_POOL_FROM", 10**6)
    assert pooled == html_report.render_html(payload)
    assert pooled.count("<img") == 3


def test_page_without_matplotlib_keeps_tables_and_names_the_extra(tmp_path, no_matplotlib):
    payload = _payload()

    page = html_report.write_html(payload, tmp_path).read_text(encoding="utf-8")

    _check_common(page, payload)
    assert "<img" not in page
    assert html_report.PLOTS_HINT in page
    assert "matplotlib is not installed" in page


def test_the_plots_hint_is_a_command_that_installs_the_plots_extra():
    # A fresh-user trial: the hint said "pip install dspark-conformance[plots]", which fails
    # (the distribution is not on the package index). The extra is matplotlib alone.
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    [requirement] = pyproject["project"]["optional-dependencies"]["plots"]
    assert html_report.PLOTS_HINT == f"pip install {re.match(r'[A-Za-z0-9_.-]+', requirement).group(0)}"


def test_kill_matrix_and_calibration_are_read_from_the_report_dir(tmp_path):
    pytest.importorskip("matplotlib")
    mutants = [
        {"id": "simulated-rounded-once", "section": "S6", "fault": "rounded once", "mirrors": "S10", "killed": True,
         "killers": [{"test": "a::test_S6_x", "evidence": "p=1e-9 < alpha=5e-06"},
                     {"test": "a::test_S6_y", "evidence": ""}], "counts": {"failed": 2}, "error": ""},
        {"id": "sampling-ties-highest-index", "section": "S3", "fault": "ties", "mirrors": "", "killed": False,
         "killers": [], "counts": {"passed": 9}, "error": ""},
    ]
    calibration = {
        "runs": 20, "failed_runs": 1, "run_rate_upper95": 0.249, "budget": 0.01,
        "per_test": {"a::test_S3_law[x]": {"runs": 20, "false_failures": 1, "rate_upper95": 0.249, "pvalue_ks": 0.18},
                     "a::test_S6_law[y]": {"runs": 20, "false_failures": 0, "rate_upper95": 0.168, "pvalue_ks": None}},
        "power": {"simulated-rounded-once": {"a::test_S6_x": {"seeds": 5, "killed": 5, "power_lower95": 0.478}},
                  "sampling-ties-highest-index": {}},
        "power_any_killer": {"simulated-rounded-once": {"seeds": 5, "killed": 5, "power_lower95": 0.478}},
        "declared_power": {"S6/x": {"power_lower95": 0.9972}, "S6/y": {"power_lower95": 0.9955}},
    }
    (tmp_path / "mutants.json").write_text(json.dumps(mutants))
    (tmp_path / "calibration.json").write_text(json.dumps(calibration))

    page = html_report.write_html(_payload(), tmp_path).read_text(encoding="utf-8")

    kill = page[page.index('id="mutants"'):page.index('id="unavailable"')]
    assert "1 of 2 mutants killed" in kill
    assert '<td class="killed">&#10003; 2</td>' in kill and '<td class="survived">&#10007;</td>' in kill
    assert "test_S6_x</code> (+1 more)" in kill
    cal = page[page.index('id="calibration"'):page.index('id="mutants"')]
    assert "1 of 20 reference runs false-failed" in cal and "0.249" in cal
    assert "2 assertions, smallest lower end of the 95% interval 0.9955" in cal
    assert cal.count("<img") == 2  # false failures per test, power per mutant
    assert page.count("<img") == len(PLOTTED) + 2
    assert "no mutants.json" not in page and "no calibration.json" not in page
    assert 'href="#mutants"' in page and 'href="#calibration"' in page


def test_no_statistics_and_no_s7_are_said_plainly(tmp_path, no_matplotlib):
    payload = {**_payload(), "tests": [_test("t.py::test_S1_x", "S1", "passed")]}

    page = html_report.render_html(payload)

    assert "No statistical assertion ran." in page
    assert "no S7 case ran in this run" in page
    assert 'class="badge big PASS">PASS<' in page and "Every test passed." in page


def test_a_section_whose_cases_all_skipped_is_not_said_to_have_run(no_matplotlib):
    # A fresh-user trial: the page said "18 S7 tests ran" where all 18 skipped.
    skipped = [_test(f"t.py::test_S7_x[{i}]", "S7", "skipped", reason="gpu tier: CUDA is not available")
               for i in range(2)]
    page = html_report.render_html({**_payload(), "tests": skipped})
    assert "no S7 case ran in this run (2 skipped)" in page and " ran, but" not in page
    page = html_report.render_html({**_payload(), "tests": [*skipped, _test("t.py::test_S7_y", "S7", "passed")]})
    assert "1 S7 case ran (2 skipped), but none records" in page


@settings(max_examples=15, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('<>&"\'ab/ '), max_size=20))
def test_any_text_in_names_and_reasons_is_escaped(text):
    hostile = f"<x-evil>{text}"
    payload = _payload()
    payload["impl"] = hostile
    payload["tests"][1]["reason"] = hostile
    payload["tests"][4]["stats"][0]["name"] = hostile

    with pytest.MonkeyPatch.context() as patch:  # no plots: hypothesis reruns the body, keep it fast
        patch.setitem(sys.modules, "matplotlib", None)
        page = html_report.render_html(payload)

    assert "<x-evil>" not in page
    assert html.escape(hostile) in page


@pytest.mark.parametrize("payload, error, match", [
    ([], TypeError, "payload"),
    ({"impl": "x"}, ValueError, "payload.*missing"),
    ({**_payload(), "tests": {}}, TypeError, r"payload\['tests'\]"),
    ({**_payload(), "base_seed": "1"}, TypeError, r"payload\['base_seed'\]"),
    ({**_payload(), "wall_s": math.nan}, ValueError, r"payload\['wall_s'\]"),
])
def test_bad_payload_names_the_argument(tmp_path, payload, error, match):
    with pytest.raises(error, match=match):
        html_report.write_html(payload, tmp_path)


def test_bad_report_dir_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match="report_dir"):
        html_report.write_html(_payload(), tmp_path / "missing")
    with pytest.raises(TypeError, match="report_dir"):
        html_report.write_html(_payload(), 3)


def test_reliability_diagrams_are_drawn_from_s7_records(tmp_path):
    pytest.importorskip("matplotlib")
    payload = _payload()
    s7 = {"case": "conformance/test_confidence.py::test_S7_sts[x]", "section": "S7", "outcome": "passed",
          "duration_s": 0.1, "reason": "", "stats": [], "replay": "r",
          "reliability": [{"name": "S7/sts/x: a_1 after STS", "predicted": [0.1, 0.5, 0.9],
                           "observed": [0.12, 0.48, 0.91], "count": [10, 20, 30]}]}
    payload["tests"].append(s7)
    page = html_report.render_html(payload)
    assert "Reliability diagrams" in page and 'alt="S7/sts/x: a_1 after STS"' in page
    assert "reliability diagram (S7)" not in page.split('id="unavailable"')[1]


@pytest.mark.parametrize("name", report.VERDICTS + report.OUTCOMES)
def test_every_badge_has_a_colour(name):
    # Badges are white text: a verdict or outcome without a background rule is invisible (trial
    # of session 20: an interrupted run's INTERRUPTED badge was white on the white page).
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", html_report._CSS)
    coloured = {sel.strip().lstrip(".") for selectors, body in rules if "background" in body
                for sel in selectors.split(",")}
    assert name in coloured


def test_overall_verdicts_are_the_declared_ones():
    payload = {"exit_status": 0}
    records = [{"case": "conformance/test_x.py::test_S1_a", "section": "S1", "outcome": outcome, "stats": [],
                "duration_s": 0.0, "bit_identical": None}
               for outcome in ("passed", "failed", "skipped", "inconclusive")]
    seen = {report.overall(report.summarize(records[i:i + 1]), payload) for i in range(4)}
    seen.add(report.overall(report.summarize(records[:1]), {"exit_status": 2}))
    assert seen == set(report.VERDICTS)
