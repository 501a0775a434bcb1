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
# scx_bpfland peer from .tools/cargo/bin, "custos-hold" Custos naming --hold,
# "custos-nohold" Custos with --no-hold, the hold's ablation,
# "custos-feedback" and "custos-learned" Custos with that --policy, "bare" the
# flood alone: no collector, no scheduler, its own runtime),
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
# run's flood; SP_RESUMER, read or exec, says how the shell that resumes it
# waits: see run()), SP_WORKLOAD (find, the default; exec: each worker forks and execs
# /bin/true SP_EXEC_ITERATIONS times; storm: each worker opens and closes a
# file for SP_STORM_SECONDS; and in the shell, SP_ITERATIONS (300) rounds per
# worker: swarm, a process reading 20 files each round; churn, create, rename
# and unlink; connect, 4 loopback TCP connections a round to a listener;
# critical, an open-for-write and an exec), SP_OUT (results.jsonl and logs), CUSTOS_BIN.
# Arguments go to `custos sched`.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CUSTOS_BIN:-$root/target/release}
bpfland=${BPFLAND:-$root/.tools/cargo/bin/scx_bpfland}
schedulers=${SP_SCHEDULERS:-default custos}
for s in $schedulers; do
  case $s in default | bare | bpfland | custos | custos-hold | custos-nohold | custos-feedback | custos-learned) ;;
    *) echo "SP_SCHEDULERS: no scheduler named $s" >&2; exit 2 ;;
  esac
done
files=${SP_FILES:-4000} worker_counts=${SP_WORKERS:-16} ring_kb=${SP_RING_KB:-64}
runs=${SP_RUNS:-1} order=${SP_ORDER:-grouped} trace=${SP_TRACE:-0}
workload=${SP_WORKLOAD:-find} hold_rings=${SP_HOLD_RINGS:-0} resumer=${SP_RESUMER:-read}
case $resumer in read | exec) ;; *) echo "SP_RESUMER must be read or exec, not $resumer" >&2; exit 2 ;; esac
tracefs=/sys/kernel/tracing
out=${SP_OUT:-/tmp/custos-superproducer}
mkdir -p "$out"

"$bin/custos-workload" tree /tmp/sp-tree --files "$files" >/dev/null
mapfile -t tree_files < <(find /tmp/sp-tree -type f)
# The connect flood's listener: accepts and closes, for the whole session.
listen_port=${SP_LISTEN_PORT:-7411} listener=
if [ "$workload" = connect ]; then
  ip link set lo up 2>/dev/null
  python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1024)
while True:
    c, _ = s.accept(); c.close()
' "$listen_port" & listener=$!
  trap '[ -n "$listener" ] && kill "$listener" 2>/dev/null' EXIT
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$listen_port") 2>/dev/null && break; sleep 0.1; done
  (exec 3<>/dev/tcp/127.0.0.1/"$listen_port") || { echo "the connect flood's listener did not start" >&2; exit 1; }
fi

