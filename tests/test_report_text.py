"""What a run prints and writes as text: report.md and the matrix (conformance/report/markdown.py, matrix.py)."""

from __future__ import annotations

from conformance.report import markdown


def test_a_reason_with_angle_brackets_is_shown_not_swallowed_as_html(tmp_path):
    # A fresh-user trial: "<accepted drafts>, <one token < 3>" sat raw in report.md, which a
    # Markdown renderer drops as an HTML tag; report.html escaped it.
    record = {"case": "conformance/test_verify.py::test_S5_x", "nodeid": "n", "section": "S5", "outcome": "failed",
              "duration_s": 0.1, "reason": "AssertionError: expected <accepted drafts>, <one token < 3> & more",
              "stats": [], "numerics": [], "bit_identical": None, "replay": "dspark-conformance run --case k"}
    payload = {"impl": "x", "device": "cpu", "base_seed": 1, "wall_s": 1.0, "capabilities": [], "tests": [record]}
    markdown.write_markdown(payload, tmp_path / "report.md")
    line = next(l for l in (tmp_path / "report.md").read_text().splitlines() if "test_S5_x" in l)
    assert "&lt;accepted drafts&gt;, &lt;one token &lt; 3&gt; &amp; more" in line, line
    assert "<accepted" not in line


def test_the_matrix_warns_where_a_pass_had_little_power():
    # A fresh-user trial: --budget 1e-9 gave PASS with power 0.0000 and nothing else said.
    from conformance.report import matrix

    def payload(power):
        stat = {"power_at_min_effect": power}
        record = {"case": "conformance/test_simulated.py::test_S6_x", "section": "S6", "outcome": "passed",
                  "duration_s": 0.1, "reason": "", "stats": [stat, {"power_at_min_effect": 0.999}], "numerics": []}
        return {"impl": "x", "device": "cpu", "base_seed": 1, "wall_s": 1.0, "budget": 1e-9, "tests": [record]}

    low = matrix.format_matrix(payload(0.0000025))
    assert "min 0.0000 over 2 assertions; WARNING: 1 below 0.5, where a pass says little (raise --budget)" in low
    assert "WARNING" not in matrix.format_matrix(payload(0.5))


def test_sections_with_selected_cases_that_never_ran_read_interrupted_not_pass(tmp_path):
    # A fresh-user trial: an interrupted run printed "S6 ... PASS 11" where 17 of its 28
    # selected cases never ran, and nothing counted them.
    from conformance import cli
    from conformance.report import matrix

    record = {"case": "conformance/test_simulated.py::test_S6_x", "nodeid": "n", "section": "S6", "outcome": "passed",
              "duration_s": 0.1, "reason": "", "stats": [], "numerics": [], "bit_identical": None, "replay": "r"}
    failed = dict(record, case="conformance/test_verify.py::test_S5_y", section="S5", outcome="failed")
    payload = {"impl": "x", "device": "cpu", "base_seed": 1, "wall_s": 1.0, "capabilities": [], "exit_status": 2,
               "tests": [record, failed], "selected_by_section": {"S5": 1, "S6": 28, "S8": 3}}
    rows = {row.section: row for row in matrix.run_rows(payload)}
    assert (rows["S5"].verdict, rows["S6"].verdict, rows["S8"].verdict) == ("FAIL", "INTERRUPTED", "INTERRUPTED")
    assert (rows["S6"].not_run, rows["S8"].not_run) == (27, 3)
    line = "30 of the 32 selected cases did not run (the run was interrupted before them)"
    assert line in matrix.format_matrix(payload)
    markdown.write_markdown(payload, tmp_path / "report.md")
    assert line in (tmp_path / "report.md").read_text()
    stopped = dict(payload, exit_status=1)  # -x, --maxfail, or xdist's worker restarts spent: no interrupt
    assert ("30 of the 32 selected cases did not run (the run stopped before them: -x or --maxfail, or xdist stopped "
            "restarting crashed workers)") in matrix.format_matrix(stopped)
    # A record missing from a run pytest calls complete is no PASS either.
    complete = dict(payload, tests=[record], exit_status=0, selected_by_section={"S6": 2})
    assert matrix.overall(matrix.run_rows(complete), complete) == "INTERRUPTED"
    assert cli.exit_code(0, complete) == cli.EXIT_INFRA
    every = dict(complete, selected_by_section={"S6": 1})
    assert (matrix.overall(matrix.run_rows(every), every), cli.exit_code(0, every)) == ("PASS", cli.EXIT_PASS)


