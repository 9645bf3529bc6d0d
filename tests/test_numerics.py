"""SPEC S0: the bounded comparison and the separate bit-identity level (``conformance.numerics``).

* :func:`conformance.numerics.compare` on hand inputs: bit identity, a reordered float32
  sum inside its bound but not bit-identical, a difference beyond it, NaN, bad arguments;
* suite runs (subprocesses, as ``dspark-conformance run --case``) of the bounded S2 / S4 / S7
  cases: the duplicate-``sample_block`` mutant (S10) still fails them by orders of
  magnitude; a reordered but correct variant (float64 teacher forcing, float32 survival:
  ``tests.toy_adapters:reordered``) passes them and is reported not bit-identical; the
  reference is bit-identical;
* the matrix column ``bit-identical`` (tests bit-identical / compared, per section).
"""

import math

import pytest
import torch

from conformance import numerics, runner
from conformance.report import markdown, matrix

S2_TEACHER = "S2/teacher-forcing/{}"
S4_VS_EAGER = "S4/folded-vs-eager/{}"
S7_SURVIVAL = "S7/prefix-survival/sigmoid-batched"
BOUNDED = [S2_TEACHER.format("gated-mixed"), S4_VS_EAGER.format("vanilla-float32"),
           S4_VS_EAGER.format("rnn-bfloat16"), S7_SURVIVAL]
#: A second sample_block pass moves corrected logits by O(1); the bound is ~1e-6 (float32)
#: to ~1e-2 (bf16, one rounding of |L| ~ 4): it must fail by far more than this factor.
DUPLICATE_MIN_RATIO = 1e3


def _run(impl: str, cases: list[str]) -> dict[str, dict]:
    code, payload, cmd = runner.run_quietly(impl=impl, device="cpu", cases=cases)
    assert payload is not None, f"no results.json from {' '.join(cmd)} (exit {code})"
    return {record["case"]: record for record in payload["tests"]}


# ----------------------------------------------------------------------------- compare
def test_compare_reports_bit_identity_apart_from_the_bound():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    same = numerics.compare("c", x, x.clone(), torch.zeros(1000))
    assert same.within_bound and same.bit_identical and same.worst_ratio == 0
    # The same sum in float32, pairwise (torch) against left to right: n u sum|x| bounds both.
    rows = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    pairwise = rows.sum(dim=1)
    sequential = torch.zeros(64)
    for j in range(rows.shape[1]):
        sequential = sequential + rows[:, j]
    bound = 2 * rows.shape[1] * 2.0**-24 * rows.abs().sum(dim=1).double()
    reordered = numerics.compare("c", pairwise, sequential, bound)
    assert reordered.within_bound and not reordered.bit_identical and 0 < reordered.worst_ratio < 1
    assert numerics.compare("c", x.bfloat16(), x, x.abs() * 2.0**-8).bit_identical  # one rounding into got's dtype


