//! The files of a rotated recording (`custos collect -o DIR --rotate-mb N`,
//! and its compressed copy `--archive DIR`): how a segment is named, how a
//! directory's segments are found in order and opened, and the check of
//! DIR before the first one is made.
//!
//! What a segment holds (its header line, the seal chain running on from
//! the segment before) is defined in custos-seal; this module only knows
//! the files.

use anyhow::{bail, Context, Result};
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::Existing;

const PREFIX: &str = "segment-";
const SUFFIX: &str = ".jsonl";
/// A segment compressed (by `--archive DIR`, or by hand after it closed):
/// the suffix after `.jsonl` picks the decompression.
const COMPRESSED: [&str; 2] = [".zst", ".gz"];
/// Zero-padded to six digits so that `ls` lists a series in order (a
/// million segments of the least size, 1 MiB, is a terabyte); a longer
/// number is written whole and still ordered by value here.
const DIGITS: usize = 6;

/// The name of segment `n` (numbered from 1): `segment-000001.jsonl`.
pub fn file_name(n: u64) -> String {
    format!("{PREFIX}{n:0DIGITS$}{SUFFIX}")
}

/// The name of segment `n` compressed with zstd, as `--archive DIR` writes
/// it: `segment-000001.jsonl.zst`.
pub fn zstd_file_name(n: u64) -> String {
    format!("{}{}", file_name(n), COMPRESSED[0])
}

/// The number of a segment's file name, plain or compressed
/// (`segment-000001.jsonl`, `.jsonl.zst`, `.jsonl.gz`); `None` for any
/// other name (and for another spelling of a number, `segment-1.jsonl`:
/// one name per segment).
pub fn number_of(name: &OsStr) -> Option<u64> {
    let name = name.to_str()?;
    let plain = COMPRESSED
        .iter()
        .find_map(|c| name.strip_suffix(c))
        .unwrap_or(name);
    let digits = plain.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (n > 0 && file_name(n) == plain).then_some(n)
}

/// Removes the segments `*oldest` up to (not including) `until` from `dir`,
/// named by `name` (`file_name` or `zstd_file_name`), moving `*oldest` on
/// past each one gone (a file already gone counts as removed: a restart
/// after a crash between two removals goes on). Returns what it removed
/// for the notice, `"segment-000001.jsonl"` or `"3 segments, … to …"`;
/// `None` when nothing was due. On an error `*oldest` names the file that
/// could not be removed.
pub fn remove_before(
    dir: &Path,
    oldest: &mut u64,
    until: u64,
    name: fn(u64) -> String,
) -> std::io::Result<Option<String>> {
    let first = *oldest;
    if first >= until {
        return Ok(None);
    }
    while *oldest < until {
        match std::fs::remove_file(dir.join(name(*oldest))) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => *oldest += 1,
        }
    }
    Ok(Some(match *oldest - first {
        1 => name(first),
        n => format!("{n} segments, {} to {}", name(first), name(*oldest - 1)),
    }))
}

/// The segments in `dir`, by number (other files are not ours and are
/// left out). A number there twice (plain and compressed: `zstd` keeps
/// the file it compressed) is an error that names both: which one is the
/// recording is the user's call.
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        if let Some(n) = number_of(&entry.file_name()) {
            found.push((n, entry.path()));
        }
    }
    found.sort_unstable();
    if let Some(w) = found.windows(2).find(|w| w[0].0 == w[1].0) {
        bail!(
            "{}: segment {} is there twice, as {} and {}: remove one (after compressing a segment, remove the plain one)",
            dir.display(),
            w[0].0,
            w[0].1.display(),
            w[1].1.display()
        );
    }
    Ok(found)
}

/// Begins a series in `dir` (checked by [`check_dir`] with `existing`,
/// and set aside already if it said so): makes the directory if it is new.
/// Segments found there now are an earlier series': removed only when
/// `existing` says to replace them (`--force`, and only those files:
/// others in DIR are never touched), else refused, left as they are
/// (segments that appeared since the check, or after the set-aside).
/// `flag` names the output in errors, `program` says on stderr what
/// `--force` removed. The -o series (custos-seal) and its compressed copy
/// (`--archive DIR`, custos-store) both begin here.
pub fn begin(flag: &str, dir: &Path, existing: Existing, program: &str) -> Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(e).with_context(|| format!("{flag} {}: creating it", dir.display()))
        }
        _ => {}
    }
    let old = list(dir)?;
    if old.is_empty() {
        return Ok(());
    }
    if existing != Existing::Replace {
        bail!(
            "{flag} {}: holds segments of an earlier recording, left as they are (add --force to replace them)",
            dir.display()
        );
    }
    for (_, path) in &old {
        std::fs::remove_file(path)
            .with_context(|| format!("--force: removing {}", path.display()))?;
    }
    eprintln!(
        "{program}: --force: removed the {} segments of an earlier recording in {}",
        old.len(),
        dir.display()
    );
    Ok(())
}

