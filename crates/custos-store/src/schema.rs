//! The database layout. One SQLite file in WAL mode; see docs/store.md for why.

use anyhow::{Context, Result};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// Bumped whenever the layout changes; a database with another version is refused.
/// 2: `event_ranges` (runs of event ids per raw chunk) replaced the per-event
/// `events` rows; `edges` is clustered on the cause (no `edges_by_cause`).
/// 3: the cause lists in blocks of 64 nodes (`cause_blocks`), not a row per
/// node (`causes`); the nodes likewise (`node_blocks`), their name, pid and
/// exec indexes as sorted runs (`node_key_runs`, `node_key_pages`); the edges by cause as per-batch
/// parts per block of causes (`effect_parts`), not a row per edge (`edges`).
/// 4: the raw lines as column segments (`raw_segments`), not zstd text
/// chunks (`raw_chunks`); `event_ranges` name a segment, not a chunk's slots.
/// 5: smaller graph blocks: `effect_parts` keyed by one integer (`block << 3
/// | part`), not `(block, part) WITHOUT ROWID`; key pages delta-coded;
/// cause blocks with 16-bit offsets; edge entries carry their boot only
/// when it changes.
pub const SCHEMA_VERSION: i64 = 5;

/// WAL size after which a commit checkpoints (see `open_rw`).
pub const WAL_CHECKPOINT_BYTES: i64 = 64 << 20;

/// Node kinds (the `nodes.kind` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    Process = 1,
    File = 2,
    Socket = 3,
    Pipe = 4,
    User = 5,
}

impl NodeKind {
    pub fn from_i64(v: i64) -> Option<Self> {
        Some(match v {
            1 => Self::Process,
            2 => Self::File,
            3 => Self::Socket,
            4 => Self::Pipe,
            5 => Self::User,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::File => "file",
            Self::Socket => "socket",
            Self::Pipe => "pipe",
            Self::User => "user",
        }
    }
}

/// Edge kinds in W3C PROV terms. Every edge points from effect to cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeKind {
    /// process (effect) read an artifact version (cause)
    Used = 1,
    /// artifact version (effect) was written by a process (cause)
    WasGeneratedBy = 2,
    /// process (effect) was forked/exec'd/continued from a process (cause)
    WasInformedBy = 3,
    /// artifact version (effect) derives from an earlier version or a rename source (cause)
    WasDerivedFrom = 4,
    /// process (effect) acted for a user (cause)
    WasAssociatedWith = 5,
}