def _record(case, outcome="passed", *, duration=0.1, reason="", stats=()):
    return {"case": case, "nodeid": case, "section": case.partition("/")[0], "outcome": outcome,
            "duration_s": duration, "reason": reason, "stats": list(stats), "numerics": [], "bit_identical": None,
            "replay": f"dspark-conformance run --case {case}"}


def _payload(*records, **fields):
    return {"impl": "x", "device": "cpu", "base_seed": 1, "wall_s": 1.0, "capabilities": [], "tests": list(records),
            **fields}


def _renderings(payload, tmp_path):
    """The console matrix, report.md and report.html of one payload."""
    from conformance.report import html, matrix

    markdown.write_markdown(payload, tmp_path / "report.md")
    return matrix.format_matrix(payload), (tmp_path / "report.md").read_text(), html.render_html(payload)


def test_every_rendering_states_the_budget_and_the_power_reached(tmp_path):
    # A new user's trial: --budget 0.1 warned of power 0.0018 on the console only; report.md
    # and report.html said a plain PASS.
    stats = [{"name": f"S6/a/{i}", "passed": True, "power_at_min_effect": power}
             for i, power in enumerate((0.0018, 0.4))]
    low = _payload(_record("S6/a", stats=stats), budget=0.1)
    for text in _renderings(low, tmp_path):
        assert "power at the declared minimum effects (budget x0.1): min 0.0018 over 2 assertions" in text
        assert "WARNING: 2 below 0.5, where a pass says little (raise --budget)" in text
    for text in _renderings(_payload(_record("S6/a")), tmp_path):  # no statistical assertion: no line
        assert "power at the declared" not in text


def test_every_rendering_names_an_offered_capability_that_cannot_run_here_and_why(tmp_path):
    # A new user's trial: SGLang on CPU said why its folded sampler skipped in report.md only.
    payload = _payload(_record("S4/a", "skipped", reason="Skipped: cannot run here"),
                       cannot_run_here={"FoldedDraft": "needs a CUDA build of torch"})
    for text in _renderings(payload, tmp_path):
        assert "nable to run here" in text and "FoldedDraft (needs a CUDA build of torch)" in text
    for text in _renderings(_payload(_record("S4/a")), tmp_path):
        assert "nable to run here" not in text


def test_the_time_column_says_it_sums_case_durations_not_wall_time(tmp_path):
    # A fresh-user trial: "time s" summed 766 s of cases over the workers of a 478 s run.
    payload = _payload(_record("S6/a", duration=0.8), _record("S6/b", duration=0.8))
    for text in _renderings(payload, tmp_path):
        assert "case time s" in text and "time s" not in text.replace("case time s", "")
        assert "the sum of case durations across workers (the wall time is above)" in text


def test_report_md_lists_failures_errors_and_xpasses_before_the_skips(tmp_path):
    # A fresh-user trial: report.md (where CI/gate.sh points on FAIL) listed the two failures
    # at lines 287 and 295, after 267 skips.
    skips = [_record(f"S5/s{i}", "skipped", reason="capability ChainVerifier not offered by x") for i in range(5)]
    payload = _payload(*skips[:3], _record("S5/f", "failed", reason="E AssertionError: wrong"), *skips[3:],
                       _record("S6/e", "error", reason="E RuntimeError: boom"),
                       _record("S6/x", "xpassed", reason="[S6] fixed"), _record("S6/i", "inconclusive"),
                       _record("S6/xf", "xfailed", reason="[S6] known"))
    markdown.write_markdown(payload, tmp_path / "report.md")
    lines = (tmp_path / "report.md").read_text().splitlines()
    listed = [line.split("`")[1] for line in lines if line.startswith("- **")]
    assert listed == ["S5/f", "S6/e", "S6/x", "S6/i", "S6/xf", *(f"S5/s{i}" for i in range(5))], listed


