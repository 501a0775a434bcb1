//! The paths a command will write, checked in one place before anything is
//! created, truncated or opened for writing.
//!
//! Custos's files are evidence: a typo in one flag must not cost the user the
//! recording a previous run left under the output's name. Every command
//! validates its other arguments first, then hands each file it will write to
//! [`check`] (with the files it reads), and only then opens them, with
//! [`create`], which keeps the promise [`check`] made even if the file
//! appeared in between.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub mod segments;

/// What an existing file at an output path means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Refused: a recording is never replaced unless the user says `--force`.
    Refuse,
    /// Replaced (the user said `--force`, or the output is derived and can be
    /// made again, like a rendered graph).
    Replace,
    /// Written after what it holds (the store; documented append modes).
    Append,
    /// Renamed aside, never replaced (`custos collect --set-aside-previous`):
    /// [`check`] accepts it where its directory lets it be renamed, the
    /// caller calls [`set_aside`] once every option is checked, and
    /// [`create`] then refuses whatever stands at the path, as with
    /// [`Existing::Refuse`].
    SetAside,
}

impl Existing {
    /// [`Existing::Replace`] with `force`, else [`Existing::Refuse`].
    pub fn unless_forced(force: bool) -> Self {
        match force {
            true => Existing::Replace,
            false => Existing::Refuse,
        }
    }
}

/// One file a command will write: the flag that named it (for messages),
/// its path, and what an existing file there means.
#[derive(Debug, Clone, Copy)]
pub struct Output<'a> {
    pub flag: &'a str,
    pub path: &'a Path,
    pub existing: Existing,
}

impl<'a> Output<'a> {
    pub fn new(flag: &'a str, path: &'a Path, existing: Existing) -> Self {
        Self {
            flag,
            path,
            existing,
        }
    }
}

/// `-`: the standard stream, not a file of ours.
fn is_std(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Which file a path names: its inode when it exists, else where it would be
/// made (the real directory and the name), so two spellings of one file meet.
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    Inode(u64, u64),
    Path(PathBuf),
}

fn identity(path: &Path) -> Option<Identity> {
    // An input `-` is whatever stdin is: a file redirected in has an inode.
    let path = if is_std(path) {
        Path::new("/proc/self/fd/0")
    } else {
        path
    };
    match std::fs::metadata(path) {
        Ok(m) => Some(Identity::Inode(m.dev(), m.ino())),
        Err(_) => {
            let dir = parent(path).canonicalize().ok()?;
            Some(Identity::Path(dir.join(path.file_name()?)))
        }
    }
}

