//! One `Metrics` struct for the periodic stderr line and the `stats` records.

use std::time::Duration;

use serde::Serialize;

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
    /// Records that came after their number was settled as lost (delivered
    /// with `late`; 0 in a sound run).
    pub late: u64,
    /// Lines written older than one written before them (0 unless the
    /// reorder buffer overflowed or records came late).
    pub out_of_order: u64,
    /// Times the reorder buffer reached its bound (`--reorder-buffer-mb`).
    pub reorder_forced: u64,
    /// Lines the consumer handed to the output before this record (events,
    /// loss, stats and the other records; seals are added by the writer).
    pub lines_written: u64,
    /// Producers the programs kicked off their CPU at a syscall that took a
    /// ring under the hold's reserve (only while `custos sched`'s hold runs).
    pub hold_kicks: u64,
    /// Of those, kicked at their return to user mode (the hold stop, outside
    /// every copy of the programs) rather than inside the program.
    pub hold_stops: u64,
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
        self.hold_kicks = states.iter().map(|s| s.hold_kicks).sum();
        self.hold_stops = states.iter().map(|s| s.hold_stops).sum();
        self.delivered = c.delivered;
        self.incomplete = c.incomplete;
        self.loss_records = c.loss_records;
        self.lost_in_gaps = c.lost_in_gaps;
        self.late = c.late;
        self.out_of_order = c.out_of_order;
        self.reorder_forced = c.reorder_forced;
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
        StatsRecord {
            ty: "stats",
            time_ns,
            final_: last,
            metrics: self,
        }
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
/// on that CPU (bpf_prog_info.recursion_misses), and what they cost.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Skips {
    /// Syscall tracepoint runs each copy skipped (entries and exits together).
    #[serde(rename = "skipped_by_copy")]
    pub by_copy: Vec<u64>,
    /// Of the first copy's skips, the syscalls a backup copy saw instead.
    #[serde(rename = "skips_covered")]
    pub covered: u64,
    /// Hook runs (fork, BPF-LSM) every copy of the hook's program skipped:
    /// these events are lost. (The name predates the fork hook's copies.)
    #[serde(rename = "skipped_lsm")]
    pub lsm: u64,
    /// Of the first copy's hook skips, the runs a backup copy saw instead.
    #[serde(rename = "skips_covered_hooks")]
    pub hooks_covered: u64,
    /// Hook runs each copy skipped (fork, bprm_check, file_open and the
    /// one-copy io_uring programs together): a run is lost only if every
    /// copy's count moved.
    #[serde(rename = "hook_skips_by_copy")]
    pub hooks_by_copy: Vec<u64>,
    /// Syscalls that would have been recorded and were lost because every
    /// copy skipped their entry or their exit: found in the task at its next
    /// tracepoint, exact, each once, and reported in-band per CPU.
    pub skipped: u64,
    /// Syscalls whose entry *and* exit every copy skipped: invisible in the
    /// task, bounded from the kernel's counters (any syscall, traced or not,
    /// so an upper bound of the lost records), reported in-band without a CPU.
    pub skipped_bound: u64,
    /// Events lost to skips, at most: `skipped + skipped_bound + skipped_lsm`.
    pub unnumbered: u64,
}

