//! Runs one command in a VM and brings back its exit code, stdout and stderr.
//!
//! The sched_ext kernel has no 9p, no overlayfs and no virtio-console, so:
//! the host root is shared read-only over virtiofs (virtme-ng does that), the
//! guest gets tmpfs where it must write (`/tmp`, `/boot`), and everything that
//! comes back travels through a shared control directory on the host — the
//! command's stdout/stderr files, a `started` marker and its exit code — never
//! through the console.

use crate::kernel::Kernel;
use crate::tools;
use anyhow::{bail, Context, Result};
use std::fmt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Kernel command-line options every guest gets. Emulated CPUs run unevenly,
/// which trips the RCU stall detector, and sched_ext treats an RCU stall as
/// fatal for the BPF scheduler; the scheduler's own watchdog stays in force.
pub const GUEST_CMDLINE: &str = "rcupdate.rcu_cpu_stall_timeout=300";

/// Whether to use hardware virtualisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KvmMode {
    /// KVM when it works on this host (tried once, verdict remembered), else emulation.
    Auto,
    /// KVM or fail.
    On,
    /// Software emulation only.
    Off,
}

/// What to boot and how.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub kernel: Kernel,
    pub cpus: u32,
    /// QEMU memory size, e.g. "2G".
    pub memory: String,
    /// Host directories writable from the guest at the same path.
    pub shares: Vec<PathBuf>,
    /// Whole-run limit; past it QEMU is killed and the run fails.
    pub timeout: Duration,
    pub kvm: KvmMode,
    /// No progress lines on stderr.
    pub quiet: bool,
    /// Extra environment for the command (PATH is the host's already).
    pub env: Vec<(String, String)>,
    /// Working directory in the guest (default: the caller's).
    pub cwd: Option<PathBuf>,
    /// Extra kernel command-line options.
    pub append: Vec<String>,
    /// A host TAP device to attach the guest to (a virtio NIC; the guest
    /// gives it an address itself): a network between host and guest without
    /// NAT, so two machines' provenance meets at real connections.
    pub tap: Option<String>,
    /// QEMU's CPU model (`-cpu`); None: virtme-ng's choice (`max` under
    /// emulation, `host` under KVM). Under emulation a model without AVX2
    /// and FMA (`qemu64`) makes floating-point code that picks its kernels
    /// by CPUID several times faster: QEMU emulates those instructions
    /// slowly (bench/placement/README.md).
    pub cpu_model: Option<String>,
}

impl VmSpec {
    pub fn new(kernel: Kernel) -> VmSpec {
        VmSpec {
            kernel,
            cpus: 2,
            memory: "2G".into(),
            shares: Vec::new(),
            timeout: Duration::from_secs(900),
            kvm: KvmMode::Auto,
            quiet: true,
            env: Vec::new(),
            cwd: None,
            append: Vec::new(),
            tap: None,
            cpu_model: None,
        }
    }
}

/// Where the command's output goes while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// Collected into [`VmOutput`] when the run ends.
    Capture,
    /// Copied to this process's stdout/stderr as it arrives.
    Forward,
}

/// What came back from the guest.
#[derive(Debug)]
pub struct VmOutput {
    pub code: i32,
    /// Empty with [`Streams::Forward`].
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// From QEMU start to the command's start.
    pub boot_time: Duration,
    pub used_kvm: bool,
}

/// Why a run produced no exit code.
#[derive(Debug)]
pub enum VmError {
    /// The run hit its timeout; QEMU was killed.
    Timeout {
        after: Duration,
        booted: bool,
        log_tail: String,
    },
    /// The guest ended without running the command to completion.
    GuestFailed { reason: String, log_tail: String },
    /// Ctrl-C; QEMU was killed.
    Interrupted,
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmError::Timeout {
                after,
                booted,
                log_tail,
            } => {
                let stage = if *booted {
                    "the command was still running"
                } else {
                    "the guest had not booted: is the kernel bootable? `custos vm kernel` provisions a known-good one"
                };
                write!(
                    f,
                    "VM timed out after {} s ({stage}); QEMU killed",
                    after.as_secs()
                )?;
                if !log_tail.is_empty() {
                    write!(f, "\nlast lines of the VM log:\n{log_tail}")?;
                }
                Ok(())
            }
            VmError::GuestFailed { reason, log_tail } => {
                write!(f, "{reason}")?;
                if !log_tail.is_empty() {
                    write!(f, "\nlast lines of the VM log:\n{log_tail}")?;
                }
                Ok(())
            }
            VmError::Interrupted => write!(f, "interrupted; QEMU killed"),
        }
    }
}

