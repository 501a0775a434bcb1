#!/usr/bin/env bash
# The fleet benchmark (README.md): builds fleet-bench and runs it with
# ClickHouse's default LZ4 and with zstd; writes results-lz4.json and
# results-zstd.json here; then fleet-e2e, results.json. Needs scripts/deps.sh (Kafka jars, clickhouse-server).
set -euo pipefail
cd "$(dirname "$0")/../.."
SCALE=${SCALE:-0.05}
cargo build -q --release -p custos-fleet --bin fleet-bench --bin fleet-e2e
BIN=${CARGO_TARGET_DIR:-target}/release/fleet-bench
"$BIN" --scale "$SCALE" --results bench/fleet/results-lz4.json
"$BIN" --scale "$SCALE" --zstd --results bench/fleet/results-zstd.json
# The fleet end to end (results.json): live ingest with the graph, a broker
# restart, per-event latency, a cross-host query.
"${CARGO_TARGET_DIR:-target}/release/fleet-e2e" --scale 0.01 --probes 50 --results bench/fleet/results.json
