#!/bin/bash
# Guest side of tests/units.rs's VM test: the scheduler's and the
# collector's units, run as their lines say (ExecStart with the units'
# capabilities and NoNewPrivileges, KillSignal within TimeoutStopSec), on
# a real sched_ext kernel, watched by a real Prometheus with the shipped
# rule file. Each result is a "key value" line on stdout; logs, status
# and query answers go to $OUT.
#
# The environment names: B (the directory of custos and custos-workload),
# OUT, COLLECT and SCHED (each unit's confined ExecStart, one line),
# COLLECT_SIGNAL, COLLECT_TIMEOUT, SCHED_SIGNAL and SCHED_TIMEOUT (each
# unit's KillSignal without SIG, its TimeoutStopSec in seconds), RESTART_SEC (the scheduler unit's RestartSec in seconds),
# EVENTS (the collector's output, from the config), PROM, COLLECT_PORT,
# SCHED_PORT (ports), RULES (the rule file), FILES (files per worker).
set -u
STATE=/sys/kernel/sched_ext/state
ip link set lo up 2>/dev/null

wait_for() { # condition, tenths of a second
	for _ in $(seq "$2"); do eval "$1" && return 0; sleep 0.1; done
	return 1
}
status() { # name: custos status --expect-sched, its JSON kept, its exit status printed
	$B/custos status --json --expect-sched >"$OUT/status-$1.json" 2>"$OUT/status-$1.err"
	echo "status.$1 $?"
}
query() { # name promql: Prometheus's answer kept
	curl -sf -G "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode "query=$2" >"$OUT/query-$1.json"
}
firing() {
	curl -sf "http://127.0.0.1:$PROM/api/v1/alerts" >"$OUT/alerts.json" &&
		grep -q '"alertname":"CustosEventsLost"' "$OUT/alerts.json" &&
		grep -q '"state":"firing"' "$OUT/alerts.json"
}
flood() { # 16 find workers over the tree: wait for them
	local pids=()
	for _ in $(seq 16); do
		find /tmp/units-tree -type f -exec cat {} + >/dev/null &
		pids+=($!)
	done
	wait "${pids[@]}"
}
stop() { # pid signal timeout name: stops as systemd would, prints rc and seconds
	local t0=$(date +%s%N)
	kill -"$2" "$1"
	local i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt $(($3 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
	if kill -0 "$1" 2>/dev/null; then
		echo "$4.stop_timed_out yes"
		kill -KILL "$1"
	fi
	wait "$1"
	echo "$4.stop_rc $?"
	echo "$4.stop_ms $((($(date +%s%N) - t0) / 1000000))"
}
start_sched() { # name
	$SCHED >"$OUT/sched-$1.log" 2>&1 &
	sched=$!
	wait_for '[ "$(cat $STATE)" = enabled ]' 1200
	echo "sched.$1.attached $([ "$(cat $STATE)" = enabled ] && echo yes || echo no)"
}

$B/custos-workload tree /tmp/units-tree --files "$FILES" >/dev/null

cat >/tmp/prometheus.yml <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $RULES
scrape_configs:
  - job_name: custos-collect
    static_configs:
      - targets: ['127.0.0.1:$COLLECT_PORT']
  - job_name: custos-sched
    static_configs:
      - targets: ['127.0.0.1:$SCHED_PORT']
EOF
prometheus --config.file=/tmp/prometheus.yml --storage.tsdb.path=/tmp/prometheus \
	--web.listen-address=127.0.0.1:$PROM --log.level=warn >"$OUT/prometheus.log" 2>&1 &
prom=$!
wait_for "curl -sf http://127.0.0.1:$PROM/-/ready >/dev/null" 1200
echo "prometheus.ready $(curl -sf http://127.0.0.1:$PROM/-/ready >/dev/null && echo yes || echo no)"

# The scheduler first: it pins the feature maps the collector then uses.
start_sched first
status sched-only
$COLLECT 2>"$OUT/collect.log" &
collector=$!
wait_for "$B/custos status --expect-sched >/dev/null 2>&1" 1800
status both
curl -sf "http://127.0.0.1:$SCHED_PORT/metrics" >"$OUT/sched-metrics.txt"
echo "sched.metrics_rc $?"

# A flood under custos sched: Prometheus scrapes both, the alert must not fire.
t0=$(date +%s)
flood
echo "flood.custos_s $(($(date +%s) - t0))"
sleep 5
query custos-alert 'max_over_time(ALERTS{alertname="CustosEventsLost"}[30m])'
query custos-lost 'max(last_over_time(custos_events_lost_total[30m]))'
query custos-produced 'max(last_over_time(custos_events_produced_total[30m]))'
query sched-up 'max_over_time(up{job="custos-sched"}[30m])'
status after-custos-flood

# The scheduler killed (a crash): the kernel goes back to its own
# scheduler; the collector runs on. Restart=on-failure starts it again
# after RestartSec, and it attaches beside the running collector.
kill -KILL $sched
wait $sched 2>/dev/null
wait_for '[ "$(cat $STATE)" = disabled ]' 600
echo "sched.killed_state $(cat $STATE)"
status sched-killed
sleep "$RESTART_SEC"
start_sched restarted
status restarted

# Stopped as the unit stops it: the default scheduler under a flood, the
# alert fires while the flood lasts.
stop $sched "$SCHED_SIGNAL" "$SCHED_TIMEOUT" sched
echo "sched.stopped_state $(cat $STATE)"
status sched-stopped
flood &
flooding=$!
t0=$(date +%s)
fired=no
while kill -0 $flooding 2>/dev/null; do
	firing && { fired=yes; break; }
	sleep 1
done
# The last minute's rate still counts the flood's losses once it ended.
[ $fired = no ] && wait_for firing 300 && fired=yes
echo "default.alert_fired $fired"
echo "default.alert_after_s $(($(date +%s) - t0))"
wait $flooding
query default-lost 'max(last_over_time(custos_events_lost_total[30m]))'

stop $collector "$COLLECT_SIGNAL" "$COLLECT_TIMEOUT" collect
$B/custos verify "$EVENTS" >"$OUT/verify.log" 2>&1
echo "verify.rc $?"
kill $prom
echo "done yes"
