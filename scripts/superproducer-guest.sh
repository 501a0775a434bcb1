#!/usr/bin/env bash
# Runs inside the VM (scripts/demo.sh starts it): the super-producer attack
# under the kernel's default scheduler, then under Custos, in one session.
#
# The collector records with small rings while K `find -exec cat` workers
# flood it; a marker process does an exec and an open-for-write mid-flood.
# Loss comes from the collector's exact accounting: records the full rings
# refused ("dropped"), and syscalls the kernel never handed to any copy of the
# collector's program because every copy was already running, preempted, on
# that CPU ("unnumbered"; docs/collector.md).
#
# Environment: SP_SCHEDULERS (default "default custos"; "bpfland" runs the
# scx_bpfland peer from .tools/cargo/bin, "custos-hold" Custos with --hold),
# SP_FILES, SP_WORKERS (one count or
# several, "16 64"), SP_RING_KB, SP_RUNS (runs of each scheduler per worker
# count, default 1; SP_ORDER=interleaved alternates the schedulers run by run,
# SP_ORDER=grouped, the default, runs each scheduler's runs back to back),
# SP_TRACE=1 (record sched_switch/sched_wakeup and the scheduler's
# per-second stats of each run under SP_OUT, for finding the cause of a drop;
# or a list of schedulers, SP_TRACE=custos, to trace only their runs),
# SP_KEEP_EVENTS (1, the default, keeps each run's event stream; 0 keeps only
# its loss records; or a list of schedulers whose streams are kept),
# SP_HOLD_RINGS=1 (grow each ring from SP_RING_KB to the smallest on which
# the hold's bound holds on the VM's CPUs: `custos collect --hold-rings`),
# SP_PAUSE_MS (stop the collector with SIGSTOP for that long, 2 s into each
# run's flood), SP_WORKLOAD (find, the default; exec: each worker forks and execs
# /bin/true SP_EXEC_ITERATIONS times; storm: each worker opens and closes a
# file for SP_STORM_SECONDS), SP_OUT (results.jsonl and logs), CUSTOS_BIN.
# Arguments go to `custos sched`.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CUSTOS_BIN:-$root/target/release}
bpfland=${BPFLAND:-$root/.tools/cargo/bin/scx_bpfland}
schedulers=${SP_SCHEDULERS:-default custos}
files=${SP_FILES:-4000} worker_counts=${SP_WORKERS:-16} ring_kb=${SP_RING_KB:-64}
runs=${SP_RUNS:-1} order=${SP_ORDER:-grouped} trace=${SP_TRACE:-0}
workload=${SP_WORKLOAD:-find} hold_rings=${SP_HOLD_RINGS:-0}
tracefs=/sys/kernel/tracing
out=${SP_OUT:-/tmp/custos-superproducer}
mkdir -p "$out"

"$bin/custos-workload" tree /tmp/sp-tree --files "$files" >/dev/null

wait_for() { # condition, tenths of a second
  for _ in $(seq "$2"); do eval "$1" && return 0; sleep 0.1; done
  return 1
}

traced() { # name
  [ "$trace" = 1 ] || [[ " $trace " == *" $1 "* ]]
}

trace_start() { # name
  traced "$1" || return 0
  [ -e $tracefs/trace ] || mount -t tracefs nodev $tracefs
  echo 0 >$tracefs/tracing_on
  echo mono >$tracefs/trace_clock
  echo "${SP_TRACE_KB:-262144}" >$tracefs/buffer_size_kb
  echo >$tracefs/trace
  echo 1 >$tracefs/events/sched/sched_switch/enable
  echo 1 >$tracefs/events/sched/sched_wakeup/enable
  echo 1 >$tracefs/events/sched/sched_wakeup_new/enable
  echo 1 >$tracefs/tracing_on
  # Maps the trace's monotonic clock onto the events' wall clock.
  echo "custos_wallclock $(date +%s%N)" >$tracefs/trace_marker
}

trace_stop() { # name file
  traced "$1" || return 0
  echo 0 >$tracefs/tracing_on
  cat $tracefs/trace >"$2"
  echo 0 >$tracefs/events/enable
}

