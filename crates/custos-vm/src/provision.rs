//! `custos vm kernel`: fetch the newest Debian cloud kernel built with sched_ext.
//!
//! Debian's unstable suite carries current kernels, but adding it to the
//! system's apt sources would upgrade libc and half the system on the next
//! install. So apt runs here with a private sources list, state and cache in a
//! temporary directory, and only `apt-get download` (no install) is used.

use crate::kernel::{self, check_config, Kernel, KernelOrigin};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where to look for kernels in Debian.
#[derive(Debug, Clone)]
pub struct Source {
    pub mirror: String,
    pub suite: String,
    /// The metapackage that always depends on the current cloud kernel.
    pub metapackage: String,
}

impl Default for Source {
    fn default() -> Self {
        Source {
            mirror: "http://deb.debian.org/debian".into(),
            suite: "unstable".into(),
            metapackage: "linux-image-cloud-amd64".into(),
        }
    }
}

/// A private apt: its own sources list, lists, status and cache.
struct PrivateApt {
    dir: tempfile::TempDir,
}

impl PrivateApt {
    fn new(source: &Source) -> Result<PrivateApt> {
        let dir = tempfile::Builder::new()
            .prefix("custos-apt-")
            .tempdir()
            .context("cannot create a private apt directory")?;
        let p = dir.path();
        for sub in [
            "lists/partial",
            "cache/archives/partial",
            "sources.list.d",
            "preferences.d",
            "download",
        ] {
            std::fs::create_dir_all(p.join(sub))?;
        }
        std::fs::write(
            p.join("sources.list"),
            format!("deb {} {} main\n", source.mirror, source.suite),
        )?;
        std::fs::write(p.join("status"), "")?;
        Ok(PrivateApt { dir })
    }

    fn options(&self) -> Vec<String> {
        let p = self.dir.path().display();
        [
            format!("Dir::Etc::SourceList={p}/sources.list"),
            format!("Dir::Etc::SourceParts={p}/sources.list.d"),
            format!("Dir::Etc::PreferencesParts={p}/preferences.d"),
            format!("Dir::State::Lists={p}/lists"),
            format!("Dir::State::status={p}/status"),
            format!("Dir::Cache={p}/cache"),
            "APT::Architecture=amd64".into(),
            "Acquire::Languages=none".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect()
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<String> {
        let out = Command::new(tool)
            .args(self.options())
            .args(args)
            .current_dir(self.dir.path().join("download"))
            .output()
            .with_context(|| format!("cannot run {tool}; is apt installed?"))?;
        if !out.status.success() {
            bail!(
                "{tool} {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// From `apt-cache depends <metapackage>` output, the versioned image package
/// it points at, e.g. `linux-image-7.2.13+deb14-cloud-amd64`.
pub fn versioned_image(depends_output: &str, metapackage: &str) -> Option<String> {
    let flavour = metapackage.strip_prefix("linux-image-")?; // "cloud-amd64"
    depends_output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|d| d.trim().trim_matches(|c| c == '<' || c == '>'))
        .find(|d| {
            d.starts_with("linux-image-")
                && d.ends_with(flavour)
                && d[12..].starts_with(|c: char| c.is_ascii_digit())
        })
        .map(str::to_string)
}

/// Finds the kernel image and config inside an unpacked kernel package, in
/// either layout Debian has used (`boot/` or `usr/lib/modules/<release>/`).
pub fn find_in_package(root: &Path, release: &str) -> Option<(PathBuf, PathBuf)> {
    let layouts = [
        (
            root.join(format!("boot/vmlinuz-{release}")),
            root.join(format!("boot/config-{release}")),
        ),
        (
            root.join(format!("usr/lib/modules/{release}/vmlinuz")),
            root.join(format!("usr/lib/modules/{release}/config")),
        ),
        (
            root.join(format!("lib/modules/{release}/vmlinuz")),
            root.join(format!("lib/modules/{release}/config")),
        ),
    ];
    layouts
        .into_iter()
        .find(|(v, c)| v.is_file() && c.is_file())
}

/// The file of module `name` (`name.ko`, maybe compressed) under `dir`.
fn find_module(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(m) = find_module(&p, name) {
                return Some(m);
            }
        } else if p.file_name().is_some_and(|n| {
            n.to_string_lossy()
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(".ko"))
        }) {
            return Some(p);
        }
    }
    None
}

/// Downloads the newest sched_ext cloud kernel into the cache (or finds it
/// there already) and returns it. Progress goes to stderr.
pub fn download_newest(source: &Source, cache: &Path) -> Result<Kernel> {
    let apt = PrivateApt::new(source)?;
    eprintln!(
        "custos vm kernel: reading Debian {} package lists from {} (private apt state)…",
        source.suite, source.mirror
    );
    apt.run("apt-get", &["-q", "update"])
        .context("cannot read Debian's package lists")?;
    let depends = apt.run("apt-cache", &["depends", &source.metapackage])?;
    let image_pkg = versioned_image(&depends, &source.metapackage).with_context(|| {
        format!(
            "{} in Debian {} depends on no versioned kernel image",
            source.metapackage, source.suite
        )
    })?;
    let release = image_pkg.trim_start_matches("linux-image-").to_string();
    eprintln!("custos vm kernel: newest is {release} ({image_pkg})");

    let target = cache.join(&release);
    if let Ok(k) = Kernel::open(&target, KernelOrigin::Cache) {
        if k.network_modules().is_some() {
            eprintln!("custos vm kernel: already cached in {}", target.display());
            return Ok(k);
        }
        eprintln!("custos vm kernel: {} lacks the network modules (for `custos vm run --tap`): fetching it again", target.display());
    }

    // Debian has moved the files between packages over time: vmlinuz in
    // linux-binary-* and config in linux-base-* now, both in linux-image-*
    // before. Unpack what exists into one tree until both are there.
    let download = apt.dir.path().join("download");
    let unpacked = apt.dir.path().join("unpacked");
    let mut notes = Vec::new();
    let fetch = |pkg: &str| -> Result<()> {
        eprintln!("custos vm kernel: downloading {pkg}…");
        apt.run("apt-get", &["-q", "download", pkg])?;
        let deb = std::fs::read_dir(&download)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{pkg}_")))
            })
            .with_context(|| format!("apt-get download {pkg} left no .deb"))?;
        let status = Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&unpacked)
            .status()
            .context("cannot run dpkg-deb")?;
        if !status.success() {
            bail!("dpkg-deb could not unpack {}", deb.display());
        }
        Ok(())
    };
    for pkg in [
        format!("linux-binary-{release}"),
        format!("linux-base-{release}"),
        image_pkg.clone(),
    ] {
        if let Err(e) = fetch(&pkg) {
            notes.push(format!("{e:#}"));
            continue;
        }
        let Some((vmlinuz, config)) = find_in_package(&unpacked, &release) else {
            continue;
        };
        // The modules live in a package of their own now (in linux-image-* before).
        let modules_root = unpacked.join("usr/lib/modules").join(&release);
        if find_module(&modules_root, crate::kernel::NETWORK_MODULES[0]).is_none() {
            if let Err(e) = fetch(&format!("linux-modules-{release}")) {
                eprintln!("custos vm kernel: {e:#}");
            }
        }
        let text = std::fs::read_to_string(&config)?;
        let check = check_config(&text);
        if !check.is_fit() {
            let names: Vec<_> = check
                .missing_required
                .iter()
                .map(|m| m.0.as_str())
                .collect();
            bail!(
                "Debian's newest cloud kernel {release} lacks {}",
                names.join(", ")
            );
        }
        // Write under a dot-name and rename, so a crash never leaves a half kernel that looks whole.
        std::fs::create_dir_all(cache)
            .with_context(|| format!("cannot create {}", cache.display()))?;
        let partial = cache.join(format!(".partial-{release}"));
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&partial)?;
        std::fs::copy(&vmlinuz, partial.join("vmlinuz"))?;
        std::fs::copy(&config, partial.join("config"))?;
        // The guest's NIC driver, which this kernel builds as modules only
        // (`custos vm run --tap` loads them): copied when the package has them.
        let modules = partial.join(crate::kernel::NETWORK_MODULES_DIR);
        for name in crate::kernel::NETWORK_MODULES {
            match find_module(&modules_root, name) {
                Some(m) => {
                    std::fs::create_dir_all(&modules)?;
                    std::fs::copy(&m, modules.join(m.file_name().expect("a file")))?;
                }
                None => eprintln!("custos vm kernel: no {name} module in the package; `custos vm run --tap` will not work with it"),
            }
        }
        let _ = std::fs::remove_dir_all(&target);
        std::fs::rename(&partial, &target)?;
        eprintln!(
            "custos vm kernel: cached {} in {}",
            release,
            target.display()
        );
        return Kernel::open(&target, KernelOrigin::Cache);
    }
    notes.push(format!(
        "the packages held no vmlinuz and config for {release}"
    ));
    bail!(notes.join("; "))
}