# The floods written in the shell (SP_ITERATIONS rounds per worker): each
# round forks what the flood is made of, as an attacker's script would.
iterations=${SP_ITERATIONS:-300}
swarm_worker() {
  local i n=${#tree_files[@]}
  for ((i = 0; i < iterations; i++)); do
    cat "${tree_files[@]:$(( (RANDOM * 20) % (n - 20) )):20}" >/dev/null
  done
}
churn_worker() {
  local i d; d=$(mktemp -d /tmp/sp-churn.XXXXXX)
  for ((i = 0; i < iterations; i++)); do
    echo x >"$d/a$i"; mv "$d/a$i" "$d/b$i"; rm "$d/b$i"
  done
  rmdir "$d"
}
connect_worker() {
  local i
  for ((i = 0; i < iterations * 4; i++)); do
    exec {fd}<>/dev/tcp/127.0.0.1/"$listen_port" && exec {fd}>&-
  done
}
critical_worker() {
  local i d; d=$(mktemp -d /tmp/sp-critical.XXXXXX)
  for ((i = 0; i < iterations; i++)); do
    : >"$d/c$((i % 16))"; /bin/true
  done
  rm -rf "$d"
}

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
  rm -rf /sys/fs/bpf/custos /tmp/custos-marker "$out/$tag.attack.log"
  local grow=() collector= sched=
  [ "$hold_rings" = 1 ] && grow=(--hold-rings)
  if [ "$name" != bare ]; then
    "$bin/custos" collect --force -o "$events" --events-ring-kb "$ring_kb" --attrs-ring-kb "$ring_kb" \
      --critical-ring-kb "$ring_kb" "${grow[@]}" --stats-interval 0 2>"$out/$tag.collect.log" &
    collector=$!
    wait_for '[ -e /sys/fs/bpf/custos/global_features ]' 100 || { echo "collector did not start" >&2; return 1; }
  fi
  if [ "$name" != default ] && [ "$name" != bare ]; then
    if [ "$name" = bpfland ]; then
      "$bpfland" >"$out/$tag.sched.log" 2>&1 &
    else
      local stats=()
      traced "$name" && stats=(--stats 1)
      # custos-hold names the hold (--hold; the default since it held
      # producers at their stop), custos-nohold turns it off (the ablation).
      [ "$name" = custos-hold ] && set -- --hold "$@"
      [ "$name" = custos-nohold ] && set -- --no-hold "$@"
      case $name in custos-feedback | custos-learned) set -- --policy "${name#custos-}" "$@" ;; esac
      "$bin/custos" sched --stats-json "$out/$tag.sched.json" "${stats[@]}" "$@" >"$out/$tag.sched.log" 2>&1 &
    fi
    sched=$!
    wait_for '[ "$(cat /sys/kernel/sched_ext/state)" = enabled ]' 300 || { echo "scheduler did not attach" >&2; cat "$out/$tag.sched.log" >&2; return 1; }
  fi
  trace_start "$name"
  local start end pids=() probe= attack=
  # The innocent task: wakes every 10 ms for 100 us of work, makes no traced
  # syscall, and records how late it ran (issue 29: it must keep its pace).
  "$bin/custos-workload" ticker >"$out/$tag.probe.json" & probe=$!
  start=$(date +%s%N)
  # The consumer's CPU time so far (its start: loading and verifying its
  # programs, 25 of 31 s in a short run), taken off its time at exit.
  local consumer_cpu0_ms=
  [ -n "$collector" ] && consumer_cpu0_ms=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%d", ($14 + $15) * 1000 / hz }' "/proc/$collector/stat")
  for _ in $(seq "$workers"); do
    case $workload in
      find) find /tmp/sp-tree -type f -exec cat {} + >/dev/null & pids+=($!) ;;
      # Many short-lived producers: each worker forks and execs /bin/true.
      exec) "$bin/custos-workload" fork-exec -n "${SP_EXEC_ITERATIONS:-400}" >/dev/null & pids+=($!) ;;
      # A plain syscall storm: openat+close as fast as it goes.
      storm) "$bin/custos-workload" storm --procs 1 --seconds "${SP_STORM_SECONDS:-15}" >/dev/null & pids+=($!) ;;
      # A swarm of short-lived producers: a new process every few ms, each
      # reading 20 files and exiting (a per-task history never builds up).
      swarm) swarm_worker & pids+=($!) ;;
      # Create, rename and unlink: open-for-write is a critical event.
      churn) churn_worker & pids+=($!) ;;
      # Loopback TCP: connect, accept and close, against one listener.
      connect) connect_worker & pids+=($!) ;;
      # Critical events aimed at the reserved ring: open-for-write and exec.
      critical) critical_worker & pids+=($!) ;;
    esac
  done
  # The attack the flood is there to hide, 1 s in: read a secret, stage it,
  # drop a binary and run it, clean up, leave the marker (its exec and
  # open-for-write are both on the reserved path). Timed from bash's clock:
  # it must finish before the flood does, and its time is set against the
  # default scheduler's (issue 29).
  (sleep 1; a0=${EPOCHREALTIME/./}
   /bin/sh -c 'cat /etc/shadow >/tmp/custos-loot; cp /bin/true /tmp/custos-dropper; /tmp/custos-dropper
     rm -f /tmp/custos-loot /tmp/custos-dropper; echo marker > /tmp/custos-marker'
   printf '%s %s\n' "$a0" "${EPOCHREALTIME/./}" >"$out/$tag.attack.log") & attack=$!
  # The consumer stopped mid-flood, as by a lock or a page fault outside
  # the CPU: what the scheduler can do is hold the producers until it drains.
  # Between the stop and the resume the shell waits (times from bash's
  # clock, written after). SP_RESUMER=exec: in /bin/sleep, a program exec'd
  # while the hold is on, as an operator's would be (its exec makes 18
  # events in a window; judged by light_rate 16, the hold took it for a
  # producer and the stop lasted until the guard, 5.7-20.8 s). Otherwise
  # (read): in bash's own `read -t` on a FIFO nobody writes, forking
  # nothing. With a `date` and an `awk` forked in between, under the flood,
  # a "2 s" stop lasted 4-6 s.
  local pause_ms=${SP_PAUSE_MS:-0} pause_s
  printf -v pause_s '%d.%03d' $((pause_ms / 1000)) $((pause_ms % 1000))
  [ "$pause_ms" -gt 0 ] && [ -n "$collector" ] &&
    { (rm -f /tmp/sp-pause.fifo; mkfifo /tmp/sp-pause.fifo; exec {never}<>/tmp/sp-pause.fifo
       sleep 2; kill -STOP "$collector"; stopped=${EPOCHREALTIME/./}
       if [ "$resumer" = exec ]; then /bin/sleep "$pause_s"; else read -rt "$pause_s" -u "$never"; fi
       kill -CONT "$collector"; resumed=${EPOCHREALTIME/./}
       printf 'stopped %s000\nresumed %s000\n' "$stopped" "$resumed" >>"$out/$tag.pause.log") & pids+=($!); }
  wait "${pids[@]}"
  end=$(date +%s%N)
  wait "$attack"
  kill -INT "$probe"; wait "$probe"
  trace_stop "$name" "$out/$tag.trace"
  local state; state=$(cat /sys/kernel/sched_ext/state)
  [ -n "$sched" ] && { kill -INT "$sched"; wait "$sched"; }
  local attack_ms= attack_end_ms= probe_p50= probe_p99=
  read -r probe_p50 probe_p99 < <(python3 -c 'import json,sys; p = json.load(open(sys.argv[1])); print(p["p50_ns"], p["p99_ns"])' "$out/$tag.probe.json" 2>/dev/null)
  # The attack's own time, and when it ended from the flood's start (the
  # flood's runtime is runtime_ms).
  [ -s "$out/$tag.attack.log" ] && read -r attack_ms attack_end_ms < <(awk -v s="$start" '{ printf "%d %d\n", ($2 - $1) / 1e3, ($2 * 1e3 - s) / 1e6 }' "$out/$tag.attack.log")
  if [ -z "$collector" ]; then
    printf '%-8s %7s %10s %10s %9s %11s %7s %11s %8s %s\n' "$name" "$workers" - - - - - "$(( (end - start) / 1000000 )) ms" - "$state"
    printf '{"workload":"%s","scheduler":"%s","workers":%s,"run":%s,"runtime_ms":%s,"sched_ext_state":"%s","probe_p50_ns":%s,"probe_p99_ns":%s,"attack_ms":%s,"attack_end_ms":%s}\n' \
      "$workload" "$name" "$workers" "$run_no" "$(( (end - start) / 1000000 ))" "$state" "${probe_p50:-null}" "${probe_p99:-null}" \
      "${attack_ms:-null}" "${attack_end_ms:-null}" >>"$out/results.jsonl"
    return 0
  fi
  # The consumer's CPU time, all its threads, from the flood's start to its
  # exit (its final drain included): at exit, the shell's reaped children's
  # times (getrusage) before and after reaping it, the only child reaped in
  # between. The consumer-bound limit (bench/completeness) is the flood's
  # own runtime plus this.
  times >"$out/$tag.times"
  kill -INT "$collector"; wait "$collector"
  times >>"$out/$tag.times"
  local consumer_cpu_ms
  consumer_cpu_ms=$(awk 'function ms(t, a) { split(t, a, /[ms]/); return a[1] * 60000 + a[2] * 1000 }
    NR == 2 { c0 = ms($1) + ms($2) } NR == 4 { c1 = ms($1) + ms($2) } END { printf "%d", c1 - c0 - s }' s="$consumer_cpu0_ms" "$out/$tag.times")
  local line produced delivered dropped unnumbered marker attack_recorded
  line=$(grep -a 'produced [0-9]* = delivered' "$out/$tag.collect.log" | tail -1)
  produced=$(sed -E 's/.*produced ([0-9]+) = .*/\1/' <<<"$line")
  delivered=$(sed -E 's/.*delivered ([0-9]+) .*/\1/' <<<"$line")
  dropped=$(sed -E 's/.*dropped ([0-9]+) .*/\1/' <<<"$line")
  unnumbered=$(sed -E 's/.*unnumbered ([0-9]+).*/\1/' <<<"$line")
  # The marker's exec and its open-for-write, both on the reserved path;
  # and every step of the attack: the secret read, the dropper written and
  # run.
  read -r marker attack_recorded < <(grep -a -e custos-marker -e custos-dropper -e /etc/shadow "$events" | python3 -c '
import json, sys
execd = opened = shadow = dropped = ran = False
for line in sys.stdin:
    e = json.loads(line)
    if e.get("type") != "event":
        continue
    argv = e.get("argv") or []
    if e.get("syscall") == "execve" and e.get("ret") == 0 and any("custos-marker" in a for a in argv):
        execd = True
    if e.get("path") == "/tmp/custos-marker" and e.get("critical") is True:
        opened = True
    if e.get("path") == "/etc/shadow" and isinstance(e.get("ret"), int) and e["ret"] >= 0:
        shadow = True
    if e.get("path") == "/tmp/custos-dropper" and e.get("critical") is True:
        dropped = True
    if e.get("syscall") == "execve" and e.get("ret") == 0 and e.get("path") == "/tmp/custos-dropper":
        ran = True
print("yes" if execd and opened else "no", "true" if execd and opened and shadow and dropped and ran else "false")
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
  local bounded= stall_ms=
  # Whether the rings were large enough for the hold's bound (critical,
  # events, attributes), and how long a stop really lasted.
  bounded=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get("hold_bounded")).replace(" ", ""))' "$out/$tag.collector-stats.json" 2>/dev/null)
  # The hold's own account, where a scheduler held (its --stats-json, the
  # collector's final stats): bounces, floors crossed, the lowest free space.
  local hold=
  hold=$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
c = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
if s.get("holds"):
    print(json.dumps({"holds": s["holds"], "held": s["held"], "held_in_program": s["held_in_program"],
                      "held_at_stop": s.get("held_at_stop"), "bounces": s["hold_bounces"],
                      "leaks": s["hold_leaks"], "floors": s["hold_floors"],
                      "lowest_free_pct": round(s["hold_lowest_free_pct"], 2), "floor_pct": round(s["hold_floor_pct"], 2),
                      "kicks": c.get("hold_kicks"), "stops": c.get("hold_stops")}, separators=(",", ":")))
' "$out/$tag.sched.json" "$out/$tag.collector-stats.json" 2>/dev/null)
  [ -s "$out/$tag.pause.log" ] && stall_ms=$(awk '/^stopped/ { s = $2 } /^resumed/ { r = $2 } END { if (s && r) printf "%d", (r - s) / 1e6 }' "$out/$tag.pause.log")
  printf '{"workload":"%s","scheduler":"%s","workers":%s,"run":%s,"produced":%s,"delivered":%s,"dropped":%s,"unnumbered":%s,"runtime_ms":%s,"marker_delivered":%s,"sched_ext_state":"%s","probe_p50_ns":%s,"probe_p99_ns":%s,"hold_bounded":%s,"stall_ms":%s,"attack_ms":%s,"attack_end_ms":%s,"attack_recorded":%s,"hold":%s,"consumer_cpu_ms":%s}\n' \
    "$workload" "$name" "$workers" "$run_no" "${produced:-null}" "${delivered:-null}" "${dropped:-null}" "${unnumbered:-null}" "$(( (end - start) / 1000000 ))" \
    "$([ $marker = yes ] && echo true || echo false)" "$state" "${probe_p50:-null}" "${probe_p99:-null}" "${bounded:-null}" "${stall_ms:-null}" \
    "${attack_ms:-null}" "${attack_end_ms:-null}" "${attack_recorded:-false}" "${hold:-null}" "${consumer_cpu_ms:-null}" >>"$out/results.jsonl"
}

rm -f "$out/results.jsonl"
case $workload in
  find) what="'find -exec cat' over $files files" ;;
  exec) what="fork+exec of /bin/true, ${SP_EXEC_ITERATIONS:-400} each" ;;
  storm) what="openat+close for ${SP_STORM_SECONDS:-15} s" ;;
  swarm) what="$iterations processes reading 20 files each" ;;
  churn) what="$iterations create/rename/unlink rounds each" ;;
  connect) what="$((iterations * 4)) loopback TCP connections each" ;;
  critical) what="$iterations open-for-write + exec rounds each" ;;
  *) echo "unknown SP_WORKLOAD $workload" >&2; exit 2 ;;
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
