#!/usr/bin/env bash
# Runs inside the VM (bench/policy/run.py starts it): loss and runtime of
# the default scheduler, Custos's static policy and its learned policy, in
# one session, on the find flood at each worker count (more workers than
# training ever saw: at most 8) and on a workload never used in training
# (an exec storm: many short-lived producers).
# Usage: eval-guest.sh OUT MODEL; EVAL_WORKERS (default "16 64"),
# EVAL_UNSEEN_WORKERS (default 16), EVAL_RUNS (default 1).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$1 model=$2
sp=$root/scripts/superproducer-guest.sh
runs=${EVAL_RUNS:-1}
status=0
for workers in ${EVAL_WORKERS:-16 64}; do
  SP_OUT=$out/find-w$workers-default SP_SCHEDULERS=default SP_WORKERS=$workers SP_RUNS=$runs SP_KEEP_EVENTS=0 \
    bash "$sp" || status=1
  SP_OUT=$out/find-w$workers-static SP_SCHEDULERS=custos SP_WORKERS=$workers SP_RUNS=$runs SP_KEEP_EVENTS=0 \
    bash "$sp" --policy static || status=1
  SP_OUT=$out/find-w$workers-learned SP_SCHEDULERS=custos SP_WORKERS=$workers SP_RUNS=$runs SP_KEEP_EVENTS=0 \
    bash "$sp" --policy learned --model "$model" || status=1
done
w=${EVAL_UNSEEN_WORKERS:-16}
for policy in default static learned; do
  args=()
  scheds=custos
  case $policy in
    default) scheds=default ;;
    static) args=(--policy static) ;;
    learned) args=(--policy learned --model "$model") ;;
  esac
  SP_OUT=$out/exec-w$w-$policy SP_WORKLOAD=exec SP_SCHEDULERS=$scheds SP_WORKERS=$w SP_RUNS=$runs SP_KEEP_EVENTS=0 \
    bash "$sp" "${args[@]}" || status=1
done
exit $status
