#!/bin/sh
# Guest side of tests/policy.rs: the learned policy in a real sched_ext
# kernel. Usage: learned.sh BIN_DIR OUT. OUT holds model.json (a valid
# model) and corrupt.json (the same with one weight changed). Every result is
# a "key value" line on stdout; logs and stats go to OUT.
B=$1; OUT=$2
STATE=/sys/kernel/sched_ext/state
wait_state() {
	i=0
	while [ "$(cat $STATE)" != "$1" ] && [ $i -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
	[ "$(cat $STATE)" = "$1" ]
}
load() { # seconds of busy work the policy decides on
	end=$(($(date +%s) + $1))
	while [ "$(date +%s)" -lt "$end" ]; do
		find /usr/lib -maxdepth 2 >/dev/null 2>&1
		sh -c 'for i in 1 2 3 4 5 6 7 8; do cat /proc/self/stat >/dev/null; done'
	done
}
# Load until LOG reports training epoch N, at most 90 s: an epoch's time
# depends on how fast this emulated CPU runs float code (over 10 s on some
# hosts, under the load), so a fixed duration saw one epoch there.
load_until_epoch() { # N LOG
	i=0
	while ! grep -q "policy epoch $1:" "$2" && [ $i -lt 45 ]; do load 2; i=$((i + 1)); done
}
# The network only runs under provenance pressure (without it the budgeted
# queues are masked): a collector with 16 KiB rings and a storm beside the
# load make availability fall.
collector=
pressure_on() {
	rm -rf /sys/fs/bpf/custos
	$B/custos collect -o /dev/null --events-ring-kb 16 --attrs-ring-kb 16 --critical-ring-kb 16 \
		--stats-interval 0 >"$OUT/$1-collect.log" 2>&1 &
	collector=$!
	i=0
	while [ ! -e /sys/fs/bpf/custos/global_features ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}
pressure_off() {
	kill -INT $collector; wait $collector
}
pressured_load() { # seconds
	$B/custos-workload storm --procs 4 --seconds "$1" >/dev/null 2>&1 &
	load "$1"
	wait $!
}
BARE="--no-consumer-preempt --no-overflow-hold --no-hold"

# A corrupt model named by --model: an error before anything is attached.
$B/custos sched --policy learned --model "$OUT/corrupt.json" --duration 4 \
	--stats-json "$OUT/corrupt-stats.json" >"$OUT/corrupt.log" 2>&1
echo "corrupt.rc $?"

# No pressure (no collector): the shipped model never budgets anyone.
$B/custos sched --policy learned --duration 5 --stats-json "$OUT/unpressured-stats.json" >"$OUT/unpressured.log" 2>&1 &
pid=$!
wait_state enabled 60
load 4
wait $pid
echo "unpressured.rc $?"

pressure_on learned
# The model's network decides: weights live (generation), inferences counted.
$B/custos sched --policy learned --model "$OUT/model.json" $BARE --duration 10 \
	--stats-json "$OUT/learned-stats.json" >"$OUT/learned.log" 2>&1 &
pid=$!
wait_state enabled 60 && echo "learned.attached yes"
pressured_load 6
wait $pid
echo "learned.rc $?"

# No --model: the shipped model.
$B/custos sched --policy learned $BARE --duration 4 --stats-json "$OUT/shipped-stats.json" >"$OUT/shipped.log" 2>&1 &
pid=$!
wait_state enabled 60
pressured_load 3
wait $pid
echo "shipped.rc $?"
pressure_off

# Online training in the scheduler: new weights after every epoch. (Without
# pressure: every decision is still a transition to learn from, and the
# learner gets the CPU time an epoch needs on this one vCPU.)
$B/custos sched --policy learned --train --save-model "$OUT/inproc.json" \
	--stats-json "$OUT/inproc-stats.json" >"$OUT/inproc.log" 2>&1 &
pid=$!
wait_state enabled 60
load_until_epoch 2 "$OUT/inproc.log"
kill -INT $pid
wait $pid
echo "inproc.rc $?"

# Online training beside it, by another process, through the pinned maps.
$B/custos sched --policy learned --model "$OUT/model.json" --emit-transitions \
	--stats-json "$OUT/external-stats.json" >"$OUT/external-sched.log" 2>&1 &
pid=$!
wait_state enabled 60
$B/custos train --online --epoch-secs 2 --from "$OUT/model.json" \
	--out "$OUT/external.json" >"$OUT/external-train.log" 2>&1 &
trainer=$!
load_until_epoch 2 "$OUT/external-train.log"
kill -INT $trainer
wait $trainer
echo "external.train_rc $?"
kill -INT $pid
wait $pid
echo "external.rc $?"

# The feedback controller (no learning) under a flood that fills the rings:
# the seed's bare backbone (no consumer protection) and 16 KiB rings, so
# availability falls and the controller must budget the producers.
pressure_on feedback
$B/custos sched --policy feedback $BARE --duration 10 \
	--stats-json "$OUT/feedback-stats.json" >"$OUT/feedback.log" 2>&1 &
pid=$!
wait_state enabled 60 && echo "feedback.attached yes"
$B/custos-workload storm --procs 4 --seconds 6 >/dev/null 2>&1
wait $pid
echo "feedback.rc $?"
pressure_off
echo "done yes"