impl std::error::Error for VmError {}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes Ctrl-C (and SIGTERM, SIGHUP, SIGQUIT) end a running VM instead of orphaning QEMU,
/// which runs in its own process group and would not see the signal.
pub fn handle_interrupts() {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGHUP, handler);
        libc::signal(libc::SIGQUIT, handler);
    }
}

/// Ends the guest's process group (vng, QEMU, virtiofsd) on every way out of
/// this process. Returns and errors go through `Drop`; a signal this process
/// cannot catch (SIGKILL) or a crash closes the pipe a watchdog process waits
/// on, and the watchdog, in a process group of its own, kills the guest's.
struct GuestGuard {
    pgid: i32,
    watchdog: std::process::Child,
    _pipe: std::os::fd::OwnedFd,
}

impl GuestGuard {
    fn start(pgid: i32) -> Result<GuestGuard> {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fds we then own; close-on-exec keeps the
        // write end out of every other child.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error())
                .context("creating the guest watchdog's pipe");
        }
        // SAFETY: both fds were just created and are owned here only.
        let (read, write) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!("read _ ; kill -s KILL -- -{pgid} 2>/dev/null"))
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting the guest watchdog")?;
        Ok(GuestGuard {
            pgid,
            watchdog,
            _pipe: write,
        })
    }

    fn kill(&self) {
        // SAFETY: plain kill(2) on the process group we created.
        unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
    }
}

