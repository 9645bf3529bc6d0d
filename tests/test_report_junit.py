"""conformance.report.junit: the sessions of one run merged into one junit.xml."""

import xml.etree.ElementTree as ET

import pytest

from conformance.report.junit import merge_junit


def _session(path, cases):
    """A pytest-style JUnit file: ``cases`` is ``[(name, outcome)]``, outcome one of
    passed / failure / error / skipped."""
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name="pytest", tests="999", failures="999")
    for name, outcome in cases:
        case = ET.SubElement(suite, "testcase", classname="conformance.suite.test_x", name=name)
        if outcome != "passed":
            ET.SubElement(case, outcome, message=f"{name} {outcome}")
    ET.ElementTree(root).write(path)
    return path


def test_sessions_keep_their_order_and_a_rerun_replaces_the_earlier_record(tmp_path):
    first = _session(tmp_path / "a.xml", [("t1", "passed"), ("t2", "failure"), ("t3", "error")])
    second = _session(tmp_path / "b.xml", [("t4", "skipped")])
    rerun = _session(tmp_path / "c.xml", [("t3", "passed")])
    merge_junit([first, tmp_path / "absent.xml", second, rerun], tmp_path / "junit.xml")
    suites = ET.parse(tmp_path / "junit.xml").getroot().findall("testsuite")
    assert [[c.get("name") for c in s.iter("testcase")] for s in suites] == [["t1", "t2"], ["t4"], ["t3"]]
    counts = [{k: s.get(k) for k in ("tests", "failures", "errors", "skipped")} for s in suites]
    assert counts == [{"tests": "2", "failures": "1", "errors": "0", "skipped": "0"},
                      {"tests": "1", "failures": "0", "errors": "0", "skipped": "1"},
                      {"tests": "1", "failures": "0", "errors": "0", "skipped": "0"}]


def test_the_output_may_be_a_source(tmp_path):
    path = _session(tmp_path / "junit.xml", [("t1", "passed")])
    merge_junit([path], path)
    assert [c.get("name") for c in ET.parse(path).getroot().iter("testcase")] == ["t1"]


def test_no_source_or_a_foreign_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="sources: none of"):
        merge_junit([tmp_path / "absent.xml"], tmp_path / "junit.xml")
    (tmp_path / "other.xml").write_text("<html/>")
    with pytest.raises(ValueError, match="expected a JUnit XML file"):
        merge_junit([tmp_path / "other.xml"], tmp_path / "junit.xml")


def test_an_interrupted_sessions_unnamed_testcase_is_dropped(tmp_path):
    # pytest writes `<testcase time="0.000" />` into an interrupted session's file (trial of
    # session 20): counted in `tests`, it named no test.
    path = _session(tmp_path / "a.xml", [("t1", "passed")])
    tree = ET.parse(path)
    ET.SubElement(tree.getroot().find("testsuite"), "testcase", time="0.000")
    tree.write(path)
    merge_junit([path], tmp_path / "junit.xml")
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert [c.get("name") for c in suite.iter("testcase")] == ["t1"] and suite.get("tests") == "1"