/// The directory a new file at `path` is made in.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// access(2): may this process write there (root too: a read-only mount says no)?
fn may(path: &Path, mode: libc::c_int) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a NUL-terminated path that lives across the call.
    match unsafe { libc::access(c.as_ptr(), mode) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Checks every output before any is written: not a directory, not an
/// existing file unless its [`Existing`] allows it, writable (the file, or
/// its directory when it is new), and neither one of `inputs` nor another
/// output. `-` (stdout) is not checked.
pub fn check(outputs: &[Output<'_>], inputs: &[&Path]) -> Result<()> {
    let mut seen: Vec<(String, &Path, Identity)> = inputs
        .iter()
        .filter_map(|p| identity(p).map(|id| ("the input".to_string(), *p, id)))
        .collect();
    for o in outputs {
        let (flag, path) = (o.flag, o.path);
        if is_std(path) {
            continue;
        }
        if path.as_os_str().is_empty() {
            bail!("{flag}: an empty file name");
        }
        if o.existing == Existing::SetAside {
            check_aside(flag, path)?;
        }
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => bail!("{flag} {}: is a directory", path.display()),
            // A regular file holds what a previous run wrote.
            Ok(m) if m.is_file() && o.existing == Existing::Refuse => bail!(
                "{flag} {}: the file exists ({} bytes) and is left as it is: name a new file, or add --force to replace it",
                path.display(),
                m.len()
            ),
            // Renamed, not written: check_aside found its directory writable.
            Ok(m) if m.is_file() && o.existing == Existing::SetAside => {}
            // Existing (a file we may replace or append to, a FIFO, /dev/null): writable?
            Ok(_) => may(path, libc::W_OK)
                .with_context(|| format!("{flag} {}: cannot write it", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let dir = parent(path);
                match std::fs::metadata(dir) {
                    Ok(m) if m.is_dir() => may(dir, libc::W_OK | libc::X_OK).with_context(|| {
                        format!(
                            "{flag} {}: cannot create a file in {}",
                            path.display(),
                            dir.display()
                        )
                    })?,
                    Ok(_) => bail!("{flag} {}: {} is not a directory", path.display(), dir.display()),
                    Err(e) => bail!(
                        "{flag} {}: its directory {}: {e}",
                        path.display(),
                        dir.display()
                    ),
                }
            }
            Err(e) => bail!("{flag} {}: {e}", path.display()),
        }
        if let Some(id) = identity(path) {
            if let Some((other, other_path, _)) = seen.iter().find(|(_, _, s)| *s == id) {
                bail!(
                    "{flag} {} is the same file as {other} {}: writing it would destroy what is read or written there",
                    path.display(),
                    other_path.display()
                );
            }
            seen.push((flag.to_string(), path, id));
        }
    }
    Ok(())
}

/// Opens an output [`check`] accepted, as its [`Existing`] says: a refused
/// existing file stays refused even if it appeared since the check.
pub fn create(o: &Output<'_>) -> Result<File> {
    let mut opts = OpenOptions::new();
    match o.existing {
        // Set aside already: what stands there now appeared since.
        Existing::Refuse | Existing::SetAside => opts.write(true).create_new(true),
        Existing::Replace => opts.write(true).create(true).truncate(true),
        Existing::Append => opts.append(true).create(true),
    };
    let opened = match opts.open(o.path) {
        // Not a file of ours (/dev/null, a FIFO): written to, as check() allowed.
        Err(e)
            if matches!(o.existing, Existing::Refuse | Existing::SetAside)
                && e.kind() == std::io::ErrorKind::AlreadyExists
                && std::fs::metadata(o.path).is_ok_and(|m| !m.is_file() && !m.is_dir()) =>
        {
            OpenOptions::new().write(true).open(o.path)
        }
        r => r,
    };
    opened.with_context(|| match o.existing {
        Existing::Refuse | Existing::SetAside if o.path.exists() => format!(
            "{} {}: the file exists and is left as it is (add --force to replace it)",
            o.flag,
            o.path.display()
        ),
        _ => format!("{} {}: cannot create it", o.flag, o.path.display()),
    })
}

/// Whether `path` holds an earlier recording: a regular file, or a
/// directory with segments of a rotated series (a directory without any is
/// written into as it is, [`segments::check_dir`]).
fn holds_recording(path: &Path) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(m) if m.is_dir() => Ok(!segments::list(path)?.is_empty()),
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| path.display().to_string()),
    }
}

/// What [`set_aside`] needs, checked before anything is made: a name of
/// its own to add the time to (not `.`, `..` or `/`), and, if a recording
/// is there, a directory that lets it be renamed.
fn check_aside(flag: &str, path: &Path) -> Result<()> {
    if path.file_name().is_none() {
        bail!(
            "{flag} {}: an earlier recording there is set aside under its name and the time, so name it by its own name (not . , .. or /)",
            path.display()
        );
    }
    if holds_recording(path)? {
        let dir = parent(path);
        may(dir, libc::W_OK | libc::X_OK).with_context(|| {
            format!(
                "{flag} {}: the earlier recording there cannot be set aside: cannot rename in {}",
                path.display(),
                dir.display()
            )
        })?;
    }
    Ok(())
}