def test_a_long_failure_message_is_cut_between_words_never_inside_a_number(tmp_path):
    # A fresh-user trial: the console's FAILED line cut "chi-square = 1662" to "166".
    from conformance.report import html, matrix

    for pad in range(0, 30):
        message = "S6/x/law: FAILED: " + "word " * (75 + pad) + "chi-square (Pearson) = 1662, p = 1.5e-07 <= alpha"
        record = _record("S6/x", "failed", reason=f"Traceback\nE   AssertionError: {message}\nstats.py:113")
        words = ("AssertionError: " + message).split()
        shown = matrix.short_reason(record)
        assert len(shown) <= matrix.REASON_LIMIT
        kept = shown.removesuffix(" " + matrix.ELLIPSIS).split()
        assert kept == words[:len(kept)], shown  # whole words of the message, in order
        assert shown.endswith(matrix.ELLIPSIS) == (len(kept) < len(words))
        console = next(line for line in matrix.format_matrix(_payload(record)).splitlines() if "S6/x" in line)
        reason = console.removeprefix("FAILED S6/x: ").removesuffix(f"  replay: {record['replay']}")
        assert len(reason) <= matrix.CONSOLE_REASON_LIMIT, console
        kept = reason.removesuffix(" " + matrix.ELLIPSIS).split()
        assert kept == words[1:len(kept) + 1], console  # "AssertionError:" left out, whole words after it
        assert f"<div>{shown}</div>" in html.render_html(_payload(record))
    assert matrix.clip("1662" * 200, 10) == "1662" * 200  # one word longer than the limit is kept whole


def test_every_verdict_has_a_coverage_line_with_skips_by_class_and_a_warning_where_most_skipped(tmp_path):
    # A fresh-user trial: "overall: PASS" printed with 277 of 332 cases skipped and no line
    # saying so. The reasons below are those the plugin and the suite give.
    from conformance import contract
    from conformance.report import matrix

    unmet = contract.Requirement(devices=("cuda",), reason="a Triton kernel").unmet("cpu")
    reasons = ["capability ChainVerifier not offered by toy:only-simulated", "gpu tier: CUDA is not available",
               f"capability StepSampler of x {unmet}", "gpu tier: production vocabulary needs --dspark-device cuda",
               "ChainVerifier.verify: not supported by the IUT (no explicit uniforms)",
               "SpeculativeRound: seeded rows not supported by this IUT (no seeds)",
               "the session cannot be spied on (sample_block_calls is None)"]
    skips = [_record(f"S5/s{i}", "skipped", reason=reason) for i, reason in enumerate(reasons)]
    payload = _payload(*skips, _record("S5/p"), _record("S6/p"), _record("S6/q"), _record("S6/s", "skipped"))
    expected = ("coverage: 3 of 11 cases ran; 8 skipped (1 not offered by the adapter, 3 need CUDA or the GPU tier, "
                "2 unsupported feature, 2 other)")
    warning = "WARNING: most cases skipped in S5 (7 of 8): the verdict there rests on the few that ran"
    console, report_md, page = _renderings(payload, tmp_path)
    assert expected in console and warning in console and "S6 (" not in console.split("WARNING")[1]
    assert expected in report_md and warning in report_md
    assert expected.removeprefix("coverage: ") in page and warning in page
    assert matrix.overall(matrix.run_rows(payload), payload) == "PASS"  # shown, never a change of verdict
    half = _payload(_record("S6/p"), _record("S6/s", "skipped"))
    assert "WARNING" not in matrix.format_matrix(half)  # half is not most
    assert "coverage: 1 of 2 cases ran; 1 skipped (0 not offered" in matrix.format_matrix(half)
    none_ran = _payload(_record("S6/p"), _record("S5/s", "skipped"), _record("S5/t", "skipped"))
    assert "WARNING" not in matrix.format_matrix(none_ran)  # S5 reads SKIP: no "few that ran"


def test_cases_that_ran_again_alone_after_cuda_out_of_memory_are_said_in_every_rendering(tmp_path):
    """``conformance.runner.rerun_out_of_memory`` replaces a record by its lone run and marks
    it; the reports say which cases those are, never silently."""
    again = [{**_record(f"S4/big-{i}"), "first_attempt": "failed with CUDA out of memory beside the other workers"}
             for i in range(6)]
    console, report_md, page = _renderings(_payload(_record("S3/fine"), *again), tmp_path)
    line = ("ran again alone: 6 cases failed with CUDA out of memory beside the other workers, and their lone runs "
            "decide (S4/big-0, S4/big-1, S4/big-2, S4/big-3, S4/big-4, ...)")
    assert line in console and line in report_md and line in page
    (tmp_path / "plain").mkdir()
    assert "ran again alone" not in _renderings(_payload(_record("S3/fine")), tmp_path / "plain")[0]


