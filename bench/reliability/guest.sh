#!/usr/bin/env bash
# Runs inside the VM (bench/reliability/run.py starts it), one vCPU.
#
#   attack      the scripted attack of scripts/attack.sh (read four secrets,
#               tar them, upload the archive over HTTP, download a script,
#               overwrite another with it) during a `find -exec cat` flood,
#               under `custos sched`
#   skips       the same flood under the default scheduler, which loses
#               syscalls to skips: are they all in the loss records?
#   sched-first / collector-first / restart
#               the start orders of scheduler and collector (restart: the
#               collector is stopped and started again under the running
#               scheduler), each then under the flood
#
# Every run writes OUT/<name>.jsonl (the stream) and OUT/<name>.json
# (produced, dropped, unnumbered, marker, sched_ext state).
# Environment: CUSTOS_BIN, OUT, WORKERS (16), FILES (4000), RING_KB (64),
# SCHED_ARGS (extra `custos sched` arguments, e.g. "--policy learned"),
# RUNS (which runs, in this order; default all five).
set -u
bin=${CUSTOS_BIN:?} out=${OUT:?}
workers=${WORKERS:-16} files=${FILES:-4000} ring_kb=${RING_KB:-64}
work=/tmp/reliability
mkdir -p "$out" "$work"
"$bin/custos-workload" tree "$work/tree" --files "$files" >/dev/null

until_true() { # condition, tenths of a second
  for _ in $(seq "$2"); do eval "$1" && return 0; sleep 0.1; done
  return 1
}

# The collector runs a command that marks when it is attached and ends when
# told: stopping it is the command's exit.
collector=
start_collector() { # name
  rm -f "$work/attached" "$work/detach"
  "$bin/custos" collect --force -o "$out/$1.jsonl" --events-ring-kb "$ring_kb" --attrs-ring-kb "$ring_kb" \
    --critical-ring-kb "$ring_kb" --stats-interval 0 -- \
    sh -c "touch $work/attached; until [ -e $work/detach ]; do sleep 0.1; done" 2>>"$out/$1.collect.log" &
  collector=$!
  until_true "[ -e $work/attached ]" 300 || { echo "collector did not attach" >&2; cat "$out/$1.collect.log" >&2; exit 1; }
}
stop_collector() {
  touch "$work/detach"; wait "$collector"
}

sched=
start_sched() { # name
  # shellcheck disable=SC2086 # SCHED_ARGS is a list of arguments
  "$bin/custos" sched ${SCHED_ARGS:-} >"$out/$1.sched.log" 2>&1 &
  sched=$!
  until_true '[ "$(cat /sys/kernel/sched_ext/state)" = enabled ]' 300 || { echo "scheduler did not attach" >&2; cat "$out/$1.sched.log" >&2; exit 1; }
}
stop_sched() {
  kill -INT "$sched"; wait "$sched"
}

# The attack (scripts/attack.sh): set up before the flood, run by a shell of
# its own while the flood runs.
attacker=$(dirname "$0")/../../scripts/attack.sh
attack_setup() {
  bash "$attacker" setup "$work/victim"
  cp "$work/victim/port" "$out/attack.port"
}
attack() {
  bash "$attacker" run "$work/victim" "$out/attack.steps.jsonl"
}

flood() { # name [attack]
  local pids=() start end
  start=$(date +%s%N)
  for _ in $(seq "$workers"); do
    find "$work/tree" -type f -exec cat {} + >/dev/null & pids+=($!)
  done
  (sleep 1; exec /bin/sh -c "echo marker > $work/marker") & pids+=($!)
  if [ "${2:-}" = attack ]; then (sleep 2; attack) & pids+=($!); fi
  wait "${pids[@]}"
  end=$(date +%s%N)
  printf '{"name":"%s","workers":%s,"runtime_ms":%s,"sched_ext_state":"%s"}\n' \
    "$1" "$workers" "$(( (end - start) / 1000000 ))" "$(cat /sys/kernel/sched_ext/state)" >"$out/$1.json"
}

run_attack() {
  echo "attack: the scripted attack during the flood, under custos sched" >&2
  rm -rf /sys/fs/bpf/custos
  start_collector attack; start_sched attack
  attack_setup
  flood attack attack
  stop_sched; stop_collector
}

run_skips() {
  echo "skips: the flood under the default scheduler" >&2
  start_collector skips
  flood skips
  stop_collector
}

# sched-first / collector-first: one starts, the other 3 s later; the flood;
# they stop in the reverse order.
run_in_order() { # name first second (sched or collector)
  echo "$1: $2, then $3" >&2
  rm -rf /sys/fs/bpf/custos
  "start_$2" "$1"; sleep 3; "start_$3" "$1"
  flood "$1"
  "stop_$3"; "stop_$2"
}

run_restart() {
  echo "restart: the collector restarted under the running scheduler" >&2
  rm -rf /sys/fs/bpf/custos
  start_collector restart-before; start_sched restart
  sleep 2; stop_collector; sleep 1
  start_collector restart
  flood restart
  stop_sched; stop_collector
}

for run in ${RUNS:-attack skips sched-first collector-first restart}; do
  case $run in
    attack | skips | restart) "run_$run" ;;
    sched-first) run_in_order sched-first sched collector ;;
    collector-first) run_in_order collector-first collector sched ;;
    *) echo "unknown run '$run' (attack, skips, sched-first, collector-first, restart)" >&2; exit 2 ;;
  esac
done
echo done >&2
