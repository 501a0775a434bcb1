#!/usr/bin/env bash
# Runs inside the sched_ext VM (bench/sched/run.py writes the parameters).
# For each scheduler in turn, in this one boot: latency and CPU workloads
# (the super producer runs in a second, one-vCPU boot: run.py). One JSON
# line per result on $OUT/results.jsonl; logs beside it.
set -uo pipefail
: "${OUT:?}" "${ROOT:?}" "${SCHEDULERS:?}" "${REPS:?}" "${PINGPONG_N:?}" "${FORKEXEC_N:?}" "${CPU_UNITS:?}"
: "${STRESS_SECONDS:?}"
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

for sched in $SCHEDULERS; do
  note "$sched: latency and CPU workloads ($REPS reps)"
  start_scheduler "$sched" workloads
  for rep in $(seq "$REPS"); do
    emit "$sched" pipe "$("$WORKLOAD" pipe-pingpong -n "$PINGPONG_N")"
    emit "$sched" unix "$("$WORKLOAD" unix-pingpong -n "$PINGPONG_N")"
    emit "$sched" forkexec "$("$WORKLOAD" fork-exec -n "$FORKEXEC_N")"
    # Three CPU-bound jobs on two CPUs: the runtime shows how fairly the CPU is shared.
    # (wait for these jobs only: a bare `wait` would also wait for the scheduler)
    jobs=()
    for j in 1 2 3; do "$WORKLOAD" cpu --units "$CPU_UNITS" > "$OUT/cpu-$sched-$rep-$j.json" & jobs+=($!); done
    wait "${jobs[@]}"
    for j in 1 2 3; do emit "$sched" cpu "$(cat "$OUT/cpu-$sched-$rep-$j.json")"; done
  done
  stop_scheduler "$sched" workloads

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
