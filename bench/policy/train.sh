#!/usr/bin/env bash
# Trains the shipped default model of the learned policy, reproducibly:
#   1. in the 1-vCPU VM, the training workloads (train-guest.sh) run beside
#      the collector under the static policy with 30 % exploration and
#      without Custos's consumer protection (--no-consumer-preempt
#      --no-overflow-hold), and the scheduler records every transition.
#      With the protection on, at most 8 workers never filled the rings, not
#      even 16 KiB ones (two recordings, 245 850 and 339 752 transitions, not
#      one event lost, availability never below 25 %): a completeness reward
#      that is always zero teaches nothing about loss. Without it the queue
#      decision is what stands between the flood and the rings (59 % lost);
#   2. on the host, `custos train` fits the DQN to the recording (offline)
#      and writes the model.
# Usage: bench/policy/train.sh [OUT_MODEL] (default
# crates/custos-policy/models/default.json). TRAIN_ROUNDS (default 4),
# TRAIN_EPOCHS (default 40), TRAIN_SEED (default 1), TRAIN_RING_KB (64),
# TRAIN_EXPLORE_PCT (30) and TRAIN_SCHED_ARGS vary it; the recording
# and logs stay in bench/policy/out/train.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
model=${1:-crates/custos-policy/models/default.json}
out=bench/policy/out/train
rm -rf "$out"; mkdir -p "$out"
custos=target/release/custos
echo "recording transitions in the VM ($(date -u +%H:%M:%S))"
"$custos" vm run -q --cpus 1 --share "$root/$out" -- \
  env TRAIN_RING_KB="${TRAIN_RING_KB:-64}" bash "$root/bench/policy/train-guest.sh" "$root/$out" "${TRAIN_ROUNDS:-4}" \
  --policy static --explore-pct "${TRAIN_EXPLORE_PCT:-30}" --record-transitions "$root/$out/train.tr" \
  ${TRAIN_SCHED_ARGS---no-consumer-preempt --no-overflow-hold}
echo "training offline ($(date -u +%H:%M:%S))"
mkdir -p "$(dirname "$model")"
"$custos" train --recording "$out/train.tr" --out "$model" \
  --epochs "${TRAIN_EPOCHS:-40}" --seed "${TRAIN_SEED:-1}" --lr 1e-3 2>&1 | tee "$out/train.log"