/// `YYYYMMDDTHHMMSS.NNNNNNNNNZ`, the UTC time `t` to the nanosecond: the
/// basic ISO 8601 form, no colon in a file name, sorting as the times do.
fn utc_stamp(t: SystemTime) -> Result<String> {
    let d = t
        .duration_since(UNIX_EPOCH)
        .context("the clock reads before 1970")?;
    let secs = libc::time_t::try_from(d.as_secs()).context("the clock is out of range")?;
    // SAFETY: gmtime_r fills the struct we own from the time we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::gmtime_r(&secs, &mut tm) }.is_null() {
        bail!("the clock is out of range ({secs} s)");
    }
    Ok(format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}.{:09}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        d.subsec_nanos()
    ))
}

/// Moves an earlier recording at `path` (a file, or a directory holding a
/// rotated series' segments) aside to `path.YYYYMMDDTHHMMSS.NNNNNNNNNZ`,
/// the UTC time of the move, and returns that name; `None` when there is
/// none to move. One rename(2) with RENAME_NOREPLACE: the recording is
/// wholly at one name or the other, and nothing at the new name is ever
/// replaced or entered. Call it after [`check`] (or
/// [`segments::check_dir`]) accepted the output as [`Existing::SetAside`].
pub fn set_aside(flag: &str, path: &Path) -> Result<Option<PathBuf>> {
    set_aside_at(flag, path, SystemTime::now())
}

