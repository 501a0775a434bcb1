//! A sealed stream cut into numbered segment files (`custos collect -o DIR
//! --rotate-mb N`, docs/tamper-evidence.md "Rotated series").
//!
//! The series is one stream: one stream id, one chain. A segment ends
//! after a seal and the next one begins with the next batch, so the
//! segments laid end to end are exactly the stream an unrotated run writes,
//! and the chain runs on across each cut: a segment missing, moved,
//! truncated or edited breaks it like a batch would.
//!
//! Each segment's first line is its header, a line of the stream like any
//! other (so it is sealed in the segment's first batch): its number, where
//! in the chain it starts, and from which segment on the series is kept.
//! Once that header is sealed the writer deletes the older segments it
//! announced, so a series whose first segments are gone says, under the
//! seal, that they were rotated away; a gap it does not announce is a
//! deletion.

use anyhow::{bail, Result};
use custos_output::segments::{file_name, list, remove_before};
use custos_output::{Existing, Output};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::{Finding, Report, Verifier};

/// Where the chain stands between two batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The next batch's number.
    pub batch: u64,
    /// The stream line the next batch starts at (seal lines not counted).
    pub first_line: u64,
}

/// An output cut into files at batch boundaries. The [`crate::Sealer`]
/// tells it of each boundary (the stream's start, then after every seal,
/// `last` after the final one); when it starts a new file there it returns
/// that file's header line, which the sealer writes as the next batch's
/// first line.
pub trait Cuts: Send {
    fn boundary(&mut self, at: Boundary, last: bool) -> io::Result<Option<Vec<u8>>>;
}

/// A segment's first line (field order fixed by this struct).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeader {
    #[serde(rename = "type")]
    pub ty: String,
    pub v: u32,
    /// Numbered from 1 in the order written; the file is named after it.
    pub segment: u64,
    /// The chain's batch number and stream line this segment starts at.
    pub batch: u64,
    pub first_line: u64,
    /// Segments below this number are deleted once this header is sealed
    /// (`--rotate-keep`): the oldest segment the writer keeps.
    pub kept_from: u64,
}

impl SegmentHeader {
    pub fn new(segment: u64, at: Boundary, kept_from: u64) -> Self {
        SegmentHeader {
            ty: "segment".into(),
            v: 1,
            segment,
            batch: at.batch,
            first_line: at.first_line,
            kept_from,
        }
    }

    /// The header as a line of the stream, newline included.
    pub fn line(&self) -> Vec<u8> {
        let mut text = serde_json::to_vec(self).expect("a header serializes");
        text.push(b'\n');
        text
    }

    /// The header this line is, if it is one.
    pub fn parse(line: &[u8]) -> Option<Self> {
        if !line.starts_with(b"{\"type\":\"segment\"") {
            return None;
        }
        serde_json::from_slice(line)
            .ok()
            .filter(|h: &Self| h.v == 1)
    }
}

/// A finding of a series, with the segment it was found in.
#[derive(Serialize, Debug, Clone)]
pub struct SeriesFinding {
    /// The segment's file name; for what is missing between two files, the
    /// file after the gap (then `before` is true).
    pub segment: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub before: bool,
    #[serde(flatten)]
    pub finding: Finding,
}

/// One segment as verified.
#[derive(Serialize, Debug, Clone)]
pub struct SegmentSeen {
    pub number: u64,
    pub name: String,
    /// The batches whose seals held in it.
    pub first_batch: Option<u64>,
    pub last_batch: Option<u64>,
    pub lines: u64,
}

/// What `custos verify DIR` says of a series.
#[derive(Serialize, Debug)]
pub struct SeriesReport {
    pub intact: bool,
    /// The number of the oldest segment found, and how many before it were
    /// rotated away as the headers announced (its number - 1 when they
    /// were; a gap not announced is a `deleted` finding instead).
    pub first_segment: Option<u64>,
    pub rotated_away: u64,
    pub segments: Vec<SegmentSeen>,
    /// Lines read in the segments here (seals not counted), and the chain's
    /// report over them laid end to end (its findings are in `findings`
    /// below, each with its segment).
    pub lines: u64,
    pub batches_verified: u64,
    pub key: Option<String>,
    pub stream: Option<String>,
    pub finished: bool,
    pub findings: Vec<SeriesFinding>,
}

