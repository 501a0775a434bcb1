//! Scheduler statistics: one `Metrics` struct serves the live monitor
//! (`--stats`, `--monitor`, through scx_stats) and the JSON summary.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use scx_stats::prelude::*;
use scx_stats_derive::{stat_doc, Stats};
use serde::{Deserialize, Serialize};

/// Where `custos sched` serves its statistics (scx_stats socket, under /var/run/scx).
pub const STATS_SCHED_PATH: &str = "custos";

#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(desc = "one queue of the Aegis backbone")]
pub struct QueueMetrics {
    #[stat(
        desc = "Waiting time of the queue in ns (0 for the primary queue)",
        _gauge
    )]
    pub waiting_time_ns: u64,
    #[stat(desc = "Tasks moved from this queue onto a CPU")]
    pub dispatches: u64,
    #[stat(desc = "Dispatches where this queue won the hungry-factor argmax (Eq. 2)")]
    pub hungry_factor_picks: u64,
    #[stat(desc = "Dispatches forced by the starvation guard")]
    pub starvation_guard_picks: u64,
    #[stat(desc = "Policy decisions that put a task in this queue")]
    pub policy_decisions: u64,
    #[stat(desc = "Mean time from enqueue to running, in us")]
    pub wait_avg_us: f64,
    #[stat(desc = "Longest time from enqueue to running, in us")]
    pub wait_max_us: f64,
    #[stat(desc = "Sum of enqueue-to-running times, in ns")]
    pub wait_total_ns: u64,
}