fn set_aside_at(flag: &str, path: &Path, now: SystemTime) -> Result<Option<PathBuf>> {
    check_aside(flag, path)?;
    if !holds_recording(path)? {
        return Ok(None);
    }
    let mut name = path.file_name().expect("checked above").to_os_string();
    name.push(".");
    name.push(utc_stamp(now)?);
    let aside = parent(path).join(name);
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .with_context(|| format!("{flag} {}: a NUL in the name", p.display()))
    };
    let (from, to) = (c(path)?, c(&aside)?);
    // SAFETY: two NUL-terminated paths that live across the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        let why = match err.raw_os_error() {
            Some(libc::EEXIST) => format!("{} exists already and is not replaced", aside.display()),
            Some(libc::EBUSY) => {
                "it is in use by the system (a mount point?): name a directory inside it".into()
            }
            Some(libc::EINVAL) => format!(
                "the file system of {} cannot rename without the risk of replacing (no RENAME_NOREPLACE)",
                parent(path).display()
            ),
            _ => format!("renaming it to {}", aside.display()),
        };
        return Err(err).with_context(|| {
            format!(
                "{flag} {}: the earlier recording there cannot be set aside, and is left as it is: {why}",
                path.display()
            )
        });
    }
    Ok(Some(aside))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_would_lose_data_and_accepts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.jsonl");
        std::fs::write(&old, "kept\n").unwrap();
        let new = dir.path().join("new.jsonl");
        let out = |p, e| Output::new("-o", p, e);
        // An existing file only with --force (or append).
        let e = check(&[out(&old, Existing::Refuse)], &[]).unwrap_err();
        assert!(format!("{e:#}").contains("--force"), "{e:#}");
        check(&[out(&old, Existing::Replace)], &[]).unwrap();
        check(&[out(&old, Existing::Append)], &[]).unwrap();
        check(&[out(&new, Existing::Refuse)], &[]).unwrap();
        // Not the input, under another spelling either, nor another output.
        let spelled = dir.path().join(".").join("old.jsonl");
        let e = check(&[out(&spelled, Existing::Replace)], &[&old]).unwrap_err();
        assert!(format!("{e:#}").contains("same file as the input"), "{e:#}");
        let twice = [
            out(&new, Existing::Refuse),
            Output::new("--archive", &new, Existing::Refuse),
        ];
        assert!(check(&twice, &[]).is_err());
        // A directory, a missing directory, a file as directory.
        assert!(check(&[out(dir.path(), Existing::Replace)], &[]).is_err());
        let missing = dir.path().join("no/such.jsonl");
        assert!(check(&[out(&missing, Existing::Refuse)], &[]).is_err());
        let under_file = old.join("x");
        assert!(check(&[out(&under_file, Existing::Refuse)], &[]).is_err());
        // stdout and devices are not files of ours.
        check(&[out(Path::new("-"), Existing::Refuse)], &[]).unwrap();
        check(&[out(Path::new("/dev/null"), Existing::Refuse)], &[]).unwrap();
        // create() keeps the promise.
        assert!(create(&out(&old, Existing::Refuse)).is_err());
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "kept\n");
        create(&out(&new, Existing::Refuse)).unwrap();
        assert!(new.exists());
        create(&out(Path::new("/dev/null"), Existing::Refuse)).unwrap();
    }

    /// An earlier recording (a file, a directory of segments) moves whole
    /// to its name and the UTC time; nothing else moves, nothing at the
    /// new name is replaced or entered, and a name without one is refused.
    #[test]
    fn set_aside_renames_a_recording_and_never_replaces() {
        let at = |ns: u64| UNIX_EPOCH + std::time::Duration::from_nanos(ns);
        let t = at(1_795_256_104_123_456_789);
        assert_eq!(utc_stamp(t).unwrap(), "20261121T101504.123456789Z");
        assert_eq!(utc_stamp(at(5)).unwrap(), "19700101T000000.000000005Z");

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = d.join("events.jsonl");
        std::fs::write(&file, "first\n").unwrap();
        let aside = set_aside_at("-o", &file, t).unwrap().unwrap();
        assert_eq!(aside, d.join("events.jsonl.20261121T101504.123456789Z"));
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), "first\n");
        assert!(!file.exists());
        // Nothing there: nothing to do.
        assert_eq!(set_aside_at("-o", &file, t).unwrap(), None);
        // The same name taken: both left as they are.
        std::fs::write(&file, "second\n").unwrap();
        let e = set_aside_at("-o", &file, t).unwrap_err();
        assert!(format!("{e:#}").contains("exists already"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), "first\n");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "second\n");

        // A series: the directory whole; into a directory of the same name
        // neither replaced nor entered.
        let series = d.join("events");
        std::fs::create_dir(&series).unwrap();
        std::fs::write(series.join(segments::file_name(1)), "seg\n").unwrap();
        let taken = d.join("events.20261121T101504.123456789Z");
        std::fs::create_dir(&taken).unwrap();
        let e = set_aside_at("-o", &series, t).unwrap_err();
        assert!(format!("{e:#}").contains("exists already"), "{e:#}");
        assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 0);
        let later = set_aside_at("-o", &series, at(1_795_256_105_000_000_000))
            .unwrap()
            .unwrap();
        assert_eq!(later, d.join("events.20261121T101505.000000000Z"));
        assert_eq!(
            std::fs::read_to_string(later.join(segments::file_name(1))).unwrap(),
            "seg\n"
        );
        // A directory without segments holds no recording: it stays.
        std::fs::create_dir(&series).unwrap();
        std::fs::write(series.join("notes.txt"), "").unwrap();
        assert_eq!(set_aside_at("-o", &series, t).unwrap(), None);
        assert!(series.join("notes.txt").exists());
        // No name to add the time to.
        for p in [".", "..", "/"] {
            let e = set_aside_at("-o", Path::new(p), t).unwrap_err();
            assert!(format!("{e:#}").contains("by its own name"), "{p}: {e:#}");
            let e = check(&[Output::new("-o", Path::new(p), Existing::SetAside)], &[]);
            assert!(e.is_err(), "{p}");
        }
        // check() accepts an existing file to set aside; create() then
        // refuses one that stands there again.
        let o = Output::new("-o", &file, Existing::SetAside);
        check(&[o], &[]).unwrap();
        assert!(create(&o).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "second\n");
    }

    #[test]
    fn a_read_only_directory_is_refused_before_anything_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let ro = dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        let mut perm = std::fs::metadata(&ro).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o555);
        std::fs::set_permissions(&ro, perm).unwrap();
        let p = ro.join("out.jsonl");
        let r = check(&[Output::new("-o", &p, Existing::Refuse)], &[]);
        // Root may write anywhere (access(2) says yes unless the mount is read-only).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(r.is_err());
        }
        assert!(!p.exists());
    }
}
