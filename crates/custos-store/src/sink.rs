//! A live destination for a JSON Lines stream: the store, a compressed archive,
//! or both, written by a thread of its own.
//!
//! `custos collect --db/--archive` writes its events here. The collector's ring
//! consumer must never wait on the disk — a consumer that falls behind makes
//! the kernel drop events — so writes only queue the bytes (in memory, without
//! bound) and the writer thread catches up at its own pace.

use crate::archive::Recorder;
use crate::ingest::{IngestOptions, IngestSummary, Ingestor};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the writer thread did.
#[derive(Debug, Default)]
pub struct SinkSummary {
    /// Totals of the store ingest, when there was a store.
    pub ingest: Option<IngestSummary>,
    /// Lines written to the archive, when there was one.
    pub archived_lines: Option<u64>,
}

/// The writer thread; [`LiveSink::finish`] waits for it to drain.
pub struct LiveSink {
    tx: Option<Sender<Vec<u8>>>,
    worker: Option<JoinHandle<Result<SinkSummary>>>,
}

/// The `Write` end handed to the producer. Every write is queued whole.
pub struct SinkWriter {
    tx: Sender<Vec<u8>>,
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tx
            .send(buf.to_vec())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the store writer stopped (see its error)"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum Target {
    Store(Box<Ingestor>),
    Archive(Recorder),
}

impl LiveSink {
    /// Opens the store (`db`) and/or archive and starts the writer thread.
    pub fn start(db: Option<&Path>, archive: Option<&Path>, source: &str) -> Result<(LiveSink, SinkWriter)> {
        let recorder = archive.map(Recorder::create).transpose()?;
        let target = match db {
            Some(db) => Target::Store(Box::new(Ingestor::open(db, IngestOptions { source: source.to_string(), archive: recorder, ..Default::default() })?)),
            None => Target::Archive(recorder.context("a live sink needs a store or an archive")?),
        };
        let (tx, rx) = channel();
        let worker = std::thread::Builder::new().name("custos-store-writer".into()).spawn(move || drain(target, rx))?;
        Ok((LiveSink { tx: Some(tx.clone()), worker: Some(worker) }, SinkWriter { tx }))
    }

    /// Waits until everything queued is written (every [`SinkWriter`] must be
    /// dropped first), commits, and returns the totals.
    pub fn finish(mut self) -> Result<SinkSummary> {
        drop(self.tx.take());
        self.worker.take().expect("finished once").join().map_err(|_| anyhow::anyhow!("the store writer panicked"))?
    }
}

fn drain(mut target: Target, rx: Receiver<Vec<u8>>) -> Result<SinkSummary> {
    // Chunks do not respect line boundaries: keep the unfinished tail.
    let mut carry: Vec<u8> = Vec::new();
    let push = |target: &mut Target, line: &[u8]| -> Result<()> {
        match target {
            Target::Store(ing) => ing.push_bytes(line).map(|_| ()),
            Target::Archive(rec) => rec.write_line(&String::from_utf8_lossy(line)),
        }
    };
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(chunk) => {
                carry.extend_from_slice(&chunk);
                let mut start = 0;
                while let Some(nl) = carry[start..].iter().position(|&b| b == b'\n') {
                    push(&mut target, &carry[start..start + nl])?;
                    start += nl + 1;
                }
                carry.drain(..start);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // A quiet stream still gets its events committed, about once a second.
        match &mut target {
            Target::Store(ing) => {
                ing.commit_if_due()?;
            }
            Target::Archive(rec) => rec.flush()?,
        }
    }
    if !carry.is_empty() {
        push(&mut target, &carry)?;
    }
    Ok(match target {
        Target::Store(ing) => SinkSummary { ingest: Some(ing.finish()?.0), archived_lines: None },
        Target::Archive(rec) => SinkSummary { ingest: None, archived_lines: Some(rec.finish()?) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENT: &str = r#"{"type":"event","id":1,"cpu":0,"seq":1,"time_ns":1000,"pid":10,"tid":10,"ppid":1,"uid":0,"gid":0,"comm":"sh","syscall":"openat","category":"file","ret":3,"fd":3,"path":"/tmp/a","args":{"flags":577}}"#;

    #[test]
    fn lines_split_across_writes_reach_the_store_and_archive_whole() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let zst = dir.path().join("s.jsonl.zst");
        let (sink, mut w) = LiveSink::start(Some(&db), Some(&zst), "test").unwrap();
        let second = EVENT.replace(r#""id":1"#, r#""id":2"#).replace(r#""seq":1"#, r#""seq":2"#);
        let stream = format!("{EVENT}\n{second}\n{{\"type\":\"bogus\"");
        for piece in stream.as_bytes().chunks(7) {
            w.write_all(piece).unwrap();
        }
        drop(w);
        let s = sink.finish().unwrap();
        let ing = s.ingest.unwrap();
        assert_eq!(ing.lines, 3);
        assert_eq!(ing.events_new, 2);
        let archived = std::io::read_to_string(crate::archive::open_input(&zst).unwrap()).unwrap();
        assert_eq!(archived, format!("{EVENT}\n{second}\n{{\"type\":\"bogus\"\n"));
    }
}