run() { # name tag workers [custos sched args...]
  local name=$1 tag=$2 workers=$3; shift 3
  local events="$out/$tag.jsonl"
  rm -rf /sys/fs/bpf/custos /tmp/custos-marker
  local grow=()
  [ "$hold_rings" = 1 ] && grow=(--hold-rings)
  "$bin/custos" collect --force -o "$events" --events-ring-kb "$ring_kb" --attrs-ring-kb "$ring_kb" \
    --critical-ring-kb "$ring_kb" "${grow[@]}" --stats-interval 0 2>"$out/$tag.collect.log" &
  local collector=$! sched=
  wait_for '[ -e /sys/fs/bpf/custos/global_features ]' 100 || { echo "collector did not start" >&2; return 1; }
  if [ "$name" != default ]; then
    if [ "$name" = bpfland ]; then
      "$bpfland" >"$out/$tag.sched.log" 2>&1 &
    else
      local stats=()
      traced "$name" && stats=(--stats 1)
      # custos-hold: Custos with the hold (--hold), beside plain custos.
      [ "$name" = custos-hold ] && set -- --hold "$@"
      "$bin/custos" sched --stats-json "$out/$tag.sched.json" "${stats[@]}" "$@" >"$out/$tag.sched.log" 2>&1 &
    fi
    sched=$!
    wait_for '[ "$(cat /sys/kernel/sched_ext/state)" = enabled ]' 300 || { echo "scheduler did not attach" >&2; cat "$out/$tag.sched.log" >&2; return 1; }
  fi
  trace_start "$name"
  local start end pids=() probe=
  # The innocent task: wakes every 10 ms for 100 us of work, makes no traced
  # syscall, and records how late it ran (issue 29: it must keep its pace).
  "$bin/custos-workload" ticker >"$out/$tag.probe.json" & probe=$!
  start=$(date +%s%N)
  for _ in $(seq "$workers"); do
    case $workload in
      find) find /tmp/sp-tree -type f -exec cat {} + >/dev/null & pids+=($!) ;;
      # Many short-lived producers: each worker forks and execs /bin/true.
      exec) "$bin/custos-workload" fork-exec -n "${SP_EXEC_ITERATIONS:-400}" >/dev/null & pids+=($!) ;;
      # A plain syscall storm: openat+close as fast as it goes.
      storm) "$bin/custos-workload" storm --procs 1 --seconds "${SP_STORM_SECONDS:-15}" >/dev/null & pids+=($!) ;;
    esac
  done
  (sleep 1; exec /bin/sh -c 'echo marker > /tmp/custos-marker') & pids+=($!)
  # The consumer stopped mid-flood, as by a lock or a page fault outside
  # the CPU: what the scheduler can do is hold the producers until it drains.
  # Between the stop and the resume the shell forks nothing: it waits in
  # bash's own `read -t` on a FIFO nobody writes (times from bash's clock,
  # written after). With a `date` and an `awk` forked in between, under
  # the flood, a "2 s" stop lasted 4-6 s; with /bin/sleep, whose exec makes
  # 18 events in a window (the hold's light_rate is 16), the hold took the
  # sleep for a producer and the stop lasted until the guard (5.7-11.7 s,
  # beside a CPU hog on the host).
  local pause_ms=${SP_PAUSE_MS:-0} pause_s
  printf -v pause_s '%d.%03d' $((pause_ms / 1000)) $((pause_ms % 1000))
  [ "$pause_ms" -gt 0 ] &&
    { (rm -f /tmp/sp-pause.fifo; mkfifo /tmp/sp-pause.fifo; exec {never}<>/tmp/sp-pause.fifo
       sleep 2; kill -STOP "$collector"; stopped=${EPOCHREALTIME/./}
       read -rt "$pause_s" -u "$never"; kill -CONT "$collector"; resumed=${EPOCHREALTIME/./}
       printf 'stopped %s000\nresumed %s000\n' "$stopped" "$resumed" >>"$out/$tag.pause.log") & pids+=($!); }
  wait "${pids[@]}"
  end=$(date +%s%N)
  kill -INT "$probe"; wait "$probe"
  trace_stop "$name" "$out/$tag.trace"
  local state; state=$(cat /sys/kernel/sched_ext/state)
  [ -n "$sched" ] && { kill -INT "$sched"; wait "$sched"; }
  kill -INT "$collector"; wait "$collector"
  local line produced delivered dropped unnumbered marker
  line=$(grep -a 'produced [0-9]* = delivered' "$out/$tag.collect.log" | tail -1)
  produced=$(sed -E 's/.*produced ([0-9]+) = .*/\1/' <<<"$line")
  delivered=$(sed -E 's/.*delivered ([0-9]+) .*/\1/' <<<"$line")
  dropped=$(sed -E 's/.*dropped ([0-9]+) .*/\1/' <<<"$line")
  unnumbered=$(sed -E 's/.*unnumbered ([0-9]+).*/\1/' <<<"$line")
  # The marker's exec and its open-for-write, both on the reserved path.
  marker=$(grep -a custos-marker "$events" | python3 -c '
import json, sys
execd = opened = False
for line in sys.stdin:
    e = json.loads(line)
    if e.get("syscall") == "execve" and e.get("ret") == 0 and any("custos-marker" in a for a in e.get("argv") or []):
        execd = True
    if e.get("path") == "/tmp/custos-marker" and e.get("critical") is True:
        opened = True
print("yes" if execd and opened else "no")
')
  # The in-band loss records (CPU, sequence range, ring, time window) stay;
  # the stream itself only if asked (SP_KEEP_EVENTS=1), it is large.
  grep -a '"type":"loss"' "$events" >"$out/$tag.loss.jsonl"
  # The final stats record: the exact and bounded skip counts the loss
  # records must add up to.
  grep -a '"type":"stats"' "$events" | grep -a '"final":true' | tail -1 >"$out/$tag.collector-stats.json"
  local keep=${SP_KEEP_EVENTS:-1}
  [ "$keep" = 1 ] || [[ " $keep " == *" $name "* ]] || rm -f "$events"
  printf '%-8s %7s %10s %10s %9s %11s %7s %11s %8s %s\n' "$name" "$workers" "$produced" "$delivered" "$dropped" "$unnumbered" \
    "$(awk -v d="$dropped" -v u="$unnumbered" -v p="$produced" 'BEGIN { t = p + u; printf "%.1f%%", t ? 100 * (d + u) / t : 0 }')" \
    "$(( (end - start) / 1000000 )) ms" "$marker" "${state}"
  local probe_p50= probe_p99= bounded= stall_ms=
  read -r probe_p50 probe_p99 < <(python3 -c 'import json,sys; p = json.load(open(sys.argv[1])); print(p["p50_ns"], p["p99_ns"])' "$out/$tag.probe.json" 2>/dev/null)
  # Whether the rings were large enough for the hold's bound (critical,
  # events, attributes), and how long a stop really lasted.
  bounded=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get("hold_bounded")).replace(" ", ""))' "$out/$tag.collector-stats.json" 2>/dev/null)
  [ -s "$out/$tag.pause.log" ] && stall_ms=$(awk '/^stopped/ { s = $2 } /^resumed/ { r = $2 } END { if (s && r) printf "%d", (r - s) / 1e6 }' "$out/$tag.pause.log")
  printf '{"workload":"%s","scheduler":"%s","workers":%s,"run":%s,"produced":%s,"delivered":%s,"dropped":%s,"unnumbered":%s,"runtime_ms":%s,"marker_delivered":%s,"sched_ext_state":"%s","probe_p50_ns":%s,"probe_p99_ns":%s,"hold_bounded":%s,"stall_ms":%s}\n' \
    "$workload" "$name" "$workers" "$run_no" "${produced:-null}" "${delivered:-null}" "${dropped:-null}" "${unnumbered:-null}" "$(( (end - start) / 1000000 ))" \
    "$([ $marker = yes ] && echo true || echo false)" "$state" "${probe_p50:-null}" "${probe_p99:-null}" "${bounded:-null}" "${stall_ms:-null}" >>"$out/results.jsonl"
}