/// Verifies a series segment by segment, in the order of their numbers:
/// [`SeriesVerifier::segment`] at each file, then its lines.
pub struct SeriesVerifier {
    chain: Verifier,
    segments: Vec<SegmentSeen>,
    /// The chain's findings up to where each segment began.
    findings_before: Vec<usize>,
    own: Vec<SeriesFinding>,
    /// The current segment has had no line yet: its first must be its header.
    expect_header: bool,
    /// The highest `kept_from` a header announced.
    kept_from: u64,
    /// The chain's findings before its finish (those after are of the whole).
    finish_from: usize,
}

impl SeriesVerifier {
    pub fn new(chain: Verifier) -> Self {
        SeriesVerifier {
            chain,
            segments: Vec::new(),
            findings_before: Vec::new(),
            own: Vec::new(),
            expect_header: false,
            kept_from: 1,
            finish_from: usize::MAX,
        }
    }

    fn finding(&mut self, kind: &'static str, segment: Option<String>, message: String) {
        self.own.push(SeriesFinding {
            before: kind == "deleted",
            segment,
            finding: Finding::unplaced(kind, message),
        });
    }

    /// The next segment file: its number (from its name) and name.
    pub fn segment(&mut self, number: u64, name: &str) {
        self.end_segment();
        if let Some(prev) = self.segments.last().map(|s| s.number) {
            if number > prev + 1 {
                let missing = match number - prev - 1 {
                    1 => format!("segment {} is missing", prev + 1),
                    n => format!("segments {} to {} are missing ({n})", prev + 1, number - 1),
                };
                self.finding(
                    "deleted",
                    Some(name.to_string()),
                    format!("{missing}: removed from the middle of the series, before {name}"),
                );
            }
        }
        self.segments.push(SegmentSeen {
            number,
            name: name.to_string(),
            first_batch: None,
            last_batch: None,
            lines: 0,
        });
        self.findings_before.push(self.chain.findings.len());
        self.expect_header = true;
    }

    /// Closes the current segment: a file without even its header line.
    fn end_segment(&mut self) {
        if !self.expect_header {
            return;
        }
        self.expect_header = false;
        let name = self.segments.last().map(|s| s.name.clone());
        self.finding(
            "truncated",
            name.clone(),
            format!(
                "{} is empty: cut off as it was opened, or emptied",
                name.unwrap_or_default()
            ),
        );
    }

    /// One line of the current segment, its newline included.
    pub fn line(&mut self, line: &[u8]) {
        let Some(seg) = self.segments.last_mut() else {
            return;
        };
        if std::mem::take(&mut self.expect_header) {
            let (number, name) = (seg.number, seg.name.clone());
            match SegmentHeader::parse(line) {
                Some(h) => {
                    if h.segment != number {
                        self.finding(
                            "reordered",
                            Some(name.clone()),
                            format!("{name} holds segment {}: files were renamed or swapped", h.segment),
                        );
                    }
                    // The oldest segment here sets where the chain is read from.
                    if self.segments.len() == 1 {
                        self.chain.resume_at(h.batch, h.first_line);
                    }
                    self.kept_from = self.kept_from.max(h.kept_from);
                }
                None => self.finding(
                    "altered",
                    Some(name.clone()),
                    format!("{name} does not begin with its segment header: its start was altered or cut off"),
                ),
            }
        }
        let seg = self.segments.last_mut().expect("a segment");
        let verified = self.chain.verified;
        self.chain.line(line);
        match self.chain.last_sealed() {
            // A seal that held: its batch is this segment's.
            Some(b) if self.chain.verified > verified => {
                seg.first_batch.get_or_insert(b);
                seg.last_batch = Some(b);
            }
            _ if !crate::is_seal(line) => seg.lines += 1,
            _ => {}
        }
    }

