"""The case registry covers every SPEC clause and fits the declared statistical budget."""

import importlib
import pkgutil

import conformance.suite
from conformance import budget
from conformance.cases import REGISTRY, SPEC_CLAUSES


def _load_conformance_tests():
    for info in pkgutil.iter_modules(conformance.suite.__path__):
        if info.name.startswith("test_"):
            importlib.import_module(f"conformance.suite.{info.name}")
    return REGISTRY


def test_every_spec_clause_is_covered():
    covered = {clause for case in _load_conformance_tests().values() for clause in case.clauses}
    missing = sorted(set(SPEC_CLAUSES) - covered)
    assert not missing, f"SPEC clauses without a conformance case: {missing}"


def test_declared_statistical_assertions_fit_the_budget():
    declared = sum(case.statistical for case in _load_conformance_tests().values())
    assert 0 < declared <= budget.MAX_STATISTICAL_ASSERTIONS, (
        f"cases declare {declared} statistical assertions; budget allows {budget.MAX_STATISTICAL_ASSERTIONS}"
    )
    assert budget.PER_ASSERTION_ALPHA * budget.MAX_STATISTICAL_ASSERTIONS <= budget.FAMILY_WISE_ALPHA


def test_case_clauses_belong_to_their_section():
    """A case checks clauses of its own section (S0 numerics and S10 known bugs may be checked
    anywhere)."""
    for case_id, case in _load_conformance_tests().items():
        foreign = [c for c in case.clauses if c.split(".")[0] not in (case.section, "S0", "S10")]
        assert not foreign, f"{case_id}: clauses of other sections {foreign}"