#[stat_doc]
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(top)]
pub struct Metrics {
    #[stat(desc = "Seconds this report covers")]
    pub interval_s: f64,
    #[stat(desc = "Per-queue statistics; queue 0 is primary")]
    pub queues: Vec<QueueMetrics>,
    #[stat(desc = "Tasks the policy moved from primary to a budgeted queue")]
    pub policy_to_budgeted: u64,
    #[stat(desc = "Tasks the policy moved from a budgeted queue back to primary")]
    pub policy_to_primary: u64,
    #[stat(desc = "Policy decisions for consumers (always primary)")]
    pub consumer_decisions: u64,
    #[stat(desc = "Wakeups sent straight to an idle CPU")]
    pub direct_dispatches: u64,
    #[stat(desc = "Synchronous wakeups run on the waker's CPU (it sleeps next)")]
    pub sync_wakeups: u64,
    #[stat(desc = "Enqueues of one-CPU tasks onto their CPU's queues")]
    pub pinned_enqueues: u64,
    #[stat(desc = "Per-CPU kthreads run next on their CPU, outside the queues")]
    pub kthread_dispatches: u64,
    #[stat(desc = "Slices refilled for a task with nothing else to run")]
    pub keep_running: u64,
    #[stat(desc = "Idle CPUs woken when a budgeted queue became eligible")]
    pub budget_timer_fires: u64,
    #[stat(desc = "Idle CPUs kicked on enqueue")]
    pub idle_kicks: u64,
    #[stat(desc = "Waking consumers that preempted a budgeted task")]
    pub consumer_preemptions: u64,
    #[stat(desc = "Waking consumers that preempted an ordinary task (no budgeted one running)")]
    pub consumer_preemptions_primary: u64,
    #[stat(
        desc = "Consumers that kept their CPU past a slice because events were waiting in the rings"
    )]
    pub consumer_kept: u64,
    #[stat(
        desc = "Tasks preempted with migration disabled (inside a collector program) run next on their CPU with a short slice"
    )]
    pub migration_disabled_next: u64,
    #[stat(desc = "Waking consumers put first on their CPU, with nothing to preempt there")]
    pub consumer_next: u64,
    #[stat(desc = "Queued consumers dispatched before the budgeted queues")]
    pub consumer_first: u64,
    #[stat(
        desc = "Consumer enqueues that found nothing to preempt and took the primary queue's head"
    )]
    pub consumer_queued: u64,
    #[stat(
        desc = "Dispatches that held the budgeted queues back because the rings were nearly full"
    )]
    pub overflow_holds: u64,
    #[stat(desc = "Running tasks whose slice the policy ended at a tick to budget them")]
    pub tick_preemptions: u64,
    #[stat(desc = "Hold: times it began, a ring's free space under its reserve (--hold)")]
    pub holds: u64,
    #[stat(desc = "Hold: time it was on, in ns")]
    pub hold_ns: u64,
    #[stat(desc = "Hold: 1 while it is on", _gauge)]
    pub hold_on: u64,
    #[stat(desc = "Hold: tasks put in the held queue")]
    pub held: u64,
    #[stat(desc = "Hold: CPUs running producers kicked when it began")]
    pub hold_kicks: u64,
    #[stat(desc = "Hold: running producers stopped at a tick")]
    pub hold_tick_preemptions: u64,
    #[stat(desc = "Hold: producers stopped as they were switched in")]
    pub hold_running_kicks: u64,
    #[stat(desc = "Hold: held tasks run after it ended")]
    pub hold_released: u64,
    #[stat(
        desc = "Hold: held tasks let through once it lasted --hold-guard-ms (the consumer may wait for them)"
    )]
    pub hold_leaks: u64,
    #[stat(desc = "Hold: times a ring went under its floor, where every producer is held")]
    pub hold_floors: u64,
    #[stat(
        desc = "Hold: tasks it let run that a policy had budgeted, sent to the primary side (it does not serve budgeted queues)"
    )]
    pub hold_unbudgeted: u64,
    #[stat(
        desc = "Hold: of the held, tasks held inside a program (the collector's kick at the crossing syscall)"
    )]
    pub held_in_program: u64,
    #[stat(
        desc = "Hold: of the held, tasks held at their hold stop (kicked by the collector on their way back to user mode, inside no program)"
    )]
    pub held_at_stop: u64,
    #[stat(
        desc = "Hold: bounces, producers kicked inside a program that their CPU could not hold there (no copy of the programs to spare): each makes another syscall before it is kicked again"
    )]
    pub hold_bounces: u64,
    #[stat(
        desc = "Hold: the lowest free space seen on a ring, in percent of that ring (100 until seen)"
    )]
    pub hold_lowest_free_pct: f64,
    #[stat(desc = "Hold: that ring's reserve, in percent of the ring (at most 37.5)")]
    pub hold_reserve_pct: f64,
    #[stat(desc = "Hold: that ring's floor, in percent of the ring (at most 18.75)")]
    pub hold_floor_pct: f64,
    #[stat(desc = "Light lane: waking tasks that make few events, queued in it")]
    pub light_enqueues: u64,
    #[stat(desc = "Light lane: tasks run from it")]
    pub light_dispatches: u64,
    #[stat(desc = "Light lane: times it waited because its CPU share (--light-share) was spent")]
    pub light_deferred: u64,
    #[stat(desc = "Light lane: waking consumers that left a light task's CPU alone")]
    pub light_spared: u64,
    #[stat(desc = "Queues consumed because a task waited past the starvation guard")]
    pub starvation_guard_picks: u64,
    #[stat(desc = "Feature-maintenance calls")]
    pub feature_updates: u64,
    #[stat(
        desc = "Feature updates over 100 us (CPU taken away mid-update), left out of feature_ns"
    )]
    pub feature_outliers: u64,
    #[stat(desc = "Time spent maintaining features, in ns")]
    pub feature_ns: u64,
    #[stat(desc = "CPUs the scheduler runs on", _gauge)]
    pub nr_cpus: u64,
    #[stat(desc = "Mean feature-maintenance cost per call, in ns")]
    pub feature_ns_per_update: f64,
    #[stat(desc = "Share of CPU time spent maintaining features, in percent")]
    pub feature_cpu_pct: f64,
    #[stat(
        desc = "Consumers known (collector's and --consumer/--consumer-pid)",
        _gauge
    )]
    pub nr_consumers: u64,
    #[stat(
        desc = "1 while a collector fills the shared provenance feature maps",
        _gauge
    )]
    pub collector_features: u64,
    #[stat(desc = "Ring availability seen by the policy, 0..128", _gauge)]
    pub availability: u64,
    #[stat(
        desc = "The queue policy in use (static, or learned and its model), or why learned is not"
    )]
    pub policy: String,
    #[stat(
        desc = "Generation of the learned policy's live weights (0: none pushed yet)",
        _gauge
    )]
    pub policy_generation: u64,
    #[stat(desc = "Forward passes of the learned policy's network")]
    pub inferences: u64,
    #[stat(desc = "Time spent in those forward passes, in ns")]
    pub inference_ns: u64,
    #[stat(desc = "Mean cost of one forward pass, in ns")]
    pub inference_ns_per_decision: f64,
    #[stat(desc = "Learned decisions the delta function reused (Eq. 12)")]
    pub delta_skips: u64,
    #[stat(desc = "Share of learned decisions the delta function reused, in percent")]
    pub delta_skip_pct: f64,
    #[stat(desc = "Share of CPU time spent in forward passes, in percent")]
    pub inference_cpu_pct: f64,
    #[stat(desc = "Learned decisions taken by the static policy (no weights pushed yet)")]
    pub learned_fallbacks: u64,
    #[stat(
        desc = "Learned decisions that kept a task primary without the network: no pressure (availability at or above --availability-high), the budgeted queues masked"
    )]
    pub learned_unpressured: u64,
    #[stat(desc = "Training: decisions that explored a random queue")]
    pub explorations: u64,
    #[stat(desc = "Transitions emitted for training or recording")]
    pub transitions: u64,
    #[stat(desc = "Transitions lost to a full transitions ring")]
    pub transitions_dropped: u64,
    #[stat(
        desc = "Who places waking tasks: custos (the scheduler's own), gru and its model, or why not gru"
    )]
    pub placement: String,
    #[stat(desc = "GRU placement: snapshots of created or woken tasks sent to the agent")]
    pub placement_snapshots: u64,
    #[stat(desc = "GRU placement: snapshots lost to a full snapshots ring")]
    pub placement_snapshots_dropped: u64,
    #[stat(desc = "GRU placement: wakeups placed on the predicted CPU (it was idle)")]
    pub placement_used: u64,
    #[stat(desc = "GRU placement: predictions older than --placement-stale-ms, not used")]
    pub placement_stale: u64,
    #[stat(desc = "GRU placement: predicted CPUs outside the task's cpumask, not used")]
    pub placement_rejected_cpumask: u64,
    #[stat(desc = "GRU placement: predicted CPUs that were busy; the own placement decided")]
    pub placement_busy: u64,
    #[stat(
        desc = "GRU placement: wakeups without a prediction (or new tasks); the own placement decided"
    )]
    pub placement_fallbacks: u64,
    #[stat(desc = "GRU placement: snapshots the agent read")]
    pub placement_agent_snapshots: u64,
    #[stat(desc = "GRU placement: predictions the agent wrote (one per full window)")]
    pub placement_predictions: u64,
    #[stat(desc = "GRU placement: inferences that failed or named no CPU of this machine")]
    pub placement_prediction_errors: u64,
    #[stat(desc = "GRU placement: predictions the pid_to_cpu map refused")]
    pub placement_map_write_failures: u64,
    #[stat(
        desc = "GRU placement: windows not predicted, their snapshot read past --placement-stale-ms"
    )]
    pub placement_skipped_late: u64,
    #[stat(
        desc = "GRU placement: windows not predicted, the agent's CPU budget (--placement-cpu-pct) spent"
    )]
    pub placement_skipped_budget: u64,
    #[stat(
        desc = "GRU placement: windows not predicted, their task would not use a prediction (budgeted, a consumer, or pinned)"
    )]
    pub placement_skipped_unplaceable: u64,
    #[stat(
        desc = "GRU placement: windows not predicted, a newer window of the same pid was in the batch"
    )]
    pub placement_skipped_superseded: u64,
    #[stat(
        desc = "GRU placement: windows not predicted, the provenance rings under pressure (below --availability-high)"
    )]
    pub placement_skipped_pressure: u64,
    #[stat(desc = "GRU placement: inference calls (each over a batch of up to 64 windows)")]
    pub placement_inference_calls: u64,
    #[stat(desc = "GRU placement: total inference time in ns")]
    pub placement_inference_ns: u64,
    #[stat(
        desc = "GRU placement: median inference call time in us (a bounded sample of the whole run)"
    )]
    pub placement_inference_p50_us: f64,
    #[stat(desc = "GRU placement: 99th-percentile inference call time in us (same sample)")]
    pub placement_inference_p99_us: f64,
}