def test_a_failed_frequency_test_names_its_worst_bins_in_the_reports_and_on_the_console_with_tracebacks(tmp_path):
    # A fresh-user trial: a statistical failure did not say which outcome each bin is.
    from conformance import stats
    from conformance.budget import StatLedger
    from conformance.report import matrix

    result = stats.goodness_of_fit([100, 300, 100, 300, 200], [0.1, 0.15, 0.25, 0.3, 0.2], name="S6/x/law",
                                   labels=[f"length {k}" for k in range(1, 6)], ledger=StatLedger())
    reason = f"Traceback\nE   AssertionError: {result.message()}\nconformance/stats.py:113: AssertionError"
    record = _record("S6/x", "failed", reason=reason, stats=[result.to_dict()])
    worst = "S6/x/law: largest Pearson residuals (O - E)/sqrt(E): length 2 +12.2 (O 300, E 150.0); length 3 -9.49"
    console, report_md, page = _renderings(_payload(record), tmp_path)
    assert worst in report_md and worst in page
    assert worst not in console and worst in matrix.format_matrix(_payload(record), details=True)  # --tracebacks
    # Where the shown reason holds the bins already, they are not said twice.
    short = dict(record, reason="E   AssertionError: " + result.message().split("; chi-square")[0]
                 + "; " + stats.bins.largest_residuals(result.observed, result.expected, result.bin_labels))
    assert matrix.format_matrix(_payload(short), details=True).count("largest Pearson residuals") == 1


def test_the_console_gives_one_line_per_failure_with_its_replay_command(tmp_path):
    # Issue 44: after the matrix, the console printed each failure over three or more lines
    # (reason, bins, replay) where one line with its replay command tells what to rerun.
    from conformance import stats
    from conformance.budget import StatLedger
    from conformance.report import matrix

    result = stats.goodness_of_fit([100, 300, 100, 300, 200], [0.1, 0.15, 0.25, 0.3, 0.2], name="S6/f/law",
                                   labels=[f"length {k}" for k in range(1, 6)], ledger=StatLedger())
    deciding = [_record("S6/f", "failed", reason=f"Traceback\nE   AssertionError: {result.message()}\nstats.py:113",
                        stats=[result.to_dict()]),
                _record("S5/e", "error", reason="Traceback\nE   RuntimeError: CUDA error: an illegal memory access"),
                _record("S6/x", "xpassed", reason="[S6] fixed in this release"),
                _record("S6/i", "inconclusive", reason="E   AssertionError: S6/i: p = 3e-06 between the thresholds")]
    error = {"module": "conformance/suite/test_round.py", "error": "ModuleNotFoundError: No module named 'x'"}
    payload = _payload(_record("S6/p"), _record("S5/s", "skipped", reason="not offered"), *deciding,
                       collection_errors=[error])
    lines = matrix.format_matrix(payload).splitlines()
    after = lines[lines.index("overall: FAIL") + 1:]
    assert len(after) == len(deciding), after  # nothing else below the verdict: no bins, no replay lines
    for line, record in zip(after, deciding):
        assert line.startswith(f"{record['outcome'].upper()} {record['case']}: "), line
        assert line.endswith(f"  replay: {record['replay']}"), line
        assert len(line) <= 200, line
    assert "ERROR S5/e: RuntimeError: CUDA error: an illegal memory access  replay: " in after[1]
    assert after[3].startswith("INCONCLUSIVE S6/i: p = 3e-06 between the thresholds  replay: "), after[3]
    assert after[0].startswith("FAILED S6/f: law: chi-square (Pearson) = 240, p = 9.28e-51 <= alpha = 5e-06; "
                               "TV(observed, probs) = 0.15  replay: "), after[0]
    assert f"COLLECTION ERROR: {error['module']}: {error['error']} (none of its cases ran)" in lines
    assert not any(r["case"] in line for line in lines for r in payload["tests"] if r["outcome"] in ("passed", "skipped"))


