"""The benchmark harness ``bench/``: derived columns, byte counts, failure rows, the tier
command lines, and a CPU smoke run of every benchmark at tiny shapes (``--quick``).

The smoke run checks structure (every row timed or skipped with a reason, the JSON record),
never speed: timings on a shared CPU mean nothing.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import ceiling, common, folded, summary, verdict
from bench.__main__ import main, tier_commands
from bench.common import CopyBandwidth, Row, Timing
from bench.wall import Timed
from dspark_ref.fused_sampling import INTERPRETER_DEFECT, KERNEL_INTERPRETED, splits_for, triton

CPU = Timing(torch.device("cpu"), warmup_ms=0.0, rep_ms=1.0)
needs_interpreter = pytest.mark.skipif(not KERNEL_INTERPRETED or INTERPRETER_DEFECT is not None,
                                       reason=INTERPRETER_DEFECT or "needs TRITON_INTERPRET=1 at import")


@pytest.fixture
def one_thread():
    # Two oversubscribed cores make multi-threaded torch ops crawl; one thread keeps this fast.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_bench_finalize_derives_bandwidth_percent_and_speedup():
    copy = CopyBandwidth(bytes=2**20, median_ms=1.0, gbs=4.0)
    base = Row("step", "s", "eager", {}, median_ms=2.0, bytes_moved=4_000_000, baseline=True)
    fast = Row("step", "s", "fast", {}, median_ms=0.5, bytes_moved=4_000_000)
    other_shape = Row("step", "t", "fast", {}, median_ms=0.5, bytes_moved=1_000_000)
    skipped = Row("step", "s", "absent", {}, status="skipped: not installed")
    common.finalize([base, fast, other_shape, skipped], copy)
    assert base.gbs == pytest.approx(2.0) and base.pct_copy == pytest.approx(50.0) and base.speedup == 1.0
    assert fast.gbs == pytest.approx(8.0) and fast.pct_copy == pytest.approx(200.0)
    assert fast.speedup == pytest.approx(4.0)
    assert other_shape.speedup is None  # no baseline for shape "t"
    assert skipped.gbs is None and skipped.speedup is None


def test_bench_roofline_is_bytes_over_copy_bandwidth():
    copy = CopyBandwidth(bytes=2**20, median_ms=1.0, gbs=2.0)
    row = common.roofline_row("step", "s", "roofline", {}, 1_000_000, copy, "note")
    assert row.median_ms == pytest.approx(0.5)  # 1e6 B / 2e9 B/s
    assert common.finalize([row], copy)[0].pct_copy == pytest.approx(100.0)


def test_bench_copy_bandwidth_counts_read_and_write(monkeypatch):
    monkeypatch.setattr(common, "median_ms", lambda fn, timing: 2.0)
    bw = common.copy_bandwidth(CPU, 2**20)
    assert bw.gbs == pytest.approx(2 * 2**20 / 2e-3 / 1e9)


def test_bench_copy_bandwidth_rejects_small_buffer():
    with pytest.raises(ValueError, match="nbytes"):
        common.copy_bandwidth(CPU, 1024)


def test_bench_graph_replay_rejects_cpu():
    with pytest.raises(ValueError, match="device"):
        common.graph_replay(lambda: None, torch.device("cpu"))


@pytest.mark.gpu
def test_bench_graph_replay_keeps_what_the_captured_call_holds():
    """A call whose factory made its own input: after capture only the returned replay holds
    it. Were it freed, the allocations below would reuse its block and the replay would read
    their zeros (seen on the H200: SGLang's step temperatures read as 0, a greedy row)."""
    device = torch.device("cuda")
    out = torch.empty(64, device=device)

    def factory():
        scale = torch.full((64,), 0.8, device=device)  # held by the call's closure only
        return lambda: torch.mul(scale, 2.0, out=out)

    replay = common.graph_replay(factory(), device)
    reuse = [torch.zeros(64, device=device) for _ in range(64)]
    out.zero_()
    replay()
    torch.cuda.synchronize(device)
    assert torch.equal(out, torch.full_like(out, 1.6)), out[:4].tolist()
    del reuse


def test_bench_measure_reports_a_failure_in_its_row():
    def broken():
        raise RuntimeError("kernel exploded")

    row = common.measure("step", "s", "broken", {}, broken, CPU)
    assert row.median_ms is None and row.status == "failed: RuntimeError: kernel exploded"
    assert "failed: RuntimeError: kernel exploded" in common.format_table([row])


def test_bench_folded_block_bytes_hand_computed():
    # B=2, gamma=3, V=10, r=4, bf16: logits 120 + corrected 120 + W2 3*10*4*2 = 240 + noise 3*2*2*10*4 = 480
    assert folded.block_bytes(2, 3, 10, 4, 2) == 960


def test_bench_tier_commands():
    base = [sys.executable, "-m", "pytest", "conformance", "tests", "-q", "-n", "3"]
    assert tier_commands("3", torch.device("cpu")) == {"cpu": base}
    assert tier_commands("3", torch.device("cuda")) == {"cpu": base, "gpu": [*base, "--dspark-device", "cuda"]}


def _step_rows(shape, ours_graph_ms, sglang_graph_ms):
    rows = [
        {"benchmark": "step", "shape": shape, "impl": "ref fused race [graph]", "median_ms": ours_graph_ms},
        {"benchmark": "step", "shape": shape, "impl": "ref fused race, counter noise [graph]", "median_ms": 0.01},
        {"benchmark": "step", "shape": shape, "impl": "ref fused race [call]", "median_ms": 0.05},
        {"benchmark": "step", "shape": shape, "impl": "ref fused race, counter noise [call]", "median_ms": 0.04},
        {"benchmark": "step", "shape": shape, "impl": "ref fused race, deferred check [call]", "median_ms": 0.03},
        {"benchmark": "step", "shape": shape, "impl": "ref fused race, counter noise, deferred check [call]",
         "median_ms": 0.02},
        {"benchmark": "step", "shape": shape, "impl": "roofline logits+noise", "median_ms": 0.008},
        {"benchmark": "step", "shape": shape, "impl": "roofline logits only", "median_ms": 0.004},
        {"benchmark": "step", "shape": shape, "impl": "sglang MarkovSampleStep [call]", "median_ms": 0.08},
    ]
    if sglang_graph_ms is not None:
        rows.append({"benchmark": "step", "shape": shape, "impl": "sglang MarkovSampleStep [graph]",
                     "median_ms": sglang_graph_ms})
    else:
        rows.append({"benchmark": "step", "shape": shape, "impl": "sglang MarkovSampleStep [graph]",
                     "median_ms": None, "status": "skipped: not installed"})
    return rows


def test_bench_summary_ratios_side_by_side():
    copy = {"benchmark": "step", "shape": "B=64 V=129280 float32", "impl": summary.COPY_SAME_BYTES, "median_ms": 0.0095}
    rows = _step_rows("B=64 V=129280 float32", 0.01, 0.0454) + [copy, {"benchmark": "folded", "shape": "x", "impl": "y"}]
    records = summary.ratios(rows)
    assert [(r["mode"], r["impl"]) for r in records] == [
        ("call", "ref fused race"), ("call", "ref fused race, counter noise"),
        ("call", "ref fused race, deferred check"), ("call", "ref fused race, counter noise, deferred check"),
        ("graph", "ref fused race"), ("graph", "ref fused race, counter noise"), ("graph", summary.COPY_SAME_BYTES),
    ]
    graph = records[4]
    assert graph["ours_over_sglang"] == pytest.approx(0.01 / 0.0454)
    assert graph["ours_over_roofline"] == pytest.approx(0.01 / 0.008)
    assert graph["pct_roofline"] == pytest.approx(80.0)
    assert records[6]["ours_over_sglang"] is None and records[6]["pct_roofline"] == pytest.approx(800 / 9.5)
    assert records[3]["ours_over_sglang"] == pytest.approx(0.25) and records[3]["pct_roofline"] == pytest.approx(20.0)
    met = summary.targets(records)
    assert met["roofline_met"] and met["compared"] == 2 and met["slower_than_sglang"] == []
    assert met["sync_call_compared"] == 1 and met["sync_call_slower"] == []
    assert met["copy_pct"] == pytest.approx(800 / 9.5)
    assert "a copy of the same bytes: 84.2%" in summary.format_ratios(records)
    assert summary.markdown(records).count("\n") == 9


def test_bench_summary_reports_steady_state_beside_the_single_replay():
    shape = "B=64 V=129280 float32"
    steady = [
        {"benchmark": "step", "shape": shape, "impl": "ref fused race [steady]", "median_ms": 0.009},
        {"benchmark": "step", "shape": shape, "impl": "sglang MarkovSampleStep [steady]", "median_ms": 0.036},
        {"benchmark": "step", "shape": shape, "impl": f"{summary.COPY_SAME_BYTES} [steady]", "median_ms": 0.0085},
    ]
    records = summary.ratios(_step_rows(shape, 0.0125, 0.0454) + steady)
    by_mode = {(r["mode"], r["impl"]): r for r in records}
    assert by_mode[("steady", "ref fused race")]["ours_over_sglang"] == pytest.approx(0.25)
    assert by_mode[("steady", "ref fused race")]["pct_roofline"] == pytest.approx(800 / 9)
    assert ("steady", "ref fused race, counter noise") not in by_mode  # no such row: nothing claimed
    met = summary.targets(records)
    # judged on the single replay (64%), the steady state only reported beside it
    assert met["roofline_pct"] == pytest.approx(64.0) and not met["roofline_met"]
    assert met["steady_pct"] == pytest.approx(800 / 9) and met["steady_copy_pct"] == pytest.approx(800 / 8.5)
    assert "steady state: 88.9%, the copy 94.1%" in summary.format_ratios(records)


def test_bench_summary_reports_the_read_only_ceiling_beside_the_copy(tmp_path, capsys):
    # The ceiling benchmark's read of the race's bytes is a ceiling like the copy: its % roofline
    # is reported, never compared with SGLang, and the CLI takes its JSON beside the step's.
    shape = "B=64 V=129280 float32"
    reads = [{"benchmark": "ceiling", "shape": shape, "impl": f"{summary.READ_SAME_BYTES} [graph]", "median_ms": 0.01},
             {"benchmark": "ceiling", "shape": shape, "impl": f"{summary.READ_SAME_BYTES} [steady]",
              "median_ms": 0.0089},
             {"benchmark": "ceiling", "shape": shape, "impl": "read, flat [graph]", "median_ms": 0.001}]
    step = _step_rows(shape, 0.0125, 0.0454)
    records = summary.ratios(step + reads)
    by_mode = {(r["mode"], r["impl"]): r for r in records}
    read = by_mode[("graph", summary.READ_SAME_BYTES)]
    assert read["pct_roofline"] == pytest.approx(80.0) and read["ours_over_sglang"] is None
    assert not any(r["impl"] == "read, flat" for r in records)
    met = summary.targets(records)
    assert met["read_pct"] == pytest.approx(80.0) and met["steady_read_pct"] == pytest.approx(800 / 8.9)
    assert "a kernel that only reads them: 80.0%" in summary.format_ratios(records)
    assert "only reads" not in summary.format_ratios(summary.ratios(step))  # no ceiling rows: nothing said
    paths = []
    for name, rows in (("step.json", step), ("ceiling.json", reads)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps({"environment": {}, "rows": rows}))
    assert summary.main([str(p) for p in paths]) == 0
    assert "a kernel that only reads them: 80.0%" in capsys.readouterr().out


def test_bench_summary_adds_an_empty_launch_to_the_roofline_beside_the_single_replay():
    # What the timer charges a launch with no bytes, added to the roofline time: the % roofline
    # a kernel at the copy bandwidth would show under a single replay; not formed in steady state.
    shape = "B=64 V=129280 float32"
    empty = [{"benchmark": "ceiling", "shape": shape, "impl": f"{summary.EMPTY_KERNEL} [{mode}]", "median_ms": 0.002}
             for mode in ("call", "graph")]
    records = summary.ratios(_step_rows(shape, 0.0125, 0.0454) + empty)
    plus = [r for r in records if r["impl"] == summary.ROOFLINE_PLUS_EMPTY]
    assert [r["mode"] for r in plus] == ["graph"]
    assert plus[0]["ours_ms"] == pytest.approx(0.010) and plus[0]["pct_roofline"] == pytest.approx(80.0)
    assert plus[0]["ours_over_sglang"] is None
    assert summary.targets(records)["floor_pct"] == pytest.approx(80.0)
    assert "the copy bandwidth plus an empty launch: 80.0%" in summary.format_ratios(records)
    assert summary.targets(summary.ratios(_step_rows(shape, 0.0125, 0.0454)))["floor_pct"] is None


def test_bench_summary_judges_the_deferred_eager_call_and_reports_the_sync_one():
    # Eagerly, the check="deferred" call (returns before its kernel ends, as SGLang's does) is
    # judged; the check="sync" call, which waits for its flags, is reported beside it.
    shape = "B=1 V=129280 float32"
    rows = [dict(r, median_ms=0.09) if r["impl"] == "ref fused race, counter noise [call]" else r
            for r in _step_rows(shape, 0.01, 0.0454)]
    met = summary.targets(summary.ratios(rows))
    assert met["judged"]["call"] == "ref fused race, counter noise, deferred check"
    assert met["compared"] == 2 and met["slower_than_sglang"] == []
    assert met["sync_call_compared"] == 1 and met["sync_call_slower"] == [f"{shape} [call]"]
    slow = [dict(r, median_ms=0.1) if "deferred" in r["impl"] else r for r in rows]
    met = summary.targets(summary.ratios(slow))
    assert met["slower_than_sglang"] == [f"{shape} [call]"]
    assert "1 of 2 shapes/modes faster, slower at B=1 V=129280 float32 [call]" in summary.format_ratios(
        summary.ratios(slow))


def test_bench_summary_without_sglang_times_compares_nothing():
    # A run whose SGLang rows were skipped (an import error, say) must not read as a result.
    rows = [dict(r, median_ms=None, status="skipped: AdapterLoadError") if r["impl"].startswith("sglang") else r
            for r in _step_rows("B=64 V=129280 float32", 0.01, None)]
    records = summary.ratios(rows)
    line = summary.format_ratios(records).splitlines()[-1]
    assert "0 of 0" not in line
    assert line.count("not compared (no SGLang times)") == 2


def test_bench_steady_sets_cover_the_flush_size():
    assert common.steady_sets(2**30) == 2
    assert common.steady_sets(66_191_360) == 5  # B=64 V=129,280 fp32 logits + noise
    assert common.steady_sets(2**20) == 256
    with pytest.raises(ValueError, match="bytes_per_call"):
        common.steady_sets(0)


def test_bench_measure_steady_divides_by_the_calls_of_its_graph(monkeypatch):
    calls = []
    monkeypatch.setattr(common, "graph_replay", lambda fn, device: fn)
    monkeypatch.setattr(common, "median_ms", lambda fn, timing: (fn(), 4.0)[1])
    graphed = Timing(torch.device("cpu"), warmup_ms=0.0, rep_ms=1.0)
    monkeypatch.setattr(Timing, "use_graphs", property(lambda self: True))
    row = common.measure_steady("step", "s", "x [steady]", {}, lambda: [lambda: calls.append(0),
                                                                      lambda: calls.append(1)], graphed)
    assert row.status == "ok" and row.median_ms == pytest.approx(0.5)  # 8 calls: two sets cycled to the minimum
    assert calls == [0, 1] * 4 and row.params == {"calls_per_graph": 8, "input_sets": 2}


def test_bench_measure_steady_skips_without_graphs_and_reports_failures(monkeypatch):
    assert common.measure_steady("step", "s", "x", {}, lambda: [], CPU).status.startswith("skipped: ")
    monkeypatch.setattr(Timing, "use_graphs", property(lambda self: True))
    row = common.measure_steady("step", "s", "x", {}, lambda: [], CPU)
    assert row.status == "failed: ValueError: make_fns built no call"


def test_bench_summary_without_sglang_leaves_its_ratios_empty_and_flags_misses():
    records = summary.ratios(_step_rows("B=64 V=129280 float32", 0.02, None))
    assert [r["ours_over_sglang"] for r in records if r["mode"] == "graph"] == [None, None]
    met = summary.targets(records)
    assert not met["roofline_met"] and met["compared"] == 1 and met["slower_than_sglang"] == []
    assert met["copy_pct"] is None  # no copy row: nothing claimed


@pytest.mark.parametrize("argv, message", [
    (["tiers", "--workers", "many"], "--workers"),
    (["nonsense"], "benchmark"),
    (["step", "--sglang-path", "/nonexistent/dir"], "--sglang-path"),
    (["verdict", "--repeats", "0"], "--repeats"),
    (["step", "--", "-k", "test_S1_"], "options after '--'"),
])
def test_bench_cli_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_bench_cli_rejects_cuda_without_cuda(capsys):
    with pytest.raises(SystemExit):
        main(["step", "--device", "cuda"])
    assert "--device cuda" in capsys.readouterr().err


def test_bench_all_quick_smoke(tmp_path, capsys, one_thread):
    out = tmp_path / "bench.json"
    code = main(["all", "--quick", "--device", "cpu", "--warmup-ms", "0", "--rep-ms", "1", "--json", str(out)])
    table = capsys.readouterr().out
    assert code == 0, table
    assert "median ms" in table and "% copy BW" in table and "speedup vs eager" in table
    record = json.loads(out.read_text())
    assert {"device_name", "cpu_count", "torch", "triton", "timer", "command"} <= set(record["environment"])
    assert record["copy_bandwidth"]["gbs"] > 0
    rows = record["rows"]
    assert {r["benchmark"] for r in rows} == {"step", "ceiling", "folded", "throughput"}
    for r in rows:
        if r["status"] == "ok":
            assert r["median_ms"] > 0, r
        else:
            assert r["status"].startswith("skipped: ") and len(r["status"]) > len("skipped: "), r
    step_shapes = {r["shape"] for r in rows if r["benchmark"] == "step"}
    assert step_shapes == {f"B={b} V=1000 {d}" for b in (1, 8) for d in ("float32", "bfloat16")}
    baselines = [r for r in rows if r["baseline"]]
    assert baselines and all(r["speedup"] == 1.0 for r in baselines)
    timed = {r["impl"] for r in rows if r["status"] == "ok"}
    assert {"eager sample_step [call]", "eager exponential_race [call]", "roofline logits+noise",
            "FoldedDraftSampler.replay [graph]", "FoldedDraftSampler.propose [eager]",
            "sample_block, fresh sampler [eager]", "reference StepSampler + bincount", "stats.goodness_of_fit"} <= timed


def _check_ceiling_reads(rows, vocab, device):
    """Each read program's maximum is exactly that of the tiles its order gives it: the race
    order a chunk of ceil(n_tiles / S) tiles, interleaved tiles s, s + S, ...; the flat read
    blocks p, p + P, ... (module note of bench/ceiling.py): no value is skipped or read twice."""
    gen = torch.Generator().manual_seed(rows * vocab)
    logits = torch.randn(rows, vocab, generator=gen).to(device)
    noise = torch.rand(rows, vocab, generator=gen).to(device)
    tile, n_tiles = ceiling.TILE, -(-vocab // ceiling.TILE)
    splits = splits_for(rows, vocab, tile, torch.device(device))
    per = -(-n_tiles // splits)
    padded = torch.nn.functional.pad(logits.float() + noise, (0, n_tiles * tile - vocab), value=-float("inf"))
    tile_max = padded.view(rows, n_tiles, tile).amax(dim=2)
    for order, owner in [("race", lambda t: t // per), ("interleaved", lambda t: t % splits)]:
        expected = torch.full((rows, splits), -float("inf"), device=device)
        for t in range(n_tiles):
            expected[:, owner(t)] = torch.maximum(expected[:, owner(t)], tile_max[:, t])
        got = ceiling.read_partials(logits, noise, order=order)().view(rows, splits)
        assert torch.equal(got, expected), order
    got = ceiling.read_partials(None, noise, order="flat")()
    blocks = -(-noise.numel() // 512)
    flat = torch.nn.functional.pad(noise.reshape(-1), (0, blocks * 512 - noise.numel()), value=-float("inf"))
    block_max = flat.view(blocks, 512).amax(dim=1)
    expected = torch.full_like(got, -float("inf"))
    for b in range(blocks):
        expected[b % got.numel()] = torch.maximum(expected[b % got.numel()], block_max[b])
    assert torch.equal(got, expected)
    assert ceiling.empty_kernel(torch.device(device))().tolist() == [0.0]  # it ran: its store landed


@needs_interpreter
def test_bench_interpreted_ceiling_reads_cover_their_tiles():
    _check_ceiling_reads(3, 5000, "cpu")


@pytest.mark.skipif(KERNEL_INTERPRETED or triton is None, reason="already interpreted, or no triton")
@pytest.mark.skipif(INTERPRETER_DEFECT is not None, reason=str(INTERPRETER_DEFECT))
def test_bench_ceiling_interpreter_subprocess():
    """Re-run this module's ``interpreted`` tests in a child with TRITON_INTERPRET=1."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-k", "interpreted",
               str(Path(__file__).resolve())]
    child = subprocess.run(command, cwd=Path(__file__).resolve().parents[1], env=dict(os.environ, TRITON_INTERPRET="1"),
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0 and " passed" in child.stdout and "skipped" not in child.stdout, (
        child.stdout + child.stderr)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or triton is None or KERNEL_INTERPRETED,
                    reason="needs CUDA, triton, and the compiled kernels")
def test_bench_gpu_ceiling_reads_cover_their_tiles():
    _check_ceiling_reads(64, 129_280, "cuda")


def test_bench_ceiling_rejects_an_unknown_order():
    with pytest.raises(ValueError, match="order"):
        ceiling.read_partials(torch.zeros(1, 4), torch.zeros(1, 4), order="backwards")


# --- time to verdict (bench/verdict.py): fabricated results.json payloads, no subprocess ---

def _results(cases, *, skipped=(), powers=(), overall="PASS", wall_s=10.0):
    """A results.json of ``run``: ``cases`` passed, the first carrying one statistical
    assertion per power in ``powers``; ``skipped`` cases skipped."""
    tests = [{"case": c, "outcome": "passed", "stats": []} for c in cases]
    tests += [{"case": c, "outcome": "skipped", "stats": []} for c in skipped]
    if tests:
        tests[0]["stats"] = [{"power_at_min_effect": p} for p in powers]
    return {"overall": overall, "exit_code": 0, "wall_s": wall_s, "tests": tests}


def _run(side, seconds, payload=None, *, measure="main job", repeat=0, returncode=0, reports=True):
    found = verdict.outcome(payload) if payload is not None else None
    return verdict.Run(measure, side, repeat, seconds, returncode, "", reports, found)


CASES = ["S1/a", "S2/b", "S3/c"]


def test_bench_verdict_outcome_reads_cases_assertions_power_and_verdict():
    payload = _results(CASES, skipped=["S4/gpu"], powers=[0.9, float("nan"), 0.8], overall="INCONCLUSIVE")
    assert verdict.outcome(payload) == {
        "verdict": "INCONCLUSIVE", "exit_code": 0, "cases_run": sorted(CASES), "cases_skipped": 1,
        "assertions": 3, "min_power": 0.8, "wall_s": 10.0}  # a vacuous (NaN) assertion counts, not its power
    assert verdict.outcome(_results(CASES))["min_power"] is None
    with pytest.raises(ValueError, match="payload"):
        verdict.outcome({"overall": "PASS"})


def test_bench_verdict_ratio_is_the_median_change_over_the_median_baseline():
    runs = [_run("baseline", s, _results(CASES, wall_s=w), repeat=i)
            for i, (s, w) in enumerate([(10.0, 8.0), (30.0, 20.0), (20.0, 12.0)])]
    runs += [_run("change", s, _results(CASES, wall_s=w), repeat=i)
             for i, (s, w) in enumerate([(5.0, 4.0), (4.0, 3.0), (6.0, 2.0)])]
    runs += [_run(side, s, measure="test command", reports=False)
             for side, s in (("baseline", 600.0), ("change", 300.0))]
    rows = {r["measure"]: r for r in verdict.ratio_rows(runs)}
    assert list(rows) == ["main job", "main job, pytest", "test command"]
    assert rows["main job"] == {"measure": "main job", "baseline_s": 20.0, "change_s": 5.0, "ratio": 0.25, "repeats": 3}
    assert (rows["main job, pytest"]["baseline_s"], rows["main job, pytest"]["change_s"]) == (12.0, 3.0)
    assert rows["main job, pytest"]["ratio"] == 0.25
    assert rows["test command"]["ratio"] == 0.5 and rows["test command"]["repeats"] == 1


def test_bench_verdict_same_runs_pass_every_check():
    payload = _results(CASES, skipped=["S4/gpu"], powers=[0.95, 0.99])
    found = verdict.checks([_run("baseline", 10.0, payload), _run("change", 5.0, payload)])
    assert [c.name for c in found] == [f"main job: {n}" for n in (
        "case ids run", "cases skipped", "statistical assertions", "minimum power", "verdict")]
    assert all(c.equal for c in found) and not verdict.failed(found)
    assert found[0].baseline == found[0].change == "3 cases" and found[3].baseline == "0.950000"


@pytest.mark.parametrize("change, differs", [
    (_results(CASES[:2] + ["S9/new"], skipped=["S4/gpu"], powers=[0.95, 0.99]), "case ids run"),
    (_results(CASES, powers=[0.95, 0.99]), "cases skipped"),
    (_results(CASES, skipped=["S4/gpu"], powers=[0.95]), "statistical assertions"),
    (_results(CASES, skipped=["S4/gpu"], powers=[0.90, 0.99]), "minimum power"),
    (_results(CASES, skipped=["S4/gpu"], powers=[0.95, 0.99], overall="FAIL"), "verdict"),
])
def test_bench_verdict_flags_a_change_that_runs_something_else(change, differs):
    base = _results(CASES, skipped=["S4/gpu"], powers=[0.95, 0.99])
    found = verdict.checks([_run("baseline", 10.0, base), _run("change", 5.0, change)])
    assert [c.name for c in found if not c.equal] == [f"main job: {differs}"]
    assert verdict.failed(found)
    if differs == "case ids run":  # same count, other ids: the ids decide, and the report names them
        assert found[0].baseline == found[0].change == "3 cases"
        assert found[0].detail == "only in baseline: S3/c; only in change: S9/new"
    report = verdict.format_report([], verdict.ratio_rows([]), found, "title")
    assert "DIFFERENT" in report and report.splitlines()[-1].startswith("FAIL")


def test_bench_verdict_flags_repeats_that_disagree_and_runs_without_results():
    runs = [_run("baseline", 10.0, _results(CASES)), _run("baseline", 10.0, _results(CASES[:2]), repeat=1),
            _run("change", 5.0, _results(CASES)), _run("change", 5.0, _results(CASES), repeat=1)]
    found = {c.name: c for c in verdict.checks(runs)}
    assert not found["main job: case ids run"].equal
    assert found["main job: case ids run"].baseline == "varies: 2 cases, 3 cases"
    missing = verdict.checks([_run("baseline", 10.0, _results(CASES)), _run("change", 1.0, None, returncode=3)])
    assert [(c.name, c.change, c.equal) for c in missing] == [
        ("main job: results.json written", "missing in 1 of 1 runs", False)]
    assert "change 3" in missing[0].detail


def test_bench_verdict_test_command_compares_exit_status():
    same = verdict.checks([_run(s, 1.0, measure="test command", reports=False) for s in verdict.SIDES])
    assert [(c.name, c.equal) for c in same] == [("test command: exit status", True)]
    other = verdict.checks([_run("baseline", 1.0, measure="test command", reports=False),
                            _run("change", 1.0, measure="test command", reports=False, returncode=1)])
    assert not other[0].equal and (other[0].baseline, other[0].change) == ("0", "1")


def test_bench_verdict_report_prints_the_ratio_table():
    payload = _results(CASES, powers=[0.95])
    runs = [_run("baseline", 120.0, payload), _run("change", 60.0, payload)]
    sides = [verdict.Side("baseline", "main", Path("/b"), "abc1234"),
             verdict.Side("change", "HEAD", Path("/c"), "def5678")]
    report = verdict.format_report(sides, verdict.ratio_rows(runs), verdict.checks(runs), "title")
    assert "baseline: main (abc1234)" in report and "change: HEAD (def5678)" in report
    row = next(line for line in report.splitlines() if line.startswith("main job "))
    assert row.split()[-3:] == ["120.0", "60.0", "0.500"]
    assert "DIFFERENT" not in report and report.splitlines()[-1].startswith("the sides ran the same")


def test_bench_verdict_commands_run_the_sides_own_checkout():
    chosen = verdict.measures(device="cpu", workers="2", run_options=["-k", "test_S1_"], tests=True)
    assert [m.name for m in chosen] == ["main job", f"start-up (--case {verdict.STARTUP_CASE})", "test command"]
    report = Path("/r")
    assert chosen[0].argv(report)[1:] == ["-m", "conformance.cli", "run", "--device", "cpu", "--workers", "2",
                                          "--report", "/r", "-k", "test_S1_"]
    assert chosen[1].argv(report)[-4:] == ["--case", verdict.STARTUP_CASE, "--report", "/r"]
    assert chosen[2].argv(report)[1:] == ["-m", "pytest", "-n", "2", "--dist", "worksteal"]  # the README's
    side = verdict.Side("change", "HEAD", Path("/tmp/side"), "abc")
    assert verdict.side_env(side)["PYTHONPATH"].split(os.pathsep)[0] == "/tmp/side"


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def test_bench_verdict_checks_out_revisions_and_removes_them(tmp_path):
    repo = tmp_path / "repo"
    (repo / "conformance").mkdir(parents=True)
    (repo / "conformance" / "v.txt").write_text("1")
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    _git(repo, "tag", "one")
    (repo / "conformance" / "v.txt").write_text("2")
    _git(repo, "commit", "-q", "-am", "two")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with verdict.checkouts({"baseline": "one", "change": str(repo)}, repo, scratch) as sides:
        assert (sides[0].path / "conformance" / "v.txt").read_text() == "1"
        assert sides[1].path == repo and (sides[1].path / "conformance" / "v.txt").read_text() == "2"
    assert not (scratch / "baseline").exists()
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(listed.splitlines()) == 1  # git's record of the worktree went with it
    with pytest.raises(ValueError, match="--change: 'no-such-rev'"):
        with verdict.checkouts({"baseline": "one", "change": "no-such-rev"}, repo, scratch):
            pass
    assert not (scratch / "baseline").exists()


def test_bench_verdict_sides_alternate_in_their_own_checkouts(tmp_path, monkeypatch):
    calls = []

    def fake_time_command(command, cwd, env):
        calls.append((Path(cwd).name, env["PYTHONPATH"].split(os.pathsep)[0]))
        if "--report" in command:
            report = Path(command[command.index("--report") + 1])
            report.mkdir(parents=True)
            (report / "results.json").write_text(json.dumps(_results(CASES)))
        return Timed(" ".join(command), 1.0, 0, "")

    monkeypatch.setattr(verdict, "time_command", fake_time_command)
    sides = [verdict.Side(label, label, tmp_path / label, "abc") for label in verdict.SIDES]
    chosen = verdict.measures(device="cpu", workers="2", run_options=[], startup_case=None)
    runs = verdict.run_sides(sides, chosen, 3, tmp_path / "reports", say=lambda line: None)
    assert [r.side for r in runs] == ["baseline", "change", "change", "baseline", "baseline", "change"]
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [  # kept where asked (--reports)
        f"{r.side}-{i}" for i, r in sorted(enumerate(runs), key=lambda ir: f"{ir[1].side}-{ir[0]}")]
    assert calls == [(r.side, str(tmp_path / r.side)) for r in runs]  # cwd and PYTHONPATH: the side's checkout
    assert all(r.outcome["cases_run"] == sorted(CASES) for r in runs)


def test_a_timed_command_s_last_line_is_its_summary_on_stdout_not_a_warning_after_it(tmp_path):
    """A pytest plugin may write warnings to stderr after pytest's summary line (a foreign
    environment's pytest-benchmark did, and bench verdict then showed the warning as the test
    command's outcome); stderr's last line counts only where stdout has none."""
    from bench.wall import time_command

    script = "import sys; print('2 failed, 2456 passed'); print('  warner(Warning(text))', file=sys.stderr)"
    assert time_command([sys.executable, "-c", script], tmp_path).last_line == "2 failed, 2456 passed"
    quiet = "import sys; print('Traceback: boom', file=sys.stderr); sys.exit(3)"
    timed = time_command([sys.executable, "-c", quiet], tmp_path)
    assert (timed.returncode, timed.last_line) == (3, "Traceback: boom")


def test_no_startup_leaves_the_start_up_run_out():
    from bench.__main__ import build_parser

    parser = build_parser()
    assert parser.parse_args(["verdict"]).startup_case == verdict.STARTUP_CASE
    assert parser.parse_args(["verdict", "--no-startup"]).startup_case is None
    names = [m.name for m in verdict.measures(device="cuda", workers="16", run_options=[], startup_case=None)]
    assert not any(name.startswith("start-up") for name in names)
