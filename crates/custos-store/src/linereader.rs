//! The input side of `custos ingest`: a thread cuts the stream into lines,
//! never holding more than `--max-line-bytes` of one, and hands them over a
//! bounded queue. On a signal it is told to stop: it hands over every whole
//! line it has already read from the input and stops before it would read
//! more, so that what the process took from a pipe is what it stores.

use crate::archive::Input;
use anyhow::anyhow;
use std::io::BufRead;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Default of `--max-line-bytes`: far above any line the collector writes
/// (a path is at most 4 KiB, an argv at most the kernel's 2 MiB), far below
/// what would strain memory or SQLite's 1 GB limit on a value.
pub const DEFAULT_MAX_LINE_BYTES: u64 = 16 << 20;

/// Of a line over the limit, the first bytes kept as its reject.
pub const OVERLONG_HEAD_BYTES: usize = 4096;

/// Lines read but not yet taken: the queue is bounded, so a slow store
/// stops the reading (and the writer of a pipe), never grows memory.
pub const QUEUE_LINES: usize = 1 << 16;

pub enum Msg {
    /// A whole line without its newline; `len`: the bytes it took in the
    /// stream (its newline included), for the offset a re-run resumes from.
    Line {
        text: Vec<u8>,
        len: u64,
    },
    /// A line longer than the limit: its first bytes, its length without
    /// the newline, and the bytes it took in the stream.
    Overlong {
        head: Vec<u8>,
        line_bytes: u64,
        len: u64,
    },
    Failed(anyhow::Error),
}

/// What the reader and the taker share, under one lock so that "the reader
/// is waiting for input" and "stop" are seen in one order by both.
#[derive(Default)]
struct Shared {
    stop: bool,
    /// The reader is in (or about to enter) a read of the input, with every
    /// whole line before it queued.
    waiting: bool,
    /// The taker has stopped taking: whatever a pending read returns is not
    /// queued (the process is leaving).
    abandoned: bool,
    /// Bytes of an unfinished line read so far.
    partial: u64,
}

/// The taking end: the queue and the means to stop the reader.
pub struct LineReader {
    pub rx: mpsc::Receiver<Msg>,
    shared: Arc<Mutex<Shared>>,
}

/// How stopping went: lines taken after the stop (they were already read),
/// and bytes of an unfinished line that were read and are not stored.
pub struct Stopped {
    pub drained: u64,
    pub partial_bytes: u64,
}

impl LineReader {
    pub fn spawn(input: Input, name: String, max_line_bytes: u64) -> Self {
        let (tx, rx) = mpsc::sync_channel(QUEUE_LINES);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let s = shared.clone();
        std::thread::spawn(move || read_lines(input, &name, max_line_bytes, &tx, &s));
        Self { rx, shared }
    }

    /// Stops the reader and gives `take` every line it has read: those
    /// queued, and those still in its buffer. Does not wait for input.
    pub fn stop(&self, mut take: impl FnMut(Msg) -> anyhow::Result<()>) -> anyhow::Result<Stopped> {
        self.shared.lock().unwrap().stop = true;
        let mut drained = 0u64;
        loop {
            while let Ok(m) = self.rx.try_recv() {
                drained += 1;
                take(m)?;
            }
            {
                let mut s = self.shared.lock().unwrap();
                if s.waiting {
                    // Blocked on the input with everything before queued:
                    // take the rest of the queue and leave.
                    s.abandoned = true;
                    let partial_bytes = s.partial;
                    drop(s);
                    while let Ok(m) = self.rx.try_recv() {
                        drained += 1;
                        take(m)?;
                    }
                    return Ok(Stopped {
                        drained,
                        partial_bytes,
                    });
                }
            }
            // Still cutting lines out of its buffer: it stops by itself
            // before its next read.
            match self.rx.recv_timeout(std::time::Duration::from_millis(10)) {
                Ok(m) => {
                    drained += 1;
                    take(m)?;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Ok(Stopped {
                        drained,
                        partial_bytes: self.shared.lock().unwrap().partial,
                    })
                }
            }
        }
    }
}

