//! Tamper evidence for the store (docs/tamper-evidence.md, "The store"):
//! each ingest seals every batch it commits, in a chain of its own, with the
//! same seal format as the stream (crates/custos-seal). A batch's content is
//! what it added to the raw record: its raw segment (every line it stored,
//! loss records included, byte for byte as compressed) and the event id
//! ranges that point into it. `custos verify --db` re-computes every chain
//! and cross-checks the `losses` table against the loss records the sealed
//! segments hold, so hiding a loss is found too.
//!
//! The graph (nodes, edges, lookups) is derived from the raw record and not
//! sealed: it is rewritten as batches merge. `custos ingest` of the raw
//! record (`custos query event`, or the archive) rebuilds it.

use crate::record::{parse_line, Record};
use anyhow::Result;
use custos_seal::{BatchSealer, Finding, Report, SealKey, Verifier};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Separates store batch hashes from the stream's.
const DOMAIN: &[u8] = b"custos-store-batch-v1\0";

/// The content hash of a committed batch: its ingest, its segment and the
/// segment's bytes, and the event id runs `(boot, first, last)` that name it.
pub fn batch_content(
    ingest: i64,
    segment: Option<i64>,
    blob: &[u8],
    runs: &[(i64, i64, i64)],
) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(DOMAIN);
    h.update(&ingest.to_le_bytes());
    h.update(&segment.unwrap_or(-1).to_le_bytes());
    h.update(&(blob.len() as u64).to_le_bytes());
    h.update(blob);
    let mut runs = runs.to_vec();
    runs.sort_unstable();
    h.update(&(runs.len() as u64).to_le_bytes());
    for (boot, first, last) in runs {
        for v in [boot, first, last] {
            h.update(&v.to_le_bytes());
        }
    }
    *h.finalize().as_bytes()
}

/// An ingest's chain: seals each batch as it commits (inside its transaction).
pub struct StoreSealer {
    chain: BatchSealer,
    /// The chain as it was before the open batch: restored when it rolls back.
    committed: custos_seal::ChainState,
}

impl StoreSealer {
    pub fn new(key: SealKey) -> Result<Self> {
        let chain = BatchSealer::new(key)?;
        let committed = chain.state();
        Ok(StoreSealer { chain, committed })
    }

    /// Seals a batch and stores its seal; `segment` None: the final seal.
    #[allow(clippy::too_many_arguments)] // one per part of the batch
    pub fn seal(
        &mut self,
        db: &Connection,
        ingest: i64,
        segment: Option<i64>,
        blob: &[u8],
        runs: &[(i64, i64, i64)],
        lines: u64,
        times: (u64, u64),
    ) -> Result<()> {
        let content = batch_content(ingest, segment, blob, runs);
        let line = self
            .chain
            .seal(&content, lines, times.0, times.1, segment.is_none());
        db.prepare_cached("INSERT INTO seals(ingest, batch, segment, line) VALUES(?1,?2,?3,?4)")?
            .execute(params![
                ingest,
                line.batch as i64,
                segment,
                serde_json::to_string(&line)?
            ])?;
        Ok(())
    }

    /// The batch committed: its seal stays in the chain.
    pub fn committed(&mut self) {
        self.committed = self.chain.state();
    }

    /// The batch rolled back: so does the chain.
    pub fn rolled_back(&mut self) {
        self.chain.set_state(self.committed);
    }
}

/// What `custos verify --db` says of one ingest.
#[derive(serde::Serialize, Debug)]
pub struct IngestReport {
    pub ingest: i64,
    pub source: String,
    pub report: Report,
}