/// `custos vm kernel`: the newest kernel from Debian if it can be had, else
/// the newest cached or shared one, else a clear error.
pub fn provision(source: &Source, offline: bool) -> Result<Kernel> {
    let cache = kernel::cache_dir();
    if !offline {
        match download_newest(source, &cache) {
            Ok(k) => return Ok(k),
            Err(e) => eprintln!("custos vm kernel: could not get a kernel from Debian: {e:#}"),
        }
    }
    let k = kernel::select_default().context("and no kernel from Debian either")?;
    eprintln!(
        "custos vm kernel: falling back to {} ({})",
        k.release, k.origin
    );
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versioned_image_is_found_in_apt_cache_depends_output() {
        let out = "linux-image-cloud-amd64\n  Depends: linux-base-cloud-amd64\n  Depends: linux-image-7.2.13+deb14-cloud-amd64\n";
        assert_eq!(
            versioned_image(out, "linux-image-cloud-amd64").as_deref(),
            Some("linux-image-7.2.13+deb14-cloud-amd64")
        );
        // Virtual packages come in angle brackets.
        let out = "linux-image-cloud-amd64\n  Depends: <linux-image-7.3.1-cloud-amd64>\n";
        assert_eq!(
            versioned_image(out, "linux-image-cloud-amd64").as_deref(),
            Some("linux-image-7.3.1-cloud-amd64")
        );
        // Another flavour, or a non-versioned dependency, is not it.
        let out = "x\n  Depends: linux-image-7.2.13+deb14-amd64\n  Depends: linux-image-cloud-amd64-dbg\n";
        assert_eq!(versioned_image(out, "linux-image-cloud-amd64"), None);
    }

    #[test]
    fn both_package_layouts_are_recognised() {
        for (img, cfg) in [
            ("boot/vmlinuz-7.0.0", "boot/config-7.0.0"),
            (
                "usr/lib/modules/7.0.0/vmlinuz",
                "usr/lib/modules/7.0.0/config",
            ),
        ] {
            let root = tempfile::tempdir().unwrap();
            for f in [img, cfg] {
                let p = root.path().join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, "x").unwrap();
            }
            let (v, c) = find_in_package(root.path(), "7.0.0").unwrap();
            assert!(v.ends_with(img) && c.ends_with(cfg));
        }
        assert!(find_in_package(Path::new("/nonexistent"), "7.0.0").is_none());
    }
}
