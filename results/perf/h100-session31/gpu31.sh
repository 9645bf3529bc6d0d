#!/usr/bin/env bash
# Session 31, one call: boundary GPU tests; bench verdict pair (36c92d3 vs this tree) for the
# reference; vLLM 0.34.0 and SGLang 0.5.23 whole suite on this tree (alone default).
set -u
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
O=$OUT; S=$O/summary.txt
t0=$SECONDS
step() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout "$lim" "$@" > "$O/$name.log" 2>&1; local rc=$?;
  echo "$name rc=$rc wall=$((SECONDS-s))s at=$((SECONDS-t0))s" | tee -a "$S"; tail -4 "$O/$name.log" | tee -a "$S"; }
{ nvidia-smi -L; nproc; python3 -c "import torch, triton, sys; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"; git log --oneline -1; } | tee "$S"
mkdir -p /tmp/v34 /tmp/sgl /tmp/base
tar -xf .carry/v34.txz -C /tmp/v34; tar -xf .carry/sgl.txz -C /tmp/sgl; tar -xzf .carry/base-36c92d3.tgz -C /tmp/base
step boundary 60 env PYTHONPATH=. python3 -m pytest -q -p no:cacheprovider tests/test_boundary.py -m gpu
step verdict 280 env PYTHONPATH=. python3 -m bench verdict --device cuda --workers 16 --repeats 1 \
  --baseline /tmp/base --change . --reports "$O/verdict" --json "$O/verdict.json"
step vllm 120 env PYTHONPATH=.:/tmp/v34 python3 -m conformance.cli run --impl vllm==0.34.0 --device cuda --workers 16 --report "$O/vllm"
step sgl-load 40 env PYTHONPATH=.:/tmp/sgl python3 -X importtime -c "import time; t=time.time(); from conformance.loading import load_adapter; a=load_adapter('sglang==0.5.23'); print('load_adapter s', round(time.time()-t, 2))"
sort -t'|' -k2 -n "$O/sgl-load.log" | tail -40 > "$O/sgl-load-top.txt"
step ref-one 60 env PYTHONPATH=. PYTHONPROFILEIMPORTTIME=1 python3 -m conformance.cli run --device cuda --workers 0 --case S1/vocab/one-token --report "$O/ref-one"
step sgl-one 60 env PYTHONPATH=.:/tmp/sgl PYTHONPROFILEIMPORTTIME=1 python3 -m conformance.cli run --impl sglang==0.5.23 --device cuda --workers 0 --case S1/vocab/one-token --report "$O/sgl-one"
step sglang 130 env PYTHONPATH=.:/tmp/sgl python3 -m conformance.cli run --impl sglang==0.5.23 --device cuda --workers 16 --report "$O/sglang"
rm -rf "$O"/verdict/*/junit.xml "$O"/*/report.html "$O"/verdict/*/report.html 2>/dev/null
echo "total $((SECONDS-t0))s" | tee -a "$S"
