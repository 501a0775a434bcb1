//! Finds the external tools the runner drives: virtme-ng (`vng`), which needs
//! `virtiofsd` and `qemu-system-x86_64` on its PATH.
//!
//! `make deps` installs vng and virtiofsd into the checkout's `.tools/`, so
//! besides PATH we look there, starting from the working directory and from
//! this executable (which lives in the checkout's `target/`).

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// Directories that may hold the tools, in search order.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let explicit = std::env::var_os("CUSTOS_TOOLS_DIR").map(PathBuf::from);
    for dir in explicit
        .into_iter()
        .chain(crate::kernel::checkout_ancestors())
    {
        for tools in [dir.clone(), dir.join(".tools")] {
            for bin in ["venv/bin", "cargo/bin"] {
                let candidate = tools.join(bin);
                if candidate.is_dir() && !dirs.contains(&candidate) {
                    dirs.push(candidate);
                }
            }
        }
    }
    dirs
}

fn find(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The tools, and the PATH to give vng so it finds the rest.
pub struct Tools {
    pub vng: PathBuf,
    pub path_env: std::ffi::OsString,
}

pub fn locate() -> Result<Tools> {
    let dirs = search_dirs();
    let mut missing = Vec::new();
    let vng = find("vng", &dirs);
    for tool in ["vng", "virtiofsd", "qemu-system-x86_64"] {
        if find(tool, &dirs).is_none() {
            missing.push(tool);
        }
    }
    if !missing.is_empty() {
        bail!("{} not found on PATH or in .tools/; run `make deps` (or scripts/deps.sh) in the Custos checkout", missing.join(", "));
    }
    // vng spawns virtiofsd and QEMU by name, so the directories we found them in go first.
    let path_env = std::env::join_paths(&dirs)?;
    Ok(Tools {
        vng: vng.expect("checked above"),
        path_env,
    })
}
