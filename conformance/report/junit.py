"""``junit.xml``: the JUnit XML files of one run's pytest sessions merged into one.

A run with workers is two pytest sessions (the parallel phase, then the latency-bound
cases alone; ``conformance.runner``), and cases whose process lost the CUDA context run
again in fresh sessions; each writes its own file. A CI system reads one file per run, so
the run's ``junit.xml`` holds every session's ``<testsuite>`` in order, and a testcase that
a later session ran again (same ``classname`` and ``name``) keeps only its latest record, as
``results.json`` does. A testcase with no name is dropped: pytest writes one into the file
of a session that a signal interrupted, naming no test. Each suite's ``tests`` /
``failures`` / ``errors`` / ``skipped`` counts are recomputed from the testcases it keeps.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

__all__ = ["merge_junit"]


def _suites(path: Path) -> list[ET.Element]:
    root = ET.parse(path).getroot()
    if root.tag == "testsuite":
        return [root]
    if root.tag != "testsuites":
        raise ValueError(f"{path}: expected a JUnit XML file (<testsuites> or <testsuite>), got <{root.tag}>")
    return list(root.iter("testsuite"))


def _recount(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attribute, str(sum(1 for case in cases if case.find(tag) is not None)))


def merge_junit(sources: Sequence[Path], out: Path) -> None:
    """Write ``out``: one ``<testsuites>`` holding the ``<testsuite>`` elements of the
    existing files among ``sources``, in order, each testcase kept only in the last source
    that holds it, unnamed ones dropped (module note). ``out`` may be one of ``sources``.

    Raises:
        ValueError: no source exists, or one is not JUnit XML.
        xml.etree.ElementTree.ParseError: a source is not well-formed XML.
    """
    present = [Path(path) for path in sources if Path(path).exists()]
    if not present:
        raise ValueError(f"sources: none of {[str(p) for p in sources]} exists")
    suites = [suite for path in present for suite in _suites(path)]
    latest: dict[tuple[str | None, str | None], ET.Element] = {}
    for suite in suites:
        for case in suite.findall("testcase"):
            latest[(case.get("classname"), case.get("name"))] = case
    merged = ET.Element("testsuites", {"name": "dspark-conformance"})
    for suite in suites:
        for case in suite.findall("testcase"):
            if case.get("name") is None or latest[(case.get("classname"), case.get("name"))] is not case:
                suite.remove(case)
        _recount(suite)
        merged.append(suite)
    ET.ElementTree(merged).write(out, encoding="utf-8", xml_declaration=True)
