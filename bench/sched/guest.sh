#!/usr/bin/env bash
# Runs inside the sched_ext VM (bench/sched/run.py writes the parameters).
# For each scheduler in turn, in this one boot: latency and CPU workloads,
# then the super producer under the collector. One JSON line per result on
# $OUT/results.jsonl; logs beside it.
set -uo pipefail
: "${OUT:?}" "${ROOT:?}" "${SCHEDULERS:?}" "${REPS:?}" "${PINGPONG_N:?}" "${FORKEXEC_N:?}" "${CPU_UNITS:?}"
: "${SP_WORKERS:?}" "${SP_FILES:?}" "${SP_RING_KB:?}" "${STRESS_SECONDS:?}"
CUSTOS=$ROOT/target/release/custos
WORKLOAD=$ROOT/target/release/custos-workload
BPFLAND=$ROOT/.tools/cargo/bin/scx_bpfland
STATE=/sys/kernel/sched_ext/state

emit() { # scheduler phase json
  printf '{"scheduler":"%s","phase":"%s","result":%s}\n' "$1" "$2" "$3" >> "$OUT/results.jsonl"
}
note() { echo "bench/sched: $*" >&2; }

wait_state() { # wanted-state seconds
  for _ in $(seq $(( $2 * 10 ))); do
    [ "$(cat $STATE)" = "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

SCHED_PID=
start_scheduler() {
  case $1 in
    default) return 0 ;;
    custos) "$CUSTOS" sched > "$OUT/sched-$1-$2.log" 2>&1 & SCHED_PID=$! ;;
    bpfland) "$BPFLAND" > "$OUT/sched-$1-$2.log" 2>&1 & SCHED_PID=$! ;;
  esac
  if ! wait_state enabled 60; then
    note "$1 did not reach enabled; log:"; cat "$OUT/sched-$1-$2.log" >&2; exit 1
  fi
}
stop_scheduler() { # name -> records whether it stayed enabled all along
  [ "$1" = default ] && return 0
  local state; state=$(cat $STATE)
  kill -INT "$SCHED_PID"; wait "$SCHED_PID"
  wait_state disabled 30 || { note "$1 did not detach"; exit 1; }
  if [ "$state" != enabled ]; then
    note "$1 was no longer enabled at the end (state: $state); log:"; cat "$OUT/sched-$1-$2.log" >&2; exit 1
  fi
}

# The super producer's tree: a large tree for `find` to walk and `cat` to read.
"$WORKLOAD" tree /tmp/sp-tree --files "$SP_FILES" > /dev/null

for sched in $SCHEDULERS; do
  note "$sched: latency and CPU workloads ($REPS reps)"
  start_scheduler "$sched" workloads
  for rep in $(seq "$REPS"); do
    emit "$sched" pipe "$("$WORKLOAD" pipe-pingpong -n "$PINGPONG_N")"
    emit "$sched" unix "$("$WORKLOAD" unix-pingpong -n "$PINGPONG_N")"
    emit "$sched" forkexec "$("$WORKLOAD" fork-exec -n "$FORKEXEC_N")"
    # Three CPU-bound jobs on two CPUs: the runtime shows how fairly the CPU is shared.
    for j in 1 2 3; do "$WORKLOAD" cpu --units "$CPU_UNITS" > "$OUT/cpu-$sched-$rep-$j.json" & done
    wait
    for j in 1 2 3; do emit "$sched" cpu "$(cat "$OUT/cpu-$sched-$rep-$j.json")"; done
  done
  stop_scheduler "$sched" workloads

  note "$sched: super producer ($SP_WORKERS find workers, ${SP_RING_KB} KiB rings)"
  rm -rf /sys/fs/bpf/custos 2>/dev/null
  "$CUSTOS" collect -o "/tmp/sp-$sched.jsonl" --events-ring-kb "$SP_RING_KB" --attrs-ring-kb "$SP_RING_KB" \
    --critical-ring-kb "$SP_RING_KB" --stats-interval 1 2> "$OUT/collect-$sched.log" &
  COLLECT_PID=$!
  for _ in $(seq 300); do [ -e /sys/fs/bpf/custos/global_features ] && break; sleep 0.1; done
  [ -e /sys/fs/bpf/custos/global_features ] || { note "collector did not start"; cat "$OUT/collect-$sched.log" >&2; exit 1; }
  start_scheduler "$sched" superproducer
  start=$(date +%s%N)
  workers=()
  for w in $(seq "$SP_WORKERS"); do
    find /tmp/sp-tree -type f -exec cat {} + > /dev/null &
    workers+=($!)
  done
  # The marker: an exec and an open-for-write in the middle of the flood.
  sleep 0.5
  /bin/true "custos-marker-$sched"
  echo marker > "/tmp/custos-marker-$sched"
  wait "${workers[@]}"
  end=$(date +%s%N)
  stop_scheduler "$sched" superproducer
  kill -INT "$COLLECT_PID"; wait "$COLLECT_PID"
  summary=$(grep -o 'produced [0-9]* = delivered [0-9]* + dropped [0-9]*' "$OUT/collect-$sched.log" | tail -1)
  read -r produced delivered dropped <<< "$(echo "$summary" | awk '{print $2, $5, $8}')"
  marker_exec=$(grep -c "custos-marker-$sched" "/tmp/sp-$sched.jsonl" | head -1)
  marker_write=$(grep "\"path\":\"/tmp/custos-marker-$sched\"" "/tmp/sp-$sched.jsonl" | grep -c '"critical":true')
  emit "$sched" superproducer "{\"runtime_ns\":$(( end - start )),\"produced\":${produced:-null},\"delivered\":${delivered:-null},\"dropped\":${dropped:-null},\"marker_lines\":$marker_exec,\"marker_critical_writes\":$marker_write}"
  rm -f "/tmp/sp-$sched.jsonl"
done

if [ "$STRESS_SECONDS" -gt 0 ]; then
  note "custos: ${STRESS_SECONDS} s of stress-ng"
  start_scheduler custos stress
  stress-ng --cpu 2 --fork 2 --pipe 2 --hdd 1 --hdd-bytes 16M --affinity 1 --timeout "${STRESS_SECONDS}s" --quiet > "$OUT/stress.log" 2>&1
  stayed=$([ "$(cat $STATE)" = enabled ] && echo "$STRESS_SECONDS" || echo 0)
  stop_scheduler custos stress
  emit custos stress "{\"seconds\":$STRESS_SECONDS,\"seconds_enabled\":$stayed}"
fi
note "done"