fn read_lines(
    mut input: Input,
    name: &str,
    max_line_bytes: u64,
    tx: &mpsc::SyncSender<Msg>,
    shared: &Mutex<Shared>,
) {
    let mut line: Vec<u8> = Vec::with_capacity(4096);
    // Bytes of the current line so far, kept or not (newline excluded).
    let mut line_bytes: u64 = 0;
    let finish = |line: &mut Vec<u8>, line_bytes: u64, len: u64| -> Msg {
        if line_bytes > max_line_bytes {
            line.truncate(OVERLONG_HEAD_BYTES);
            line.shrink_to_fit();
            Msg::Overlong {
                head: std::mem::take(line),
                line_bytes,
                len,
            }
        } else {
            // An exact-size copy: the queue holds up to QUEUE_LINES of them.
            let text = line.clone();
            line.clear();
            Msg::Line { text, len }
        }
    };
    loop {
        // Only an empty buffer makes fill_buf read the input (and maybe wait).
        let reads = input.buffer().is_empty();
        if reads {
            let mut s = shared.lock().unwrap();
            s.partial = line_bytes;
            if s.stop {
                return;
            }
            s.waiting = true;
        }
        let got = input.fill_buf();
        if reads {
            let mut s = shared.lock().unwrap();
            if s.abandoned {
                return;
            }
            s.waiting = false;
        }
        let chunk = match got {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(Msg::Failed(anyhow!(e).context(format!("reading {name}"))));
                return;
            }
        };
        if chunk.is_empty() {
            // The end: a last line without a newline is still a line.
            if line_bytes > 0 {
                let _ = tx.send(finish(&mut line, line_bytes, line_bytes));
                shared.lock().unwrap().partial = 0;
            }
            return;
        }
        let (take, whole) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let content = &chunk[..take - whole as usize];
        // Held: up to the limit while the line may still fit, then only its head.
        let cap = match line_bytes + content.len() as u64 > max_line_bytes {
            true => OVERLONG_HEAD_BYTES,
            false => usize::MAX,
        };
        let room = cap.saturating_sub(line.len()).min(content.len());
        line.extend_from_slice(&content[..room]);
        if line.len() > cap {
            line.truncate(cap);
        }
        line_bytes += content.len() as u64;
        input.consume(take);
        if whole {
            let msg = finish(&mut line, line_bytes, line_bytes + 1);
            line_bytes = 0;
            if tx.send(msg).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], max: u64) -> Vec<(Vec<u8>, u64, u64, bool)> {
        let cursor: Box<dyn std::io::Read + Send> = Box::new(std::io::Cursor::new(input.to_vec()));
        let r = LineReader::spawn(std::io::BufReader::new(cursor), "t".into(), max);
        r.rx.iter()
            .map(|m| match m {
                Msg::Line { text, len } => (text.clone(), text.len() as u64, len, false),
                Msg::Overlong {
                    head,
                    line_bytes,
                    len,
                } => (head, line_bytes, len, true),
                Msg::Failed(e) => panic!("{e:#}"),
            })
            .collect()
    }

    #[test]
    fn lines_over_the_limit_keep_their_head_and_length_and_the_rest_goes_on() {
        let long = vec![b'x'; 20_000];
        let mut input = b"a\n".to_vec();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nbb\nlast");
        let got = all(&input, 10_000);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], (b"a".to_vec(), 1, 2, false));
        assert!(got[1].3, "over the limit");
        assert_eq!(got[1].0.len(), OVERLONG_HEAD_BYTES);
        assert_eq!((got[1].1, got[1].2), (20_000, 20_001));
        assert_eq!(got[2], (b"bb".to_vec(), 2, 3, false));
        assert_eq!(got[3], (b"last".to_vec(), 4, 4, false));
        // The offsets add up to the stream.
        assert_eq!(got.iter().map(|g| g.2).sum::<u64>(), input.len() as u64);
        // At the limit exactly: a line.
        assert!(!all(&long, 20_000)[0].3);
        assert!(all(&long, 19_999)[0].3);
    }

    #[test]
    fn a_newline_free_input_is_one_reject_not_held_whole() {
        // 64 MiB without a newline, through a 1 MiB buffer: the reader never
        // holds more than the head once past the limit.
        struct Endless(u64);
        impl std::io::Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = (buf.len() as u64).min(self.0) as usize;
                buf[..n].fill(b'{');
                self.0 -= n as u64;
                Ok(n)
            }
        }
        let endless: Box<dyn std::io::Read + Send> = Box::new(Endless(64 << 20));
        let input = std::io::BufReader::with_capacity(1 << 20, endless);
        let r = LineReader::spawn(input, "t".into(), 1 << 20);
        let got: Vec<Msg> = r.rx.iter().collect();
        assert_eq!(got.len(), 1);
        match &got[0] {
            Msg::Overlong {
                head,
                line_bytes,
                len,
            } => {
                assert_eq!(head.len(), OVERLONG_HEAD_BYTES);
                assert_eq!((*line_bytes, *len), (64 << 20, 64 << 20));
                assert!(head.capacity() < 4 << 20, "{}", head.capacity());
            }
            _ => panic!("expected a reject"),
        }
    }
}