    /// The segment a chain finding belongs to, and whether it is the one
    /// after a gap rather than the one holding it.
    fn segment_of(&self, index: usize, f: &Finding) -> (Option<String>, bool) {
        // Found at finish: a missing batch goes to the file that holds its
        // neighbours, else the first after it; the tail's findings to the last.
        if index >= self.finish_from {
            if f.kind == "deleted" {
                let Some(b) = f.batch else {
                    return (None, false);
                };
                let holding = self.segments.iter().find(|s| {
                    s.first_batch.is_some_and(|first| first < b)
                        && s.last_batch.is_some_and(|last| last > b)
                });
                if let Some(s) = holding {
                    return (Some(s.name.clone()), false);
                }
                let after = self
                    .segments
                    .iter()
                    .find(|s| s.first_batch.is_some_and(|first| first > b));
                return (after.map(|s| s.name.clone()), true);
            }
            return (self.segments.last().map(|s| s.name.clone()), false);
        }
        let at = self.findings_before.partition_point(|&n| n <= index);
        let seg = at.checked_sub(1).and_then(|i| self.segments.get(i));
        (seg.map(|s| s.name.clone()), false)
    }

    pub fn finish(mut self) -> SeriesReport {
        self.end_segment();
        self.finish_from = self.chain.findings.len();
        let first_segment = self.segments.first().map(|s| s.number);
        let mut rotated_away = 0;
        if let Some(first) = first_segment {
            // Older segments the headers announced as rotated away are gone
            // by design; any others were deleted.
            rotated_away = (first - 1).min(self.kept_from - 1);
            if first > self.kept_from {
                let name = self.segments[0].name.clone();
                self.finding(
                    "deleted",
                    Some(name.clone()),
                    format!(
                        "the series starts at {name}, but its headers rotated away only the segments before {}: segments {} to {} were removed",
                        self.kept_from,
                        self.kept_from,
                        first - 1
                    ),
                );
            }
        }
        let chain = std::mem::replace(&mut self.chain, Verifier::new(None).expect("no key"));
        let report: Report = chain.finish();
        let mut findings = std::mem::take(&mut self.own);
        for (i, f) in report.findings.iter().enumerate() {
            let (segment, before) = self.segment_of(i, f);
            findings.push(SeriesFinding {
                segment,
                before,
                finding: f.clone(),
            });
        }
        let lines = self.segments.iter().map(|s| s.lines).sum();
        SeriesReport {
            intact: report.intact && findings.is_empty(),
            first_segment,
            rotated_away,
            segments: self.segments,
            lines,
            batches_verified: report.batches_verified,
            key: report.key,
            stream: report.stream,
            finished: report.finished,
            findings,
        }
    }
}

/// Reads the series in `dir` in the order of its segments' numbers and
/// verifies it (`pinned`: the key the seals must carry, as for one stream).
pub fn verify_dir(dir: &Path, pinned: Option<&str>) -> Result<SeriesReport> {
    let mut series = SeriesVerifier::new(Verifier::new(pinned)?);
    let segments = list(dir)?;
    if segments.is_empty() {
        bail!(
            "{}: no segments (segment-NNNNNN.jsonl, or .jsonl.zst/.jsonl.gz) in this directory",
            dir.display()
        );
    }
    for (number, path) in segments {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        series.segment(number, &name);
        let input = io::BufReader::with_capacity(1 << 20, custos_output::segments::open(&path)?);
        crate::for_each_line(input, &path, |line| series.line(line))?;
    }
    Ok(series.finish())
}

/// The writing side: a stream written into numbered segments of `dir`, cut
/// at the first batch boundary past `limit` bytes, keeping the newest
/// `keep` segments. [`SegmentFile`] is where the stream is written (behind
/// the sealer, maybe beside another output); [`SegmentCuts`] is what the
/// sealer tells of its boundaries. Both hold the same state.
struct Rotation {
    dir: PathBuf,
    limit: u64,
    keep: u64,
    /// Who says so on stderr when segments are rotated away.
    program: &'static str,
    file: File,
    number: u64,
    bytes: u64,
    /// Segment 1's header is still due (at the stream's start).
    fresh: bool,
    /// The oldest segment of this run still on disk, and the oldest the
    /// last header said is kept: those between go once that header is sealed.
    oldest: u64,
    announced: u64,
}

