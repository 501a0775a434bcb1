//! Custos across many hosts (issue 17, phase 1): each host's collector
//! streams its lines into Kafka (`custos collect --kafka`), and `custos
//! fleet ingest` moves the topic into ClickHouse, each line once, losses
//! and stats included (docs/fleet.md).
//!
//! Not for: querying the fleet (a later phase) or collecting events
//! (custos-collector). `servers` starts real Kafka and ClickHouse servers
//! for the tests and the bench.

pub mod cli;
pub mod graph;
pub mod ingest;
pub mod metrics;
pub mod query;
pub mod schema;
pub mod servers;
pub mod sink;
