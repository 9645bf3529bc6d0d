"""Links between the documents resolve (issue 44): every relative markdown link in README.md,
CHANGELOG.md, docs/ and results/ names a file or folder of this checkout, and every concrete
``docs/...`` or ``results/...`` path named in the code (docstrings, comments, messages; the
suite, the reference, CI and the benchmarks, not the tests' made-up paths) or in
a document's code span exists. A file moved without its links fails here, with each dead link.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md",
                    *(ROOT / "docs").rglob("*.md"), *(ROOT / "results").rglob("*.md")])
CODE = sorted(p for d in ("conformance", "dspark_ref", "CI", "bench", "fixtures", ".ci")
              for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in {".py", ".sh", ""})

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_LINK = re.compile(r"\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)", re.I)
#: A repository path as the docs and the code write one: from the top folder on, no
#: placeholder or pattern (``VERSION``, a folder ``PERIOD/``, ``<version>``, ``*``, ``{a,b}``,
#: ``..``) in it.
_REPO_PATH = re.compile(r"(?<![\w:/.-])((?:docs|results)/[\w./-]*[\w/])")
_PATTERN = re.compile(r"[*<>{}]|\.\.|VERSION|\b[A-Z]{2,}(?=/|$)|\bX\b")


def _links(markdown: str) -> list[str]:
    """The relative link targets of ``markdown`` outside fenced code, without their #anchors."""
    text = _FENCE.sub("", markdown)
    text = re.sub(r"`[^`\n]*`", "", text)  # a link written inside a code span is not a link
    return [m.group(1).split("#")[0] for m in _LINK.finditer(text)
            if not _EXTERNAL.match(m.group(1)) and m.group(1).split("#")[0]]


def _anchored_links(markdown: str) -> list[tuple[str, str]]:
    """``(target, anchor)`` of each relative link with an #anchor (target '' for this file)."""
    text = re.sub(r"`[^`\n]*`", "", _FENCE.sub("", markdown))
    return [tuple(m.group(1).split("#", 1)) for m in _LINK.finditer(text)
            if "#" in m.group(1) and not re.match(r"^[a-z][a-z0-9+.-]*:", m.group(1), re.I)]


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown``: lower case, punctuation dropped,
    spaces as hyphens, a repeated one suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", _FENCE.sub("", markdown), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def _repo_paths(text: str) -> list[str]:
    """The concrete repository paths (``docs/...``, ``results/...``) that ``text`` names."""
    paths = []
    for m in _REPO_PATH.finditer(text):
        token = re.match(r"[^\s`'\"()\]]*", text[m.start():]).group(0)
        if not _PATTERN.search(token):
            paths.append(m.group(1).rstrip("."))
    return paths


def _code_spans(markdown: str) -> str:
    return "\n".join(re.findall(r"`([^`\n]+)`", _FENCE.sub("", markdown)))


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_resolve(doc: Path):
    dead = [t for t in _links(doc.read_text()) if not (doc.parent / t).exists()]
    assert not dead, f"{doc.relative_to(ROOT)}: links to nothing: {dead}"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_anchors_resolve(doc: Path):
    dead = []
    for target, anchor in _anchored_links(doc.read_text()):
        path = doc.parent / target if target else doc
        if path.suffix == ".md" and path.exists() and anchor not in _anchors(path.read_text()):
            dead.append(f"{target}#{anchor}")
    assert not dead, f"{doc.relative_to(ROOT)}: links to headings that do not exist: {dead}"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_in_code_spans_exist(doc: Path):
    dead = [p for p in _repo_paths(_code_spans(doc.read_text())) if not (ROOT / p).exists()]
    assert not dead, f"{doc.relative_to(ROOT)}: names paths that do not exist: {dead}"


def test_paths_named_in_code_exist():
    dead = [f"{f.relative_to(ROOT)}: {p}" for f in CODE for p in _repo_paths(f.read_text(errors="replace"))
            if not (ROOT / p).exists()]
    assert not dead, "paths named in the code that do not exist:\n" + "\n".join(dead)


def test_the_checks_see_a_dead_link():
    """The parsers find what they must: a dead link and a dead path, not a link in code, an
    external link, an anchor or a placeholder path."""
    text = "[a](gone.md) [b](https://x.org) [c](#top) `[d](code.md)`\n```\n[e](fenced.md)\n```\n"
    assert _links(text) == ["gone.md"]
    assert _anchors("# A `b` (c, 1): d\n## A `b` (c, 1): d\n") == {"a-b-c-1-d", "a-b-c-1-d-1"}
    assert _anchored_links("[x](f.md#top) [y](#here) [z](https://x.org/#a)") == [("f.md", "top"), ("", "here")]
    assert _repo_paths("see docs/conformance/gone.md, docs/x-VERSION.md, results/*/a.md") == [
        "docs/conformance/gone.md"]
