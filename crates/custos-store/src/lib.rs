//! The Custos provenance store: ingests the collector's JSON Lines stream
//! (docs/event-schema.md) into one SQLite file holding the raw events, the
//! loss records and a versioned, acyclic W3C PROV graph; answers ancestry,
//! descendant, path and touch queries with completeness annotations; renders
//! answers as DOT/SVG or PROV-JSON; records compressed raw archives.
//!
//! Not for: collecting events (custos-collector) or long-term analytics across
//! many hosts (export PROV-JSON for that). See docs/store.md for the layout.

pub mod archive;
pub mod blocks;
pub mod causes;
pub mod cli;
pub mod effects;
pub mod graph;
pub mod ingest;
pub mod linereader;
pub mod metrics;
pub mod nodes;
pub mod query;
pub mod rawseg;
pub mod record;
pub mod render;
pub mod schema;
pub mod sink;
pub mod synth;
pub mod tamper;
pub mod timefmt;
mod varint;
pub mod workflows;

pub use archive::Recorder;
pub use ingest::{Ack, IngestOptions, IngestSummary, Ingestor};
/// The SQLite binding the store is built on, for callers that open the file themselves.
pub use rusqlite;
