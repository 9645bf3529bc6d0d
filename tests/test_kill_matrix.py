"""The mutant kill matrix (issue: test power): every mutant fails a test of its own section.

Each case runs the conformance tests of the mutant's SPEC section in a subprocess with
``--dspark-impl mutant:<id>`` and the default seeds, exactly as
``dspark-conformance mutants`` does.
"""

import pytest

from conformance.mutation import kill_one
from fixtures.mutants import load_all

MUTANTS = load_all()


def test_catalogue_size_and_sections():
    assert len(MUTANTS) >= 25, f"expected at least 25 mutants, found {len(MUTANTS)}"
    for m in MUTANTS.values():
        assert m.section in {f"S{i}" for i in range(1, 10)}, f"{m.id}: section {m.section!r}"
        assert m.fault, f"{m.id}: no fault description"


@pytest.mark.slow
@pytest.mark.parametrize("mutant_id", sorted(MUTANTS))
def test_mutant_is_killed_by_its_section(mutant_id):
    record = kill_one(mutant_id)
    assert not record.error, record.error
    assert record.killed, (
        f"mutant {mutant_id} ({record.fault}) survived the {record.section} tests: {record.counts}"
    )
