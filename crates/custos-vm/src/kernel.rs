//! Kernels the VM can boot: where they are, whether they are fit, which one wins.
//!
//! A kernel is a directory `<version>/` holding `vmlinuz` (a bzImage) and
//! `config` (its build configuration, which the guest needs at
//! `/boot/config-$(uname -r)` because libbpf reads Kconfig values from it).

use anyhow::{bail, Context, Result};
use std::cmp::Ordering;
use std::fmt;
use std::path::{Path, PathBuf};

/// Options a kernel must have built in (`=y`) for Custos to run in it.
/// Modules are not an option: the guest has no module tree.
pub const REQUIRED_OPTIONS: &[(&str, &str)] = &[
    (
        "CONFIG_SCHED_CLASS_EXT",
        "sched_ext, for the Custos scheduler",
    ),
    ("CONFIG_BPF_SYSCALL", "BPF programs"),
    (
        "CONFIG_DEBUG_INFO_BTF",
        "BTF, for CO-RE BPF programs and struct_ops",
    ),
    ("CONFIG_VIRTIO_PCI", "virtio devices under QEMU"),
    ("CONFIG_VIRTIO_FS", "the host root shared over virtiofs"),
    ("CONFIG_FUSE_FS", "virtiofs is built on FUSE"),
    (
        "CONFIG_TMPFS",
        "writable /tmp and /boot in the read-only guest",
    ),
];

/// Options Custos uses when present; their absence is reported, not fatal.
pub const WANTED_OPTIONS: &[(&str, &str)] = &[
    ("CONFIG_BPF_LSM", "BPF-LSM hooks for the collector"),
    ("CONFIG_FUNCTION_TRACER", "fentry/fexit programs"),
];

/// What a kernel config says about Custos's needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigCheck {
    /// Required options that are not `=y`, with why they are needed.
    pub missing_required: Vec<(String, String)>,
    /// Wanted options that are not `=y`.
    pub missing_wanted: Vec<(String, String)>,
}

impl ConfigCheck {
    pub fn is_fit(&self) -> bool {
        self.missing_required.is_empty()
    }
}

/// Checks a kernel `.config` text. Only `CONFIG_X=y` counts as present:
/// `=m` needs modules the guest does not have, and `# CONFIG_X is not set` is off.
pub fn check_config(text: &str) -> ConfigCheck {
    let built_in = |name: &str| {
        text.lines()
            .filter_map(|l| l.trim().split_once('='))
            .any(|(k, v)| k == name && v == "y")
    };
    let missing = |opts: &[(&str, &str)]| {
        opts.iter()
            .filter(|(name, _)| !built_in(name))
            .map(|(n, why)| (n.to_string(), why.to_string()))
            .collect::<Vec<_>>()
    };
    ConfigCheck {
        missing_required: missing(REQUIRED_OPTIONS),
        missing_wanted: missing(WANTED_OPTIONS),
    }
}

/// Reads the release string (what `uname -r` will say) from a bzImage header.
///
/// The x86 boot protocol puts "HdrS" at 0x202 and, at 0x20e, a pointer
/// (relative to 0x200) to a NUL-terminated version string such as
/// `7.2.13+deb14-cloud-amd64 (debian-kernel@...) #1 SMP ...`.
pub fn bzimage_release(image: &[u8]) -> Result<String> {
    if image.len() < 0x210 || &image[0x202..0x206] != b"HdrS" {
        bail!("not a Linux x86 kernel image (no bzImage boot header)");
    }
    let ptr = u16::from_le_bytes([image[0x20e], image[0x20f]]) as usize + 0x200;
    let tail = image
        .get(ptr..)
        .context("bzImage version pointer is past the end of the file")?;
    let end = tail
        .iter()
        .take(512)
        .position(|&b| b == 0)
        .context("bzImage version string is not terminated")?;
    let version =
        std::str::from_utf8(&tail[..end]).context("bzImage version string is not text")?;
    let release = version.split_whitespace().next().unwrap_or("");
    if release.is_empty() {
        bail!("bzImage has an empty version string");
    }
    Ok(release.to_string())
}

/// Where a kernel came from, shown to the user so they know what they boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelOrigin {
    /// Downloaded from Debian into the user's cache.
    Cache,
    /// The project's shared fallback copy.
    Shared,
    /// Given explicitly with `--kernel`.
    Explicit,
}

impl fmt::Display for KernelOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KernelOrigin::Cache => "downloaded, cached",
            KernelOrigin::Shared => "shared fallback",
            KernelOrigin::Explicit => "given with --kernel",
        })
    }
}

