//! One `Metrics` struct for the periodic stderr line and the `stats` records.

use std::time::Duration;

use serde::Serialize;

use crate::bpf_skel::types::{custos_cpu_state, custos_global_features};
use crate::consumer::ConsumerCounters;
use crate::intf::*;

#[derive(Debug, Default, Clone, Serialize)]
pub struct Metrics {
    /// Events numbered by the programs (sum of per-CPU sequences).
    pub produced: u64,
    /// Events the consumer received.
    pub delivered: u64,
    /// Events a ring refused (critical + events).
    pub dropped: u64,
    pub dropped_critical: u64,
    pub dropped_events: u64,
    /// Attribute halves refused; their events were delivered incomplete.
    pub dropped_attrs: u64,
    pub incomplete: u64,
    pub loss_records: u64,
    /// Events lost per the consumer's sequence-gap accounting.
    pub lost_in_gaps: u64,
    /// Delivered events per second since the last stats record.
    pub events_per_s: f64,
    /// Fraction of each ring in use when last sampled (critical, events, attrs).
    pub ring_fill: [f64; 3],
    /// Events produced but not yet consumed (consumer lag).
    pub consumer_lag: u64,
    pub uptime_s: f64,
    /// Program runs the kernel skipped as re-entrant (never numbered).
    #[serde(flatten)]
    pub skips: Skips,
    #[serde(skip)]
    last_delivered: u64,
    #[serde(skip)]
    last_uptime: f64,
}

impl Metrics {
    pub fn new(_nr_cpus: usize) -> Self {
        Metrics::default()
    }

    pub fn update(
        &mut self,
        states: &[custos_cpu_state],
        c: &ConsumerCounters,
        g: Option<&custos_global_features>,
        uptime: Duration,
    ) {
        self.produced = states.iter().map(|s| s.seq).sum();
        self.dropped_critical = states.iter().map(|s| s.drops[DROP_CRITICAL]).sum();
        self.dropped_events = states.iter().map(|s| s.drops[DROP_EVENTS]).sum();
        self.dropped_attrs = states.iter().map(|s| s.drops[DROP_ATTRS]).sum();
        self.dropped = self.dropped_critical + self.dropped_events;
        self.delivered = c.delivered;
        self.incomplete = c.incomplete;
        self.loss_records = c.loss_records;
        self.lost_in_gaps = c.lost_in_gaps;
        self.consumer_lag = self.produced.saturating_sub(self.delivered + self.dropped);
        if let Some(g) = g {
            for i in [RING_CRITICAL, RING_EVENTS, RING_ATTRS] {
                if g.ring_size[i] > 0 {
                    self.ring_fill[i] = 1.0 - g.ring_free_bytes[i] as f64 / g.ring_size[i] as f64;
                }
            }
        }
        let now = uptime.as_secs_f64();
        let dt = now - self.last_uptime;
        if dt > 0.0 {
            self.events_per_s = (self.delivered - self.last_delivered) as f64 / dt;
        }
        self.last_delivered = self.delivered;
        self.last_uptime = now;
        self.uptime_s = now;
    }

    pub fn line(&self) -> String {
        format!(
            "{:.0} ev/s  produced {}  delivered {}  dropped {} (critical {}, events {})  incomplete {}  rings used: critical {:.0}% events {:.0}% attrs {:.0}%",
            self.events_per_s,
            self.produced,
            self.delivered,
            self.dropped,
            self.dropped_critical,
            self.dropped_events,
            self.incomplete,
            self.ring_fill[0] * 100.0,
            self.ring_fill[1] * 100.0,
            self.ring_fill[2] * 100.0,
        )
    }

    pub fn stats_record(&self, time_ns: u64, last: bool) -> StatsRecord<'_> {
        StatsRecord { ty: "stats", time_ns, final_: last, metrics: self }
    }
}

#[derive(Serialize)]
pub struct StatsRecord<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    time_ns: u64,
    #[serde(rename = "final")]
    final_: bool,
    #[serde(flatten)]
    metrics: &'a Metrics,
}

/// Program runs the kernel skipped because the program was already running
/// on that CPU (bpf_prog_info.recursion_misses).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Skips {
    /// Syscall tracepoint runs each copy skipped (entry and exit together).
    /// A syscall is lost only if every copy skipped it, so the loss is at
    /// most the smallest of these, per tracepoint.
    #[serde(rename = "skipped_by_copy")]
    pub by_copy: Vec<u64>,
    /// Skipped BPF-LSM hook runs: these events are lost.
    #[serde(rename = "skipped_lsm")]
    pub lsm: u64,
    /// An upper bound on the events lost this way: for each syscall
    /// tracepoint the fewest skips of any copy, plus the LSM skips.
    pub unnumbered: u64,
}

impl Skips {
    /// `enter[k]`, `exit[k]`: skips of copy k of each tracepoint's program.
    pub fn new(enter: &[u64], exit: &[u64], lsm: u64) -> Self {
        let min = |v: &[u64]| v.iter().copied().min().unwrap_or(0);
        Skips {
            by_copy: enter.iter().zip(exit).map(|(a, b)| a + b).collect(),
            lsm,
            unnumbered: min(enter) + min(exit) + lsm,
        }
    }

    /// Skips the first copy suffered: syscalls the backup copies saw instead,
    /// or none did.
    pub fn first_copy(&self) -> u64 {
        self.by_copy.first().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod skips_tests {
    use super::Skips;

    #[test]
    fn the_bound_is_the_least_skipped_copy_of_each_tracepoint() {
        let s = Skips::new(&[900, 12, 30], &[400, 50, 7], 2);
        assert_eq!(s.by_copy, vec![1300, 62, 37]);
        assert_eq!(s.unnumbered, 12 + 7 + 2);
        assert_eq!(s.first_copy(), 1300);
    }
}
