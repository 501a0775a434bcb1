//! `--metrics ADDR`: the collector's statistics for Prometheus
//! (docs/operations.md, "Metrics"), served by custos-metrics. The values
//! are the `--stats` ones: the drain loop computes a [`Metrics`] with the
//! function that makes the stderr line and the `stats` records, and
//! publishes a copy; [`encode_metrics`] writes it at each scrape, so no
//! counter is kept twice.

use custos_metrics::{counter, counter_family, gauge, DescriptorEncoder, Unit};
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

pub use custos_metrics::Endpoint;

use crate::stats::Metrics;

/// The drain loop's handle on the metrics server.
pub type Publisher = custos_metrics::Publisher<Metrics>;

/// The collector's name in the build metric (`custos_collector_build`).
pub const PROCESS: &str = "collector";

/// Every figure of a `stats` record, under its Prometheus name.
pub fn encode_metrics(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    counter(
        e,
        "custos_events_produced",
        "Events the BPF programs numbered (sum of the per-CPU sequences): stats `produced`.",
        m.produced,
    )?;
    counter(
        e,
        "custos_events_delivered",
        "Events the consumer received from the rings: stats `delivered`.",
        m.delivered,
    )?;
    // Every event lost, by cause; the ring-full ones by ring. The
    // skipped_bound series is an upper bound (docs/event-schema.md).
    let lost: [(&[(&str, &str)], u64); 5] = [
        (
            &[("cause", "ring_full"), ("ring", "critical")],
            m.dropped_critical,
        ),
        (
            &[("cause", "ring_full"), ("ring", "events")],
            m.dropped_events,
        ),
        (&[("cause", "skipped")], m.skips.skipped),
        (&[("cause", "skipped_bound")], m.skips.skipped_bound),
        (&[("cause", "hook_skipped")], m.skips.lsm),
    ];
    counter_family(
        e,
        "custos_events_lost",
        "Events lost, by cause: refused by a full ring (stats `dropped_critical`, `dropped_events`), \
         syscalls every program copy skipped (`skipped`, exact; `skipped_bound`, an upper bound) \
         and hook runs every copy skipped (`skipped_lsm`).",
        lost,
    )?;
    counter(
        e,
        "custos_attributes_dropped",
        "Attribute halves (paths, argv, addresses) the attrs ring refused; their events were delivered incomplete: stats `dropped_attrs`.",
        m.dropped_attrs,
    )?;
    counter(
        e,
        "custos_events_incomplete",
        "Events delivered without their attribute half: stats `incomplete`.",
        m.incomplete,
    )?;
    counter(
        e,
        "custos_loss_records",
        "Loss records written to the stream: stats `loss_records`.",
        m.loss_records,
    )?;
    counter(
        e,
        "custos_events_reported_lost",
        "Events the loss records report missing from the per-CPU sequences (equals the ring-full losses in a sound run): stats `lost_in_gaps`.",
        m.lost_in_gaps,
    )?;
    counter(
        e,
        "custos_events_late",
        "Records that came after their number was reported lost (0 in a sound run): stats `late`.",
        m.late,
    )?;
    counter(
        e,
        "custos_lines_out_of_order",
        "Lines written older than a line written before them: stats `out_of_order`.",
        m.out_of_order,
    )?;
    counter(
        e,
        "custos_reorder_forced",
        "Times the reorder buffer reached its bound (--reorder-buffer-mb) and wrote lines before their order was settled: stats `reorder_forced`.",
        m.reorder_forced,
    )?;
    counter(
        e,
        "custos_lines_written",
        "Lines the consumer handed to the output (events, loss, stats and other records): stats `lines_written`.",
        m.lines_written,
    )?;
    counter(
        e,
        "custos_hold_kicks",
        "Producers the programs kicked off their CPU at a syscall that took a ring under the reserve of custos sched's hold: stats `hold_kicks`.",
        m.hold_kicks,
    )?;
    counter(
        e,
        "custos_hold_stops",
        "Of the kicked producers, those kicked at their return to user mode (the hold stop, inside no program): stats `hold_stops`.",
        m.hold_stops,
    )?;
    per_copy(
        e,
        "custos_program_runs_skipped",
        "Syscall tracepoint runs the kernel skipped as re-entrant, per program copy (a backup copy covers the first's): stats `skipped_by_copy`.",
        &m.skips.by_copy,
    )?;
    per_copy(
        e,
        "custos_hook_runs_skipped",
        "Hook runs (fork, BPF-LSM) the kernel skipped as re-entrant, per program copy (a run is lost only if every copy skipped it): stats `hook_skips_by_copy`.",
        &m.skips.hooks_by_copy,
    )?;
    gauge(
        e,
        "custos_consumer_lag_events",
        "Events produced and neither delivered nor dropped yet: stats `consumer_lag`.",
        None,
        m.consumer_lag as i64,
    )?;
    {
        let mut fam = e.encode_descriptor(
            "custos_ring_available_ratio",
            "Fraction of each ring free when last sampled (1 - stats `ring_fill`).",
            None,
            MetricType::Gauge,
        )?;
        for (ring, fill) in crate::features::RING_NAMES.iter().zip(m.ring_fill) {
            ConstGauge::new(1.0 - fill).encode(fam.encode_family(&[("ring", *ring)])?)?;
        }
    }
    gauge(
        e,
        "custos_collector_uptime",
        "Time since the collector began draining: stats `uptime_s`.",
        Some(&Unit::Seconds),
        m.uptime_s,
    )
}

/// A counter per program copy, labelled `copy="0"`, `"1"`, ...
fn per_copy(e: &mut DescriptorEncoder, name: &str, help: &str, counts: &[u64]) -> std::fmt::Result {
    let copies: Vec<String> = (0..counts.len()).map(|k| k.to_string()).collect();
    counter_family(
        e,
        name,
        help,
        copies
            .iter()
            .zip(counts)
            .map(|(copy, v)| ([("copy", copy.as_str())], *v)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/operations.md names every series a scrape reads, as exposed.
    #[test]
    fn every_series_is_documented() {
        custos_metrics::assert_documented(
            PROCESS,
            encode_metrics,
            &Metrics::default(),
            "custos_events_produced_total",
        );
    }
}
