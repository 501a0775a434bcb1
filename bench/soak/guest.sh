#!/usr/bin/env bash
# Runs inside the sched_ext VM (bench/soak/run.py starts it): the soak.
# `custos sched` and `custos collect --db` run for SOAK_MINUTES while a
# super-producer flood (SOAK_WORKERS `find -exec cat` workers for
# SOAK_FLOOD_SECONDS) starts every SOAK_FLOOD_EVERY seconds, as seed 000
# trained with. Every SOAK_SAMPLE_S seconds the monitor below
#  - samples the memory of the collector and the scheduler (/proc/PID/status)
#    and the scheduler's state (/sys/kernel/sched_ext) into samples.csv;
#  - writes a marker file (the monitor's own open-for-write: no exec) and asks
#    the store, while it ingests, who wrote each marker not yet answered
#    (`custos query who-touched`), oldest first, into queries.csv: the
#    store answers, and how long after the write it knew.
# An innocent probe (`custos-workload ticker`, one per minute) records how
# late a task that wakes every 10 ms ran (probe-N.json).
# At the end the collector and the scheduler are stopped with SIGINT (they
# drain), and the store's own counts are read (store.json): events stored,
# loss records by category, the collector's final stats record.
#
# Environment: SOAK_OUT (required; the shared directory), SOAK_MINUTES,
# SOAK_FLOOD_EVERY, SOAK_FLOOD_SECONDS, SOAK_FLOOD_FIRST (seconds of quiet
# before the first flood), SOAK_WORKERS, SOAK_FILES (files each find pass
# reads), SOAK_SAMPLE_S, SOAK_RING_KB (the collector's three rings),
# SOAK_DB_CACHE_MB (the store writer's page cache, `--db-cache-mb`),
# SOAK_SCHEDULER (custos, or none: the kernel's default, a baseline),
# CUSTOS_BIN. Arguments go to `custos sched`.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${CUSTOS_BIN:-$root/target/release}
out=${SOAK_OUT:?SOAK_OUT: where the results go}
minutes=${SOAK_MINUTES:-30} every=${SOAK_FLOOD_EVERY:-180} flood_s=${SOAK_FLOOD_SECONDS:-60}
first=${SOAK_FLOOD_FIRST:-30} workers=${SOAK_WORKERS:-16} files=${SOAK_FILES:-500}
sample_s=${SOAK_SAMPLE_S:-5} ring_kb=${SOAK_RING_KB:-64} scheduler=${SOAK_SCHEDULER:-custos}
db_cache_mb=${SOAK_DB_CACHE_MB:-8}
scx=/sys/kernel/sched_ext
# The store and the flood's files live in the guest's tmpfs: the store is
# written by one host (this one) and must not wait on the shared directory.
work=/tmp/soak db=/tmp/soak/store.db marks=/tmp/soak/marks
rm -rf "$work" /sys/fs/bpf/custos
mkdir -p "$out" "$work" "$marks"
rm -f "$out"/*.csv "$out"/probe-*.json "$out"/store.json "$out"/stats.jsonl "$out"/*.log "$out"/dmesg.txt "$out"/meta.json

now_us() { echo "${EPOCHREALTIME/./}"; }
note() { echo "soak: $*" >&2; }
wait_for() { # condition, tenths of a second
  for _ in $(seq "$2"); do eval "$1" && return 0; sleep 0.1; done
  return 1
}

"$bin/custos-workload" tree "$work/tree" --files "$files" >/dev/null

# 64 KiB rings by default, as the super-producer benchmarks and seed 000's
# training: a flood then fills them in well under a second, so every flood
# exercises the scheduler's hold on the producers (16 MiB rings would absorb
# much of a flood and test less).
# The store writer's page cache holds the pages it wrote, so the collector's
# memory grows with the store up to --db-cache-mb (512 MiB by default, more
# than a 30-minute store): a small one fills in the first cycles, and what
# still grows after that is not the cache.
"$bin/custos" collect --force --db "$db" --db-cache-mb "$db_cache_mb" --events-ring-kb "$ring_kb" \
  --attrs-ring-kb "$ring_kb" --critical-ring-kb "$ring_kb" 2>"$out/collect.log" &
collector=$!
wait_for '[ -e /sys/fs/bpf/custos/global_features ]' 300 || { note "collector did not start"; cat "$out/collect.log" >&2; exit 1; }
sched=
if [ "$scheduler" = custos ]; then
  "$bin/custos" sched --stats-json "$out/sched.json" "$@" >"$out/sched.log" 2>&1 &
  sched=$!
  wait_for "[ \"\$(cat $scx/state)\" = enabled ]" 300 || { note "scheduler did not attach"; cat "$out/sched.log" >&2; exit 1; }
fi
enable_seq_start=$(cat $scx/enable_seq 2>/dev/null || echo null)
ops_start=$(cat $scx/root/ops 2>/dev/null)
dmesg >"$out/dmesg-start.txt" 2>&1

# VmRSS, RssAnon, RssFile, RssShmem of /proc/PID/status, in kB, into
# rss anon file shmem (0 once the process is gone). Builtins only.
status_kb() { # pid
  local k v rest
  rss=0 anon=0 file=0 shmem=0
  local try
  # A read can come back short (seen: VmRSS or RssAnon missing): try again.
  for try in 1 2 3; do
    [ -r "/proc/$1/status" ] || return 0
    while read -r k v rest; do
      case $k in
        VmRSS:) rss=$v ;; RssAnon:) anon=$v ;; RssFile:) file=$v ;; RssShmem:) shmem=$v ;;
      esac
    done <"/proc/$1/status" 2>/dev/null
    [ "$rss" != 0 ] && [ "$anon" != 0 ] && return 0
  done
}

# A sleep without an exec: `read -t` on a FIFO nobody writes.
mkfifo "$work/tick"
nap() { # ms
  local fd s
  [ "$1" -gt 0 ] || return 0
  printf -v s '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 ))
  exec {fd}<>"$work/tick"
  read -r -t "$s" -u "$fd"
  exec {fd}>&-
}

echo "t_s,flooding,collector_alive,collector_rss_kb,collector_anon_kb,collector_file_kb,collector_shmem_kb,sched_alive,sched_rss_kb,sched_anon_kb,sched_ext_state,sched_ops" >"$out/samples.csv"
echo "t_s,marker,written_s,ms,rc,answered,found" >"$out/queries.csv"
echo "marker,written_s" >"$out/markers.csv"
echo "flood,start_s,end_s,workers" >"$out/floods.csv"

t0=$(now_us)
since() { echo $(( ($(now_us) - t0) / 1000 )); } # ms since the start
secs() { printf '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 )); } # ms -> s, no exec
total_ms=$(( minutes * 60000 ))
marker=0 pending=() missing=()
declare -A written=()
flood_no=0 flood_pids=() flood_start= next_flood=$(( first * 1000 ))
probe= probe_no=0
echo 0 >"$work/flooding"
note "$minutes min, a flood of $workers 'find -exec cat' workers over $files files for ${flood_s} s every ${every} s (first at ${first} s), ${ring_kb} KiB rings, scheduler $scheduler, $(nproc) CPU(s), kernel $(uname -r)"

# The sampler: a loop of its own that neither forks nor execs, so it wakes
# like the probe (a sleeper) and samples through the floods, while the
# monitor below, which execs a query every tick, competes with them.
sampler() {
  local t c_alive s_alive s_rss s_anon state ops flooding
  while [ ! -e "$work/stop" ]; do
    t=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
    status_kb "$collector"
    c_alive=0; kill -0 "$collector" 2>/dev/null && c_alive=1
    local c_rss=$rss c_anon=$anon c_file=$file c_shmem=$shmem
    s_alive=0 s_rss=0 s_anon=0
    if [ -n "$sched" ]; then
      status_kb "$sched"; s_rss=$rss s_anon=$anon
      kill -0 "$sched" 2>/dev/null && s_alive=1
    fi
    state= ops= flooding=
    { read -r state <$scx/state; read -r ops <$scx/root/ops; } 2>/dev/null
    read -r flooding <"$work/flooding"
    printf '%d.%03d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' $(( t / 1000 )) $(( t % 1000 )) "$flooding" "$c_alive" \
      "$c_rss" "$c_anon" "$c_file" "$c_shmem" "$s_alive" "$s_rss" "$s_anon" "$state" "$ops" >>"$out/samples.csv"
    if [ $(( (t / 1000) % 60 )) -lt "$sample_s" ]; then
      note "$(( t / 1000 )) s: collector $(( c_rss / 1024 )) MB (anon $(( c_anon / 1024 ))), scheduler $(( s_rss / 1024 )) MB, sched_ext $state${ops:+ ($ops)}, flooding $flooding"
    fi
    nap $(( sample_s * 1000 - ((${EPOCHREALTIME/./} - t0) / 1000 - t) ))
  done
}
sampler &
sampler_pid=$!

flood_end() { # the flood's row: from its start to its last worker's end
  local e last=0
  while read -r e; do [ "$e" -gt "$last" ] && last=$e; done <"$work/flood.end"
  rm -f "$work/flood.end"
  echo "$flood_no,$(secs "$flood_start"),$(secs $(( (last - t0) / 1000 ))),$workers" >>"$out/floods.csv"
}

ask() { # marker -> 0 when the store names the marker's writer
  local m=$1 a b rc found=0 answered=1 ans
  a=$(now_us)
  ans=$("$bin/custos" query --db "$db" --json who-touched "$marks/m-$m" 2>&1); rc=$?
  b=$(now_us)
  # Found: the store holds the marker and the process that wrote it.
  [ $rc = 0 ] && [[ $ans == *wasGeneratedBy* ]] && found=1
  # Not there (yet) is an answer; any other error is a query that failed.
  if [ $rc != 0 ] && [[ $ans != *"nothing in the store matches"* ]]; then
    answered=0
    note "query of marker $m failed ($rc): ${ans:0:300}"
  fi
  echo "$(secs "$(( (a - t0) / 1000 ))"),$m,${written[$m]},$(( (b - a) / 1000 )),$rc,$answered,$found" >>"$out/queries.csv"
  [ $found = 1 ]
}

# Asks for the markers not yet answered, newest first: the store applies
# events in time order, so while the newest is not there the store is
# behind; once it is, every older one must be there too, and one that is
# not is missing (asked once more at the end, in the drained store).
ask_pending() {
  [ ${#pending[@]} -gt 0 ] || return 0
  ask "${pending[-1]}" || return 0
  local m
  for m in "${pending[@]:0:${#pending[@]}-1}"; do ask "$m" || missing+=("$m"); done
  pending=()
}

while :; do
  t=$(since)
  [ "$t" -ge "$total_ms" ] && break
  # Floods: one starts at first, first + every, ... if it can end in time.
  if [ ${#flood_pids[@]} -gt 0 ]; then
    alive=()
    for p in "${flood_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    if [ ${#alive[@]} = 0 ]; then
      wait "${flood_pids[@]}" 2>/dev/null
      flood_end
      echo 0 >"$work/flooding"
      flood_pids=()
    fi
  fi
  if [ ${#flood_pids[@]} = 0 ] && [ "$t" -ge "$next_flood" ] && [ $(( next_flood + flood_s * 1000 )) -le "$total_ms" ]; then
    flood_no=$(( flood_no + 1 )) flood_start=$t next_flood=$(( next_flood + every * 1000 ))
    for _ in $(seq "$workers"); do
      # Passes over the tree until flood_s is up (the last pass finishes).
      # Each notes when it ended: the monitor may notice late.
      bash -c 'while [ $SECONDS -lt '"$flood_s"' ]; do find '"$work/tree"' -type f -exec cat {} + >/dev/null; done
        echo "${EPOCHREALTIME/./}" >>'"$work/flood.end" &
      flood_pids+=($!)
    done
    echo 1 >"$work/flooding"
  fi
  # The probe: one minute at a time, so a late wake-up is placed in time.
  if [ -z "$probe" ] || ! kill -0 "$probe" 2>/dev/null; then
    [ -n "$probe" ] && wait "$probe"
    probe_no=$(( probe_no + 1 ))
    echo "$(secs "$t")" >"$out/probe-$probe_no.start"
    "$bin/custos-workload" ticker --seconds 60 >"$out/probe-$probe_no.json" &
    probe=$!
  fi
  # The markers of the ticks before (one sample period old at least), then
  # this tick's: written by this shell, a traced open-for-write, no exec.
  ask_pending
  marker=$(( marker + 1 ))
  echo "$marker" >"$marks/m-$marker"
  written[$marker]=$(secs "$(since)")
  echo "$marker,${written[$marker]}" >>"$out/markers.csv"
  pending+=("$marker")
  kill -0 "$collector" 2>/dev/null || { note "the collector exited"; break; }
  rest=$(( sample_s * 1000 - ($(since) - t) ))
  [ $rest -gt 0 ] && nap "$rest"
done

# The end: no flood is left running (the last one ended in time).
[ ${#flood_pids[@]} -gt 0 ] && { wait "${flood_pids[@]}"; flood_end; }
[ -n "$probe" ] && { kill -INT "$probe" 2>/dev/null; wait "$probe"; }
: >"$work/stop"; wait "$sampler_pid"
end_s=$(secs "$(since)")
state_end=$(cat $scx/state 2>/dev/null) ops_end=$(cat $scx/root/ops 2>/dev/null)
enable_seq_end=$(cat $scx/enable_seq 2>/dev/null || echo null)
# Before the scheduler is stopped: a "disabled" here was not ours.
dmesg >"$out/dmesg.txt" 2>&1
kill -INT "$collector"; wait "$collector"; collector_rc=$?
sched_rc=null
if [ -n "$sched" ]; then
  kill -0 "$sched" 2>/dev/null && kill -INT "$sched"
  wait "$sched"; sched_rc=$?
fi
# The markers still waiting, and those missing, in the drained store.
for m in "${missing[@]}" "${pending[@]}"; do ask "$m"; done
printf '{"minutes":%s,"flood_every_s":%s,"flood_s":%s,"flood_first_s":%s,"workers":%s,"files":%s,"sample_s":%s,"ring_kb":%s,"db_cache_mb":%s,"scheduler":"%s","cpus":%s,"kernel":"%s","end_s":%s,"sched_ext_state_end":"%s","sched_ops_start":"%s","sched_ops_end":"%s","enable_seq_start":%s,"enable_seq_end":%s,"collector_rc":%s,"sched_rc":%s,"db_bytes":%s}\n' \
  "$minutes" "$every" "$flood_s" "$first" "$workers" "$files" "$sample_s" "$ring_kb" "$db_cache_mb" "$scheduler" "$(nproc)" "$(uname -r)" \
  "$end_s" "$state_end" "$ops_start" "$ops_end" "$enable_seq_start" "$enable_seq_end" "$collector_rc" "$sched_rc" \
  "$(stat -c %s "$db")" >"$out/meta.json"
# The store's own account: events stored (each id once, in runs of ids),
# loss records by category, and the collector's stats records.
python3 - "$db" "$out" <<'EOF'
import json, sqlite3, sys
db, out = sys.argv[1], sys.argv[2]
con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
one = lambda q: con.execute(q).fetchone()[0]
losses = {c: {"records": n, "count": s} for c, n, s in
          con.execute("SELECT category, COUNT(*), SUM(count) FROM losses GROUP BY category")}
stats = [json.loads(l) for (l,) in con.execute("SELECT line FROM stats ORDER BY time_ns")]
final = [s for s in stats if s.get("final")]
ingests = [dict(zip(("lines", "events_new", "events_duplicate", "malformed", "losses"), r))
           for r in con.execute("SELECT lines, events_new, events_duplicate, malformed, losses FROM ingests")]
with open(f"{out}/stats.jsonl", "w") as f:
    for s in stats:
        f.write(json.dumps(s) + "\n")
json.dump({
    "stored": one("SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges"),
    "losses": losses,
    "rejects": one("SELECT COUNT(*) FROM rejects"),
    "ingests": ingests,
    "final_stats": final[-1] if final else None,
    "stats_records": len(stats),
}, open(f"{out}/store.json", "w"), indent=1)
EOF
note "done: collector exit $collector_rc, scheduler exit $sched_rc, sched_ext $state_end; $(tail -2 "$out/collect.log" | tr '\n' ' ')"
rm -rf "$work"
