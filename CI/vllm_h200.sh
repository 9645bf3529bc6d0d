#!/usr/bin/env bash
# The whole DSpark conformance suite (statistical cases included) on one vLLM release, on a
# CUDA machine (made for the H200), from a tarball of the wheel's Python files only.
#
#   CI/vllm_h200.sh VERSION TARBALL [OUTDIR]
#
#   VERSION  e.g. 0.33.0 (checked against the tarball's dist-info: --impl vllm==VERSION)
#   TARBALL  .txz/.tgz holding vllm/**/*.py and vllm-VERSION.dist-info/ (no compiled _C is
#            needed: DSpark's kernels are Triton); build it next to an install with
#              cd DIR && (find vllm -name '*.py'; find vllm-X.dist-info -type f) | sort > files \
#                && tar -cJf vllm-X.txz -T files
#   OUTDIR   where reports and a summary go (default $OUT, else ./reports/vllm-VERSION-h200)
#
# Runs from the checkout's root (the directory above CI/), with PYTHON (default python3)
# holding torch (CUDA) and triton; the suite itself need not be installed (PYTHONPATH).
# Steps, each with its own time limit, summary in OUTDIR/summary.txt:
#   1. load:  the adapter loads and lists its capabilities;
#   2. off:   DSPARK_VLLM_LEDGER=off, whole suite, --device cuda: the committed matrix
#             (results/conformance/vllm/vllm-VERSION-cuda-h200.{md,json} from off/report.md, results.json);
#   3. gate:  CI/gate.sh --impl vllm==VERSION --device cuda with the ledger on;
#   4. repro: the minimal inputs of findings V2 and V3 (docs/conformance/vllm-repro/) on the GPU.
# With the device tool: carry or copy the tarball into the tree (e.g. shared/), then
#   CI/vllm_h200.sh 0.33.0 shared/vllm-0.33.0.txz "$OUT"
# Exit: the gate's exit code (0 pass, 1 fail, 2 inconclusive, 3 infrastructure); 9 setup.
set -uo pipefail
version=${1:?usage: CI/vllm_h200.sh VERSION TARBALL [OUTDIR]}
tarball=${2:?usage: CI/vllm_h200.sh VERSION TARBALL [OUTDIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${3:-${OUT:-$root/reports/vllm-$version-h200}}
py=${PYTHON:-python3}
workers=${WORKERS:-8}
mkdir -p "$out"
site=$(mktemp -d /tmp/vllm-$version-XXXX)
tar -xf "$tarball" -C "$site" || exit 9
[ -d "$site/vllm-$version.dist-info" ] || { echo "no vllm-$version.dist-info in $tarball" >&2; exit 9; }
cd "$root" || exit 9
export PYTHONPATH="$root:$site" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
S=$out/summary.txt
{ nvidia-smi -L; "$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())"; git log --oneline -1 2>/dev/null; } | tee "$S"
timeout 120 "$py" -c "from conformance.loading import load_adapter; a = load_adapter('vllm==$version'); print(a.name, sorted(c.__name__ for c in a.capabilities))" 2>&1 | tail -3 | tee -a "$S"
DSPARK_VLLM_LEDGER=off timeout ${OFF_TIMEOUT:-540} "$py" -m conformance.cli run --impl "vllm==$version" --device cuda \
  --workers "$workers" --report "$out/off" > "$out/off.log" 2>&1
echo "OFF $version exit $?" | tee -a "$S"; grep -A12 "^DSpark conformance" "$out/off.log" | tee -a "$S"
PYTHON=$py timeout ${GATE_TIMEOUT:-540} CI/gate.sh --impl "vllm==$version" --device cuda --report "$out/gate" > "$out/gate.log" 2>&1
code=$?
echo "GATE $version exit $code" | tee -a "$S"; grep -A12 "^DSpark conformance" "$out/gate.log" | tee -a "$S"; tail -1 "$out/gate.log" | tee -a "$S"
N=1000000 timeout 120 "$py" docs/conformance/vllm-repro/v3_shared_noise.py 2>&1 | tail -3 | tee -a "$S"
timeout 120 "$py" docs/conformance/vllm-repro/v2_greedy_rule.py 2>&1 | tail -1 | tee -a "$S"
rm -rf "$site"
exit $code
