//! The cheapest archive: the JSON Lines stream itself, zstd- or gzip-compressed.
//! `custos collect` can hold a [`Recorder`] and call [`Recorder::write_line`]
//! for every line it emits; `custos ingest --archive` does the same for its input.

use anyhow::{bail, Context, Result};
use custos_output::{Existing, Output};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

enum Sink {
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
}

/// The zstd level of `.zst` archives: zstd's default, fast. (On the store
/// benchmark's synthetic stream it gives 25.4 bytes/event against gzip -6's
/// 23.7: bench/store/results.json.)
pub const ZSTD_LEVEL: i32 = 3;

/// A compressed raw-log recorder. The format follows the file name: `.zst` or `.gz`.
pub struct Recorder {
    sink: Sink,
    path: PathBuf,
    lines: u64,
}

/// The compression an archive's name picks; an error for any other name.
/// Checked before the file is created (the CLIs call it from their checks).
pub fn check_name(path: &Path) -> Result<()> {
    let name = path.to_string_lossy();
    if name.ends_with(".zst") || name.ends_with(".zstd") || name.ends_with(".gz") {
        return Ok(());
    }
    bail!(
        "archive {}: name must end in .zst or .gz (that picks the compression)",
        path.display()
    )
}

impl Recorder {
    /// Creates the archive at `path`; an existing file there is as `existing`
    /// says (the CLIs have checked the path with custos_output::check).
    pub fn create(path: &Path, existing: Existing) -> Result<Self> {
        // The name first: a wrong one must not empty the file it names.
        check_name(path)?;
        let name = path.to_string_lossy();
        let file = custos_output::create(&Output::new("--archive", path, existing))?;
        let out = BufWriter::with_capacity(1 << 20, file);
        let sink = if name.ends_with(".gz") {
            Sink::Gzip(flate2::write::GzEncoder::new(
                out,
                flate2::Compression::default(),
            ))
        } else {
            Sink::Zstd(zstd::stream::write::Encoder::new(out, ZSTD_LEVEL).context("starting zstd")?)
        };
        Ok(Self {
            sink,
            path: path.to_path_buf(),
            lines: 0,
        })
    }

    pub fn write_line(&mut self, line: &str) -> Result<()> {
        let w: &mut dyn Write = match &mut self.sink {
            Sink::Zstd(e) => e,
            Sink::Gzip(e) => e,
        };
        w.write_all(line.as_bytes())
            .and_then(|_| w.write_all(b"\n"))
            .with_context(|| format!("writing archive {}", self.path.display()))?;
        self.lines += 1;
        Ok(())
    }

    /// Pushes buffered data to the file so a crash loses at most what came after.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.sink {
            Sink::Zstd(e) => e.flush(),
            Sink::Gzip(e) => e.flush(),
        }
        .with_context(|| format!("flushing archive {}", self.path.display()))
    }

    /// Ends the compressed stream; returns the lines written.
    pub fn finish(self) -> Result<u64> {
        let path = self.path.clone();
        let mut out = match self.sink {
            Sink::Zstd(e) => e.finish(),
            Sink::Gzip(e) => e.finish(),
        }
        .with_context(|| format!("finishing archive {}", path.display()))?;
        out.flush()
            .with_context(|| format!("finishing archive {}", path.display()))?;
        Ok(self.lines)
    }
}

/// An input stream, buffered (its buffer can be looked at without reading).
pub type Input = BufReader<Box<dyn Read + Send>>;

/// Opens an input stream: `-` is stdin; `.zst`/`.gz` files are decompressed;
/// a directory is a rotated series (`custos collect -o DIR --rotate-mb N`),
/// read as its segments laid end to end in the order of their numbers.
pub fn open_input(path: &Path) -> Result<Input> {
    let raw: Box<dyn Read + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else if path.is_dir() {
        Box::new(open_series(path)?)
    } else {
        let file = File::open(path).with_context(|| format!("opening input {}", path.display()))?;
        let name = path.to_string_lossy();
        if name.ends_with(".zst") || name.ends_with(".zstd") {
            Box::new(
                zstd::stream::read::Decoder::new(file)
                    .with_context(|| format!("reading zstd {}", path.display()))?,
            )
        } else if name.ends_with(".gz") {
            Box::new(flate2::read::MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        }
    };
    Ok(BufReader::with_capacity(1 << 20, raw))
}

/// A series' segments, one after the other; a gap in their numbers is
/// warned of (the ingest goes on: `custos verify DIR` is the check).
fn open_series(dir: &Path) -> Result<impl Read + Send> {
    let segments = custos_output::segments::list(dir)?;
    if segments.is_empty() {
        bail!(
            "{}: a directory without segments (segment-NNNNNN.jsonl)",
            dir.display()
        );
    }
    let mut numbers = segments.iter().map(|(n, _)| *n);
    let mut expect = numbers.next().expect("one at least");
    for n in numbers {
        expect += 1;
        if n != expect {
            eprintln!(
                "custos: warning: {}: segment {expect} is missing before {}: `custos verify {}` says what else",
                dir.display(),
                custos_output::segments::file_name(n),
                dir.display()
            );
            expect = n;
        }
    }
    // The first now: a directory that cannot be read fails before the ingest starts.
    let mut paths: std::collections::VecDeque<PathBuf> =
        segments.into_iter().map(|(_, p)| p).collect();
    let first = paths.pop_front().expect("one at least");
    let file = File::open(&first).with_context(|| format!("opening input {}", first.display()))?;
    Ok(Series {
        current: file,
        rest: paths,
    })
}

/// Segment files read one after the other, each opened when the one before
/// is done (a long series has more segments than a process may hold open;
/// one that vanished meanwhile, rotated away by a live collector, is an
/// error, not a silent gap).
struct Series {
    current: File,
    rest: std::collections::VecDeque<PathBuf>,
}

impl Read for Series {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.current.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let Some(next) = self.rest.pop_front() else {
                return Ok(0);
            };
            self.current = File::open(&next).map_err(|e| {
                std::io::Error::new(e.kind(), format!("opening {}: {e}", next.display()))
            })?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn zstd_and_gzip_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a.jsonl.zst", "a.jsonl.gz"] {
            let p = dir.path().join(name);
            let mut r = Recorder::create(&p, Existing::Refuse).unwrap();
            for i in 0..1000 {
                r.write_line(&format!("{{\"type\":\"event\",\"id\":{i}}}"))
                    .unwrap();
            }
            assert_eq!(r.finish().unwrap(), 1000);
            let mut s = String::new();
            open_input(&p).unwrap().read_to_string(&mut s).unwrap();
            assert_eq!(s.lines().count(), 1000);
            assert!(s.lines().nth(999).unwrap().contains("999"));
            assert!(std::fs::metadata(&p).unwrap().len() < s.len() as u64 / 4);
        }
        // A wrong name is refused before the file is touched.
        let raw = dir.path().join("a.jsonl");
        std::fs::write(&raw, "kept\n").unwrap();
        assert!(Recorder::create(&raw, Existing::Replace).is_err());
        assert_eq!(std::fs::read_to_string(&raw).unwrap(), "kept\n");
        // An existing archive only when asked to replace it.
        let zst = dir.path().join("a.jsonl.zst");
        let before = std::fs::read(&zst).unwrap();
        assert!(Recorder::create(&zst, Existing::Refuse).is_err());
        assert_eq!(std::fs::read(&zst).unwrap(), before);
    }
}
