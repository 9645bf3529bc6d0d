"""The progress lines of ``dspark-conformance run`` (``conformance.progress``); the console
as a whole (no dots, tracebacks only with ``--tracebacks``, under xdist too) is checked by
the runs of tests/test_cli.py."""

from collections import Counter

from conformance.progress import SectionProgress, elapsed_text


def _progress(done: dict[str, int], counted: dict[str, Counter]) -> SectionProgress:
    progress = SectionProgress(config=None, tracebacks=False)
    progress.done.update(done)
    progress.counted.update(counted)
    return progress


def test_elapsed_text_in_whole_seconds_and_minutes():
    assert [elapsed_text(s) for s in (0.4, 42.4, 59.6, 185)] == ["0 s", "42 s", "1 min 0 s", "3 min 5 s"]


def test_a_line_says_the_section_the_run_and_the_time_left_at_the_mean_rate():
    progress = _progress({"S3": 30, "S5": 10}, {"S3": Counter(failed=2, skipped=4)})
    selected = {"S3": 75, "S5": 71}
    # 40 of 146 cases in 80 s: the 106 left at 2 s each
    assert progress.line("S3", selected, 80.0) == (
        "S3 step sampling: 30/75 (2 failed, 4 skipped); run 40/146 cases, 1 min 20 s elapsed, about 3 min 32 s left")
    progress.done["S5"] = 71
    assert progress.line("S5", selected, 90.0).startswith("S5 chain verification: 71/71 done; run 101/146 cases")


def test_no_estimate_before_a_tenth_of_the_cases_are_done():
    """Before, the start-up dominates the mean: a first line read "about 52 min 31 s left" of a
    run that took 3 minutes (an H100 run, 1 case done 9 s in)."""
    assert _progress({"S4": 1}, {}).line("S4", {"S4": 52, "S9": 293}, 9.0) == (
        "S4 folded sampler: 1/52; run 1/345 cases, 9 s elapsed")
    assert _progress({"S4": 35}, {}).line("S4", {"S4": 52, "S9": 293}, 30.0).endswith("about 4 min 26 s left")


def test_the_last_line_has_no_estimate_and_unknown_totals_are_left_out():
    assert _progress({"S1": 15}, {}).line("S1", {"S1": 15}, 12.0) == "S1 base logits: 15/15 done; run 15/15 cases, 12 s elapsed"
    assert _progress({"S1": 3}, {}).line("S1", {}, 5.0) == "S1 base logits: 3; run 3 cases, 5 s elapsed"
