#!/usr/bin/env bash
# The main job, one screen: boot the sched_ext kernel and show it is ready.
set -euo pipefail
cd "$(dirname "$0")/.."
exec target/release/custos vm run -- sh -c '
  echo "kernel:          $(uname -r)"
  echo "sched_ext state: $(cat /sys/kernel/sched_ext/state)"
  echo "BPF LSM active:  $(grep -q bpf /sys/kernel/security/lsm && echo yes || echo no)"
  echo "CPUs:            $(nproc)"'
