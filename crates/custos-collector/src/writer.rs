//! The event stream is written by a thread of its own, so that draining the
//! rings never waits on the output.
//!
//! A file on a network share, a pipe into a slow reader or the store's
//! ingestion can block a `write` for tens of milliseconds. Were the draining
//! thread to block there, a super producer would fill the rings meanwhile and
//! events would be dropped (counted, but lost). Here the draining thread only
//! hands filled chunks to a bounded queue; the queue's bound (`--output-buffer-mb`)
//! caps the memory, and only when it is full does draining wait.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::seal::Sealer;

/// Lines the last stage of the output has finished with (written to the
/// file, or stored): the consumer's lines minus these are the output's
/// backlog, which counts in the published consumer lag.
pub type LinesDone = Arc<AtomicU64>;

/// Bytes handed to the writer thread at a time.
const CHUNK: usize = 64 << 10;

enum Msg {
    Data(Vec<u8>),
    Flush,
}

pub struct OffloadWriter {
    chunk: Vec<u8>,
    tx: Option<SyncSender<Msg>>,
    /// Chunks the writer thread has written, back for reuse: a fresh 64 KiB
    /// buffer per hand-off cost the consumer page faults on every chunk.
    spent: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<()>>,
    /// The writer thread's first error, reported at the next hand-off.
    error: Arc<Mutex<Option<io::Error>>>,
}

impl OffloadWriter {
    /// Writes to `out` from a new thread, holding at most `buffer_bytes`
    /// (rounded up to whole chunks) not yet written. With `done`, counts
    /// there the lines written (when `out` is the last stage).
    /// `sealer`: seals the stream as it is written (tamper evidence, seal.rs).
    pub fn spawn(
        out: Box<dyn Write + Send>,
        buffer_bytes: usize,
        done: Option<LinesDone>,
        sealer: Option<Sealer>,
    ) -> io::Result<Self> {
        let chunks = buffer_bytes.div_ceil(CHUNK).max(1);
        let (tx, rx) = sync_channel(chunks);
        // Room for every chunk that can be in flight, so returning one never blocks.
        let (spent_tx, spent) = sync_channel(chunks + 2);
        let error = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&error);
        let thread = std::thread::Builder::new()
            .name("custos-writer".into())
            .spawn(move || write_all(out, rx, spent_tx, slot, done, sealer))?;
        Ok(OffloadWriter {
            chunk: Vec::with_capacity(CHUNK),
            tx: Some(tx),
            spent,
            thread: Some(thread),
            error,
        })
    }

    fn check(&self) -> io::Result<()> {
        match self.error.lock().unwrap().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn send(&mut self, msg: Msg) -> io::Result<()> {
        let gone = || io::Error::new(io::ErrorKind::BrokenPipe, "the output writer stopped");
        self.tx
            .as_ref()
            .ok_or_else(gone)?
            .send(msg)
            .map_err(|_| gone())
    }

    /// Sends the chunk (if any) to the thread; reports its error, if it had one.
    fn hand_off(&mut self) -> io::Result<()> {
        self.check()?;
        if !self.chunk.is_empty() {
            // A written chunk back from the thread, else a new one.
            let next = self.spent.try_recv().map_or_else(
                |_| Vec::with_capacity(CHUNK),
                |mut chunk| {
                    chunk.clear();
                    chunk
                },
            );
            let full = std::mem::replace(&mut self.chunk, next);
            self.send(Msg::Data(full))?;
        }
        Ok(())
    }

    /// Writes out everything handed over so far and waits for the thread.
    pub fn finish(mut self) -> io::Result<()> {
        self.close()
    }

    fn close(&mut self) -> io::Result<()> {
        let handed = self.hand_off().and_then(|_| self.send(Msg::Flush));
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.check()?;
        handed
    }
}

