//! A live destination for a JSON Lines stream: the store, a compressed archive,
//! or both, written by a thread of its own.
//!
//! `custos collect --db/--archive` writes its events here. Writes queue the
//! bytes for the writer thread, up to a bound (`--sink-buffer-mb`); past it
//! a write waits. The collector's output thread then waits, its own bounded
//! buffer fills, its ring consumer waits, and the kernel's rings refuse
//! records: loss, but counted exactly per CPU and reported in-band, never
//! memory without bound. Before that, the backlog counts in the published
//! consumer lag (`lines_done`), so the scheduler throttles producers to the
//! rate of the store.
//!
//! Other destinations (the fleet's Kafka sink, custos-fleet) use the same
//! bounded queue and writer thread through [`LineTarget`].

use crate::archive::Recorder;
use crate::ingest::{IngestOptions, IngestSummary, Ingestor};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
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

/// Default bound of the bytes queued for the writer thread.
pub const DEFAULT_SINK_BUFFER: usize = 64 << 20;

/// Where a live sink's writer thread puts the stream: whole lines, in order.
pub trait LineTarget: Send + 'static {
    /// What [`LiveSink::finish`] returns.
    type Summary: Send + 'static;
    /// One line, without its newline.
    fn line(&mut self, line: &[u8]) -> Result<()>;
    /// Called about every 200 ms, also when no line came: for commits and
    /// flushes a quiet stream still needs.
    fn tick(&mut self) -> Result<()>;
    /// The stream ended: write out what is held, and say what was done.
    fn finish(self) -> Result<Self::Summary>;
}

/// The writer thread; [`LiveSink::finish`] waits for it to drain.
pub struct LiveSink<S = SinkSummary> {
    tx: Option<Sender<Vec<u8>>>,
    worker: Option<JoinHandle<Result<S>>>,
    /// Lines the writer thread has stored (or archived).
    pub lines_done: Arc<AtomicU64>,
}

/// Bytes queued and not yet taken by the writer thread, with a bound.
struct Queued {
    bytes: Mutex<usize>,
    taken: Condvar,
    bound: usize,
    /// Set when the writer thread ends: nobody will take anything any more.
    closed: std::sync::atomic::AtomicBool,
}

