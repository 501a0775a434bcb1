#!/usr/bin/env bash
# Runs inside the VM (bench/policy/run.py starts it): loss and runtime of
# the default scheduler and of Custos with three queue policies, in one
# session: static, learned (MODEL), and none (every task primary: the static
# policy with an unreachable rate threshold), each with Custos's consumer
# protection (the default) and without it (--no-consumer-preempt
# --no-overflow-hold: the seed's backbone, where the queue policy alone must
# keep the consumer fed). Workloads: the find flood at each worker count
# (training saw at most 8) and an exec storm never used in training (many
# short-lived producers).
# Usage: eval-guest.sh OUT MODEL; EVAL_WORKERS (default "16 64"),
# EVAL_UNSEEN_WORKERS (default 16; 0 skips it), EVAL_RUNS (default 1).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$1 model=$2
sp=$root/scripts/superproducer-guest.sh
runs=${EVAL_RUNS:-1}
status=0

one() { # workload workers config
  local workload=$1 workers=$2 config=$3 scheds=custos args=()
  case $config in
    default) scheds=default ;;
    static) args=(--policy static) ;;
    learned) args=(--policy learned --model "$model") ;;
    none) args=(--policy static --event-rate-high 1000000000000) ;;
    static-unprotected) args=(--policy static --no-consumer-preempt --no-overflow-hold) ;;
    learned-unprotected) args=(--policy learned --model "$model" --no-consumer-preempt --no-overflow-hold) ;;
    none-unprotected) args=(--policy static --event-rate-high 1000000000000 --no-consumer-preempt --no-overflow-hold) ;;
  esac
  SP_OUT=$out/$workload-w$workers-$config SP_WORKLOAD=$workload SP_SCHEDULERS=$scheds SP_WORKERS=$workers \
    SP_RUNS=$runs SP_KEEP_EVENTS=0 bash "$sp" "${args[@]}" || status=1
}

configs="default static learned none static-unprotected learned-unprotected none-unprotected"
for workers in ${EVAL_WORKERS:-16 64}; do
  for c in $configs; do one find "$workers" "$c"; done
done
w=${EVAL_UNSEEN_WORKERS:-16}
if [ "$w" -gt 0 ]; then
  for c in $configs; do one exec "$w" "$c"; done
fi
exit $status
