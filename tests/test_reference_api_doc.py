"""docs/reference-api.md is what docs/reference_api.py makes of ``dspark_ref`` (issue 44): the
public names are listed from the package, never copied by hand, so a name added, renamed or
re-documented without regenerating the list fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import dspark_ref

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("reference_api", ROOT / "docs" / "reference_api.py")
reference_api = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference_api)


def test_committed_listing_is_generated():
    assert (ROOT / "docs" / "reference-api.md").read_text() == reference_api.render(), \
        "docs/reference-api.md is stale: run python docs/reference_api.py"


def test_every_public_name_is_listed_once_with_its_docstring():
    listed = {name: (kind, doc) for names in reference_api.entries().values() for name, kind, doc in names}
    assert sorted(listed) == sorted(dspark_ref._EXPORTS)
    undocumented = [n for n, (kind, doc) in listed.items() if kind in {"class", "function"} and not doc]
    assert not undocumented, f"public functions and classes without a docstring: {undocumented}"


def test_constants_read_their_comment_or_literal():
    source = "#: the first\n#: and second line\nA = (1, 2)\nB = 2**30  # inline why\nC = f(x)\nD = 'x'\n"
    assert reference_api._comment_doc(source, "A") == "the first and second line"
    assert reference_api._comment_doc(source, "B") == "inline why"
    assert reference_api._comment_doc(source, "C") == ""
    assert reference_api._literal_value(source, "D") == "`= 'x'`"
    assert reference_api._literal_value(source, "C") == ""
