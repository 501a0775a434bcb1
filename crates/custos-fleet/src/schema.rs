//! The fleet's ClickHouse tables (docs/fleet.md), created on first run.
//!
//! Written for ClickHouse 18.16 (Debian's): no DateTime64, so times are
//! UInt64 nanoseconds as in the stream. Every table is a ReplacingMergeTree
//! keyed by the record's identity, and every row carries the Kafka
//! partition and offset it came from: the ingester's resume point
//! (ingest.rs) and, for a line that reached the topic twice, the merge that
//! keeps one.

/// The database the tables live in, unless `--clickhouse-db` says otherwise.
pub const DEFAULT_DATABASE: &str = "custos";

/// The tables, by the record types they hold.
pub const EVENTS: &str = "events";
pub const LOSSES: &str = "losses";
pub const RECORDS: &str = "records";
pub const TABLES: [&str; 3] = [EVENTS, LOSSES, RECORDS];
/// The provenance graph, built per host by the store's own graph builder
/// at ingest (docs/fleet.md, "The graph").
pub const NODES: &str = "nodes";
pub const EDGES: &str = "edges";
pub const GRAPH_TABLES: [&str; 2] = [NODES, EDGES];

/// The columns every table ends with: where the row came from in Kafka.
const KAFKA_COLUMNS: &str = "kafka_topic String, kafka_partition Int32, kafka_offset Int64, ingested_at DateTime DEFAULT now()";

/// `CREATE` statements for `db`, in order.
pub fn create_statements(db: &str) -> Vec<String> {
    vec![
        format!("CREATE DATABASE IF NOT EXISTS {db}"),
        // One row per event line; the typed columns for queries, the line for
        // everything else (args, container, workflow starts).
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.{EVENTS} (\
             host String, boot String, id UInt64, cpu UInt32, seq UInt64, time_ns UInt64, \
             pid UInt32, tid UInt32, ppid UInt32, uid Nullable(UInt32), euid Nullable(UInt32), \
             comm String, syscall String, ret Nullable(Int64), fd Nullable(Int32), \
             path String, path2 String, addr String, laddr String, argv Array(String), child_pid Nullable(UInt32), \
             dev Nullable(UInt64), inode Nullable(UInt64), workflow Nullable(UInt64), container String, \
             incomplete UInt8, line String, {KAFKA_COLUMNS}) \
             ENGINE = ReplacingMergeTree \
             PARTITION BY toYYYYMM(toDateTime(intDiv(time_ns, 1000000000))) \
             ORDER BY (host, boot, id)"
        ),
        // Loss records: the collector's (ring gaps, skips) and the Kafka
        // sink's (`category` "kafka"). A loss has no id: the line is its identity.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.{LOSSES} (\
             host String, boot String, category String, cpu Nullable(UInt32), \
             first_seq Nullable(UInt64), last_seq Nullable(UInt64), count UInt64, \
             start_ns UInt64, end_ns UInt64, line String, {KAFKA_COLUMNS}) \
             ENGINE = ReplacingMergeTree \
             ORDER BY (host, boot, start_ns, cityHash64(line))"
        ),
        // Every other line: `boot`, `stats`, `seal`, types this version does
        // not know, and lines that are not valid records (`type`
        // "malformed", with the parse error).
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.{RECORDS} (\
             host String, boot String, type String, time_ns UInt64, line String, error String, {KAFKA_COLUMNS}) \
             ENGINE = ReplacingMergeTree \
             ORDER BY (host, boot, type, time_ns, cityHash64(line))"
        ),
        // The store's nodes (custos_store::nodes::NodeRow), named by host and
        // the node's id in that host's graph. `attrs` is JSON text, or empty.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.{NODES} (\
             host String, node Int64, kind UInt8, boot String, name String, version Int64, \
             pid Nullable(Int64), exec Nullable(Int64), time_ns Int64, event_id Int64, attrs String) \
             ENGINE = ReplacingMergeTree \
             ORDER BY (host, node)"
        ),
        // The store's edges, effect → cause, within one host (cross-host
        // links are found when a query crosses a socket: query.rs). Keyed by
        // effect (ancestors read by it); descendants scan by cause.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.{EDGES} (\
             host String, effect Int64, cause Int64, kind UInt8, event_id Int64, time_ns Int64, boot String) \
             ENGINE = ReplacingMergeTree \
             ORDER BY (host, effect, cause, kind, event_id)"
        ),
    ]
}

/// Columns added after a table's first release: (table, column, type). A
/// table made by an earlier version gets them by `ALTER TABLE … ADD COLUMN`
/// (old rows read the type's default) instead of being refused.
pub const ADDED_COLUMNS: [(&str, &str, &str); 1] = [(EVENTS, "laddr", "String AFTER addr")];

/// The columns of `table` as [`create_statements`] makes it, read from its
/// statement (no type of ours has a comma inside).
pub fn columns(table: &str) -> Vec<String> {
    let create = create_statements("db")
        .into_iter()
        .find(|s| s.contains(&format!("db.{table} (")))
        .expect("a table of ours");
    let body = &create
        [create.find('(').expect("a column list") + 1..create.find(") ENGINE").expect("an engine")];
    body.split(", ")
        .map(|c| c.split_whitespace().next().unwrap_or_default().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_are_read_from_the_create_statements() {
        let events = super::columns(super::EVENTS);
        assert_eq!(&events[..3], ["host", "boot", "id"]);
        assert!(
            events.contains(&"argv".to_string())
                && events.ends_with(&["kafka_offset".to_string(), "ingested_at".to_string()])
        );
        assert_eq!(
            super::columns(super::RECORDS)[..4],
            ["host", "boot", "type", "time_ns"]
        );
    }
}