impl EdgeKind {
    pub fn from_i64(v: i64) -> Option<Self> {
        Some(match v {
            1 => Self::Used,
            2 => Self::WasGeneratedBy,
            3 => Self::WasInformedBy,
            4 => Self::WasDerivedFrom,
            5 => Self::WasAssociatedWith,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Used => "used",
            Self::WasGeneratedBy => "wasGeneratedBy",
            Self::WasInformedBy => "wasInformedBy",
            Self::WasDerivedFrom => "wasDerivedFrom",
            Self::WasAssociatedWith => "wasAssociatedWith",
        }
    }
}

const DDL: &str = r#"
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
-- One row per boot identity; event ids are unique only within a boot.
CREATE TABLE IF NOT EXISTS boots(boot INTEGER PRIMARY KEY, boot_id TEXT NOT NULL UNIQUE);
-- Containers the events named (docs/containers.md); process nodes carry the id in their attrs.
CREATE TABLE IF NOT EXISTS containers(
  id TEXT PRIMARY KEY, runtime TEXT, name TEXT, image TEXT, pod TEXT, namespace TEXT, container_name TEXT
) WITHOUT ROWID;
-- The raw lines of each committed batch as one column segment (see
-- rawseg.rs): every line comes back byte for byte; events point into them.
CREATE TABLE IF NOT EXISTS raw_segments(
    segment INTEGER PRIMARY KEY,
    ingest INTEGER NOT NULL,
    lines INTEGER NOT NULL,
    data BLOB NOT NULL);
-- Every accepted event once, as runs of consecutive event ids (an id is
-- cpu << 48 | seq, so one CPU's run of a batch is one row): the events
-- first_id..=last_id of `boot` are in raw segment `segment`.
-- The runs of all batches are disjoint; they are the de-duplication key.
CREATE TABLE IF NOT EXISTS event_ranges(
    boot INTEGER NOT NULL,
    first_id INTEGER NOT NULL,
    last_id INTEGER NOT NULL,
    segment INTEGER NOT NULL,
    PRIMARY KEY(boot, first_id)) WITHOUT ROWID;
-- The nodes, packed by 64 consecutive ids (see nodes.rs): block = node >> 6.
CREATE TABLE IF NOT EXISTS node_blocks(block INTEGER PRIMARY KEY, data BLOB NOT NULL);
-- Lookups by name, pid and execution: sorted runs of (key, node) pairs,
-- merged by level (a small log-structured merge; see nodes.rs): a run's
-- pages (page = run << 24 | number) and the first key of each (fences).
CREATE TABLE IF NOT EXISTS node_key_runs(run INTEGER PRIMARY KEY, level INTEGER NOT NULL, fences BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS node_key_pages(page INTEGER PRIMARY KEY, data BLOB NOT NULL);
-- The edges by cause (descendants, readers of a version, writes of a
-- process): per batch one part per block of 64 cause ids, varint-packed,
-- merged when a block gathers 8 (see effects.rs); part = block << 3 | its
-- number (0..7). The same edges by effect are the cause blocks below
-- (ancestry and every lookup by effect).
CREATE TABLE IF NOT EXISTS effect_parts(part INTEGER PRIMARY KEY, data BLOB NOT NULL);
-- The ancestry index: every node's outgoing edges (its causes), varint-packed
-- in blocks of 64 consecutive node ids keyed by node >> 6 (see causes.rs), so
-- a walk step is one integer-keyed seek and two small reads through the
-- incremental-blob API.
CREATE TABLE IF NOT EXISTS cause_blocks(block INTEGER PRIMARY KEY, data BLOB NOT NULL);
-- Workflows (docs/workflows.md; workflows.rs): one row per workflow the
-- stream named, keyed by the id of the event that started it; the
-- processes that took part; its events' ids in stream order, varint-packed,
-- one part per batch.
CREATE TABLE IF NOT EXISTS workflows(
    boot INTEGER NOT NULL,
    id INTEGER NOT NULL,
    parent INTEGER,
    cause INTEGER,
    running INTEGER,
    leader INTEGER,
    comm TEXT,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    events INTEGER NOT NULL,
    PRIMARY KEY(boot, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workflow_procs(
    boot INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    workflow INTEGER NOT NULL,
    first_ns INTEGER NOT NULL,
    PRIMARY KEY(pid, boot, workflow)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS workflow_procs_by_workflow ON workflow_procs(boot, workflow);
CREATE TABLE IF NOT EXISTS workflow_parts(
    boot INTEGER NOT NULL,
    workflow INTEGER NOT NULL,
    part INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY(boot, workflow, part)) WITHOUT ROWID;
-- Each ingest's chain of seals over the batches it committed (tamper.rs,
-- docs/tamper-evidence.md): the seal line as the stream's seals are
-- written; segment NULL for the final seal.
CREATE TABLE IF NOT EXISTS seals(
    ingest INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    segment INTEGER,
    line TEXT NOT NULL,
    PRIMARY KEY(ingest, batch)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS losses(
    boot INTEGER NOT NULL,
    cpu INTEGER NOT NULL,
    category TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    count INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    PRIMARY KEY(boot, cpu, category, first_seq, start_ns)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS losses_by_time ON losses(start_ns, end_ns);
CREATE TABLE IF NOT EXISTS stats(
    boot INTEGER NOT NULL,
    time_ns INTEGER NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY(boot, time_ns)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ingests(
    ingest INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    started_ns INTEGER NOT NULL,
    finished_ns INTEGER,
    lines INTEGER NOT NULL DEFAULT 0,
    events_new INTEGER NOT NULL DEFAULT 0,
    events_duplicate INTEGER NOT NULL DEFAULT 0,
    malformed INTEGER NOT NULL DEFAULT 0,
    losses INTEGER NOT NULL DEFAULT 0);
-- Malformed lines are kept verbatim so nothing is lost.
CREATE TABLE IF NOT EXISTS rejects(
    ingest INTEGER NOT NULL,
    line_no INTEGER NOT NULL,
    error TEXT NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY(ingest, line_no)) WITHOUT ROWID;
-- Graph-builder state, committed with every batch so a later ingest of the
-- same stream (or after a crash) continues the version chains correctly.
CREATE TABLE IF NOT EXISTS heads(
    kind INTEGER NOT NULL,
    scope INTEGER NOT NULL,
    name TEXT NOT NULL,
    node INTEGER NOT NULL,
    version INTEGER NOT NULL,
    frozen INTEGER NOT NULL,
    generator INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    PRIMARY KEY(kind, scope, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS procs(
    boot INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY(boot, pid)) WITHOUT ROWID;
"#;

fn tune(conn: &Connection) -> Result<()> {
    // 256 MiB of mmap and 64 MiB of page cache: the ancestry walk is random
    // point lookups, so keeping the b-tree interior pages hot matters most.
    conn.execute_batch(
        "PRAGMA mmap_size = 268435456;
         PRAGMA cache_size = -65536;
         PRAGMA temp_store = MEMORY;",
    )
    .context("setting connection pragmas")?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    // `rarray(?)`: an answer's node rows are read through one statement.
    rusqlite::vtab::array::load_module(conn).context("loading the rarray module")?;
    Ok(())
}

/// Opens (creating if needed) a store for writing.
pub fn open_rw(path: &Path) -> Result<Connection> {
    let conn =
        Connection::open(path).with_context(|| format!("opening store {}", path.display()))?;
    // Refuse another version before changing anything in it.
    check_version(&conn, path, true)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .with_context(|| {
            format!(
                "switching {} to WAL mode (is it a SQLite database?)",
                path.display()
            )
        })?;
    if mode != "wal" {
        anyhow::bail!("{}: could not enable WAL mode (got {mode})", path.display());
    }
    // NORMAL is durable at every WAL checkpoint and crash-consistent always;
    // FULL additionally fsyncs each commit, which is what "acknowledged" promises.
    conn.execute_batch("PRAGMA synchronous = FULL;")?;
    // A batch dirties more pages than SQLite's default auto-checkpoint (1,000
    // pages), so every commit was followed by a checkpoint: every page written
    // twice and the database file synced per batch. Checkpoint (PASSIVE, after
    // a commit) once the WAL holds 64 MiB instead: pages rewritten by several
    // batches reach the database once. Durability is unchanged (each commit
    // still syncs the WAL). The WAL stays bounded by that plus one batch while
    // `collect --db` runs; a reader holding an old snapshot can delay the
    // reset as before, and `journal_size_limit` then shrinks the file back to
    // 128 MiB at the next reset. `Ingestor::finish` still truncates it.
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    conn.execute_batch(&format!(
        "PRAGMA wal_autocheckpoint = {}; PRAGMA journal_size_limit = {};",
        WAL_CHECKPOINT_BYTES / page.max(512),
        2 * WAL_CHECKPOINT_BYTES
    ))?;
    tune(&conn)?;
    conn.execute_batch(DDL)
        .with_context(|| format!("creating tables in {}", path.display()))?;
    stamp_version(&conn)?;
    Ok(conn)
}

/// Opens an existing store for queries.
pub fn open_ro(path: &Path) -> Result<Connection> {
    if !path.exists() {
        anyhow::bail!(
            "store {} does not exist; create it with `custos ingest --db {} EVENTS.jsonl`",
            path.display(),
            path.display()
        );
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening store {}", path.display()))?;
    tune(&conn)?;
    check_version(&conn, path, false)?;
    Ok(conn)
}

/// Whether the store has table `name` (a store written before a table was
/// added to the schema has not).
pub fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [name],
        |r| r.get(0),
    )
}

fn check_version(conn: &Connection, path: &Path, create: bool) -> Result<()> {
    let has_meta = has_table(conn, "meta").with_context(|| {
        format!(
            "reading the schema version of {} (is it a SQLite database?)",
            path.display()
        )
    })?;
    let v: Option<i64> = if has_meta {
        conn.query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .ok()
    } else {
        None
    };
    match v {
        Some(SCHEMA_VERSION) => Ok(()),
        Some(other) => anyhow::bail!(
            "{} has store schema version {other}, this custos understands {SCHEMA_VERSION}; re-ingest the archived \
             JSON Lines into a new store: `custos ingest --db NEW.db ARCHIVE.jsonl.zst` (the file written by --archive, \
             or the original .jsonl)",
            path.display()
        ),
        None if create => Ok(()),
        None => anyhow::bail!("{} is not a custos store (no schema version)", path.display()),
    }
}

/// Records the layout version in a new store (after the tables exist).
fn stamp_version(conn: &Connection) -> Result<()> {
    conn.execute(
        "INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', ?1)",
        [SCHEMA_VERSION],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_checkpoints_the_wal_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_rw(&dir.path().join("s.db")).unwrap();
        let page: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        let frames: i64 = conn
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap();
        assert_eq!(frames * page, WAL_CHECKPOINT_BYTES);
        let limit: i64 = conn
            .query_row("PRAGMA journal_size_limit", [], |r| r.get(0))
            .unwrap();
        assert_eq!(limit, 2 * WAL_CHECKPOINT_BYTES);
    }

    /// A store of an older layout (version 1: per-event `events` rows;
    /// version 2: a `causes` row per node; version 3: raw text chunks;
    /// version 4: effect parts keyed by (block, part)) is refused with the command that
    /// rebuilds it, for writing and for queries, and is left untouched.
    #[test]
    fn an_older_store_is_refused_naming_custos_ingest() {
        let dir = tempfile::tempdir().unwrap();
        for (version, table) in [
            (1, "CREATE TABLE events(boot INTEGER, event_id INTEGER, time_ns INTEGER, chunk INTEGER, slot INTEGER);"),
            (2, "CREATE TABLE causes(node INTEGER PRIMARY KEY, list BLOB NOT NULL);"),
            (3, "CREATE TABLE raw_chunks(chunk INTEGER PRIMARY KEY, ingest INTEGER, lines INTEGER, zstd BLOB);"),
            (4, "CREATE TABLE effect_parts(block INTEGER, part INTEGER, data BLOB, PRIMARY KEY(block, part)) WITHOUT ROWID;"),
        ] {
            let p = dir.path().join(format!("old{version}.db"));
            {
                let c = Connection::open(&p).unwrap();
                c.execute_batch(&format!(
                    "CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
                     INSERT INTO meta VALUES('schema_version', {version});
                     {table}"
                ))
                .unwrap();
            }
            for err in [open_rw(&p).unwrap_err(), open_ro(&p).unwrap_err()] {
                let msg = format!("{err:#}");
                assert!(msg.contains(&format!("schema version {version}")) && msg.contains("understands 5"), "{msg}");
                assert!(msg.contains("custos ingest --db"), "{msg}");
            }
            let c = Connection::open(&p).unwrap();
            let tables: i64 =
                c.query_row("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0)).unwrap();
            assert_eq!(tables, 2, "nothing was created in the old store");
        }
    }
}
