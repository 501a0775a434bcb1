#!/usr/bin/env bash
# The main job, one screen: the case study of seed 000 §2.1. A scripted
# attack (scripts/attack.sh) runs during a super-producer flood in the
# sched_ext VM, under the kernel's default scheduler and under Custos; both
# streams go into the store, which is asked for every step of the attack.
# Leaves a timeline, the causal graphs, a summary and index.html in out/demo
# (bench/harness/custos_bench/demo.py; --out DIR, --workers N).
#
# One vCPU: QEMU's single-threaded emulation (needed here, see README) runs
# one vCPU at a time for up to 100 ms, so with two the consumer's CPU would
# stand still while the other runs, whatever the guest's scheduler decides.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=bench/harness exec .tools/venv/bin/python -m custos_bench.demo "$@"