pub struct SegmentFile(Arc<Mutex<Rotation>>);
pub struct SegmentCuts(Arc<Mutex<Rotation>>);

/// Starts a series in `dir` (checked by `custos_output::segments::check_dir`
/// with `existing`): makes the directory if it is new, removes an earlier
/// series' segments if `existing` says to replace them, and creates
/// segment 1.
pub fn create(
    dir: &Path,
    limit: u64,
    keep: u64,
    existing: Existing,
    program: &'static str,
) -> Result<(SegmentFile, SegmentCuts)> {
    if limit == 0 || keep == 0 {
        bail!("a series needs segments of at least one byte, and at least one kept");
    }
    custos_output::segments::begin("-o/--output", dir, existing, program)?;
    let path = dir.join(file_name(1));
    let file = custos_output::create(&Output::new("-o/--output", &path, Existing::Refuse))?;
    let state = Arc::new(Mutex::new(Rotation {
        dir: dir.to_path_buf(),
        limit,
        keep,
        program,
        file,
        number: 1,
        bytes: 0,
        fresh: true,
        oldest: 1,
        announced: 1,
    }));
    Ok((SegmentFile(state.clone()), SegmentCuts(state)))
}

impl Rotation {
    /// The header of the current segment, starting at `at`.
    fn header(&mut self, at: Boundary) -> Vec<u8> {
        self.announced = self.number.saturating_sub(self.keep - 1).max(1);
        SegmentHeader::new(self.number, at, self.announced).line()
    }

    /// Deletes the segments the last header (sealed by now) rotated away.
    fn delete_rotated(&mut self) -> io::Result<()> {
        let Some(gone) = remove_before(&self.dir, &mut self.oldest, self.announced, file_name)?
        else {
            return Ok(());
        };
        eprintln!(
            "{}: rotated away {gone} (--rotate-keep {}): the series in {} now starts at {}",
            self.program,
            self.keep,
            self.dir.display(),
            file_name(self.oldest)
        );
        Ok(())
    }
}

impl Cuts for SegmentCuts {
    fn boundary(&mut self, at: Boundary, last: bool) -> io::Result<Option<Vec<u8>>> {
        let mut r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        r.delete_rotated()?;
        if std::mem::take(&mut r.fresh) {
            return Ok(Some(r.header(at)));
        }
        if last || r.bytes < r.limit {
            return Ok(None);
        }
        let next = r.number + 1;
        let path = r.dir.join(file_name(next));
        // create_new: a file that appeared under the next name is never overwritten.
        r.file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", path.display())))?;
        (r.number, r.bytes) = (next, 0);
        Ok(Some(r.header(at)))
    }
}