impl Skips {
    /// `enter[k]`, `exit[k]`: skips of copy k of each tracepoint's program;
    /// `covered`: entries and exits a backup copy saw first; `unseen`:
    /// entries and exits found unseen in the task; `skipped`: of those, the
    /// syscalls that would have been recorded; `hooks[h][k]`: skips of copy
    /// k of hook h (the io_uring programs are hooks of one copy: each of
    /// their skips is a lost run); `hooks_covered`: hook runs a backup copy
    /// handled without the first copy running.
    pub fn new(
        enter: &[u64],
        exit: &[u64],
        covered: [u64; 2],
        unseen: [u64; 2],
        skipped: u64,
        hooks: &[Vec<u64>],
        hooks_covered: u64,
    ) -> Self {
        let first = |v: &[u64]| v.first().copied().unwrap_or(0);
        // A run every copy skipped moved every copy's count: no more runs
        // are lost than the least-skipped copy skipped. This caps what the
        // covering counts below can overstate (read while programs run, or
        // a first copy's run that found its object already handled).
        let least = |v: &[u64]| v.iter().copied().min().unwrap_or(0);
        // Counters are read one after the other while programs run: a
        // covered count can be ahead of the skip count it belongs to.
        let lost_entries = first(enter).saturating_sub(covered[0]).min(least(enter));
        let lost_exits = first(exit).saturating_sub(covered[1]).min(least(exit));
        // Every entry (exit) no copy saw was either found unseen in its task,
        // or its syscall's exit (entry) went unseen too.
        let both = lost_entries
            .saturating_sub(unseen[0])
            .min(lost_exits.saturating_sub(unseen[1]));
        let first_hook_skips: u64 = hooks.iter().map(|h| first(h)).sum();
        let lsm = first_hook_skips
            .saturating_sub(hooks_covered)
            .min(hooks.iter().map(|h| least(h)).sum::<u64>());
        let copies = hooks.iter().map(Vec::len).max().unwrap_or(0);
        Skips {
            by_copy: enter.iter().zip(exit).map(|(a, b)| a + b).collect(),
            covered: covered[0] + covered[1],
            lsm,
            hooks_covered,
            hooks_by_copy: (0..copies)
                .map(|k| hooks.iter().filter_map(|h| h.get(k)).sum())
                .collect(),
            skipped,
            skipped_bound: both,
            unnumbered: skipped + both + lsm,
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

    const NONE: [u64; 2] = [0, 0];

    #[test]
    fn skips_split_into_exact_losses_and_a_bound_on_whole_syscalls() {
        // 5 entries and 2 exits no copy saw; 3 of those entries and 1 exit
        // were found in their tasks (2 of the 4 syscalls were traced): at
        // most 1 syscall went wholly unseen.
        // 9 hook runs the first copies skipped (fork 4, file_open 5), 7 of
        // them seen by a backup; every copy of file_open skipped 2 or more.
        let hooks = [vec![4, 0, 3], vec![0, 0, 0], vec![5, 2, 6]];
        let (enter, exit) = ([900, 12, 30], [400, 50, 7]);
        let s = Skips::new(&enter, &exit, [895, 398], [3, 1], 2, &hooks, 7);
        assert_eq!(s.by_copy, vec![1300, 62, 37]);
        assert_eq!(s.covered, 1293);
        assert_eq!(s.skipped, 2);
        assert_eq!(s.skipped_bound, 1);
        assert_eq!((s.lsm, s.hooks_covered), (2, 7));
        assert_eq!(s.hooks_by_copy, vec![9, 2, 9]);
        assert_eq!(s.unnumbered, 2 + 1 + 2);
        assert_eq!(s.first_copy(), 1300);
        // A syscall counted twice before (entry and exit) counts once.
        assert_eq!(Skips::new(&[1], &[1], NONE, NONE, 0, &[], 0).unnumbered, 1);
        // Read while running, covered may run ahead: never an underflow.
        let s = Skips::new(&[3], &[0], [4, 0], NONE, 0, &[vec![1]], 2);
        assert_eq!(s.unnumbered, 0);
        // An io_uring program is a hook of one copy: each skip is a lost run.
        assert_eq!(Skips::new(&[], &[], NONE, NONE, 0, &[vec![3]], 0).lsm, 3);
    }

    #[test]
    fn no_more_runs_are_lost_than_the_least_skipped_copy_skipped() {
        let quiet = [0, 0, 0];
        // The first copy of file_open skipped one run and no backup counted
        // covering it, yet neither backup ever skipped: it ran in them.
        let idle_backups = [vec![0, 0, 0], vec![0, 0, 0], vec![1, 0, 0]];
        let s = Skips::new(&quiet, &quiet, NONE, NONE, 0, &idle_backups, 0);
        assert_eq!((s.lsm, s.unnumbered), (0, 0));
        // Every copy busy at least once: the run may be lost.
        let busy = [vec![0, 0, 0], vec![0, 0, 0], vec![1, 1, 1]];
        let s = Skips::new(&quiet, &quiet, NONE, NONE, 0, &busy, 0);
        assert_eq!((s.lsm, s.unnumbered), (1, 1));
        // Likewise for syscalls wholly unseen: backups that never skipped an
        // entry saw every entry the first copy skipped.
        let s = Skips::new(&[5, 0, 0], &[5, 0, 0], NONE, NONE, 0, &[], 0);
        assert_eq!((s.skipped_bound, s.unnumbered), (0, 0));
    }
}