/// A bootable kernel: image, config, and the release it reports.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub release: String,
    pub vmlinuz: PathBuf,
    pub config: PathBuf,
    pub origin: KernelOrigin,
}

impl Kernel {
    /// Opens and checks a kernel. `path` is a kernel directory (holding
    /// `vmlinuz` and `config`) or a bzImage file with `config` (or
    /// `config-<release>`) beside it.
    pub fn open(path: &Path, origin: KernelOrigin) -> Result<Kernel> {
        const FIX: &str = "run `custos vm kernel` to provision one, or pass --kernel a bzImage with its config beside it";
        if !path.exists() {
            bail!("kernel {} does not exist; {FIX}", path.display());
        }
        let vmlinuz = if path.is_dir() {
            path.join("vmlinuz")
        } else {
            path.to_path_buf()
        };
        let image = std::fs::read(&vmlinuz)
            .with_context(|| format!("cannot read kernel image {}; {FIX}", vmlinuz.display()))?;
        let release = bzimage_release(&image)
            .with_context(|| format!("kernel image {} is unusable; {FIX}", vmlinuz.display()))?;
        let dir = vmlinuz.parent().unwrap_or(Path::new("."));
        let config = [dir.join("config"), dir.join(format!("config-{release}"))]
            .into_iter()
            .find(|p| p.is_file())
            .with_context(|| format!("no kernel config beside {} (expected `config` or `config-{release}`); the guest needs it for libbpf; {FIX}", vmlinuz.display()))?;
        let text = std::fs::read_to_string(&config)
            .with_context(|| format!("cannot read kernel config {}", config.display()))?;
        let check = check_config(&text);
        if !check.is_fit() {
            let list: Vec<String> = check
                .missing_required
                .iter()
                .map(|(n, why)| format!("{n} ({why})"))
                .collect();
            bail!("kernel {release} lacks {}; {FIX}", list.join(", "));
        }
        Ok(Kernel {
            release,
            vmlinuz,
            config,
            origin,
        })
    }
}

/// Orders kernel releases like "7.2.13+deb14-cloud-amd64": numeric runs compare
/// as numbers, everything else as text, so 7.10 is newer than 7.9.
pub fn compare_releases(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(cb.iter()) {
        let ord = match (x, y) {
            ((true, x), (true, y)) => x
                .parse::<u64>()
                .unwrap_or(0)
                .cmp(&y.parse::<u64>().unwrap_or(0)),
            ((_, x), (_, y)) => x.cmp(y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len())
}

/// The user's kernel cache: `$CUSTOS_CACHE_DIR` or `~/.cache/custos`, then `kernels/`.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("CUSTOS_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from("/var/cache"))
                .join("custos")
        });
    base.join("kernels")
}

/// Shared fallback kernel directories: `$CUSTOS_SHARED_KERNELS`, or the first
/// `shared/kernels` found beside an ancestor of the working directory or of
/// this executable (the project's checkout sits next to `shared/`).
pub fn shared_dirs() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os("CUSTOS_SHARED_KERNELS") {
        return vec![PathBuf::from(dir)];
    }
    checkout_ancestors()
        .into_iter()
        .map(|dir| dir.join("shared").join("kernels"))
        .find(|d| d.is_dir())
        .into_iter()
        .collect()
}

/// Directories the Custos checkout may be in or under, nearest first: the
/// ancestors of the working directory, then of this executable (which lives
/// in the checkout's `target/`).
pub(crate) fn checkout_ancestors() -> Vec<PathBuf> {
    let starts = [std::env::current_dir().ok(), std::env::current_exe().ok()];
    starts
        .into_iter()
        .flatten()
        .flat_map(|s| s.ancestors().map(Path::to_path_buf).collect::<Vec<_>>())
        .collect()
}

/// A kernel directory that could not be used, and why.
#[derive(Debug, Clone)]
pub struct Rejected {
    pub path: PathBuf,
    pub reason: String,
}

/// Every kernel under the cache and the shared fallback, usable ones newest
/// first, plus the ones rejected with their reasons.
pub fn discover(cache: &Path, shared: &[PathBuf]) -> (Vec<Kernel>, Vec<Rejected>) {
    let mut found = Vec::new();
    let mut rejected = Vec::new();
    let roots = std::iter::once((cache.to_path_buf(), KernelOrigin::Cache))
        .chain(shared.iter().map(|d| (d.clone(), KernelOrigin::Shared)));
    for (root, origin) in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for dir in dirs {
            // A half-written download is not a kernel yet.
            if dir
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            match Kernel::open(&dir, origin.clone()) {
                Ok(k) => found.push(k),
                Err(e) => rejected.push(Rejected {
                    path: dir,
                    reason: format!("{e:#}"),
                }),
            }
        }
    }
    // Newest first; on a tie the cache (fresh download) beats the shared copy.
    found.sort_by(|a, b| {
        compare_releases(&b.release, &a.release)
            .then((a.origin != KernelOrigin::Cache).cmp(&(b.origin != KernelOrigin::Cache)))
    });
    (found, rejected)
}

