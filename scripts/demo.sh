#!/usr/bin/env bash
# The main job, one screen: the super-producer attack in the sched_ext VM,
# under the kernel's default scheduler and under Custos, side by side.
#
# One vCPU: QEMU's single-threaded emulation (needed here, see README) runs
# one vCPU at a time for up to 100 ms, so with two the consumer's CPU would
# stand still while the other runs, whatever the guest's scheduler decides.
set -euo pipefail
cd "$(dirname "$0")/.."
exec target/release/custos vm run --cpus 1 --timeout 900 -- bash scripts/superproducer-guest.sh "$@"