impl Drop for GuestGuard {
    fn drop(&mut self) {
        self.kill();
        // The group is gone: the watchdog must not kill a later group of that id.
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// Quotes a string for POSIX sh.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `/tmp/X` for a path `/tmp/X/...` (not /tmp itself).
fn tmp_top_dir(path: &Path) -> Option<PathBuf> {
    let mut parts = path.strip_prefix("/tmp").ok()?.components();
    parts.next().map(|top| Path::new("/tmp").join(top))
}

/// The script the guest runs: prepare a writable /tmp and /boot without
/// losing shares under /tmp, mark the start, run the command, leave its
/// exit code. Setup failures are reported apart from the command's stderr.
fn guest_script(ctl: &Path, spec: &VmSpec, command: &[String], path_env: &str) -> String {
    let q = |p: &Path| sh_quote(&p.to_string_lossy());
    let cwd = spec
        .cwd
        .clone()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("/"));
    // A checkout under /tmp (CI's, say) would vanish under the guest's tmpfs
    // with the binaries and scripts in it: its top directory there is kept
    // like a share, first, so deeper shares land on top of it.
    let mut shares: Vec<String> = tmp_top_dir(&cwd).iter().map(|p| q(p)).collect();
    shares.extend(spec.shares.iter().map(|p| q(p)));
    shares.push(q(ctl));
    let shares = shares.join(" ");
    let mut env = vec![
        ("PATH".to_string(), path_env.to_string()),
        ("HOME".to_string(), "/root".to_string()),
    ];
    for var in ["RUST_BACKTRACE", "RUST_LOG", "TERM"] {
        if let Ok(v) = std::env::var(var) {
            env.push((var.to_string(), v));
        }
    }
    env.extend(spec.env.iter().cloned());
    let exports: String = env
        .iter()
        .map(|(k, v)| format!("export {k}={}\n", sh_quote(v)))
        .collect();
    let argv: Vec<String> = command.iter().map(|a| sh_quote(a)).collect();
    format!(
        r#"#!/bin/sh
# Written by custos vm.
ctl={ctl}
(
  set -e
  # Shares under /tmp would vanish under a new tmpfs there: park them in /run and bring them back.
  i=0
  for d in {shares}; do
    case "$d" in /tmp/*) mkdir -p /run/custos-keep/$i; mount --bind "$d" /run/custos-keep/$i;; esac
    i=$((i+1))
  done
  if ! (: > /tmp/.custos-probe) 2>/dev/null; then mount -t tmpfs -o mode=1777 tmpfs /tmp; fi
  i=0
  for d in {shares}; do
    case "$d" in /tmp/*) mkdir -p "$d"; mount --bind /run/custos-keep/$i "$d";; esac
    i=$((i+1))
  done
  # libbpf reads Kconfig values from here.
  mount -t tmpfs -o mode=755 tmpfs /boot
  cp {config} "/boot/config-$(uname -r)"
  mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
{modules}) > "$ctl/setup.log" 2>&1 || {{ touch "$ctl/setup-failed"; exit 1; }}
# The host's seal key when it has one; else a key of this guest's own, where
# the read-only root lets one be made.
[ -e /var/lib/custos/seal.key ] || [ -n "${{CUSTOS_SEAL_KEY:-}}" ] || export CUSTOS_SEAL_KEY=/tmp/custos-seal/seal.key
# The kernel's log, so that a guest that dies can still say why.
(dmesg --follow > "$ctl/dmesg" 2>&1 &)
cat /proc/uptime > "$ctl/started"
cd {cwd} 2>/dev/null || cd /
{exports}{argv} < /dev/null > "$ctl/stdout" 2> "$ctl/stderr"
echo $? > "$ctl/rc.partial" && mv "$ctl/rc.partial" "$ctl/rc"
"#,
        ctl = q(ctl),
        config = q(&spec.kernel.config),
        // --tap: the NIC's driver (modules only in this kernel).
        modules = match spec.tap {
            Some(_) => spec
                .kernel
                .network_modules()
                .unwrap_or_default()
                .iter()
                .map(|m| format!("  PATH=\"$PATH:/usr/sbin:/sbin\" insmod {}\n", q(m)))
                .collect::<String>(),
            None => String::new(),
        },
        cwd = q(&cwd),
        argv = argv.join(" "),
    )
}

/// Follows a file that the guest appends to, copying new bytes out.
struct Tail {
    path: PathBuf,
    offset: u64,
}

impl Tail {
    fn pump(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Ok(());
        };
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        if !buf.is_empty() {
            self.offset += buf.len() as u64;
            out.write_all(&buf)?;
            out.flush()?;
        }
        Ok(())
    }
}

fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Remembers that KVM failed on this host so later runs skip the attempt.
fn kvm_verdict_path() -> PathBuf {
    crate::kernel::cache_dir().with_file_name("kvm-unusable")
}

fn host_key() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn kvm_worth_trying(mode: KvmMode) -> bool {
    match mode {
        KvmMode::Off => false,
        KvmMode::On => true,
        KvmMode::Auto => {
            let openable = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm")
                .is_ok();
            let known_bad = std::fs::read_to_string(kvm_verdict_path())
                .is_ok_and(|v| v.lines().next() == Some(host_key().as_str()));
            openable && !known_bad
        }
    }
}

/// Runs `command` in a VM booted from `spec`.
pub fn run(spec: &VmSpec, command: &[String], streams: Streams) -> Result<VmOutput> {
    if command.is_empty() {
        bail!("no command given to run in the VM");
    }
    for share in &spec.shares {
        if !share.is_absolute() || !share.is_dir() {
            bail!(
                "--share {} must be an existing directory given by absolute path",
                share.display()
            );
        }
    }
    if let Some(tap) = &spec.tap {
        if tap.is_empty()
            || !tap
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        {
            bail!("--tap {tap:?}: a network device name (letters, digits, '_', '.', '-')");
        }
        if !Path::new("/sys/class/net").join(tap).exists() {
            bail!("--tap {tap}: no such network device; create it first: ip tuntap add dev {tap} mode tap");
        }
        if spec.kernel.network_modules().is_none() {
            bail!(
                "--tap needs the guest's NIC driver, and the kernel at {} has no {}/ with {}: run `custos vm kernel` to fetch them",
                spec.kernel.vmlinuz.display(),
                crate::kernel::NETWORK_MODULES_DIR,
                crate::kernel::NETWORK_MODULES.join(", ")
            );
        }
    }
    let tools = tools::locate()?;
    let ctl = tempfile::Builder::new()
        .prefix("custos-vm-")
        .tempdir()
        .context("cannot create the VM control directory")?;
    let path_env = tools.path_env.to_string_lossy().into_owned();
    std::fs::write(
        ctl.path().join("guest.sh"),
        guest_script(ctl.path(), spec, command, &path_env),
    )?;

    // Booted again, from a clean control directory, in two cases where no
    // guest ran the command: QEMU found no virtiofsd socket (virtme-ng takes
    // virtiofsd's pid file as the sign it is ready, but the daemon writes it
    // before it binds the socket; on a loaded host QEMU can get there first,
    // seen once in CI), up to VIRTIOFS_ATTEMPTS boots; and KVM failed under
    // `auto`, once, with emulation.
    let mut kvm = kvm_worth_trying(spec.kvm);
    let mut attempt = 1;
    loop {
        match boot(spec, &tools, ctl.path(), streams, kvm) {
            Err(e) if attempt < VIRTIOFS_ATTEMPTS && virtiofs_was_not_up(&e) => {
                if !spec.quiet {
                    eprintln!("custos vm: QEMU started before virtiofsd listened; booting again ({}/{VIRTIOFS_ATTEMPTS})", attempt + 1);
                }
                attempt += 1;
            }
            Err(e) if kvm && spec.kvm == KvmMode::Auto && kvm_failure(&e) => {
                let why = match e.downcast_ref::<VmError>() {
                    Some(VmError::GuestFailed { log_tail, .. }) => log_tail
                        .lines()
                        .find(|l| l.to_lowercase().contains("kvm"))
                        .unwrap_or("")
                        .to_string(),
                    _ => String::new(),
                };
                if !spec.quiet {
                    eprintln!("custos vm: KVM is not usable on this host ({why}); using emulation from now on");
                }
                let verdict = kvm_verdict_path();
                if let Some(dir) = verdict.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = std::fs::write(verdict, format!("{}\n{why}\n", host_key()));
                kvm = false;
                attempt = 1;
            }
            other => return other,
        }
        for f in [
            "started",
            "stdout",
            "stderr",
            "rc",
            "setup.log",
            "setup-failed",
            "vng.log",
        ] {
            let _ = std::fs::remove_file(ctl.path().join(f));
        }
    }
}

/// Boots QEMU may refuse because virtiofsd was not listening yet (see `run`).
const VIRTIOFS_ATTEMPTS: u32 = 3;

/// How `boot` says QEMU exited before the guest ran the command.
const NEVER_STARTED: &str = "the guest never started the command";

/// A boot QEMU refused because a virtiofs socket was not there to connect to.
fn virtiofs_was_not_up(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<VmError>(), Some(VmError::GuestFailed { reason, log_tail })
        if reason.starts_with(NEVER_STARTED) && log_tail.lines().any(|l| l.contains("-chardev socket,id=charvirtfs") && l.contains("Failed to connect")))
}

/// The line of QEMU's log saying KVM stopped the guest, if it did.
fn kvm_stopped_the_guest(log: &str) -> Option<&str> {
    // Console output and QEMU's stderr share the file, so a line may start
    // with another writer's bytes (NULs, seen here).
    const MARKS: [&str; 3] = [
        "KVM internal error",
        "error: kvm run failed",
        "KVM: entry failed",
    ];
    log.lines().find_map(|l| {
        MARKS
            .iter()
            .find_map(|m| l.find(m))
            .map(|i| l[i..].trim_end())
    })
}

/// A KVM attempt that died before the guest started, blaming KVM.
fn kvm_failure(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<VmError>(), Some(VmError::GuestFailed { log_tail, .. }) if log_tail.to_lowercase().contains("kvm"))
}

fn boot(
    spec: &VmSpec,
    tools: &tools::Tools,
    ctl: &Path,
    streams: Streams,
    kvm: bool,
) -> Result<VmOutput> {
    let mut append = vec![GUEST_CMDLINE.to_string()];
    append.extend(spec.append.iter().cloned());
    let mut cmd = Command::new(&tools.vng);
    // --verbose puts the serial console (kernel messages, panics) into vng.log.
    cmd.arg("--verbose").arg("--run").arg(&spec.kernel.vmlinuz);
    if !kvm {
        // One TCG thread for all vCPUs. With a thread per vCPU, QEMU does not
        // keep live kernel text patching coherent across vCPUs: when sched_ext
        // flips its static keys, another vCPU can execute the patch's int3
        // and the guest oopses ("Oops: int3" in try_to_wake_up). Slower, but
        // the kernel under test stays sound.
        cmd.arg("--disable-kvm")
            .arg("--qemu-opts=-accel tcg,thread=single");
    }
    if let Some(model) = &spec.cpu_model {
        // After virtme-ng's own -cpu: QEMU takes the last one.
        cmd.arg(format!("--qemu-opts=-cpu {model}"));
    }
    if let Some(tap) = &spec.tap {
        cmd.arg(format!("--qemu-opts=-netdev tap,id=custosnet,ifname={tap},script=no,downscript=no -device virtio-net-pci,netdev=custosnet"));
    }
    cmd.args([
        "--cpus",
        &spec.cpus.to_string(),
        "--memory",
        &spec.memory,
        "--user",
        "root",
    ]);
    cmd.arg("--rwdir").arg(ctl);
    for share in &spec.shares {
        cmd.arg("--rwdir").arg(share);
    }
    cmd.arg("--append").arg(append.join(" "));
    cmd.arg("--").arg(format!(
        "sh {}",
        sh_quote(&ctl.join("guest.sh").to_string_lossy())
    ));
    let log = std::fs::File::create(ctl.join("vng.log"))?;
    cmd.env("PATH", &tools.path_env)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0); // so a timeout can kill QEMU and virtiofsd with it

    if !spec.quiet {
        let accel = if kvm { "KVM" } else { "QEMU emulation" };
        eprintln!(
            "custos vm: booting {} ({}, {accel}, {} CPUs, {})…",
            spec.kernel.release, spec.kernel.origin, spec.cpus, spec.memory
        );
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", tools.vng.display()))?;
    let pgid = child.id() as i32;
    let guard = GuestGuard::start(pgid)?;
    let kill = || guard.kill();

    let mut out = Tail {
        path: ctl.join("stdout"),
        offset: 0,
    };
    let mut err = Tail {
        path: ctl.join("stderr"),
        offset: 0,
    };
    let mut boot_time = None;
    let mut last_note = Instant::now();
    let mut last_kvm_check = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if boot_time.is_none() && ctl.join("started").exists() {
            boot_time = Some(start.elapsed());
            if !spec.quiet {
                eprintln!(
                    "custos vm: command started after {:.1} s",
                    start.elapsed().as_secs_f64()
                );
            }
        }
        if boot_time.is_none() && !spec.quiet && last_note.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "custos vm: still booting ({} s)…",
                start.elapsed().as_secs()
            );
            last_note = Instant::now();
        }
        if streams == Streams::Forward {
            out.pump(&mut std::io::stdout())?;
            err.pump(&mut std::io::stderr())?;
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            kill();
            let _ = child.wait();
            return Err(VmError::Interrupted.into());
        }
        // A KVM guest that hits an instruction KVM cannot emulate stops with
        // QEMU still running ("KVM internal error", seen on hosts whose
        // nested KVM is incomplete): fail now, so `auto` falls back to
        // emulation instead of waiting for the timeout.
        if kvm && boot_time.is_none() && last_kvm_check.elapsed() >= Duration::from_secs(1) {
            last_kvm_check = Instant::now();
            let log = std::fs::read_to_string(ctl.join("vng.log")).unwrap_or_default();
            if let Some(line) = kvm_stopped_the_guest(&log) {
                kill();
                let _ = child.wait();
                // The line first: the register dump after it is longer than a tail.
                return Err(VmError::GuestFailed {
                    reason: "KVM stopped the guest before it booted".into(),
                    log_tail: format!("{line}\n{}", log_tail(&ctl.join("vng.log"), 15)),
                }
                .into());
            }
        }
        if start.elapsed() >= spec.timeout {
            kill();
            let _ = child.wait();
            return Err(VmError::Timeout {
                after: spec.timeout,
                booted: boot_time.is_some(),
                log_tail: log_tail(&ctl.join("vng.log"), 15),
            }
            .into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // vng is gone; make sure nothing it started lingers.
    kill();

    let rc = std::fs::read_to_string(ctl.join("rc"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    let Some(code) = rc else {
        let reason = if ctl.join("setup-failed").exists() {
            format!(
                "guest setup failed before the command ran:\n{}",
                log_tail(&ctl.join("setup.log"), 20)
            )
        } else if boot_time.is_some() {
            format!("the guest stopped before the command finished (vng exited with {status})")
        } else {
            format!("{NEVER_STARTED} (vng exited with {status}); is the kernel bootable? `custos vm kernel` provisions a known-good one")
        };
        let mut tail = log_tail(&ctl.join("vng.log"), 15);
        let kernel = log_tail(&ctl.join("dmesg"), 25);
        if !kernel.is_empty() {
            tail = format!("{tail}\nlast kernel messages:\n{kernel}");
        }
        // The control directory goes away with the run; a dead guest's whole console stays.
        let kept = std::env::temp_dir().join(format!(
            "custos-vm-console-{}-{}.log",
            std::process::id(),
            start.elapsed().as_millis()
        ));
        if std::fs::copy(ctl.join("vng.log"), &kept).is_ok() {
            tail = format!(
                "{tail}\nthe whole console log is kept in {}",
                kept.display()
            );
        }
        return Err(VmError::GuestFailed {
            reason,
            log_tail: tail,
        }
        .into());
    };
    let (stdout, stderr) = match streams {
        Streams::Forward => {
            out.pump(&mut std::io::stdout())?;
            err.pump(&mut std::io::stderr())?;
            (Vec::new(), Vec::new())
        }
        Streams::Capture => (
            std::fs::read(ctl.join("stdout")).unwrap_or_default(),
            std::fs::read(ctl.join("stderr")).unwrap_or_default(),
        ),
    };
    Ok(VmOutput {
        code,
        stdout,
        stderr,
        boot_time: boot_time.unwrap_or_default(),
        used_kvm: kvm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_kvm_stopped_is_recognised_in_the_log() {
        // As QEMU 7.2 logged it here (a BMI2 instruction in the kernel's decompressor).
        let log = "Probing EDD (edd=off to disable)... ok\r\r\n\n\0\0\0KVM internal error. Suberror: 1\nextra data[0]: 0x0000000000000001\nemulation failure\nRAX=000000000c692990";
        assert_eq!(
            kvm_stopped_the_guest(log),
            Some("KVM internal error. Suberror: 1")
        );
        assert!(kvm_failure(
            &VmError::GuestFailed {
                reason: String::new(),
                log_tail: log.into()
            }
            .into()
        ));
        assert_eq!(
            kvm_stopped_the_guest("Linux version 7.2.13\nrun-init\n"),
            None
        );
    }

    #[test]
    fn a_boot_before_virtiofsd_listened_is_recognised() {
        // As vng's log ended in CI (stop 42).
        let failed = |reason: &str, log_tail: &str| -> anyhow::Error {
            VmError::GuestFailed {
                reason: reason.into(),
                log_tail: log_tail.into(),
            }
            .into()
        };
        let log = "virtme: waiting for virtiofsd to start\nvirtme: waiting for virtiofsd to start\nqemu-system-x86_64: -chardev socket,id=charvirtfs17,path=/tmp/virtmeg8betiy8: Failed to connect to '/tmp/virtmeg8betiy8': No such file or directory";
        let never =
            format!("{NEVER_STARTED} (vng exited with exit status: 255); is the kernel bootable?");
        assert!(virtiofs_was_not_up(&failed(&never, log)));
        // A guest that ran is never booted again, whatever the log says.
        assert!(!virtiofs_was_not_up(&failed(
            "the guest stopped before the command finished (vng exited with exit status: 255)",
            log
        )));
        assert!(!virtiofs_was_not_up(&failed(
            &never,
            "Kernel panic - not syncing: VFS: Unable to mount root fs"
        )));
    }

    #[test]
    fn quoting_survives_quotes_and_spaces() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", sh_quote("x'y \"$HOME\" `z`")))
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"x'y \"$HOME\" `z`");
    }

    #[test]
    fn a_checkout_under_tmp_keeps_its_top_directory() {
        assert_eq!(
            tmp_top_dir(Path::new("/tmp/ci/main/crates/custos")),
            Some(PathBuf::from("/tmp/ci"))
        );
        assert_eq!(tmp_top_dir(Path::new("/tmp")), None);
        assert_eq!(tmp_top_dir(Path::new("/work/main")), None);
        assert_eq!(tmp_top_dir(Path::new("/tmpx/a")), None);
    }
}
