#!/usr/bin/env bash
# The fleet benchmark (README.md): builds fleet-bench and runs it with
# ClickHouse's default LZ4 and with zstd; writes results-lz4.json and
# results-zstd.json here; then fleet-e2e, results.json. Each is stamped with
# where it ran (made_by). Needs scripts/deps.sh (Kafka jars, clickhouse-server).
set -euo pipefail
cd "$(dirname "$0")/../.."
SCALE=${SCALE:-0.05}
cargo build -q --release -p custos-fleet --bin fleet-bench --bin fleet-e2e
BIN=${CARGO_TARGET_DIR:-target}/release/fleet-bench
E2E=${CARGO_TARGET_DIR:-target}/release/fleet-e2e
stamp() { PYTHONPATH=bench/harness python3 -m custos_bench.stamp "$@"; }
state=$(mktemp)
trap 'rm -f "$state"' EXIT
stamp begin "$state" --binary "$BIN" --binary "$E2E"
"$BIN" --scale "$SCALE" --results bench/fleet/results-lz4.json
"$BIN" --scale "$SCALE" --zstd --results bench/fleet/results-zstd.json
# The fleet end to end (results.json): live ingest with the graph, a broker
# restart, per-event latency, a cross-host query.
"$E2E" --scale 0.01 --probes 50 --results bench/fleet/results.json
stamp end "$state" bench/fleet/results-lz4.json bench/fleet/results-zstd.json bench/fleet/results.json