def test_a_suite_module_that_did_not_collect_is_an_error_named_in_every_report(tmp_path):
    # A GPU run (session 23): a suite module failed to import, `-k` kept two cases of another
    # module, both passed, and the run printed "overall: PASS" (exit 1, naming nothing).
    from conformance import cli, runner
    from conformance.report import matrix

    record = {"case": "S3/x", "nodeid": "n", "section": "S3", "outcome": "passed", "duration_s": 0.1, "reason": "",
              "stats": [], "numerics": [], "bit_identical": None, "replay": "r"}
    error = {"module": "conformance/suite/test_round.py", "error": "ModuleNotFoundError: No module named 'x'"}
    payload = {"impl": "x", "device": "cpu", "base_seed": 1, "wall_s": 1.0, "capabilities": [], "exit_status": 1,
               "tests": [record], "collection_errors": [error]}
    assert matrix.overall(matrix.run_rows(payload), payload) == "ERROR"
    assert cli.exit_code(1, payload) == cli.EXIT_INFRA
    named = "COLLECTION ERROR: conformance/suite/test_round.py: ModuleNotFoundError: No module named 'x'"
    assert named in matrix.format_matrix(payload) and "overall: ERROR" in matrix.format_matrix(payload)
    markdown.write_markdown(payload, tmp_path / "report.md")
    text = (tmp_path / "report.md").read_text()
    assert named in text and "overall **ERROR**" in text
    from conformance.report import html

    page = html.write_html(payload, tmp_path)
    assert "COLLECTION ERROR: conformance/suite/test_round.py" in page.read_text()
    # A failure still decides the verdict; the module is named beside it.
    failed = dict(payload, tests=[dict(record, outcome="failed")])
    assert (matrix.overall(matrix.run_rows(failed), failed), cli.exit_code(1, failed)) == ("FAIL", cli.EXIT_FAIL)
    assert named in matrix.format_matrix(failed)
    # Both phases of a run report the module: the merged run names it once.
    _, merged = runner.merge_phases((1, payload), (1, dict(payload, tests=[])))
    assert merged["collection_errors"] == [error]
    _, merged = runner.merge_phases((0, dict(payload, collection_errors=[])), (1, dict(payload, tests=[])))
    assert merged["collection_errors"] == [error]
    clean = dict(payload, collection_errors=[], exit_status=0)
    assert (matrix.overall(matrix.run_rows(clean), clean), cli.exit_code(0, clean)) == ("PASS", cli.EXIT_PASS)


def test_a_replay_line_and_the_header_carry_the_settings_the_run_depends_on():
    # A new user's trial: a run with the ledger off printed replay lines without the switch,
    # and those replays passed (the ledger expected the failure).
    import types

    from conformance import contract as c
    from conformance.report import matrix
    from conformance.session import RunSession

    options = {"--dspark-impl": "toy", "--dspark-device": "cpu", "--dspark-seed": 7, "--dspark-budget": 1.0}
    session = RunSession(types.SimpleNamespace(getoption=options.get))
    session._adapter = c.Adapter("toy", c.Conventions(), {}, replay_env={"DSPARK_TOY_LEDGER": "off"})
    assert session.replay_command("S5/a") == ("DSPARK_TOY_LEDGER=off dspark-conformance run --impl toy "
                                              "--device cpu --seed 7 --case S5/a")
    payload = _payload(_record("S5/a"), replay_env={"DSPARK_TOY_LEDGER": "off"})
    assert matrix.format_matrix(payload).splitlines()[0].endswith(" wall=1.0s DSPARK_TOY_LEDGER=off")


def test_a_failure_reason_keeps_the_tracebacks_last_whole_lines():
    """A trial found results.json's reason starting mid-line ("max(value))"): the record keeps
    the traceback's last lines whole, within REASON_CHARS."""
    from types import SimpleNamespace

    from conformance.session import REASON_CHARS, _reason

    lines = [f"    frame {i}: value = compute(max(value))" for i in range(200)] + ["E   AssertionError: the end"]
    text = "\n".join(lines)
    reason = _reason(SimpleNamespace(skipped=False, failed=True, longreprtext=text))
    assert len(reason) <= REASON_CHARS and text.endswith(reason) and reason.startswith("    frame ")
    assert ("\n" + reason) in text  # it starts where a line starts
    one_line = "x" * (3 * REASON_CHARS)
    assert _reason(SimpleNamespace(skipped=False, failed=True, longreprtext=one_line)) == one_line[-REASON_CHARS:]
    assert _reason(SimpleNamespace(skipped=False, failed=True, longreprtext="short")) == "short"