rm -f "$out/results.jsonl"
case $workload in
  find) what="'find -exec cat' over $files files" ;;
  exec) what="fork+exec of /bin/true, ${SP_EXEC_ITERATIONS:-400} each" ;;
  *) what="openat+close for ${SP_STORM_SECONDS:-15} s" ;;
esac
rings="${ring_kb} KiB rings"
[ "$hold_rings" = 1 ] && rings="$rings (at least; --hold-rings)"
echo "super producer: {$worker_counts} x $workload workers ($what), $rings, $runs run(s) each, $(nproc) CPU(s), kernel $(uname -r)"
printf '%-8s %7s %10s %10s %9s %11s %7s %11s %8s %s\n' scheduler workers produced delivered dropped unnumbered loss runtime marker sched_ext
status=0
for workers in $worker_counts; do
  plan=()
  if [ "$order" = interleaved ]; then
    for r in $(seq "$runs"); do for s in $schedulers; do plan+=("$s:$r"); done; done
  else
    for s in $schedulers; do for r in $(seq "$runs"); do plan+=("$s:$r"); done; done
  fi
  for entry in "${plan[@]}"; do
    s=${entry%:*} run_no=${entry#*:} tag=${entry%:*}
    if [ "$runs" -gt 1 ] || [ "$(wc -w <<<"$worker_counts")" -gt 1 ]; then
      tag="$s-w$workers-r$run_no"
    fi
    run "$s" "$tag" "$workers" "$@" || status=1
  done
done
exit $status
