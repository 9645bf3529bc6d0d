"""What a run prints and writes as text: report.md and the matrix (conformance/report/markdown.py, matrix.py)."""

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


def test_the_matrix_warns_where_a_pass_had_little_power():
    # A fresh-user trial: --budget 1e-9 gave PASS with power 0.0000 and nothing else said.
    from conformance.report import matrix

    def payload(power):
        stat = {"power_at_min_effect": power}
        record = {"case": "conformance/test_simulated.py::test_S6_x", "section": "S6", "outcome": "passed",
                  "duration_s": 0.1, "reason": "", "stats": [stat, {"power_at_min_effect": 0.999}], "numerics": []}
        return {"impl": "x", "device": "cpu", "base_seed": 1, "wall_s": 1.0, "budget": 1e-9, "tests": [record]}

    low = matrix.format_matrix(payload(0.0000025))
    assert "min 0.0000 over 2 assertions; WARNING: 1 below 0.5, where a pass says little (raise --budget)" in low
    assert "WARNING" not in matrix.format_matrix(payload(0.5))
