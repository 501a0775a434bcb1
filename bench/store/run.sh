#!/usr/bin/env bash
# The store benchmark at LPM scale (README.md): builds store-bench, runs it
# (default: --seed 1 --scale 1.0, about 4 minutes and 4 GB in bench/store/out)
# and stamps the results file it wrote with where it ran (made_by).
# Usage: bench/store/run.sh [store-bench options]
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- --seed 1 --scale 1.0
# Where store-bench writes its results; --ingest-only writes none.
results=bench/store/results.json
for ((i = 1; i <= $#; i++)); do
  case ${!i} in
    --results) j=$((i + 1)); results=${!j} ;;
    --results=*) results=${!i#--results=} ;;
    --ingest-only) results= ;;
  esac
done
cargo build -q --release -p custos-store --bin store-bench
BIN=${CARGO_TARGET_DIR:-target}/release/store-bench
stamp() { PYTHONPATH=bench/harness python3 -m custos_bench.stamp "$@"; }
state=$(mktemp)
trap 'rm -f "$state"' EXIT
stamp begin "$state" --binary "$BIN"
nice -n 10 "$BIN" "$@"
[ -z "$results" ] || stamp end "$state" "$results"
