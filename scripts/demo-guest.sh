#!/usr/bin/env bash
# Runs inside the VM (scripts/demo.sh starts it), one vCPU: the case study
# of seed 000 §2.1. Under the kernel's default scheduler, then under Custos,
# Custos's collector records while WORKERS `find -exec cat` workers flood it
# (enough to overflow the default's rings) and scripts/attack.sh runs two
# seconds into the flood.
#
# Writes, per scheduler S (default, custos), into OUT: S.jsonl (the stream),
# S.steps.jsonl (the attack's steps, wall-clock ns), S.json (workers,
# runtime, the attacker's server port, sched_ext state), S.collect.log,
# S.sched.log.
# Environment: CUSTOS_BIN, OUT, DEMO_WORKERS (16), DEMO_FILES (4000),
# DEMO_RING_KB (64), DEMO_SCHEDULERS ("default custos").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CUSTOS_BIN:-$root/target/release} out=${OUT:?}
workers=${DEMO_WORKERS:-16} files=${DEMO_FILES:-4000} ring_kb=${DEMO_RING_KB:-64}
work=/tmp/demo
mkdir -p "$out" "$work"

wait_for() { # condition, tenths of a second
  for _ in $(seq "$2"); do eval "$1" && return 0; sleep 0.1; done
  return 1
}

echo "demo: building the flood's tree ($files files)" >&2
"$bin/custos-workload" tree "$work/tree" --files "$files" >/dev/null

run() { # scheduler
  local s=$1 collector sched= start end pids=()
  rm -rf /sys/fs/bpf/custos
  "$bin/custos" collect --force -o "$out/$s.jsonl" --events-ring-kb "$ring_kb" --attrs-ring-kb "$ring_kb" \
    --critical-ring-kb "$ring_kb" --stats-interval 0 2>"$out/$s.collect.log" &
  collector=$!
  wait_for '[ -e /sys/fs/bpf/custos/global_features ]' 300 || { echo "the collector did not start" >&2; cat "$out/$s.collect.log" >&2; exit 1; }
  if [ "$s" = custos ]; then
    "$bin/custos" sched >"$out/$s.sched.log" 2>&1 &
    sched=$!
    wait_for '[ "$(cat /sys/kernel/sched_ext/state)" = enabled ]' 300 || { echo "the scheduler did not attach" >&2; cat "$out/$s.sched.log" >&2; exit 1; }
  fi
  bash "$root/scripts/attack.sh" setup "$work/victim"
  echo "demo: $s scheduler: $workers find workers flood the collector; the attack starts 2 s in" >&2
  start=$(date +%s%N)
  for _ in $(seq "$workers"); do
    find "$work/tree" -type f -exec cat {} + >/dev/null & pids+=($!)
  done
  (sleep 2; exec bash "$root/scripts/attack.sh" run "$work/victim" "$out/$s.steps.jsonl") &
  local attacker=$!
  wait "${pids[@]}"
  wait "$attacker" || { echo "demo: the attack failed (exit $?)" >&2; exit 1; }
  end=$(date +%s%N)
  local state; state=$(cat /sys/kernel/sched_ext/state)
  if [ -n "$sched" ]; then kill -INT "$sched"; wait "$sched"; fi
  kill -INT "$collector"; wait "$collector"
  printf '{"scheduler":"%s","workers":%s,"files":%s,"ring_kb":%s,"start_ns":%s,"end_ns":%s,"port":%s,"sched_ext_state":"%s"}\n' \
    "$s" "$workers" "$files" "$ring_kb" "$start" "$end" "$(cat "$work/victim/port")" "$state" >"$out/$s.json"
  echo "demo: $s scheduler: flood over in $(( (end - start) / 1000000 )) ms; $(grep -a 'produced [0-9]* = ' "$out/$s.collect.log" | tail -1 | sed 's/^custos collect: //')" >&2
}

for s in ${DEMO_SCHEDULERS:-default custos}; do
  run "$s"
done
