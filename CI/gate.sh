#!/usr/bin/env bash
# Pre-merge gate: run the DSpark conformance suite on one implementation.
#
#   CI/gate.sh --impl NAME [--device cpu|cuda] [--report DIR] [--seed N]
#
# Exit codes (from `dspark-conformance run`, passed through unchanged):
#   0  PASS          every applicable test passed, at least one ran
#   1  FAIL          a test failed (a divergence: see the report's replay commands)
#   2  INCONCLUSIVE  nothing failed, but a path under test never executed, or every case skipped
#   3  INFRA         usage error, adapter failed to load, nothing collected, suite not importable,
#                    run interrupted
# PYTHON selects the interpreter (default python3).
# Statistical tests are never retried: their false-failure rate is budgeted (1e-3 per run).
set -uo pipefail

impl=reference device=cpu report=reports/gate seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --impl) impl=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --seed) seed="--seed $2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "gate.sh: unknown argument $1 (see --help)" >&2; exit 3 ;;
  esac
done

# The interpreter that holds torch and this package (a console script on PATH may belong to
# another Python, and a crash there would exit 1 like a FAIL).
py=${PYTHON:-python3}
if ! "$py" -c "import conformance.cli" 2>/dev/null; then
  echo "gate.sh: $py cannot import the suite (install it: $py -m pip install -e .)" >&2
  exit 3
fi
# shellcheck disable=SC2086
"$py" -m conformance.cli run --impl "$impl" --device "$device" --report "$report" $seed
code=$?
case $code in
  0) echo "gate: PASS ($impl on $device)" ;;
  1) echo "gate: FAIL ($impl on $device): see $report/report.md" ;;
  2) echo "gate: INCONCLUSIVE ($impl on $device): see $report/report.md" ;;
  *) echo "gate: INFRASTRUCTURE ERROR ($impl on $device, exit $code)"; code=3 ;;
esac
exit $code
