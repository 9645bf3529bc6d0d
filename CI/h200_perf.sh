#!/usr/bin/env bash
# Issue 18 on one H200: the step bench (ours vs SGLang vs roofline), the read-only ceiling, the GPU tier (TV 0.002)
# on the reference and on SGLang, the S3 tiled tests on CUDA, and a tuning sweep of the
# fused kernel, each under its own time limit, 8 minutes in all.
#
#   CI/h200_perf.sh OUTDIR
#
# Environment: PYTHON (default python3; torch with CUDA, triton, scipy, pytest, xdist,
# hypothesis), SGLANG_PATH (a directory holding sglang/ and msgspec/ for the device's Python, e.g. the unpacked
# pkgs/sglang-0.5.23; unset or missing: the SGLang bench columns and tier are skipped),
# WORKERS (xdist workers of the tier runs, default 4). Runs from the checkout's root.
# Writes to OUTDIR: bench_step.json (+ .txt; ratios in bench_ratios.md), bench_ceiling.json (+ .txt), gpu_tier_reference/
# and gpu_tier_sglang/ (dspark-conformance reports), power_replay/ (power of the reference
# tier's assertions at TV 0.002 on simulated data), tiled_cuda.txt, fused_sweep.json,
# steps.json (per step: exit code, wall seconds) and summary.txt. Regenerate the tables from
# the JSON later with `python -m bench.summary OUTDIR/bench_step.json OUTDIR/bench_ceiling.json --markdown FILE`.
# A step is skipped when less time is left than its limit. Exit: 0 if every step that ran
# exited 0, else 1.
set -uo pipefail
out=${1:?usage: CI/h200_perf.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
workers=${WORKERS:-4}
sglang=${SGLANG_PATH:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root" || exit 1
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
deadline=$(( $(date +%s) + ${TOTAL_S:-480} ))
S=$out/summary.txt
: > "$out/steps.jsonl"
{ nvidia-smi -L 2>/dev/null; "$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())"; git log --oneline -1 2>/dev/null; } | tee "$S"
if [ -n "$sglang" ] && [ ! -d "$sglang/sglang" ]; then echo "SGLANG_PATH=$sglang holds no sglang/: SGLang skipped" | tee -a "$S"; sglang=""; fi
status=0

# step NAME LIMIT_S LOG COMMAND...: run under `timeout`, record exit code and wall seconds.
step() {
  local name=$1 limit=$2 log=$3; shift 3
  local left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt "$limit" ]; then
    echo "$name: skipped, ${left}s left < limit ${limit}s" | tee -a "$S"
    echo "{\"step\": \"$name\", \"skipped\": true}" >> "$out/steps.jsonl"; return
  fi
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$log" 2>&1; rc=$?
  t1=$(date +%s.%N)
  local wall; wall=$("$py" -c "print(round($t1 - $t0, 1))")
  echo "$name: exit $rc, ${wall}s (limit ${limit}s): $(tail -n 1 "$log")" | tee -a "$S"
  echo "{\"step\": \"$name\", \"exit\": $rc, \"wall_s\": $wall, \"limit_s\": $limit}" >> "$out/steps.jsonl"
  [ "$rc" -eq 0 ] || status=1
}

sg=(); [ -n "$sglang" ] && sg=(--sglang-path "$sglang")
step bench 240 "$out/bench_step.txt" \
  "$py" -m bench step --device cuda --warmup-ms 10 --rep-ms 50 --json "$out/bench_step.json" "${sg[@]}"

# What kernels that only read the step's bytes reach (bench/ceiling.py): the race's own ceiling.
step ceiling 90 "$out/bench_ceiling.txt" \
  "$py" -m bench ceiling --device cuda --warmup-ms 10 --rep-ms 50 --json "$out/bench_ceiling.json"
ceiling_json=(); [ -f "$out/bench_ceiling.json" ] && ceiling_json=("$out/bench_ceiling.json")
[ -f "$out/bench_step.json" ] && "$py" -m bench.summary "$out/bench_step.json" "${ceiling_json[@]}" \
  --markdown "$out/bench_ratios.md" >> "$S" 2>&1

step gpu-tier-reference 110 "$out/gpu_tier_reference.txt" \
  "$py" -m conformance.cli run --impl reference --device cuda --workers "$workers" \
  --report "$out/gpu_tier_reference" -- -m gpu_tier

step tiled-cuda 60 "$out/tiled_cuda.txt" \
  "$py" -m pytest -q -p no:randomly -p no:cacheprovider tests/test_tiled_sampling.py \
  conformance/suite/test_sampling.py --dspark-device cuda -m "not statistical" \
  -k "(tiled or fused or race_exact or greedy or zero_probability or clamp or padded) and not subprocess"

if [ -n "$sglang" ]; then
  step gpu-tier-sglang 130 "$out/gpu_tier_sglang.txt" \
    env PYTHONPATH="$PYTHONPATH:$sglang" "$py" -m conformance.cli run --impl sglang==0.5.23 --device cuda \
    --workers "$workers" --report "$out/gpu_tier_sglang" -- -m gpu_tier
fi

step fused-sweep 45 "$out/fused_sweep.txt" "$py" -m bench.fused_sweep "$out/fused_sweep.json" --budget-s 35

# Power at TV 0.002 of the tier's 30 assertions, replayed on simulated data: CPU work, last, with
# what time is left (89 s with 2 jobs on 2 cores in session 9; 40 s was too short in session 8). It
# needs only gpu_tier_reference/results.json, so it can also run off the device.
[ -f "$out/gpu_tier_reference/results.json" ] && step power-replay 150 "$out/power_replay.txt" \
  "$py" -m conformance.cli calibrate --seeds 0 --power-seeds 0 --replicates 2000 --jobs 4 \
  --replay-results "$out/gpu_tier_reference/results.json" --report "$out/power_replay"

"$py" - "$out/steps.jsonl" "$out/steps.json" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
json.dump(rows, open(sys.argv[2], "w"), indent=1)
PY
echo "overall: $([ $status -eq 0 ] && echo ok || echo FAILED)" | tee -a "$S"
exit $status
