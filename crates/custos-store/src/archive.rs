//! The cheapest archive: the JSON Lines stream itself, zstd- or gzip-compressed.
//! `custos collect` can hold a [`Recorder`] and call [`Recorder::write_line`]
//! for every line it emits; `custos ingest --archive` does the same for its input.
//! Beside a rotated recording (`-o DIR --rotate-mb N`) the archive is a
//! directory of zstd segments cut where the stream's segment headers say
//! ([`Recorder::create_series`]): the same series, compressed.

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
    /// A rotated archive's state (boxed: most archives are one file).
    series: Option<Box<ArchiveSeries>>,
}

/// A rotated archive: a directory of `segment-NNNNNN.jsonl.zst` files,
/// each begun at the stream's header line of that segment (written by the
/// collector's `-o DIR --rotate-mb` rotation), so that each holds exactly
/// what the plain segment of that number holds. The segments a header
/// rotates away (`--rotate-keep`) are deleted once it is sealed, as the
/// plain ones are.
struct ArchiveSeries {
    dir: PathBuf,
    /// The segment being written, and whether a line is in it yet.
    number: u64,
    written: bool,
    /// The oldest segment on disk, and the oldest the last header keeps:
    /// those between go at the next seal.
    oldest: u64,
    kept_from: u64,
    program: &'static str,
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

fn zstd_sink(file: File) -> Result<Sink> {
    let out = BufWriter::with_capacity(1 << 20, file);
    Ok(Sink::Zstd(
        zstd::stream::write::Encoder::new(out, ZSTD_LEVEL).context("starting zstd")?,
    ))
}

impl Sink {
    /// Ends the compressed stream and writes it out.
    fn finish(self, path: &Path) -> Result<()> {
        let mut out = match self {
            Sink::Zstd(e) => e.finish(),
            Sink::Gzip(e) => e.finish(),
        }
        .with_context(|| format!("finishing archive {}", path.display()))?;
        out.flush()
            .with_context(|| format!("finishing archive {}", path.display()))
    }
}

impl Recorder {
    /// Creates the archive at `path`; an existing file there is as `existing`
    /// says (the CLIs have checked the path with custos_output::check).
    pub fn create(path: &Path, existing: Existing) -> Result<Self> {
        // The name first: a wrong one must not empty the file it names.
        check_name(path)?;
        let name = path.to_string_lossy();
        let file = custos_output::create(&Output::new("--archive", path, existing))?;
        let sink = if name.ends_with(".gz") {
            Sink::Gzip(flate2::write::GzEncoder::new(
                BufWriter::with_capacity(1 << 20, file),
                flate2::Compression::default(),
            ))
        } else {
            zstd_sink(file)?
        };
        Ok(Self {
            sink,
            path: path.to_path_buf(),
            lines: 0,
            series: None,
        })
    }

    /// Creates a rotated archive in `dir` (begun as
    /// custos_output::segments::begin says) and begins segment 1.
    pub fn create_series(dir: &Path, existing: Existing, program: &'static str) -> Result<Self> {
        custos_output::segments::begin("--archive", dir, existing, program)?;
        let path = dir.join(custos_output::segments::zstd_file_name(1));
        let file = custos_output::create(&Output::new("--archive", &path, Existing::Refuse))?;
        Ok(Self {
            sink: zstd_sink(file)?,
            path,
            lines: 0,
            series: Some(Box::new(ArchiveSeries {
                dir: dir.to_path_buf(),
                number: 1,
                written: false,
                oldest: 1,
                kept_from: 1,
                program,
            })),
        })
    }

    pub fn write_line(&mut self, line: &str) -> Result<()> {
        if self.series.is_some() {
            self.follow_series(line.as_bytes())?;
        }
        let w: &mut dyn Write = match &mut self.sink {
            Sink::Zstd(e) => e,
            Sink::Gzip(e) => e,
        };
        w.write_all(line.as_bytes())
            .and_then(|_| w.write_all(b"\n"))
            .with_context(|| format!("writing archive {}", self.path.display()))?;
        self.lines += 1;
        if let Some(s) = &mut self.series {
            s.written = true;
        }
        Ok(())
    }

    /// A rotated archive's cuts, before `line` is written: a segment header
    /// begins that segment's file (closing the one before); a seal after a
    /// header that rotated segments away deletes them.
    fn follow_series(&mut self, line: &[u8]) -> Result<()> {
        let s = self.series.as_mut().expect("a series");
        if let Some(h) = custos_seal::series::SegmentHeader::parse(line) {
            if h.segment != s.number || s.written {
                if h.segment <= s.number {
                    bail!(
                        "--archive {}: the stream's segment {} header came after segment {}",
                        s.dir.display(),
                        h.segment,
                        s.number
                    );
                }
                let path = s
                    .dir
                    .join(custos_output::segments::zstd_file_name(h.segment));
                // create_new: a file that appeared under the next name is never overwritten.
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .with_context(|| format!("--archive: creating {}", path.display()))?;
                let done = std::mem::replace(&mut self.sink, zstd_sink(file)?);
                done.finish(&self.path)?;
                self.path = path;
                (s.number, s.written) = (h.segment, false);
            }
            s.kept_from = h.kept_from;
        } else if custos_seal::is_seal(line) {
            use custos_output::segments::{remove_before, zstd_file_name};
            let gone = remove_before(&s.dir, &mut s.oldest, s.kept_from, zstd_file_name)
                .with_context(|| {
                    format!(
                        "--archive: removing {}",
                        s.dir.join(zstd_file_name(s.oldest)).display()
                    )
                })?;
            if let Some(gone) = gone {
                eprintln!(
                    "{}: rotated away archived {gone} (--rotate-keep): the archive in {} now starts at {}",
                    s.program,
                    s.dir.display(),
                    zstd_file_name(s.oldest)
                );
            }
        }
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
        self.sink.finish(&self.path)?;
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
        custos_output::segments::open(path).context("input")?
    };
    Ok(BufReader::with_capacity(1 << 20, raw))
}

/// A series' segments, one after the other; a gap in their numbers is
/// warned of (the ingest goes on: `custos verify DIR` is the check).
fn open_series(dir: &Path) -> Result<impl Read + Send> {
    let segments = custos_output::segments::list(dir)?;
    if segments.is_empty() {
        bail!(
            "{}: a directory without segments (segment-NNNNNN.jsonl, or .jsonl.zst/.jsonl.gz)",
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
    let current = custos_output::segments::open(&first).context("input")?;
    Ok(Series {
        current,
        rest: paths,
    })
}

/// Segment files read one after the other (each decompressed as its name
/// says), each opened when the one before is done (a long series has more
/// segments than a process may hold open; one that vanished meanwhile,
/// rotated away by a live collector, is an error, not a silent gap).
struct Series {
    current: Box<dyn Read + Send>,
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
            self.current = custos_output::segments::open(&next)
                .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
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