/// The kernel `custos vm run` boots when none is given: the newest usable one.
/// The guest's NIC driver (virtio-net) and what it needs, in load order:
/// the cloud kernel builds them as modules, which `custos vm kernel` keeps
/// in `modules/` beside `vmlinuz`.
pub const NETWORK_MODULES: [&str; 3] = ["failover", "net_failover", "virtio_net"];
pub const NETWORK_MODULES_DIR: &str = "modules";

impl Kernel {
    /// The network modules' files in load order, when all are there.
    pub fn network_modules(&self) -> Option<Vec<PathBuf>> {
        let dir = self.vmlinuz.parent()?.join(NETWORK_MODULES_DIR);
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .collect();
        NETWORK_MODULES
            .iter()
            .map(|name| {
                files
                    .iter()
                    .find(|f| {
                        f.file_name().is_some_and(|n| {
                            n.to_string_lossy()
                                .strip_prefix(name)
                                .is_some_and(|r| r.starts_with(".ko"))
                        })
                    })
                    .cloned()
            })
            .collect()
    }
}

pub fn select_default() -> Result<Kernel> {
    let cache = cache_dir();
    let shared = shared_dirs();
    let (found, rejected) = discover(&cache, &shared);
    if let Some(k) = found.into_iter().next() {
        return Ok(k);
    }
    let mut msg = format!(
        "no sched_ext-capable kernel found (looked in {}{}); run `custos vm kernel` to download one, or pass --kernel PATH",
        cache.display(),
        shared.iter().map(|d| format!(" and {}", d.display())).collect::<String>()
    );
    for r in rejected {
        msg.push_str(&format!("\n  rejected {}: {}", r.path.display(), r.reason));
    }
    bail!(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIT: &str = "CONFIG_SCHED_CLASS_EXT=y\nCONFIG_BPF_SYSCALL=y\nCONFIG_DEBUG_INFO_BTF=y\nCONFIG_VIRTIO_PCI=y\nCONFIG_VIRTIO_FS=y\nCONFIG_FUSE_FS=y\nCONFIG_TMPFS=y\nCONFIG_BPF_LSM=y\n";

    #[test]
    fn config_with_everything_built_in_is_fit() {
        let check = check_config(FIT);
        assert!(check.is_fit());
        assert_eq!(
            check
                .missing_wanted
                .iter()
                .map(|m| m.0.as_str())
                .collect::<Vec<_>>(),
            ["CONFIG_FUNCTION_TRACER"]
        );
    }

    #[test]
    fn sched_ext_off_module_or_absent_is_unfit() {
        for variant in [
            "# CONFIG_SCHED_CLASS_EXT is not set\n",
            "CONFIG_SCHED_CLASS_EXT=m\n",
            "",
        ] {
            let text = FIT.replace("CONFIG_SCHED_CLASS_EXT=y\n", variant);
            let check = check_config(&text);
            assert!(!check.is_fit(), "{variant:?} must be unfit");
            assert_eq!(check.missing_required[0].0, "CONFIG_SCHED_CLASS_EXT");
        }
        // A longer option name sharing the prefix does not count.
        let text = FIT.replace("CONFIG_SCHED_CLASS_EXT=y", "CONFIG_SCHED_CLASS_EXT_FOO=y");
        assert!(!check_config(&text).is_fit());
    }

    #[test]
    fn the_shared_kernel_config_is_fit() {
        let dirs = shared_dirs();
        let Some(dir) = dirs.first() else {
            eprintln!("no shared/kernels beside this checkout; nothing to check");
            return;
        };
        let text = std::fs::read_to_string(dir.join("7.2.13+deb14-cloud-amd64/config")).unwrap();
        let check = check_config(&text);
        assert!(check.is_fit(), "{check:?}");
        assert!(check.missing_wanted.is_empty(), "{check:?}");
    }

    fn fake_bzimage(version: &str) -> Vec<u8> {
        let mut img = vec![0u8; 0x400];
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x20e..0x210].copy_from_slice(&(0x100u16).to_le_bytes());
        let v = format!("{version} (builder@host) #1 SMP\0");
        img[0x300..0x300 + v.len()].copy_from_slice(v.as_bytes());
        img
    }

    #[test]
    fn bzimage_release_is_read_from_the_header() {
        assert_eq!(
            bzimage_release(&fake_bzimage("7.3.1-cloud-amd64")).unwrap(),
            "7.3.1-cloud-amd64"
        );
        assert!(bzimage_release(b"garbage").is_err());
        let mut bad = fake_bzimage("x");
        bad[0x202] = b'X';
        assert!(format!("{:#}", bzimage_release(&bad).unwrap_err()).contains("bzImage"));
    }

    #[test]
    fn the_shared_kernel_image_reports_its_release() {
        let dirs = shared_dirs();
        let Some(dir) = dirs.first() else {
            eprintln!("no shared/kernels beside this checkout; nothing to check");
            return;
        };
        let k = Kernel::open(&dir.join("7.2.13+deb14-cloud-amd64"), KernelOrigin::Shared).unwrap();
        assert_eq!(k.release, "7.2.13+deb14-cloud-amd64");
    }

    #[test]
    fn releases_compare_numerically() {
        assert_eq!(compare_releases("7.10.1", "7.9.30"), Ordering::Greater);
        assert_eq!(
            compare_releases("7.2.13+deb14-cloud-amd64", "7.2.9+deb14-cloud-amd64"),
            Ordering::Greater
        );
        assert_eq!(
            compare_releases("7.2.13+deb14-cloud-amd64", "7.2.13+deb14-cloud-amd64"),
            Ordering::Equal
        );
        assert_eq!(compare_releases("6.12.1", "7.0.0"), Ordering::Less);
    }

    fn write_kernel(root: &Path, release: &str, config: &str) {
        let dir = root.join(release);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vmlinuz"), fake_bzimage(release)).unwrap();
        std::fs::write(dir.join("config"), config).unwrap();
    }

    #[test]
    fn discovery_prefers_the_newest_fit_kernel_and_explains_rejections() {
        let cache = tempfile::tempdir().unwrap();
        let shared = tempfile::tempdir().unwrap();
        write_kernel(cache.path(), "7.2.9-cloud-amd64", FIT);
        write_kernel(
            cache.path(),
            "7.4.0-cloud-amd64",
            &FIT.replace(
                "CONFIG_SCHED_CLASS_EXT=y",
                "# CONFIG_SCHED_CLASS_EXT is not set",
            ),
        );
        write_kernel(shared.path(), "7.3.0-cloud-amd64", FIT);
        std::fs::create_dir_all(cache.path().join(".partial-7.5.0")).unwrap();
        let (found, rejected) = discover(cache.path(), &[shared.path().to_path_buf()]);
        let names: Vec<_> = found
            .iter()
            .map(|k| (k.release.as_str(), k.origin.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("7.3.0-cloud-amd64", KernelOrigin::Shared),
                ("7.2.9-cloud-amd64", KernelOrigin::Cache)
            ]
        );
        assert_eq!(rejected.len(), 1);
        assert!(
            rejected[0].reason.contains("CONFIG_SCHED_CLASS_EXT"),
            "{}",
            rejected[0].reason
        );
    }

    #[test]
    fn on_equal_releases_the_cache_wins() {
        let cache = tempfile::tempdir().unwrap();
        let shared = tempfile::tempdir().unwrap();
        write_kernel(shared.path(), "7.2.13-cloud-amd64", FIT);
        write_kernel(cache.path(), "7.2.13-cloud-amd64", FIT);
        let (found, _) = discover(cache.path(), &[shared.path().to_path_buf()]);
        assert_eq!(found[0].origin, KernelOrigin::Cache);
    }

    #[test]
    fn missing_or_corrupt_kernels_name_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let err = format!(
            "{:#}",
            Kernel::open(&dir.path().join("nope"), KernelOrigin::Explicit).unwrap_err()
        );
        assert!(
            err.contains("does not exist") && err.contains("custos vm kernel"),
            "{err}"
        );
        let junk = dir.path().join("vmlinuz");
        std::fs::write(&junk, b"not a kernel at all").unwrap();
        let err = format!(
            "{:#}",
            Kernel::open(&junk, KernelOrigin::Explicit).unwrap_err()
        );
        assert!(
            err.contains("bzImage") && err.contains("custos vm kernel"),
            "{err}"
        );
        std::fs::write(&junk, fake_bzimage("7.0.0")).unwrap();
        let err = format!(
            "{:#}",
            Kernel::open(&junk, KernelOrigin::Explicit).unwrap_err()
        );
        assert!(err.contains("no kernel config"), "{err}");
    }
}