fn write_all(
    mut out: Box<dyn Write + Send>,
    rx: Receiver<Msg>,
    spent: SyncSender<Vec<u8>>,
    error: Arc<Mutex<Option<io::Error>>>,
    done: Option<LinesDone>,
    mut sealer: Option<Sealer>,
) {
    for msg in rx {
        let r = match msg {
            Msg::Data(bytes) => match &mut sealer {
                Some(s) => s.write(&bytes, &mut out),
                None => out.write_all(&bytes),
            }
            .map(|()| {
                if let Some(d) = &done {
                    // memchr's vectorised search: a byte-by-byte count was a tenth
                    // of the consumer's CPU at 400 k events/s.
                    d.fetch_add(
                        memchr::memchr_iter(b'\n', &bytes).count() as u64,
                        Ordering::Relaxed,
                    );
                }
                // A full return queue (or a consumer gone) only means a new chunk next time.
                let _ = spent.try_send(bytes);
            }),
            Msg::Flush => match &mut sealer {
                Some(s) => s.tick(&mut out),
                None => Ok(()),
            }
            .and_then(|()| out.flush()),
        };
        if let Err(e) = r {
            *error.lock().unwrap() = Some(e);
            return; // dropping rx makes the next send fail too
        }
    }
    // The consumer closed the stream: its last seal says it ended here.
    let last = match &mut sealer {
        Some(s) => s.finish(&mut out),
        None => Ok(()),
    };
    if let Err(e) = last.and_then(|()| out.flush()) {
        *error.lock().unwrap() = Some(e);
    }
}

impl Write for OffloadWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // No error check here: this runs once per event; hand_off checks.
        // Chunks are filled to CHUNK exactly: a line crossing the boundary is
        // split, never a reason to grow (and copy) the chunk.
        let mut rest = buf;
        while !rest.is_empty() {
            let take = rest.len().min(CHUNK - self.chunk.len());
            self.chunk.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.chunk.len() == CHUNK {
                self.hand_off()?;
            }
        }
        Ok(buf.len())
    }

    /// Hands over what is buffered and asks the thread to flush, without
    /// waiting for it (the draining thread must not wait on the output).
    fn flush(&mut self) -> io::Result<()> {
        self.hand_off()?;
        self.send(Msg::Flush)
    }
}

impl Drop for OffloadWriter {
    fn drop(&mut self) {
        if self.tx.is_some() {
            let _ = self.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that records what reached it, failing after `fail_after` bytes.
    struct Probe {
        seen: Arc<Mutex<Vec<u8>>>,
        fail_after: usize,
    }

    impl Write for Probe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut seen = self.seen.lock().unwrap();
            if seen.len() + buf.len() > self.fail_after {
                return Err(io::Error::other("disk full"));
            }
            seen.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn everything_written_arrives_in_order() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut w = OffloadWriter::spawn(
            Box::new(Probe {
                seen: Arc::clone(&seen),
                fail_after: usize::MAX,
            }),
            1 << 20,
            None,
            None,
        )
        .unwrap();
        let mut expected = Vec::new();
        for i in 0..50_000u32 {
            let line = format!("{{\"n\":{i}}}\n");
            w.write_all(line.as_bytes()).unwrap();
            expected.extend_from_slice(line.as_bytes());
            if i % 10_000 == 0 {
                w.flush().unwrap();
            }
        }
        w.finish().unwrap();
        assert_eq!(*seen.lock().unwrap(), expected);
    }

    #[test]
    fn an_output_error_is_reported_not_swallowed() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut w = OffloadWriter::spawn(
            Box::new(Probe {
                seen,
                fail_after: 3 * CHUNK,
            }),
            CHUNK,
            None,
            None,
        )
        .unwrap();
        let line = [b'x'; 1000];
        let mut failed = false;
        for _ in 0..1000 {
            if w.write_all(&line).and_then(|_| w.flush()).is_err() {
                failed = true;
                break;
            }
        }
        let finished = w.finish();
        assert!(
            failed || finished.is_err(),
            "a failing output must surface as an error"
        );
    }
}
