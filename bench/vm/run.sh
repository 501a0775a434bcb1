#!/usr/bin/env bash
# Boot-to-command time of `custos vm run` (target: <= 30 s under emulation).
# Usage: bench/vm/run.sh [RUNS]   (from the checkout, after `make build`)
# Writes bench/vm/results.json, stamped with where it ran (made_by); prints one line per boot.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
custos=target/release/custos
stamp() { PYTHONPATH=bench/harness python3 -m custos_bench.stamp "$@"; }
state=$(mktemp)
trap 'rm -f "$state"' EXIT
stamp begin "$state" --binary "$custos"
release=$("$custos" vm kernel --offline)
times=()
for i in $(seq "$runs"); do
  t=$("$custos" vm run -- true 2>&1 | sed -n 's/^custos vm: command started after \([0-9.]*\) s$/\1/p')
  echo "boot $i: ${t} s"
  times+=("$t")
done
python3 - "$runs" "$release" "${times[@]}" <<'PY'
import json, statistics, sys
runs, release, times = int(sys.argv[1]), sys.argv[2], [float(t) for t in sys.argv[3:]]
res = {
    "kernel": release,
    "accelerator": "QEMU emulation (TCG)",
    "cpus": 2, "memory": "2G",
    "runs": runs,
    "boot_to_command_s": times,
    "boot_to_command_median_s": statistics.median(times),
    "boot_to_command_max_s": max(times),
    "target_s": 30,
    "command": "bench/vm/run.sh %d" % runs,
}
json.dump(res, open("bench/vm/results.json", "w"), indent=2)
print(json.dumps(res, indent=2))
PY
# `custos vm run`'s defaults: 2 vCPUs, 2G.
stamp end "$state" bench/vm/results.json --vm-cpus 2 --vm-memory 2G --vm-boots "$runs" --guest-kernel "$release"