impl Metrics {
    pub fn format<W: Write>(&self, w: &mut W) -> Result<()> {
        writeln!(
            w,
            "[custos] policy: ->budget {} ->primary {} tick {} hold {} | consumer preempt {}+{} next {} kept {} queued {} first {} | migdis {} | \
             direct {} sync {} pinned {} keep {} timer {} guard {} | \
             features {:.0} ns/call {:.3}% cpu | consumers {} collector {} avail {}",
            self.policy_to_budgeted,
            self.policy_to_primary,
            self.tick_preemptions,
            self.overflow_holds,
            self.consumer_preemptions,
            self.consumer_preemptions_primary,
            self.consumer_next,
            self.consumer_kept,
            self.consumer_queued,
            self.consumer_first,
            self.migration_disabled_next,
            self.direct_dispatches,
            self.sync_wakeups,
            self.pinned_enqueues,
            self.keep_running,
            self.budget_timer_fires,
            self.starvation_guard_picks,
            self.feature_ns_per_update,
            self.feature_cpu_pct,
            self.nr_consumers,
            if self.collector_features != 0 { "yes" } else { "no" },
            self.availability,
        )?;
        if self.holds > 0 || self.held > 0 {
            writeln!(
                w,
                "  hold {} on {} for {:.1} ms | held {} ({} in a program, {} at the stop) bounced {} kicks {} tick {} running {} released {} leaks {} floors {} unbudgeted {} | lowest free {:.1}% reserve {:.1}% floor {:.1}%",
                self.holds,
                self.hold_on,
                self.hold_ns as f64 / 1e6,
                self.held,
                self.held_in_program,
                self.held_at_stop,
                self.hold_bounces,
                self.hold_kicks,
                self.hold_tick_preemptions,
                self.hold_running_kicks,
                self.hold_released,
                self.hold_leaks,
                self.hold_floors,
                self.hold_unbudgeted,
                self.hold_lowest_free_pct,
                self.hold_reserve_pct,
                self.hold_floor_pct,
            )?;
        }
        if self.light_enqueues > 0 {
            writeln!(
                w,
                "  light lane: queued {} run {} deferred {} spared {}",
                self.light_enqueues, self.light_dispatches, self.light_deferred, self.light_spared,
            )?;
        }
        if self.policy.starts_with("learned") || self.transitions > 0 {
            writeln!(
                w,
                "  {} | generation {} | inferences {} ({:.0} ns, {:.3}% cpu) delta skips {:.1}% unpressured {} fallbacks {} explored {} | transitions {} dropped {}",
                self.policy,
                self.policy_generation,
                self.inferences,
                self.inference_ns_per_decision,
                self.inference_cpu_pct,
                self.delta_skip_pct,
                self.learned_unpressured,
                self.learned_fallbacks,
                self.explorations,
                self.transitions,
                self.transitions_dropped,
            )?;
        }
        if self.placement.starts_with("gru") || self.placement_snapshots > 0 {
            writeln!(
                w,
                "  placement {} | snapshots {} dropped {} | used {} stale {} cpumask {} busy {} none {} | predictions {} errors {} map failures {} skipped late {} budget {} unplaceable {} superseded {} pressure {} | {} calls p50 {:.1}us p99 {:.1}us {:.1}us/window",
                self.placement,
                self.placement_snapshots,
                self.placement_snapshots_dropped,
                self.placement_used,
                self.placement_stale,
                self.placement_rejected_cpumask,
                self.placement_busy,
                self.placement_fallbacks,
                self.placement_predictions,
                self.placement_prediction_errors,
                self.placement_map_write_failures,
                self.placement_skipped_late,
                self.placement_skipped_budget,
                self.placement_skipped_unplaceable,
                self.placement_skipped_superseded,
                self.placement_skipped_pressure,
                self.placement_inference_calls,
                self.placement_inference_p50_us,
                self.placement_inference_p99_us,
                self.placement_inference_ns as f64 / 1000.0 / (self.placement_predictions + self.placement_prediction_errors).max(1) as f64,
            )?;
        }
        for (q, m) in self.queues.iter().enumerate() {
            writeln!(
                w,
                "  q{q} {:>10} dispatch {:>8} hungry {:>8} policy {:>8} wait avg {:>9.1}us max {:>10.1}us",
                if q == 0 { "primary".to_string() } else { format!("w={}ns", m.waiting_time_ns) },
                m.dispatches,
                m.hungry_factor_picks,
                m.policy_decisions,
                m.wait_avg_us,
                m.wait_max_us,
            )?;
        }
        Ok(())
    }

