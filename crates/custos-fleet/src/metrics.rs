//! `custos fleet ingest --metrics ADDR`: the ingester's figures for
//! Prometheus (docs/operations.md, "Metrics"), served by custos-metrics.
//! The values are the run's [`IngestSummary`], the figures of the line
//! the command prints at its end: the loop hands the server a copy once a
//! second and its final account; [`COUNTERS`] and [`ROWS`] name and
//! describe each figure once, and the exposition is made from them.

use crate::ingest::IngestSummary;
use custos_metrics::{counter_family, counters, gauge, Counter, DescriptorEncoder};

/// The ingester's name in the build metric (`custos_fleet_ingest_build_info`).
pub const PROCESS: &str = "fleet_ingest";

/// The loop's handle on the metrics server.
pub type Publisher = custos_metrics::Publisher<IngestSummary>;

/// The counters of one value each. The rate of ingest is
/// `rate(custos_fleet_ingest_rows_inserted_total{table="events"}[1m])`.
pub const COUNTERS: &[Counter<IngestSummary>] = &[
    (
        "custos_fleet_ingest_lines_read",
        "Lines (Kafka messages) read from the topic, re-deliveries included.",
        |s| s.lines,
    ),
    (
        "custos_fleet_ingest_batches",
        "Batches stored: inserted into ClickHouse, then their offsets committed to Kafka (batches).",
        |s| s.batches,
    ),
    (
        "custos_fleet_ingest_events_reported_lost",
        "Events the loss records inserted report lost (events lost).",
        |s| s.lost_events,
    ),
    (
        "custos_fleet_ingest_lines_malformed",
        "Lines that are no valid record, inserted into the records table as malformed (malformed lines).",
        |s| s.malformed,
    ),
    (
        "custos_fleet_ingest_lines_redelivered",
        "Lines Kafka delivered again that ClickHouse already held, skipped (re-delivered lines skipped).",
        |s| s.redelivered,
    ),
    (
        "custos_fleet_ingest_retries",
        "Requests ClickHouse failed or did not answer, tried again (inserts, the graph's reads).",
        |s| s.retries,
    ),
];

/// A figure of the summary.
pub type Figure = fn(&IngestSummary) -> u64;

/// The rows inserted into ClickHouse, by table (`custos_fleet_ingest_rows_inserted_total{table}`).
pub const ROWS: &[(&str, Figure)] = &[
    ("events", |s| s.events),
    ("losses", |s| s.losses),
    ("records", |s| s.records),
    ("nodes", |s| s.nodes),
    ("edges", |s| s.edges),
];

/// Every figure of a copy of the summary.
pub fn encode_metrics(e: &mut DescriptorEncoder, s: &IngestSummary) -> std::fmt::Result {
    counters(e, COUNTERS, s)?;
    counter_family(
        e,
        "custos_fleet_ingest_rows_inserted",
        "Rows inserted into ClickHouse, by table: events (events), losses (loss records), \
         records (other records, the malformed included), nodes and edges (graph, with --graph-dir).",
        ROWS.iter().map(|(table, value)| ([("table", *table)], value(s))),
    )?;
    if let Some(lag) = s.consumer_lag {
        gauge(
            e,
            "custos_fleet_ingest_consumer_lag_messages",
            "Messages on the topic's assigned partitions not yet stored and committed: the partitions' end \
             minus the group's committed offset, summed (librdkafka's consumer_lag, refreshed every second).",
            None,
            i64::try_from(lag).unwrap_or(i64::MAX),
        )?;
    }
    Ok(())
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
            &IngestSummary::default(),
            "custos_fleet_ingest_rows_inserted_total",
        );
    }
}
