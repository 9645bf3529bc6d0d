"""docs/SPEC.md is the specification every test name cites (the one copy): its sections are
the one table of ``conformance.sections``."""

from pathlib import Path

from conformance.sections import SECTION_TITLES, section_of

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "SPEC.md"


def test_spec_sections_are_the_section_table():
    headings = [line.split()[1] for line in SPEC.read_text().splitlines() if line.startswith("## S")]
    assert headings == list(SECTION_TITLES)


def test_section_of_reads_the_id_a_test_name_cites():
    assert section_of("test_S10_duplicate[x]") == "S10" and section_of("test_S3_law") == "S3"
    assert section_of("test_other") == "-"
