#!/usr/bin/env bash
# Runs inside the VM (bench/placement/run.py writes the parameters), 2 vCPUs.
#
# MODE=record: the kernel's default scheduler runs the workloads below while
# the recorder writes every created or woken task's
# snapshot and the CPU the default scheduler put it on (`custos placement record`): the GRU's training
# data (seed 002 §3.4: imitation of the default scheduler).
#
# MODE=bench: the same workloads under each of $CONFIGS in turn, in this one
# boot: default (EEVDF), custos (Custos's own placement), gru (Custos with
# --placement gru). One JSON line per result on $OUT/results.jsonl.
#
# The seed's three workload types (Table 5.1): CPU-bound (sysbench cpu, 1 and
# 8 threads), I/O-bound (frequent blocking and wake-up: four pairs of
# processes passing a byte over AF_UNIX sockets, a fixed amount of work), and
# mixed (sysbench cpu with 4 threads beside two such pairs).
set -uo pipefail
: "${OUT:?}" "${ROOT:?}" "${MODE:?}" "${SECONDS_PER_LOAD:?}" "${PINGPONG_N:?}" "${REPS:?}"
CUSTOS=$ROOT/target/release/custos
WORKLOAD=$ROOT/target/release/custos-workload
STATE=/sys/kernel/sched_ext/state
MODEL=${MODEL:-}
# Extra `custos sched` options of the gru configuration (run.py --gru-args).
GRU_ARGS=${GRU_ARGS:-}

note() { echo "bench/placement: $*" >&2; }
emit() { # config load json
  printf '{"config":"%s","load":"%s","result":%s}\n' "$1" "$2" "$3" >> "$OUT/results.jsonl"
}
wait_state() { # wanted-state seconds
  for _ in $(seq $(( $2 * 10 ))); do
    [ "$(cat $STATE)" = "$1" ] && return 0
    sleep 0.1
  done
  return 1
}
# The files' JSON values as one compact array (the workload pretty-prints).
json_array() { python3 -c 'import json, sys; print(json.dumps([json.load(open(f)) for f in sys.argv[1:]]))' "$@"; }
ctxt() { awk '$1 == "ctxt" { print $2 }' /proc/stat; }
now_ns() { date +%s%N; }

# sysbench's histogram (value | stars count) -> median and p95 in ms.
sysbench_json() { # threads logfile
  python3 - "$1" "$2" <<'PY'
import json, re, sys
threads, log = sys.argv[1], open(sys.argv[2]).read()
eps = float(re.search(r"events per second:\s*([\d.]+)", log).group(1))
hist = [(float(v), int(c)) for v, c in re.findall(r"^\s*([\d.]+)\s*\|\*+\s+(\d+)\s*$", log, re.M)]
total = sum(c for _, c in hist)
def pct(q):
    seen = 0
    for v, c in hist:
        seen += c
        if seen >= q * total:
            return v
    return None
print(json.dumps({"threads": int(threads), "events_per_s": eps, "latency_ms_median": pct(0.5),
                  "latency_ms_p95": pct(0.95), "latency_ms_max": float(re.search(r"max:\s*([\d.]+)", log).group(1))}))
PY
}

cpu_load() { # config threads rep
  local log=$OUT/sysbench-$1-$2-$3.log c0 c1
  c0=$(ctxt)
  sysbench cpu --threads="$2" --time="$SECONDS_PER_LOAD" --histogram=on run > "$log" 2>&1 || { note "sysbench failed: $log"; return 1; }
  c1=$(ctxt)
  emit "$1" "cpu$2" "$(sysbench_json "$2" "$log" | sed "s/}\$/, \"context_switches\": $((c1 - c0))}/")"
}

pingpong_pairs() { # pairs tag -> one JSON per pair in $OUT/pp-TAG-*.json
  local pids=() i
  for i in $(seq "$1"); do "$WORKLOAD" unix-pingpong -n "$PINGPONG_N" > "$OUT/pp-$2-$i.json" & pids+=($!); done
  wait "${pids[@]}"
}

io_load() { # config rep
  local c0 c1 t0 t1
  c0=$(ctxt); t0=$(now_ns)
  pingpong_pairs 4 "io-$1-$2"
  t1=$(now_ns); c1=$(ctxt)
  emit "$1" io "{\"pairs\": 4, \"round_trips\": $PINGPONG_N, \"wall_ms\": $(( (t1 - t0) / 1000000 )), \"context_switches\": $((c1 - c0)), \"pairs_results\": $(json_array "$OUT"/pp-io-"$1"-"$2"-*.json)}"
}

mixed_load() { # config rep
  local log=$OUT/sysbench-mixed-$1-$2.log c0 c1 sb
  c0=$(ctxt)
  sysbench cpu --threads=4 --time="$SECONDS_PER_LOAD" --histogram=on run > "$log" 2>&1 & sb=$!
  pingpong_pairs 2 "mixed-$1-$2"
  wait "$sb"
  c1=$(ctxt)
  emit "$1" mixed "{\"cpu\": $(sysbench_json 4 "$log"), \"context_switches\": $((c1 - c0)), \"pairs_results\": $(json_array "$OUT"/pp-mixed-"$1"-"$2"-*.json)}"
}

all_loads() { # config
  local rep
  for rep in $(seq "$REPS"); do
    note "$1: round $rep of $REPS"
    cpu_load "$1" 1 "$rep"; cpu_load "$1" 8 "$rep"; mixed_load "$1" "$rep"; io_load "$1" "$rep"
  done
}

SCHED_PID=
start_custos() { # config args...
  local config=$1; shift
  "$CUSTOS" sched --stats-json "$OUT/stats-$config.json" "$@" > "$OUT/sched-$config.log" 2>&1 & SCHED_PID=$!
  wait_state enabled 60 || { note "custos sched did not reach enabled; log:"; cat "$OUT/sched-$config.log" >&2; exit 1; }
}
stop_custos() { # config
  local state; state=$(cat $STATE)
  kill -INT "$SCHED_PID"; wait "$SCHED_PID"
  wait_state disabled 30 || { note "custos sched did not detach"; exit 1; }
  [ "$state" = enabled ] || { note "$1: scheduler no longer enabled at the end ($state)"; cat "$OUT/sched-$1.log" >&2; exit 1; }
}

case $MODE in
record)
  "$CUSTOS" placement record --out "$OUT/placements.jsonl" > "$OUT/record.log" 2>&1 & rec=$!
  sleep 1
  all_loads default
  kill -INT "$rec"; wait "$rec"
  cat "$OUT/record.log" >&2
  ;;
bench)
  for config in $CONFIGS; do
    case $config in
    default) all_loads default ;;
    custos) start_custos custos; all_loads custos; stop_custos custos ;;
    gru) start_custos gru --placement gru ${MODEL:+--placement-model "$MODEL"} $GRU_ARGS; all_loads gru; stop_custos gru ;;
    esac
  done
  # The super producer on these two vCPUs: Custos with its own placement,
  # then with the GRU's; the consumer protection must hold under both.
  if [ "${SP_WORKERS:-0}" -gt 0 ]; then
    note "super producer: default and custos"
    SP_OUT=$OUT/sp-custos SP_SCHEDULERS="default custos" bash "$ROOT/scripts/superproducer-guest.sh" >&2
    note "super producer: custos --placement gru"
    SP_OUT=$OUT/sp-gru SP_SCHEDULERS=custos bash "$ROOT/scripts/superproducer-guest.sh" \
      --placement gru ${MODEL:+--placement-model "$MODEL"} $GRU_ARGS >&2
  fi
  ;;
esac
note done