    /// Counters accumulated since `prev` (gauges are taken from `self`).
    pub fn delta(&self, prev: &Self) -> Self {
        let queues = self
            .queues
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = prev.queues.get(i).cloned().unwrap_or_default();
                let dispatches = c.dispatches.saturating_sub(p.dispatches);
                let wait_total_ns = c.wait_total_ns.saturating_sub(p.wait_total_ns);
                QueueMetrics {
                    waiting_time_ns: c.waiting_time_ns,
                    dispatches,
                    hungry_factor_picks: c
                        .hungry_factor_picks
                        .saturating_sub(p.hungry_factor_picks),
                    starvation_guard_picks: c
                        .starvation_guard_picks
                        .saturating_sub(p.starvation_guard_picks),
                    policy_decisions: c.policy_decisions.saturating_sub(p.policy_decisions),
                    wait_total_ns,
                    wait_avg_us: c.wait_avg_us_since(&p),
                    wait_max_us: c.wait_max_us,
                }
            })
            .collect();
        let feature_updates = self.feature_updates.saturating_sub(prev.feature_updates);
        let feature_ns = self.feature_ns.saturating_sub(prev.feature_ns);
        let interval_s = (self.interval_s - prev.interval_s).max(1e-9);
        let mut d = Self {
            interval_s,
            queues,
            policy_to_budgeted: self
                .policy_to_budgeted
                .saturating_sub(prev.policy_to_budgeted),
            policy_to_primary: self
                .policy_to_primary
                .saturating_sub(prev.policy_to_primary),
            consumer_decisions: self
                .consumer_decisions
                .saturating_sub(prev.consumer_decisions),
            direct_dispatches: self
                .direct_dispatches
                .saturating_sub(prev.direct_dispatches),
            pinned_enqueues: self.pinned_enqueues.saturating_sub(prev.pinned_enqueues),
            sync_wakeups: self.sync_wakeups.saturating_sub(prev.sync_wakeups),
            kthread_dispatches: self
                .kthread_dispatches
                .saturating_sub(prev.kthread_dispatches),
            keep_running: self.keep_running.saturating_sub(prev.keep_running),
            budget_timer_fires: self
                .budget_timer_fires
                .saturating_sub(prev.budget_timer_fires),
            idle_kicks: self.idle_kicks.saturating_sub(prev.idle_kicks),
            consumer_preemptions: self
                .consumer_preemptions
                .saturating_sub(prev.consumer_preemptions),
            consumer_preemptions_primary: self
                .consumer_preemptions_primary
                .saturating_sub(prev.consumer_preemptions_primary),
            consumer_queued: self.consumer_queued.saturating_sub(prev.consumer_queued),
            consumer_first: self.consumer_first.saturating_sub(prev.consumer_first),
            consumer_next: self.consumer_next.saturating_sub(prev.consumer_next),
            consumer_kept: self.consumer_kept.saturating_sub(prev.consumer_kept),
            migration_disabled_next: self
                .migration_disabled_next
                .saturating_sub(prev.migration_disabled_next),
            tick_preemptions: self.tick_preemptions.saturating_sub(prev.tick_preemptions),
            overflow_holds: self.overflow_holds.saturating_sub(prev.overflow_holds),
            holds: self.holds.saturating_sub(prev.holds),
            hold_ns: self.hold_ns.saturating_sub(prev.hold_ns),
            held: self.held.saturating_sub(prev.held),
            hold_kicks: self.hold_kicks.saturating_sub(prev.hold_kicks),
            hold_tick_preemptions: self
                .hold_tick_preemptions
                .saturating_sub(prev.hold_tick_preemptions),
            hold_running_kicks: self
                .hold_running_kicks
                .saturating_sub(prev.hold_running_kicks),
            hold_released: self.hold_released.saturating_sub(prev.hold_released),
            hold_leaks: self.hold_leaks.saturating_sub(prev.hold_leaks),
            hold_unbudgeted: self.hold_unbudgeted.saturating_sub(prev.hold_unbudgeted),
            hold_floors: self.hold_floors.saturating_sub(prev.hold_floors),
            held_in_program: self.held_in_program.saturating_sub(prev.held_in_program),
            held_at_stop: self.held_at_stop.saturating_sub(prev.held_at_stop),
            hold_bounces: self.hold_bounces.saturating_sub(prev.hold_bounces),
            light_enqueues: self.light_enqueues.saturating_sub(prev.light_enqueues),
            light_dispatches: self.light_dispatches.saturating_sub(prev.light_dispatches),
            light_deferred: self.light_deferred.saturating_sub(prev.light_deferred),
            light_spared: self.light_spared.saturating_sub(prev.light_spared),
            starvation_guard_picks: self
                .starvation_guard_picks
                .saturating_sub(prev.starvation_guard_picks),
            feature_updates,
            feature_ns,
            feature_outliers: self.feature_outliers.saturating_sub(prev.feature_outliers),
            inferences: self.inferences.saturating_sub(prev.inferences),
            inference_ns: self.inference_ns.saturating_sub(prev.inference_ns),
            delta_skips: self.delta_skips.saturating_sub(prev.delta_skips),
            learned_fallbacks: self
                .learned_fallbacks
                .saturating_sub(prev.learned_fallbacks),
            learned_unpressured: self
                .learned_unpressured
                .saturating_sub(prev.learned_unpressured),
            explorations: self.explorations.saturating_sub(prev.explorations),
            transitions: self.transitions.saturating_sub(prev.transitions),
            transitions_dropped: self
                .transitions_dropped
                .saturating_sub(prev.transitions_dropped),
            placement_snapshots: self
                .placement_snapshots
                .saturating_sub(prev.placement_snapshots),
            placement_snapshots_dropped: self
                .placement_snapshots_dropped
                .saturating_sub(prev.placement_snapshots_dropped),
            placement_used: self.placement_used.saturating_sub(prev.placement_used),
            placement_stale: self.placement_stale.saturating_sub(prev.placement_stale),
            placement_rejected_cpumask: self
                .placement_rejected_cpumask
                .saturating_sub(prev.placement_rejected_cpumask),
            placement_busy: self.placement_busy.saturating_sub(prev.placement_busy),
            placement_fallbacks: self
                .placement_fallbacks
                .saturating_sub(prev.placement_fallbacks),
            placement_agent_snapshots: self
                .placement_agent_snapshots
                .saturating_sub(prev.placement_agent_snapshots),
            placement_predictions: self
                .placement_predictions
                .saturating_sub(prev.placement_predictions),
            placement_prediction_errors: self
                .placement_prediction_errors
                .saturating_sub(prev.placement_prediction_errors),
            placement_map_write_failures: self
                .placement_map_write_failures
                .saturating_sub(prev.placement_map_write_failures),
            placement_skipped_late: self
                .placement_skipped_late
                .saturating_sub(prev.placement_skipped_late),
            placement_skipped_budget: self
                .placement_skipped_budget
                .saturating_sub(prev.placement_skipped_budget),
            placement_skipped_unplaceable: self
                .placement_skipped_unplaceable
                .saturating_sub(prev.placement_skipped_unplaceable),
            placement_skipped_superseded: self
                .placement_skipped_superseded
                .saturating_sub(prev.placement_skipped_superseded),
            placement_skipped_pressure: self
                .placement_skipped_pressure
                .saturating_sub(prev.placement_skipped_pressure),
            placement_inference_calls: self
                .placement_inference_calls
                .saturating_sub(prev.placement_inference_calls),
            placement_inference_ns: self
                .placement_inference_ns
                .saturating_sub(prev.placement_inference_ns),
            ..self.clone()
        };
        d.derive_feature_cost();
        d
    }

    /// Fills the derived feature-cost fields from the counters and interval.
    pub fn derive_feature_cost(&mut self) {
        self.feature_ns_per_update = if self.feature_updates > 0 {
            self.feature_ns as f64 / self.feature_updates as f64
        } else {
            0.0
        };
        let cpu_ns = self.interval_s * 1e9 * self.nr_cpus.max(1) as f64;
        self.feature_cpu_pct = if cpu_ns > 0.0 {
            self.feature_ns as f64 / cpu_ns * 100.0
        } else {
            0.0
        };
        self.inference_ns_per_decision = if self.inferences > 0 {
            self.inference_ns as f64 / self.inferences as f64
        } else {
            0.0
        };
        let learned = self.inferences + self.delta_skips;
        self.delta_skip_pct = if learned > 0 {
            self.delta_skips as f64 / learned as f64 * 100.0
        } else {
            0.0
        };
        self.inference_cpu_pct = if cpu_ns > 0.0 {
            self.inference_ns as f64 / cpu_ns * 100.0
        } else {
            0.0
        };
    }
}

