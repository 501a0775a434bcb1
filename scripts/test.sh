#!/usr/bin/env bash
# make test's suites in two lanes side by side. QEMU emulates a guest on one
# host thread, so one VM leaves the second core idle; the VM suites of the
# custos crate run in a lane of their own beside everything else (the host
# tests, the other crates' VM suites, pytest). Host collector tests (pinned
# maps: one collector per machine) are all in the second lane, one at a time.
#
# Every suite runs and reports its failures even when another failed; the
# exit status is non-zero if any did. The VM lane's output is printed when
# it ends (target/test-vm-lane.log), so the two lanes do not interleave.
set -uo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
PY=.tools/venv/bin/python

# VM suites of the custos crate, chosen so the lanes end together: on the
# slow emulator of 2026-11-27, about 39 min (attack 11, superproducer 5, hold 2,
# policy 12, demo 9.5) against 37 (host tests and the other VM suites 27,
# pytest about 10; the fuzz smoke adds about 1.5 to the second lane).
VM_LANE=(attack superproducer hold policy demo)

log() { echo "[make test $(date +%H:%M:%S)] $*"; }

# Build once, so the lanes run tests rather than compete for the compiler.
log "building the tests"
$CARGO test --release --workspace --no-run || exit 1

# Every other test target of the workspace, by name.
mapfile -t REST < <($CARGO metadata --no-deps --format-version 1 | $PY -c '
import json, sys
lane = set(sys.argv[1:])
names = sorted({t["name"] for p in json.load(sys.stdin)["packages"]
                for t in p["targets"] if "test" in t["kind"]} - lane)
print("\n".join(names))' "${VM_LANE[@]}")
[ ${#REST[@]} -gt 0 ] || { echo "no test targets found" >&2; exit 1; }

vm_args=()
for t in "${VM_LANE[@]}"; do vm_args+=(--test "$t"); done
rest_args=()
for t in "${REST[@]}"; do rest_args+=(--test "$t"); done

mkdir -p target
vm_log=target/test-vm-lane.log
log "lane 1 (VM suites of the custos crate: ${VM_LANE[*]}) starts; its output goes to $vm_log"
# A process group of its own, so that whatever ends this script ends the
# lane's tests and their VMs too; `wait` gives its exit status.
setsid --wait bash -c '"$@" >"$0" 2>&1' \
  "$vm_log" $CARGO test --release --workspace --no-fail-fast "${vm_args[@]}" &
vm_pid=$!
trap 'kill -- -$vm_pid 2>/dev/null' EXIT
trap 'exit 130' INT TERM

rc=0
log "lane 2: the libraries, binaries and the other test suites (${REST[*]})"
# Under the host collector lock that experiments beside make test take
# (one collector per machine): a locked collector started meanwhile waits
# instead of failing these tests, or being failed by them.
flock -w 1800 /tmp/custos-host-collector.lock \
  $CARGO test --release --workspace --no-fail-fast --lib --bins "${rest_args[@]}" || rc=1
# Doc tests cannot be asked for beside other targets.
$CARGO test --release --workspace --no-fail-fast --doc || rc=1
# The fuzz targets' smoke (`make fuzz-smoke`: 30 s per target, bench/fuzz/
# README.md). In this lane, after the workspace build and one suite at a
# time, not in the background: fuzzing keeps a core busy, and a third job
# would slow the host suites and the emulated VM beside them. Adds to this
# lane, on this 2-core machine: 97 s with its build cache warm; 13 min more
# the first time on a machine (786 s cold build, ASan-instrumented SQLite and
# zstd), 85 s more in a new checkout (the cache, ~/.cache/custos/fuzz-target,
# is outside the checkout: see the Makefile).
fuzz_log=target/test-fuzz-smoke.log
log "lane 2: the fuzz smoke (30 s per target; output in $fuzz_log)"
if ${MAKE:-make} -s fuzz-smoke >"$fuzz_log" 2>&1; then
  # Each target's last libFuzzer status line (executions, coverage, corpus).
  awk '/Running `/ { t = $2; sub(/.*\//, "", t) } /DONE +cov:/ { print "  " t ": " $0 }' "$fuzz_log"
else
  rc=1
  tail -n 80 "$fuzz_log"
  log "lane 2: the fuzz smoke FAILED (a crash is in fuzz/artifacts/TARGET/; $fuzz_log)"
fi
log "lane 2: the evaluation harness (pytest)"
$PY -m pytest -q bench/harness/tests || rc=1
log "lane 2 done (rc $rc); waiting for lane 1"

wait $vm_pid
vm_rc=$?
log "lane 1 done (rc $vm_rc); its output:"
cat "$vm_log"
[ "$vm_rc" = 0 ] || rc=1
log "make test: $([ $rc = 0 ] && echo passed || echo FAILED)"
exit $rc
