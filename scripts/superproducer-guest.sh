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
# scx_bpfland peer from .tools/cargo/bin), SP_FILES, SP_WORKERS, SP_RING_KB,
# SP_OUT (results.jsonl and logs), CUSTOS_BIN. Arguments go to `custos sched`.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CUSTOS_BIN:-$root/target/release}
bpfland=${BPFLAND:-$root/.tools/cargo/bin/scx_bpfland}
schedulers=${SP_SCHEDULERS:-default custos}
files=${SP_FILES:-4000} workers=${SP_WORKERS:-4} ring_kb=${SP_RING_KB:-64}
out=${SP_OUT:-/tmp/custos-superproducer}
mkdir -p "$out"

"$bin/custos-workload" tree /tmp/sp-tree --files "$files" >/dev/null

wait_for() { # condition, tenths of a second
  for _ in $(seq "$2"); do eval "$1" && return 0; sleep 0.1; done
  return 1
}

run() { # name [custos sched args...]
  local name=$1; shift
  local events="$out/$name.jsonl"
  rm -rf /sys/fs/bpf/custos /tmp/custos-marker
  "$bin/custos" collect -o "$events" --events-ring-kb "$ring_kb" --attrs-ring-kb "$ring_kb" \
    --critical-ring-kb "$ring_kb" --stats-interval 0 2>"$out/$name.collect.log" &
  local collector=$! sched=
  wait_for '[ -e /sys/fs/bpf/custos/global_features ]' 100 || { echo "collector did not start" >&2; return 1; }
  if [ "$name" != default ]; then
    if [ "$name" = bpfland ]; then
      "$bpfland" >"$out/$name.sched.log" 2>&1 &
    else
      "$bin/custos" sched --stats-json "$out/$name.sched.json" "$@" >"$out/$name.sched.log" 2>&1 &
    fi
    sched=$!
    wait_for '[ "$(cat /sys/kernel/sched_ext/state)" = enabled ]' 300 || { echo "scheduler did not attach" >&2; cat "$out/$name.sched.log" >&2; return 1; }
  fi
  local start end pids=()
  start=$(date +%s%N)
  for _ in $(seq "$workers"); do
    find /tmp/sp-tree -type f -exec cat {} + >/dev/null & pids+=($!)
  done
  (sleep 1; exec /bin/sh -c 'echo marker > /tmp/custos-marker') & pids+=($!)
  wait "${pids[@]}"
  end=$(date +%s%N)
  local state; state=$(cat /sys/kernel/sched_ext/state)
  [ -n "$sched" ] && { kill -INT "$sched"; wait "$sched"; }
  kill -INT "$collector"; wait "$collector"
  local line produced delivered dropped unnumbered marker
  line=$(grep -a 'produced [0-9]* = delivered' "$out/$name.collect.log" | tail -1)
  produced=$(sed -E 's/.*produced ([0-9]+) = .*/\1/' <<<"$line")
  delivered=$(sed -E 's/.*delivered ([0-9]+) .*/\1/' <<<"$line")
  dropped=$(sed -E 's/.*dropped ([0-9]+) .*/\1/' <<<"$line")
  unnumbered=$(sed -E 's/.*unnumbered ([0-9]+).*/\1/' <<<"$line")
  # The marker's exec and its open-for-write, both on the reserved path.
  marker=$(python3 - "$events" <<'PY'
import json, sys
execd = opened = False
for line in open(sys.argv[1], errors="replace"):
    e = json.loads(line)
    if e.get("syscall") == "execve" and e.get("ret") == 0 and any("custos-marker" in a for a in e.get("argv") or []):
        execd = True
    if e.get("path") == "/tmp/custos-marker" and e.get("critical") is True:
        opened = True
print("yes" if execd and opened else "no")
PY
)
  printf '%-8s %10s %10s %9s %11s %7s %11s %8s %s\n' "$name" "$produced" "$delivered" "$dropped" "$unnumbered" \
    "$(awk -v d="$dropped" -v u="$unnumbered" -v p="$produced" 'BEGIN { t = p + u; printf "%.1f%%", t ? 100 * (d + u) / t : 0 }')" \
    "$(( (end - start) / 1000000 )) ms" "$marker" "${state}"
  printf '{"scheduler":"%s","produced":%s,"delivered":%s,"dropped":%s,"unnumbered":%s,"runtime_ms":%s,"marker_delivered":%s,"sched_ext_state":"%s"}\n' \
    "$name" "${produced:-null}" "${delivered:-null}" "${dropped:-null}" "${unnumbered:-null}" "$(( (end - start) / 1000000 ))" \
    "$([ $marker = yes ] && echo true || echo false)" "$state" >>"$out/results.jsonl"
}

rm -f "$out/results.jsonl"
echo "super producer: $workers x 'find -exec cat' over $files files, ${ring_kb} KiB rings, $(nproc) CPU(s), kernel $(uname -r)"
printf '%-8s %10s %10s %9s %11s %7s %11s %8s %s\n' scheduler produced delivered dropped unnumbered loss runtime marker sched_ext
for s in $schedulers; do
  run "$s" "$@"
done