impl QueueMetrics {
    fn wait_avg_us_since(&self, prev: &Self) -> f64 {
        let n = self.dispatches.saturating_sub(prev.dispatches);
        if n == 0 {
            return 0.0;
        }
        self.wait_total_ns.saturating_sub(prev.wait_total_ns) as f64 / n as f64 / 1000.0
    }
}

pub fn server_data() -> StatsServerData<(), Metrics> {
    let open: Box<dyn StatsOpener<(), Metrics>> = Box::new(move |(req_ch, res_ch)| {
        req_ch.send(())?;
        let mut prev = res_ch.recv()?;
        let read: Box<dyn StatsReader<(), Metrics>> = Box::new(move |_args, (req_ch, res_ch)| {
            req_ch.send(())?;
            let cur = res_ch.recv()?;
            let delta = cur.delta(&prev);
            prev = cur;
            delta.to_json()
        });
        Ok(read)
    });
    StatsServerData::new()
        .add_meta(Metrics::meta())
        .add_meta(QueueMetrics::meta())
        .add_ops("top", StatsOps { open, close: None })
}

/// Prints the running scheduler's statistics every `intv` until `shutdown`.
pub fn monitor(intv: Duration, shutdown: Arc<AtomicBool>) -> Result<()> {
    let mut announced = false;
    while !shutdown.load(Ordering::Relaxed) {
        let mut client = match StatsClient::new()
            .set_sched_path(STATS_SCHED_PATH)
            .connect(None)
        {
            Ok(c) => c,
            Err(e) => {
                if !announced {
                    eprintln!("custos sched: waiting for the scheduler's stats socket ({e:#})");
                    announced = true;
                }
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        while !shutdown.load(Ordering::Relaxed) {
            match client.request::<Metrics>("stats", vec![]) {
                Ok(m) => m.format(&mut std::io::stdout())?,
                Err(_) => break,
            }
            std::thread::sleep(intv);
        }
    }
    Ok(())
}

/// `--metrics`: every statistic of [`Metrics`] (the run's totals, as in
/// `--stats-json`) under its Prometheus name, from the same field table
/// the `--stats` lines and `--help-stats` use: its HELP is the field's
/// description, a `u64` is a counter unless marked `_gauge`, an `f64` (a
/// mean, a share, a lowest value) a gauge. Names follow the conventions:
/// `custos_sched_` prefix, base units (`_ns` and `_us` become seconds,
/// `_pct` a ratio), the queues' figures one family each with a `queue`
/// label, and the policy and placement in use as an info metric.
pub fn encode_metrics(e: &mut custos_metrics::DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    use prometheus_client::encoding::EncodeMetric;
    use prometheus_client::metrics::info::Info;

    let value = serde_json::to_value(m).map_err(|_| std::fmt::Error)?;
    let info = Info::new([
        ("policy", m.policy.clone()),
        ("placement", m.placement.clone()),
    ]);
    info.encode(e.encode_descriptor(
        "custos_sched_policy",
        "The queue policy and the placement in use (stats `policy`, `placement`).",
        None,
        info.metric_type(),
    )?)?;
    for (field, meta) in Metrics::meta().fields {
        match &value[&field] {
            serde_json::Value::Number(_) if field != "interval_s" => {
                encode_one(e, &field, &meta.attrs, [(Vec::new(), &value[&field])])?
            }
            serde_json::Value::Array(queues) => {
                for (qfield, qmeta) in QueueMetrics::meta().fields {
                    let series: Vec<_> = queues
                        .iter()
                        .enumerate()
                        .map(|(q, v)| (vec![("queue".to_string(), q.to_string())], &v[&qfield]))
                        .collect();
                    encode_one(e, &format!("queue_{qfield}"), &qmeta.attrs, series)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A statistic's Prometheus name (after `custos_sched_`) and the factor to
/// its base unit.
pub fn prometheus_name(field: &str) -> (String, f64) {
    let mut scale = 1.0;
    let words: Vec<&str> = field
        .split('_')
        .map(|w| match w {
            "ns" => {
                scale = 1e-9;
                "seconds"
            }
            "us" => {
                scale = 1e-6;
                "seconds"
            }
            "s" => "seconds",
            "pct" => {
                scale = 0.01;
                "ratio"
            }
            w => w,
        })
        .collect();
    (format!("custos_sched_{}", words.join("_")), scale)
}

/// One statistic: a family with a series per label set (none, or a queue's).
fn encode_one<'a>(
    e: &mut custos_metrics::DescriptorEncoder,
    field: &str,
    attrs: &scx_stats::StatsFieldAttrs,
    series: impl IntoIterator<Item = (Vec<(String, String)>, &'a serde_json::Value)>,
) -> std::fmt::Result {
    use prometheus_client::encoding::EncodeMetric;
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    use prometheus_client::metrics::MetricType;

    let (name, scale) = prometheus_name(field);
    let help = attrs.desc.as_deref().unwrap_or(field);
    let mut series = series.into_iter().peekable();
    let Some((_, first)) = series.peek() else {
        return Ok(());
    };
    let counter = first.is_u64() && !attrs.user.contains_key("_gauge");
    let ty = if counter {
        MetricType::Counter
    } else {
        MetricType::Gauge
    };
    let mut fam = e.encode_descriptor(&name, help, None, ty)?;
    for (labels, v) in series {
        let enc = fam.encode_family(&labels)?;
        match (counter, scale == 1.0, v.as_u64()) {
            (true, true, Some(n)) => ConstCounter::new(n).encode(enc)?,
            (true, _, _) => ConstCounter::new(v.as_f64().unwrap_or(0.0) * scale).encode(enc)?,
            (false, true, Some(n)) => ConstGauge::new(n as i64).encode(enc)?,
            (false, _, _) => ConstGauge::new(v.as_f64().unwrap_or(f64::NAN) * scale).encode(enc)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod metrics_tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_units() {
        assert_eq!(
            prometheus_name("hold_ns"),
            ("custos_sched_hold_seconds".into(), 1e-9)
        );
        assert_eq!(
            prometheus_name("wait_max_us"),
            ("custos_sched_wait_max_seconds".into(), 1e-6)
        );
        assert_eq!(
            prometheus_name("feature_cpu_pct"),
            ("custos_sched_feature_cpu_ratio".into(), 0.01)
        );
        assert_eq!(prometheus_name("held"), ("custos_sched_held".into(), 1.0));
    }

    /// Every statistic is in the exposition with its description as HELP,
    /// counters as counters (`_total`), the marked ones as gauges, units
    /// converted, the queues labelled.
    #[test]
    fn the_exposition_has_every_statistic_with_its_help() {
        let m = Metrics {
            held: 7,
            hold_on: 1,
            hold_ns: 1_500_000_000,
            feature_cpu_pct: 2.5,
            policy: "static".into(),
            placement: "custos".into(),
            queues: vec![
                QueueMetrics {
                    dispatches: 3,
                    ..Default::default()
                },
                QueueMetrics {
                    dispatches: 4,
                    waiting_time_ns: 2_000_000,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut registry = prometheus_client::registry::Registry::default();
        #[derive(Debug)]
        struct One(Metrics);
        impl prometheus_client::collector::Collector for One {
            fn encode(&self, mut e: custos_metrics::DescriptorEncoder) -> std::fmt::Result {
                encode_metrics(&mut e, &self.0)
            }
        }
        registry.register_collector(Box::new(One(m)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "# TYPE custos_sched_held counter",
            "custos_sched_held_total 7",
            "# HELP custos_sched_held Hold: tasks put in the held queue",
            "# TYPE custos_sched_hold_on gauge",
            "custos_sched_hold_on 1",
            "custos_sched_hold_seconds_total 1.5",
            "custos_sched_feature_cpu_ratio 0.025",
            "custos_sched_queue_dispatches_total{queue=\"1\"} 4",
            "custos_sched_queue_waiting_time_seconds{queue=\"1\"} 0.002",
            "custos_sched_policy_info{policy=\"static\",placement=\"custos\"} 1",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
        // One family per statistic, none left out.
        let families = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        let expected = Metrics::meta()
            .fields
            .iter()
            .filter(|(f, meta)| {
                !matches!(meta.data, scx_stats::StatsData::Array(_))
                    && !["interval_s", "policy", "placement"].contains(&f.as_str())
            })
            .count()
            + QueueMetrics::meta().fields.len()
            + 1;
        assert_eq!(families, expected, "{text}");
    }
}
