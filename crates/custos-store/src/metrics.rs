//! `custos ingest --metrics ADDR`: the ingest's figures for Prometheus
//! (docs/operations.md, "Metrics"), served by custos-metrics. The values
//! are the run's [`IngestSummary`], the figures its summary line prints
//! (for every input read so far); [`COUNTERS`] names and describes each
//! once, and the exposition is made from it at each scrape.

use crate::ingest::IngestSummary;
use custos_metrics::{counters, Counter, DescriptorEncoder};

/// The ingest's name in the build metric (`custos_ingest_build_info`).
pub const PROCESS: &str = "ingest";

/// The loop's handle on the metrics server.
pub type Publisher = custos_metrics::Publisher<IngestSummary>;

/// Every counter of an ingest. The rate of ingest is
/// `rate(custos_ingest_events_stored_total[1m])` (or of the lines read).
pub const COUNTERS: &[Counter<IngestSummary>] = &[
    (
        "custos_ingest_lines_read",
        "Input lines read, of every kind (the summary's lines).",
        |s| s.lines,
    ),
    (
        "custos_ingest_events_stored",
        "Events stored, new to the store (the summary's new events).",
        |s| s.events_new,
    ),
    (
        "custos_ingest_events_duplicate",
        "Events the store already held, not stored again (already stored).",
        |s| s.events_duplicate,
    ),
    (
        "custos_ingest_loss_records",
        "Loss records stored, new to the store (loss records).",
        |s| s.losses_new,
    ),
    (
        "custos_ingest_events_reported_lost",
        "Events the loss records stored report lost (events lost).",
        |s| s.lost_events,
    ),
    (
        "custos_ingest_lines_malformed",
        "Lines that are no valid record, skipped and kept in the rejects table (malformed lines skipped).",
        |s| s.malformed,
    ),
    (
        "custos_ingest_lines_overlong",
        "Of the malformed lines, those longer than --max-line-bytes, kept as their first bytes.",
        |s| s.overlong,
    ),
    (
        "custos_ingest_records_other",
        "Records of other types than event, loss, boot and stats (seals, types of later versions), kept raw.",
        |s| s.unknown_types,
    ),
    (
        "custos_ingest_events_out_of_window",
        "Events that arrived more than the reorder window out of time order, applied late (edges through them may be missing).",
        |s| s.out_of_window,
    ),
    (
        "custos_ingest_batches",
        "Batches committed, one transaction each (an ack line each).",
        |s| s.batches,
    ),
    (
        "custos_ingest_graph_nodes",
        "Provenance graph nodes added (nodes added).",
        |s| s.graph.nodes,
    ),
    (
        "custos_ingest_graph_edges",
        "Provenance graph edges added (edges added).",
        |s| s.graph.edges,
    ),
    (
        "custos_ingest_io_unresolved",
        "Reads and writes whose file, socket or pipe could not be resolved (no path and an unknown fd).",
        |s| s.graph.unresolved_io,
    ),
];

/// Every counter of [`COUNTERS`], from one copy of the totals.
pub fn encode_metrics(e: &mut DescriptorEncoder, s: &IngestSummary) -> std::fmt::Result {
    counters(e, COUNTERS, s)
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
            "custos_ingest_lines_read_total",
        );
    }
}
