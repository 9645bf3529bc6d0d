"""README.md reads in five minutes and never goes stale by itself (issue 44): no sentence
over :data:`MAX_WORDS` words, and no count of the suite's own things (cases, assertions,
tests, mutants...), which change with every case and which no test keeps true. Numbers that
are settings (a version, alpha, an option's range) are not counts and stay."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_WORDS = 60
#: The things whose number changes as the suite grows: a number before one of them is a count.
COUNTED = ("case", "assertion", "test", "mutant", "finding", "seed", "section", "capabilit", "skip", "entr",
           "module", "file", "engine", "release", "adapter", "check", "run", "failure", "xfail", "comparison")
# a whole number (not a version's part, nor a name's: PEP 440), then at most two words, then the thing
_COUNT = re.compile(r"(?<![\w.,])(?<![A-Z] )(\d[\d,]*)(?![\w.])\s+(?:[\w-]+\s+){0,2}?(?i:(" + "|".join(COUNTED) + r"))\w*")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def prose(markdown: str) -> list[str]:
    """The text units of ``markdown`` outside fenced blocks: paragraphs, list items,
    headings and table cells, each on one line."""
    units, paragraph = [], []
    for line in _FENCE.sub("", markdown).splitlines() + [""]:
        stripped = line.strip()
        if stripped.startswith("|"):
            units += [cell.strip() for cell in stripped.strip("|").split("|") if cell.strip(" -")]
            stripped = ""
        if not stripped or stripped.startswith(("#", "- ")):
            units.append(" ".join(paragraph))
            paragraph = [stripped.lstrip("#- ")] if stripped else []
            continue
        paragraph.append(stripped)
    return [unit for unit in units if unit]


def sentences(text: str) -> list[str]:
    """``text`` split after ``.``, ``!``, ``?`` or ``:`` where a new sentence starts (a
    capital, a code span, a parenthesis)."""
    return re.split(r"(?<=[.!?:])\s+(?=[A-Z`(\[])", text)


def words(sentence: str) -> int:
    return sum(1 for token in sentence.split() if re.search(r"\w", token))


def counts(text: str) -> list[str]:
    """The counts of the suite's things that ``text`` states (``332 cases``, ``93 assertions``)."""
    return [match.group(0) for match in _COUNT.finditer(text)]


def test_no_readme_sentence_is_over_the_limit():
    long = [f"{words(s)} words: {s}" for unit in prose(README.read_text()) for s in sentences(unit)
            if words(s) > MAX_WORDS]
    assert not long, f"README sentences over {MAX_WORDS} words (split them):\n" + "\n".join(long)


def test_the_readme_states_no_count_of_the_suites_things():
    stated = [count for unit in prose(README.read_text()) for count in counts(unit)]
    assert not stated, f"README counts that no test keeps true (leave them out, or generate them): {stated}"


def test_the_checks_see_a_long_sentence_and_a_count():
    long = "The suite " + "checks " * MAX_WORDS + "everything."
    markdown = f"# Title\n\nShort one. {long}\n\n| a | b |\n| --- | --- |\n| x | it ran 332 cases |\n\n- 93 statistical assertions\n"
    units = prose(markdown)
    assert [words(s) for unit in units for s in sentences(unit) if words(s) > MAX_WORDS] == [MAX_WORDS + 3]
    assert [c for unit in units for c in counts(unit)] == ["332 cases", "93 statistical assertions"]
    assert counts("torch 2.13.0 is the release, alpha 1e-3, 0 < F <= 1000, S0..S10, PEP 440 release ranges") == []