/// The `Write` end handed to the producer. Every write is queued whole,
/// waiting while the queue holds its bound.
pub struct SinkWriter {
    tx: Sender<Vec<u8>>,
    queued: Arc<Queued>,
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let gone = || {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the sink's writer stopped (see its error)",
            )
        };
        let q = &self.queued;
        let mut bytes = q.bytes.lock().unwrap();
        // An empty queue takes any write, so one larger than the bound passes.
        while *bytes > 0 && *bytes + buf.len() > q.bound {
            if q.closed.load(Ordering::Acquire) {
                return Err(gone());
            }
            bytes = q
                .taken
                .wait_timeout(bytes, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        *bytes += buf.len();
        drop(bytes);
        self.tx.send(buf.to_vec()).map_err(|_| gone())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The store (with its archive, if any) or the archive alone.
enum Target {
    Store(Box<Ingestor>),
    Archive(Recorder),
}

impl LineTarget for Target {
    type Summary = SinkSummary;

    fn line(&mut self, line: &[u8]) -> Result<()> {
        match self {
            Target::Store(ing) => ing.push_bytes(line).map(|_| ()),
            Target::Archive(rec) => rec.write_line(&String::from_utf8_lossy(line)),
        }
    }

    fn tick(&mut self) -> Result<()> {
        // A quiet stream still gets its events committed, about once a second.
        match self {
            Target::Store(ing) => ing.commit_if_due().map(|_| ()),
            Target::Archive(rec) => rec.flush(),
        }
    }

    fn finish(self) -> Result<SinkSummary> {
        Ok(match self {
            Target::Store(ing) => SinkSummary {
                ingest: Some(ing.finish()?.0),
                archived_lines: None,
            },
            Target::Archive(rec) => SinkSummary {
                ingest: None,
                archived_lines: Some(rec.finish()?),
            },
        })
    }
}

impl LiveSink {
    /// Opens the store (`db`), takes the archive (a file or a rotated
    /// series, made by the caller) and starts the writer thread, which
    /// holds at most `buffer_bytes` queued.
    /// `seal_key`: seal the store's batches (tamper.rs).
    pub fn start(
        db: Option<&Path>,
        recorder: Option<Recorder>,
        source: &str,
        buffer_bytes: usize,
        seal_key: Option<custos_seal::SealKey>,
        page_cache_mib: u32,
    ) -> Result<(LiveSink, SinkWriter)> {
        // The collector writes its stream in causal order (docs/event-schema.md),
        // so the store applies it as it comes: no reorder window to hold.
        let opts = IngestOptions {
            source: source.to_string(),
            archive: recorder,
            reorder_window_ns: 0,
            seal_key,
            page_cache_mib,
            ..Default::default()
        };
        let target = match db {
            Some(db) => Target::Store(Box::new(Ingestor::open(db, opts)?)),
            None => Target::Archive(
                opts.archive
                    .context("a live sink needs a store or an archive")?,
            ),
        };
        LiveSink::spawn("custos-store-writer", target, buffer_bytes)
    }
}

impl<S: Send + 'static> LiveSink<S> {
    /// Starts a writer thread (`name`) feeding `target` whole lines, with at
    /// most `buffer_bytes` queued for it.
    pub fn spawn<T: LineTarget<Summary = S>>(
        name: &str,
        target: T,
        buffer_bytes: usize,
    ) -> Result<(LiveSink<S>, SinkWriter)> {
        let (tx, rx) = channel();
        let queued = Arc::new(Queued {
            bytes: Mutex::new(0),
            taken: Condvar::new(),
            bound: buffer_bytes.max(1),
            closed: false.into(),
        });
        let lines_done = Arc::new(AtomicU64::new(0));
        let (q, done) = (Arc::clone(&queued), Arc::clone(&lines_done));
        let worker = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let result = drain(target, rx, &q, &done);
                q.closed.store(true, Ordering::Release);
                q.taken.notify_all();
                result
            })?;
        Ok((
            LiveSink {
                tx: Some(tx.clone()),
                worker: Some(worker),
                lines_done,
            },
            SinkWriter { tx, queued },
        ))
    }

    /// Waits until everything queued is written (every [`SinkWriter`] must be
    /// dropped first), commits, and returns the totals.
    pub fn finish(mut self) -> Result<S> {
        drop(self.tx.take());
        self.worker
            .take()
            .expect("finished once")
            .join()
            .map_err(|_| anyhow::anyhow!("the sink's writer panicked"))?
    }
}

fn drain<T: LineTarget>(
    mut target: T,
    rx: Receiver<Vec<u8>>,
    queued: &Queued,
    done: &AtomicU64,
) -> Result<T::Summary> {
    // Chunks do not respect line boundaries: keep the unfinished tail.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(chunk) => {
                *queued.bytes.lock().unwrap() -= chunk.len();
                queued.taken.notify_all();
                carry.extend_from_slice(&chunk);
                let mut start = 0;
                while let Some(nl) = carry[start..].iter().position(|&b| b == b'\n') {
                    target.line(&carry[start..start + nl])?;
                    done.fetch_add(1, Ordering::Relaxed);
                    start += nl + 1;
                }
                carry.drain(..start);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        target.tick()?;
    }
    if !carry.is_empty() {
        target.line(&carry)?;
    }
    target.finish()
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
        let (sink, mut w) = LiveSink::start(
            Some(&db),
            Some(Recorder::create(&zst, custos_output::Existing::Refuse).unwrap()),
            "test",
            16,
            None,
            crate::ingest::PAGE_CACHE_MIB,
        )
        .unwrap();
        let second = EVENT
            .replace(r#""id":1"#, r#""id":2"#)
            .replace(r#""seq":1"#, r#""seq":2"#);
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
        assert_eq!(
            archived,
            format!("{EVENT}\n{second}\n{{\"type\":\"bogus\"\n")
        );
    }
}