impl Write for SegmentFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        r.file.write_all(buf)?;
        r.bytes += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SealKey, Sealer};
    use std::time::Duration;

    fn key() -> SealKey {
        SealKey {
            signing: ed25519_dalek::SigningKey::from_bytes(&[7; 32]),
        }
    }

    fn event(i: u64) -> String {
        format!(
            "{{\"type\":\"event\",\"id\":{i},\"cpu\":0,\"seq\":{i},\"time_ns\":{},\"syscall\":\"openat\",\"path\":\"/etc/file-{i:06}\"}}\n",
            1_000 + i
        )
    }

    /// Writes `n` events into a series in `dir` (segments of `limit` bytes,
    /// `keep` kept, seals every 10 lines) in pieces that cut lines, and
    /// returns the stream as one unrotated run would have written it.
    fn write_series(dir: &Path, n: u64, limit: u64, keep: u64, finish: bool) -> Vec<u8> {
        let (file, cuts) = create(dir, limit, keep, Existing::Refuse, "test").unwrap();
        let mut sealer = Sealer::new(key(), 10, Duration::from_secs(3600))
            .unwrap()
            .cut_by(Box::new(cuts));
        // Everything the sealer writes, also to a plain copy.
        struct Both(SegmentFile, Vec<u8>);
        impl Write for Both {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.write_all(buf)?;
                self.1.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut out = Both(file, Vec::new());
        let all: String = (0..n).map(event).collect();
        for piece in all.as_bytes().chunks(777) {
            sealer.write(piece, &mut out).unwrap();
        }
        if finish {
            sealer.finish(&mut out).unwrap();
        }
        out.1
    }

    fn kinds(r: &SeriesReport) -> Vec<(&'static str, Option<&str>)> {
        r.findings
            .iter()
            .map(|f| (f.finding.kind, f.segment.as_deref()))
            .collect()
    }

    fn concat(dir: &Path) -> Vec<u8> {
        list(dir)
            .unwrap()
            .iter()
            .flat_map(|(_, p)| std::fs::read(p).unwrap())
            .collect()
    }

    #[test]
    fn an_earlier_series_is_replaced_only_when_forced_and_other_files_stay() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join(file_name(7)), "earlier").unwrap();
        std::fs::write(d.join("notes.txt"), "kept").unwrap();
        assert!(create(d, 1 << 20, 2, Existing::Refuse, "test").is_err());
        assert_eq!(
            std::fs::read_to_string(d.join(file_name(7))).unwrap(),
            "earlier"
        );
        let made = create(d, 1 << 20, 2, Existing::Replace, "test").unwrap();
        drop(made);
        let left: Vec<u64> = list(d).unwrap().iter().map(|s| s.0).collect();
        assert_eq!(left, [1]);
        assert_eq!(
            std::fs::read_to_string(d.join("notes.txt")).unwrap(),
            "kept"
        );
    }

    #[test]
    fn a_series_is_the_stream_cut_at_seals_and_verifies_whole() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("series");
        let whole = write_series(&d, 2_000, 20_000, u64::MAX, true);
        let segments = list(&d).unwrap();
        assert!(segments.len() >= 10, "{segments:?}");
        // Laid end to end, the segments are the stream: no line lost or split.
        assert_eq!(concat(&d), whole);
        for (n, path) in &segments {
            let text = std::fs::read(path).unwrap();
            let first = text.split_inclusive(|b| *b == b'\n').next().unwrap();
            let h = SegmentHeader::parse(first).unwrap();
            assert_eq!((h.segment, h.kept_from), (*n, 1));
            // Each ends on a seal, the cut; each but the last is past the limit.
            let last = text[..text.len() - 1]
                .rsplit(|b| *b == b'\n')
                .next()
                .unwrap();
            assert!(crate::is_seal(last));
            if *n < segments.len() as u64 {
                assert!(text.len() >= 20_000);
            }
        }
        let r = verify_dir(&d, Some(&key().public_hex())).unwrap();
        assert!(r.intact, "{:?}", r.findings);
        assert_eq!((r.first_segment, r.rotated_away), (Some(1), 0));
        assert_eq!(r.lines, 2_000 + segments.len() as u64);
        let per_segment: u64 = r.segments.iter().map(|s| s.lines).sum();
        assert_eq!(per_segment, r.lines);
        assert!(r.finished);
        // The concatenation verifies as one stream too.
        let mut v = Verifier::new(None).unwrap();
        for l in whole.split_inclusive(|b| *b == b'\n') {
            v.line(l);
        }
        assert!(v.finish().intact);
    }

    #[test]
    fn rotation_keeps_the_newest_and_says_where_the_series_starts() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("series");
        write_series(&d, 2_000, 20_000, 2, true);
        let segments = list(&d).unwrap();
        assert_eq!(segments.len(), 2, "{segments:?}");
        let r = verify_dir(&d, None).unwrap();
        assert!(r.intact, "{:?}", r.findings);
        let first = segments[0].0;
        assert!(first > 2);
        assert_eq!((r.first_segment, r.rotated_away), (Some(first), first - 1));
        // Removing the oldest kept one is not rotation: the headers did not say so.
        std::fs::remove_file(&segments[0].1).unwrap();
        let r = verify_dir(&d, None).unwrap();
        assert!(!r.intact);
        let name = file_name(first + 1);
        assert_eq!(
            kinds(&r)[0],
            ("deleted", Some(name.as_str())),
            "{:?}",
            r.findings
        );
        assert!(r.findings[0]
            .finding
            .message
            .contains(&format!("segments {first} to {first} were removed")));
    }

    #[test]
    fn a_segment_missing_moved_edited_or_cut_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = |name: &str| {
            let d = dir.path().join(name);
            write_series(&d, 1_000, 10_000, u64::MAX, true);
            let segments = list(&d).unwrap();
            assert!(segments.len() >= 5);
            (d, segments)
        };
        // A middle segment deleted.
        let (d, s) = fresh("deleted");
        std::fs::remove_file(&s[2].1).unwrap();
        let r = verify_dir(&d, None).unwrap();
        let after = file_name(s[3].0);
        assert_eq!(kinds(&r)[0], ("deleted", Some(after.as_str())));
        assert!(r.findings[0]
            .finding
            .message
            .contains(&format!("segment {} is missing", s[2].0)));
        assert!(
            kinds(&r)[1..]
                .iter()
                .all(|k| *k == ("deleted", Some(after.as_str()))),
            "{:?}",
            kinds(&r)
        );

        // Two segments swapped (their names exchanged).
        let (d, s) = fresh("swapped");
        let tmp = d.join("tmp");
        std::fs::rename(&s[1].1, &tmp).unwrap();
        std::fs::rename(&s[2].1, &s[1].1).unwrap();
        std::fs::rename(&tmp, &s[2].1).unwrap();
        let r = verify_dir(&d, None).unwrap();
        let (n1, n2) = (file_name(s[1].0), file_name(s[2].0));
        let k = kinds(&r);
        assert!(k.contains(&("reordered", Some(n1.as_str()))), "{k:?}");
        assert!(k.contains(&("reordered", Some(n2.as_str()))), "{k:?}");

        // A line edited in segment 3.
        let (d, s) = fresh("edited");
        let text = std::fs::read_to_string(&s[2].1).unwrap();
        std::fs::write(&s[2].1, text.replacen("/etc/file-", "/etc/FILE-", 1)).unwrap();
        let r = verify_dir(&d, None).unwrap();
        let n = file_name(s[2].0);
        assert_eq!(kinds(&r), [("altered", Some(n.as_str()))]);

        // The last segment cut inside a line: a writer cut off.
        let (d, s) = fresh("cut");
        let last = &s.last().unwrap().1;
        let len = std::fs::metadata(last).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(last).unwrap();
        f.set_len(len - 300).unwrap();
        let r = verify_dir(&d, None).unwrap();
        let n = file_name(s.last().unwrap().0);
        let k = kinds(&r);
        assert!(
            !k.is_empty() && k.iter().all(|(_, seg)| *seg == Some(n.as_str())),
            "{k:?}"
        );
        assert!(k.contains(&("truncated", Some(n.as_str()))), "{k:?}");

        // A writer killed (no final seal), and one killed as it opened a segment.
        let d = dir.path().join("killed");
        write_series(&d, 1_000, 10_000, u64::MAX, false);
        let r = verify_dir(&d, None).unwrap();
        assert!(
            kinds(&r).iter().any(|k| k.0 == "truncated"),
            "{:?}",
            kinds(&r)
        );
        let next = list(&d).unwrap().last().unwrap().0 + 1;
        std::fs::write(d.join(file_name(next)), "").unwrap();
        let r = verify_dir(&d, None).unwrap();
        let n = file_name(next);
        assert!(
            kinds(&r).contains(&("truncated", Some(n.as_str()))),
            "{:?}",
            kinds(&r)
        );
    }
}
