#!/usr/bin/env bash
# Runs inside the VM (bench/policy/train.sh starts it): records the
# scheduler's transitions while training workloads run beside the
# collector, for `custos train --recording`.
#
# The training workloads differ from the evaluation ones on purpose
# (issue 10): compile jobs, archive/unarchive, a small web server under
# load, and a periodic super producer of limited concurrency (at most 8
# `find` workers; the evaluation floods with 16 and 64). The scheduler runs
# the static policy with epsilon-greedy exploration, so every queue's
# outcome shows in the transitions.
#
# Usage: train-guest.sh OUT ROUNDS [custos sched args...]
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${CUSTOS_BIN:-$root/target/release}
out=$1 rounds=$2; shift 2
ring_kb=${TRAIN_RING_KB:-64}
mkdir -p "$out"
work=/tmp/train-work
rm -rf "$work"; mkdir -p "$work/src" "$work/www"
"$bin/custos-workload" tree "$work/tree" --files 3000 >/dev/null

# Compile jobs: 24 small C files, built with make -j2.
for i in $(seq 24); do
  printf 'int f%d(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * %d; return s; }\n' "$i" "$i" >"$work/src/f$i.c"
done
printf 'int main(void) { return 0; }\n' >"$work/src/main.c"
{
  printf 'OBJS = $(patsubst %%.c,%%.o,$(wildcard *.c))\nall: prog\nprog: $(OBJS)\n\tgcc -o $@ $^\n%%.o: %%.c\n\tgcc -O1 -c $< -o $@\nclean:\n\trm -f *.o prog\n'
} >"$work/src/Makefile"
head -c 200000 /dev/urandom >"$work/www/blob"

wait_for() { for _ in $(seq "$2"); do eval "$1" && return 0; sleep 0.1; done; return 1; }

rm -rf /sys/fs/bpf/custos
"$bin/custos" collect -o /dev/null --events-ring-kb "$ring_kb" --attrs-ring-kb "$ring_kb" \
  --critical-ring-kb "$ring_kb" --stats-interval 0 2>"$out/collect.log" &
collector=$!
wait_for '[ -e /sys/fs/bpf/custos/global_features ]' 100 || { echo "collector did not start" >&2; exit 1; }
"$bin/custos" sched --stats-json "$out/sched.json" "$@" >"$out/sched.log" 2>&1 &
sched=$!
wait_for '[ "$(cat /sys/kernel/sched_ext/state)" = enabled ]' 300 || { echo "scheduler did not attach" >&2; cat "$out/sched.log" >&2; exit 1; }

(cd "$work/www" && exec python3 -m http.server 18080 --bind 127.0.0.1 >/dev/null 2>&1) &
server=$!
wait_for 'curl -sf -o /dev/null http://127.0.0.1:18080/blob' 100

for round in $(seq "$rounds"); do
  echo "training round $round/$rounds: compile, archive, web, find x$(( round % 2 ? 4 : 8 ))"
  (cd "$work/src" && make -s clean && make -s -j2) >/dev/null 2>&1 &
  c=$!
  (cd "$work" && tar czf tree.tgz tree && mkdir -p x && tar xzf tree.tgz -C x && rm -rf x tree.tgz) &
  a=$!
  (for _ in $(seq 40); do curl -sf -o /dev/null http://127.0.0.1:18080/blob; done) &
  w=$!
  wait "$c" "$a" "$w"
  # The periodic super producer, limited to 4 or 8 workers.
  pids=()
  for _ in $(seq $(( round % 2 ? 4 : 8 ))); do
    find "$work/tree" -type f -exec cat {} + >/dev/null & pids+=($!)
  done
  (cd "$work/src" && make -s clean && make -s -j2) >/dev/null 2>&1 & pids+=($!)
  wait "${pids[@]}"
done

kill "$server" 2>/dev/null; wait "$server" 2>/dev/null
kill -INT "$sched"; wait "$sched"
kill -INT "$collector"; wait "$collector"
grep -a 'produced [0-9]* = delivered' "$out/collect.log" | tail -1
grep -a 'learner:' "$out/sched.log" | tail -1
echo done
