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
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => bail!("{flag} {}: is a directory", path.display()),
            // A regular file holds what a previous run wrote.
            Ok(m) if m.is_file() && o.existing == Existing::Refuse => bail!(
                "{flag} {}: the file exists ({} bytes) and is left as it is: name a new file, or add --force to replace it",
                path.display(),
                m.len()
            ),
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
        Existing::Refuse => opts.write(true).create_new(true),
        Existing::Replace => opts.write(true).create(true).truncate(true),
        Existing::Append => opts.append(true).create(true),
    };
    let opened = match opts.open(o.path) {
        // Not a file of ours (/dev/null, a FIFO): written to, as check() allowed.
        Err(e)
            if o.existing == Existing::Refuse
                && e.kind() == std::io::ErrorKind::AlreadyExists
                && std::fs::metadata(o.path).is_ok_and(|m| !m.is_file() && !m.is_dir()) =>
        {
            OpenOptions::new().write(true).open(o.path)
        }
        r => r,
    };
    opened.with_context(|| match o.existing {
        Existing::Refuse if o.path.exists() => format!(
            "{} {}: the file exists and is left as it is (add --force to replace it)",
            o.flag,
            o.path.display()
        ),
        _ => format!("{} {}: cannot create it", o.flag, o.path.display()),
    })
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