def test_compare_fails_beyond_the_bound_and_on_nan():
    x = torch.zeros(4)
    far = numerics.compare("S2/x: a vs b", x + torch.tensor([0, 0, 1e-3, 0]), x, 1e-6)
    assert not far.within_bound and far.worst_index == 2 and far.worst_ratio == pytest.approx(1e3, rel=1e-3)
    with pytest.raises(AssertionError, match=r"S2/x: a vs b: differ beyond .* flat index 2"):
        far.assert_ok()
    nan = numerics.compare("c", torch.tensor([math.nan, 0.0]), torch.zeros(2), 1.0)
    assert not nan.within_bound and nan.to_dict()["worst_ratio"] == "inf"
    with pytest.raises(ValueError, match="shape"):
        numerics.compare("c", torch.zeros(2), torch.zeros(3), 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        numerics.compare("c", x, x, -1.0)


def test_combine_is_the_comparison_of_the_whole():
    gen = torch.Generator().manual_seed(2)
    got, expected = torch.randn(3, 7, generator=gen), torch.randn(3, 7, generator=gen)
    bound = torch.rand(3, 7, generator=gen).double() + 0.5
    tied = got.clone()
    expected[0, 5] = expected[2, 1] = 0.0
    tied[0, 5] = tied[2, 1] = 64.0  # the same worst ratio in the first and the last row ...
    bound[2, 1] = bound[0, 5]  # ... of which compare names the first
    for values in (got, tied):
        whole = numerics.compare("c", values, expected, bound)
        for cuts in ([1, 2], [2, 1], [1, 1, 1]):
            starts = [sum(cuts[:i]) for i in range(len(cuts))]
            parts = [numerics.compare("c", values[a:a + n], expected[a:a + n], bound[a:a + n])
                     for a, n in zip(starts, cuts)]
            assert numerics.combine("c", parts) == whole, cuts
    assert numerics.compare("c", tied, expected, bound).worst_index == 5
    with pytest.raises(ValueError, match="parts"):
        numerics.combine("c", [])


def test_block_logits_compared_in_row_slices_as_a_whole(monkeypatch):
    """compare_block_logits evaluates its oracle and compares slice by slice: the record is
    the whole tensor's, its worst element counted from the start of the whole."""
    from conformance.oracles import markov_block

    gen = torch.Generator().manual_seed(3)
    batch, gamma, vocab, rank, hidden = 5, 3, 11, 4, 2
    state = {"W1.weight": torch.randn(vocab, rank, generator=gen), "W2.weight": torch.randn(vocab, rank, generator=gen),
             "Wz.weight": 0.3 * torch.randn(3 * rank, 2 * rank + hidden, generator=gen),
             "Wz.bias": 0.3 * torch.randn(3 * rank, generator=gen)}
    base = torch.randn(batch, gamma, vocab, generator=gen)
    prev = torch.randint(vocab, (batch, gamma), generator=gen)
    h = torch.randn(batch, gamma, hidden, generator=gen)
    exact, bound = markov_block.oracle_block_logits("rnn", state, base, prev, h)
    got = exact.float()
    got[3, 1, 4] += 1.0  # far outside the bound, in the second slice of two rows
    case = type("Case", (), {"id": "S0/x"})()
    whole = markov_block.compare_block_logits(case, "a vs b", got, exact.float(), "rnn", state, base, prev, h)
    monkeypatch.setattr(markov_block, "COMPARE_SLICE_ELEMENTS", 2 * gamma * vocab)
    sliced = markov_block.compare_block_logits(case, "a vs b", got, exact.float(), "rnn", state, base, prev, h)
    assert not sliced.within_bound and sliced.worst_index == (3 * gamma + 1) * vocab + 4 == whole.worst_index
    assert sliced.elements == whole.elements == got.numel() and not sliced.bit_identical
    assert sliced.worst_ratio == pytest.approx(whole.worst_ratio, rel=1e-12)


# ----------------------------------------------------------------------------- the suite's cases
@pytest.mark.slow
@pytest.mark.usefixtures("preloaded_runs")
def test_duplicate_sample_block_fails_the_bound_by_orders_of_magnitude():
    cases = [S4_VS_EAGER.format(name) for name in ("vanilla-float32", "rnn-bfloat16")]
    records = _run("mutant:folded-duplicate-sample-block", cases)
    for key in cases:
        record = records[key]
        assert record["outcome"] == "failed", f"{key}: {record['outcome']}"
        worst = max(float(n["worst_ratio"]) for n in record["numerics"])
        assert worst > DUPLICATE_MIN_RATIO, f"{key}: the duplicate pass is only {worst:.3g} x the bound"
        assert record["bit_identical"] is False


@pytest.mark.slow
@pytest.mark.usefixtures("preloaded_runs")
def test_reordered_arithmetic_passes_the_bound_but_is_not_bit_identical():
    records = _run("tests.toy_adapters:reordered", BOUNDED)
    for key in BOUNDED:
        record = records[key]
        assert record["outcome"] == "passed", f"{key}: {record['outcome']}: {record['reason'][-400:]}"
        assert record["bit_identical"] is False, f"{key}: float64 / float32 variant reported bit-identical"
    reference = _run("reference", BOUNDED)
    assert all(reference[key]["outcome"] == "passed" and reference[key]["bit_identical"] for key in BOUNDED)


# ----------------------------------------------------------------------------- reports
def _record(name: str, section: str, bit_identical):
    comparisons = [] if bit_identical is None else [
        {"name": f"{name}: a vs b", "max_abs_diff": 0.0 if bit_identical else 2.4e-7,
         "worst_ratio": 0.0 if bit_identical else 0.08, "bit_identical": bit_identical},
    ]
    return {"case": f"c/t.py::{name}", "section": section, "outcome": "passed", "duration_s": 0.1,
            "reason": "", "stats": [], "numerics": comparisons, "bit_identical": bit_identical}


def test_matrix_counts_bit_identical_tests_per_section():
    rows = matrix.summarize([_record("test_S2_a", "S2", True), _record("test_S2_b", "S2", False),
                             _record("test_S2_c", "S2", None), _record("test_S5_d", "S5", None)])
    cells = matrix.table(rows)
    column = cells[0].index("bit-identical")
    assert [r[column] for r in cells[1:]] == ["1/2", "-"]
    assert [row.verdict for row in rows] == ["PASS", "PASS"]  # not bit-identical is no failure


def test_markdown_lists_tests_within_the_bound_but_not_bit_identical(tmp_path):
    tests = [_record("test_S2_a", "S2", True), _record("test_S2_b", "S2", False)]
    payload = {"impl": "x", "device": "cpu", "base_seed": 1, "wall_s": 1.0, "capabilities": [], "tests": tests}
    markdown.write_markdown(payload, tmp_path / "report.md")
    text = (tmp_path / "report.md").read_text()
    section = text.split("## Within the bound, not bit-identical")[1].split("## Statistical")[0]
    assert "`c/t.py::test_S2_b`: max |diff| 2.4e-07, 0.08 x its bound" in section
    assert "test_S2_a" not in section
