#!/usr/bin/env bash
# Mutation testing of dspark_ref (issue 17), one shard, on a CPU host without network.
#
#   CI/mutation.sh MODULES SHARD_INDEX SHARD_COUNT JOBS [OUT] [SECONDS] [DRIVER ARGS...]
#
# MODULES: comma-separated (proposal,markov,...) or "all"; the shard is every SHARD_COUNT-th
# mutant of each module from SHARD_INDEX; JOBS forked mutmut children in all (modules run
# side by side, children shared in proportion to their mutants). SECONDS (default 480)
# boxes the run: mutmut stops at 75% of it (mutants not reached are "not-checked" in the
# results), no re-check starts after 85%, and every re-check ends by 85% + 40 s. Results, one JSON and
# one log per module: OUT (default reports/mutation). DRIVER ARGS go to `driver.py run` (e.g.
# --budget 0.25). Merge them here with
#   python CI/mutation/driver.py merge OUT [RECHECK_OUT]   # -> results/mutation/summary.json, results.md
# mutmut 3.3.1 and its runtime dependencies are installed from MUTMUT_WHEELS (default
# .wt/pkgs/h200/mutmut, cp312 wheels) into a private target, or used as installed.
set -euo pipefail
cd "$(dirname "$0")/.."
modules=${1:?modules}; index=${2:?shard index}; count=${3:?shard count}; jobs=${4:?jobs}
out=${5:-reports/mutation}; seconds=${6:-480}
shift $(( $# < 6 ? $# : 6 ))
export PYTHONUNBUFFERED=1
if ! python3 -c "import mutmut" 2>/dev/null; then
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --target "$site" "${MUTMUT_WHEELS:-.wt/pkgs/h200/mutmut}"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import mutmut, sys; assert mutmut.__version__ == '3.3.1', mutmut.__version__; print('mutmut', mutmut.__version__, 'python', sys.version.split()[0])"
mkdir -p "$out"
exec python3 CI/mutation/driver.py run --modules "$modules" --shard "$index/$count" --jobs "$jobs" --out "$out" \
  --exact-until $(( seconds * 75 / 100 )) --statistical-until $(( seconds * 85 / 100 )) "$@"
