"""report.md: what a failure's reason shows (conformance/report/markdown.py)."""

from __future__ import annotations

from conformance.report import markdown


def test_a_reason_with_angle_brackets_is_shown_not_swallowed_as_html(tmp_path):
    # A fresh-user trial: "<accepted drafts>, <one token < 3>" sat raw in report.md, which a
    # Markdown renderer drops as an HTML tag; report.html escaped it.
    record = {"case": "conformance/test_verify.py::test_S5_x", "nodeid": "n", "section": "S5", "outcome": "failed",
              "duration_s": 0.1, "reason": "AssertionError: expected <accepted drafts>, <one token < 3> & more",
              "stats": [], "numerics": [], "bit_identical": None, "replay": "dspark-conformance run --case k"}
    payload = {"impl": "x", "device": "cpu", "base_seed": 1, "wall_s": 1.0, "capabilities": [], "tests": [record]}
    markdown.write_markdown(payload, tmp_path / "report.md")
    line = next(l for l in (tmp_path / "report.md").read_text().splitlines() if "test_S5_x" in l)
    assert "&lt;accepted drafts&gt;, &lt;one token &lt; 3&gt; &amp; more" in line, line
    assert "<accepted" not in line