/// Verifies every ingest's chain in the store at `db` (opened read-only);
/// `pinned`: the public key the seals must carry.
pub fn verify_db(db: &Connection, pinned: Option<&str>) -> Result<Vec<IngestReport>> {
    let has_seals = crate::schema::has_table(db, "seals")?;
    // Every event range, by segment (one pass, not a scan per segment).
    let mut runs: HashMap<i64, Vec<(i64, i64, i64)>> = HashMap::new();
    let mut st = db.prepare("SELECT boot, first_id, last_id, segment FROM event_ranges")?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        runs.entry(r.get(3)?)
            .or_default()
            .push((r.get(0)?, r.get(1)?, r.get(2)?));
    }
    drop(rows);
    let losses = LossRows::load(db)?;
    let ingests: Vec<(i64, String)> = db
        .prepare("SELECT ingest, source FROM ingests ORDER BY ingest")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    // Ingest numbers start at 1 and rise by one.
    let mut expected_ingest = 1;
    for (ingest, source) in ingests {
        let mut v = Verifier::new(pinned)?;
        let mut extra = Vec::new();
        // The numbers come from a store that may have been edited: any i64.
        // Rising (ORDER BY, a primary key), so only the first may be below.
        if ingest > expected_ingest {
            extra.push(Finding::unplaced(
                "deleted",
                format!(
                    "ingests {expected_ingest}..{} are missing: their rows were removed",
                    ingest - 1
                ),
            ));
        } else if ingest < expected_ingest {
            extra.push(Finding::unplaced(
                "altered",
                format!(
                    "ingest {ingest} is numbered below {expected_ingest}: the rows were renumbered"
                ),
            ));
        }
        expected_ingest = ingest.saturating_add(1);
        let segments: BTreeMap<i64, i64> = db
            .prepare("SELECT segment, lines FROM raw_segments WHERE ingest = ?1")?
            .query_map([ingest], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let seals: Vec<(Option<i64>, String)> = if has_seals {
            db.prepare("SELECT segment, line FROM seals WHERE ingest = ?1 ORDER BY batch")?
                .query_map([ingest], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?
        } else {
            Vec::new()
        };
        let mut claimed = HashSet::new();
        for (segment, line) in &seals {
            let (blob, lines) = match segment {
                Some(s) => {
                    claimed.insert(*s);
                    let blob: Option<Vec<u8>> = db
                        .query_row(
                            "SELECT data FROM raw_segments WHERE segment = ?1 AND ingest = ?2",
                            params![s, ingest],
                            |r| r.get(0),
                        )
                        .optional()?;
                    match blob {
                        Some(b) => {
                            losses.check(&b, *s, &mut extra)?;
                            let n = segments.get(s).copied().unwrap_or(0) as u64;
                            (b, n)
                        }
                        None => (Vec::new(), 0),
                    }
                }
                None => (Vec::new(), 0),
            };
            let content = batch_content(
                ingest,
                *segment,
                &blob,
                segment.and_then(|s| runs.get(&s)).map_or(&[][..], |r| r),
            );
            // The times are the seal's own claim (signed); a seal that does not parse is reported by the verifier.
            let (t0, t1) = serde_json::from_str::<custos_seal::SealLine>(line)
                .map_or((0, 0), |s| (s.first_time_ns, s.last_time_ns));
            v.sealed_batch(&content, lines, t0, t1, line.as_bytes());
        }
        for (s, lines) in &segments {
            if !claimed.contains(s) {
                extra.push(Finding::unplaced(
                    "inserted",
                    format!("raw segment {s} ({lines} lines) has no seal: it was added after the ingest, or its seal was removed"),
                ));
            }
        }
        let mut report = v.finish();
        if seals.is_empty() && segments.is_empty() {
            // An ingest that stored nothing new (every line already stored).
            report.findings.retain(|f| f.kind != "not-sealed");
        }
        report.findings.extend(extra);
        report.intact = report.findings.is_empty();
        out.push(IngestReport {
            ingest,
            source,
            report,
        });
    }
    Ok(out)
}

/// The `losses` table, to find the loss records the sealed segments hold:
/// (cpu, category, first_seq, start_ns). (The boot is left out: a loss line
/// names it only through the stream's `boot` line before it.)
struct LossRows(HashSet<(i64, String, i64, i64)>);

impl LossRows {
    fn load(db: &Connection) -> Result<Self> {
        let rows = db
            .prepare("SELECT cpu, category, first_seq, start_ns FROM losses")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(LossRows(rows))
    }

    /// Every loss record in `blob`, and every event that lost its
    /// attributes, has its row: a removed row would hide a loss from the
    /// answers' completeness check.
    fn check(&self, blob: &[u8], segment: i64, findings: &mut Vec<Finding>) -> Result<()> {
        // A segment that does not decode was altered: the chain says so.
        let Ok(lines) = crate::rawseg::lines(blob) else {
            return Ok(());
        };
        for line in lines {
            let key = match parse_line(&line) {
                Ok(Record::Loss(l)) => (
                    l.cpu.map_or(-1, i64::from),
                    l.category.clone(),
                    l.first_seq.map_or(-1, |v| v as i64),
                    l.start_ns as i64,
                ),
                Ok(Record::Event(ev, _)) if ev.incomplete => (
                    ev.cpu as i64,
                    "incomplete".to_string(),
                    (ev.id & crate::blocks::SEQ_MASK) as i64,
                    ev.time_ns as i64,
                ),
                _ => continue,
            };
            if !self.0.contains(&key) {
                findings.push(Finding::unplaced(
                    "loss-hidden",
                    format!(
                        "raw segment {segment} records a loss ({} on CPU {} at {}) the losses table no longer has: answers would not say they may be incomplete",
                        key.1,
                        key.0,
                        crate::timefmt::format_ns(key.3 as u64)
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{IngestOptions, Ingestor};
    use std::path::{Path, PathBuf};

    const T0: u64 = 1_763_700_000_000_000_000;

    /// 60 events and 2 loss records, committed 10 lines a batch.
    fn lines() -> Vec<String> {
        let mut v = vec![r#"{"type":"boot","boot_id":"b1"}"#.to_string()];
        for i in 1..=60u64 {
            let t = T0 + i * 1_000_000;
            v.push(format!(
                r#"{{"type":"event","id":{i},"cpu":0,"seq":{i},"time_ns":{t},"pid":7,"tid":7,"ppid":1,"comm":"cat","syscall":"read","ret":5,"fd":3,"path":"/etc/f{}"}}"#,
                i % 5
            ));
            if i == 20 || i == 45 {
                v.push(format!(
                    r#"{{"type":"loss","cpu":1,"first_seq":{i},"last_seq":{},"count":3,"category":"events","start_ns":{t},"end_ns":{}}}"#,
                    i + 2,
                    t + 5
                ));
            }
        }
        v
    }

    fn key(dir: &Path) -> SealKey {
        SealKey::load_or_create(&dir.join("seal.key")).unwrap().0
    }

    fn ingest(db: &Path, key: Option<SealKey>) {
        let mut ing = Ingestor::open(
            db,
            IngestOptions {
                batch_lines: 10,
                seal_key: key,
                reorder_window_ns: 0,
                ..Default::default()
            },
        )
        .unwrap();
        for l in lines() {
            ing.push_line(&l).unwrap();
        }
        ing.finish().unwrap();
    }

    /// A sealed store, then a copy of it changed by `sql`; what verify finds there.
    fn after(sql: &str) -> Vec<Finding> {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("s.db");
        ingest(&db, Some(key(d.path())));
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(sql).unwrap();
        drop(conn);
        let conn = crate::schema::open_ro(&db).unwrap();
        let r = verify_db(&conn, None).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].report.intact, r[0].report.findings.is_empty());
        r.into_iter().next().unwrap().report.findings
    }

    fn kinds(f: &[Finding]) -> Vec<&'static str> {
        f.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn an_untouched_store_verifies() {
        let d = tempfile::tempdir().unwrap();
        let db: PathBuf = d.path().join("s.db");
        let k = key(d.path());
        let public = k.public_hex();
        ingest(&db, Some(k));
        let conn = crate::schema::open_ro(&db).unwrap();
        let r = verify_db(&conn, Some(&public)).unwrap();
        let seals: i64 = conn
            .query_row("SELECT COUNT(*) FROM seals", [], |r| r.get(0))
            .unwrap();
        assert!(r[0].report.intact, "{:?}", r[0].report.findings);
        assert_eq!(r[0].report.batches_verified as i64, seals);
        assert!(seals >= 7, "every batch and the final seal: {seals}");
        assert!(r[0].report.finished);
        // Pinned to another key, every seal is foreign.
        let other = SealKey::load_or_create(&d.path().join("other.key"))
            .unwrap()
            .0
            .public_hex();
        let r = verify_db(&conn, Some(&other)).unwrap();
        assert!(kinds(&r[0].report.findings).contains(&"foreign-key"));
    }

    #[test]
    fn an_altered_segment_is_found_and_located() {
        let f =
            after("UPDATE raw_segments SET data = CAST(data || x'00' AS BLOB) WHERE segment = 2");
        assert_eq!(kinds(&f), ["altered"], "{f:?}");
        assert_eq!(f[0].batch, Some(1));
        assert!(
            f[0].first_time_ns.is_some() && f[0].last_time_ns.is_some(),
            "with its time range: {f:?}"
        );
    }

    /// Ingest numbers edited to the ends of an i64 are findings: before,
    /// `ingest - 1` and `ingest + 1` overflowed (a panic with overflow
    /// checks, a wrapped number in the message without).
    #[test]
    fn ingest_numbers_at_the_ends_of_an_i64_are_findings() {
        for (n, kind) in [(i64::MAX, "deleted"), (i64::MIN, "altered"), (0, "altered")] {
            let f = after(&format!("UPDATE ingests SET ingest = {n}"));
            assert!(kinds(&f).contains(&kind), "{n}: {f:?}");
        }
    }

    #[test]
    fn a_deleted_batch_is_found() {
        let f = after("DELETE FROM raw_segments WHERE segment = 3; DELETE FROM event_ranges WHERE segment = 3; DELETE FROM seals WHERE segment = 3");
        assert!(kinds(&f).contains(&"deleted"), "{f:?}");
        assert_eq!(
            f.iter().find(|f| f.kind == "deleted").unwrap().batch,
            Some(2)
        );
    }

    #[test]
    fn swapped_segments_are_found() {
        let f = after(
            "UPDATE raw_segments SET segment = -1 WHERE segment = 2; UPDATE raw_segments SET segment = 2 WHERE segment = 3; \
             UPDATE raw_segments SET segment = 3 WHERE segment = -1",
        );
        assert_eq!(kinds(&f), ["altered", "altered"], "{f:?}");
    }

    #[test]
    fn a_hidden_loss_is_found() {
        let f = after("DELETE FROM losses WHERE first_seq = 45");
        assert_eq!(kinds(&f), ["loss-hidden"], "{f:?}");
    }

    #[test]
    fn a_removed_event_range_is_found() {
        let f = after("DELETE FROM event_ranges WHERE segment = 4");
        assert_eq!(kinds(&f), ["altered"], "{f:?}");
    }

    #[test]
    fn an_edited_seal_is_forged() {
        let f = after("UPDATE seals SET line = replace(line, '\"first_line\":', '\"first_line\":1') WHERE batch = 1");
        assert!(kinds(&f).contains(&"forged-seal"), "{f:?}");
    }

    #[test]
    fn a_cut_off_end_is_found() {
        let f = after("DELETE FROM seals WHERE segment IS NULL");
        assert_eq!(kinds(&f), ["truncated"], "{f:?}");
    }

    #[test]
    fn an_unsealed_store_says_so() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("s.db");
        ingest(&db, None);
        let conn = crate::schema::open_ro(&db).unwrap();
        let r = verify_db(&conn, None).unwrap();
        assert!(
            kinds(&r[0].report.findings).contains(&"not-sealed"),
            "{:?}",
            r[0].report.findings
        );
        // Its segments are listed as unsealed too.
        assert!(kinds(&r[0].report.findings).contains(&"inserted"));
    }

    #[test]
    fn a_rolled_back_batch_leaves_the_chain_whole() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("s.db");
        let mut sealer = StoreSealer::new(key(d.path())).unwrap();
        let conn = crate::schema::open_rw(&db).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        sealer.seal(&conn, 1, None, &[], &[], 0, (0, 0)).unwrap();
        conn.execute_batch("ROLLBACK").unwrap();
        sealer.rolled_back();
        assert_eq!(sealer.chain.state().batch_no(), 0);
    }
}