/// Opens a segment (or any stream file) for reading, decompressed as its
/// name says: `.zst`/`.zstd` zstd, `.gz` gzip (every member), else plain.
pub fn open(path: &Path) -> Result<Box<dyn Read + Send>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let name = path.to_string_lossy();
    Ok(if name.ends_with(".zst") || name.ends_with(".zstd") {
        Box::new(
            zstd::stream::read::Decoder::new(file)
                .with_context(|| format!("reading zstd {}", path.display()))?,
        )
    } else if name.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    })
}

/// Checks the directory a rotated recording will be written to, before
/// anything is made: a new directory (its parent must exist and be
/// writable), or an existing writable one. One that already holds segments
/// is an earlier recording: refused unless `existing` allows replacing it
/// (`--force`; the caller then removes those segments, and only those) or
/// setting it aside (the caller then renames the directory, [`crate::set_aside`]).
/// Files that are not segments are never touched, so they do not count.
pub fn check_dir(flag: &str, dir: &Path, existing: Existing) -> Result<()> {
    if dir.as_os_str().is_empty() || dir.as_os_str() == "-" {
        bail!("{flag}: rotation writes segment files into a directory: name one (not stdout)");
    }
    if existing == Existing::SetAside {
        crate::check_aside(flag, dir)?;
        // Renamed whole, and a new directory made beside it: the parent's
        // permission was what counted.
        if crate::holds_recording(dir)? {
            return Ok(());
        }
    }
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => bail!(
            "{flag} {}: is not a directory: rotation writes numbered segment files into a directory; name a new or empty one",
            dir.display()
        ),
        Ok(_) => {
            let old = list(dir)?;
            if let (Some((first, _)), Existing::Refuse) = (old.first(), existing) {
                bail!(
                    "{flag} {}: holds {} segments of an earlier recording ({} to {}), left as they are: name a new directory, or add --force to replace them",
                    dir.display(),
                    old.len(),
                    file_name(*first),
                    file_name(old.last().expect("one at least").0)
                );
            }
            crate::may(dir, libc::W_OK | libc::X_OK)
                .with_context(|| format!("{flag} {}: cannot write there", dir.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = crate::parent(dir);
            match std::fs::metadata(parent) {
                Ok(m) if m.is_dir() => crate::may(parent, libc::W_OK | libc::X_OK)
                    .with_context(|| {
                        format!(
                            "{flag} {}: cannot create a directory in {}",
                            dir.display(),
                            parent.display()
                        )
                    }),
                Ok(_) => bail!("{flag} {}: {} is not a directory", dir.display(), parent.display()),
                Err(e) => bail!("{flag} {}: its parent {}: {e}", dir.display(), parent.display()),
            }
        }
        Err(e) => bail!("{flag} {}: {e}", dir.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_numbers_and_only_ours_count() {
        assert_eq!(file_name(1), "segment-000001.jsonl");
        assert_eq!(file_name(1_234_567), "segment-1234567.jsonl");
        for n in [1, 42, 999_999, 1_000_000, u64::MAX] {
            assert_eq!(number_of(OsStr::new(&file_name(n))), Some(n));
        }
        for other in [
            "segment-1.jsonl",
            "segment-000000.jsonl",
            "segment-00001a.jsonl",
            "segment-+00001.jsonl",
            "segment-1.jsonl.zst",
            "segment-000001.jsonl.xz",
            "segment-000001.zst",
            "events.jsonl",
            "segment-.jsonl",
        ] {
            assert_eq!(number_of(OsStr::new(other)), None, "{other}");
        }
        // Listed by number, not by name: 999999 before 1000000.
        let dir = tempfile::tempdir().unwrap();
        for n in [1_000_000, 3, 999_999, 10] {
            std::fs::write(dir.path().join(file_name(n)), "").unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), "").unwrap();
        let numbers: Vec<u64> = list(dir.path()).unwrap().iter().map(|s| s.0).collect();
        assert_eq!(numbers, [3, 10, 999_999, 1_000_000]);
        // Compressed segments count, under the plain one's number.
        for (name, n) in [
            ("segment-000001.jsonl.zst", 1),
            ("segment-000002.jsonl.gz", 2),
        ] {
            assert_eq!(number_of(OsStr::new(name)), Some(n));
        }
        assert_eq!(zstd_file_name(7), "segment-000007.jsonl.zst");
        std::fs::write(dir.path().join(zstd_file_name(4)), "").unwrap();
        let numbers: Vec<u64> = list(dir.path()).unwrap().iter().map(|s| s.0).collect();
        assert_eq!(numbers, [3, 4, 10, 999_999, 1_000_000]);
        // The same segment plain and compressed: which is the recording is not ours to guess.
        std::fs::write(dir.path().join(file_name(4)), "").unwrap();
        let err = format!("{:#}", list(dir.path()).unwrap_err());
        assert!(
            err.contains("segment 4 is there twice")
                && err.contains("segment-000004.jsonl ")
                && err.contains("segment-000004.jsonl.zst"),
            "{err}"
        );
    }

    #[test]
    fn a_directory_of_segments_is_refused_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // New (under an existing directory), or existing and empty: fine.
        check_dir("-o", &d.join("new"), Existing::Refuse).unwrap();
        check_dir("-o", d, Existing::Refuse).unwrap();
        // Other files are not ours: left alone, no reason to refuse.
        std::fs::write(d.join("notes.txt"), "kept").unwrap();
        check_dir("-o", d, Existing::Refuse).unwrap();
        // An earlier recording's segments: only with --force.
        std::fs::write(d.join(file_name(4)), "old").unwrap();
        let e = check_dir("-o", d, Existing::Refuse).unwrap_err();
        assert!(
            format!("{e:#}").contains("holds 1 segments of an earlier recording"),
            "{e:#}"
        );
        check_dir("-o", d, Existing::Replace).unwrap();
        // Or set aside, whole: its parent must let it be renamed.
        check_dir("-o", d, Existing::SetAside).unwrap();
        let e = check_dir("-o", Path::new("/"), Existing::SetAside).unwrap_err();
        assert!(format!("{e:#}").contains("by its own name"), "{e:#}");
        // A file, a missing parent, stdout.
        let e = check_dir("-o", &d.join("notes.txt"), Existing::Replace).unwrap_err();
        assert!(format!("{e:#}").contains("is not a directory"), "{e:#}");
        assert!(check_dir("-o", &d.join("no/such"), Existing::Refuse).is_err());
        assert!(check_dir("-o", Path::new("-"), Existing::Refuse).is_err());
        assert_eq!(
            std::fs::read_to_string(d.join("notes.txt")).unwrap(),
            "kept"
        );
    }

    /// Removing rotated-away segments: from `oldest` up to `until`, one or
    /// several named, an already missing one counted as gone, nothing due
    /// is None, and a failure leaves `oldest` at the file that stayed.
    #[test]
    fn rotated_away_segments_are_removed_in_order_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for n in 1..=5 {
            std::fs::write(d.join(zstd_file_name(n)), "x").unwrap();
        }
        let mut oldest = 1;
        assert_eq!(
            remove_before(d, &mut oldest, 1, zstd_file_name).unwrap(),
            None
        );
        assert_eq!(
            remove_before(d, &mut oldest, 2, zstd_file_name).unwrap(),
            Some("segment-000001.jsonl.zst".into())
        );
        std::fs::remove_file(d.join(zstd_file_name(3))).unwrap();
        assert_eq!(
            remove_before(d, &mut oldest, 4, zstd_file_name).unwrap(),
            Some("2 segments, segment-000002.jsonl.zst to segment-000003.jsonl.zst".into())
        );
        assert_eq!(oldest, 4);
        // A directory under segment 4's name cannot be removed as a file.
        std::fs::remove_file(d.join(zstd_file_name(4))).unwrap();
        std::fs::create_dir(d.join(zstd_file_name(4))).unwrap();
        assert!(remove_before(d, &mut oldest, 5, zstd_file_name).is_err());
        assert_eq!(oldest, 4);
        assert!(d.join(zstd_file_name(5)).exists());
    }
}
