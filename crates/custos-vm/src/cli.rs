//! `custos vm`: run commands in a sched_ext-capable VM, provision its kernel.

use crate::kernel::{self, Kernel, KernelOrigin};
use crate::provision::{self, Source};
use crate::runner::{self, KvmMode, Streams, VmError, VmSpec};
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum VmCommand {
    /// Boot the kernel and run COMMAND as root inside it; exits with COMMAND's code.
    ///
    /// The host root is shared read-only; /tmp and /boot are tmpfs in the guest.
    /// Exit 124: timed out (QEMU killed); 125: the VM failed before COMMAND finished.
    Run(RunArgs),
    /// Download the newest Debian cloud kernel built with sched_ext into the cache
    /// (or fall back to a cached or shared one) and print which one is used.
    Kernel(KernelArgs),
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Virtual CPUs.
    #[arg(long, default_value_t = 2)]
    pub cpus: u32,
    /// Guest memory (QEMU size syntax: 2G, 1536M).
    #[arg(long, default_value = "2G")]
    pub mem: String,
    /// Kernel to boot: a bzImage with `config` beside it, or a directory holding both.
    /// Default: the newest provisioned kernel.
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Host directory the guest may write, at the same path (repeatable).
    #[arg(long = "share", value_name = "DIR")]
    pub shares: Vec<PathBuf>,
    /// Seconds before QEMU is killed and the run fails.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Hardware virtualisation.
    #[arg(long, value_enum, default_value_t = KvmMode::Auto)]
    pub kvm: KvmMode,
    /// Set an environment variable for COMMAND (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Extra kernel command-line option (repeatable).
    #[arg(long = "append", value_name = "OPTION")]
    pub append: Vec<String>,
    /// Attach the guest to this host TAP device (`ip tuntap add dev NAME mode
    /// tap`): a virtio NIC the guest configures itself, no NAT between.
    #[arg(long, value_name = "NAME")]
    pub tap: Option<String>,
    /// QEMU CPU model (-cpu), e.g. `qemu64`. Default: virtme-ng's (`max`
    /// under emulation, `host` under KVM).
    #[arg(long, value_name = "MODEL", value_parser = parse_cpu_model)]
    pub cpu_model: Option<String>,
    /// No progress lines: stderr carries only COMMAND's stderr.
    #[arg(short, long)]
    pub quiet: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct KernelArgs {
    /// Don't ask Debian; pick among cached and shared kernels.
    #[arg(long)]
    pub offline: bool,
    /// List every kernel found and why rejected ones are unusable.
    #[arg(long)]
    pub list: bool,
    /// Debian mirror.
    #[arg(long, default_value = "http://deb.debian.org/debian")]
    pub mirror: String,
    /// Debian suite to take the kernel from.
    #[arg(long, default_value = "unstable")]
    pub suite: String,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))?;
    if k.is_empty() {
        return Err(format!("empty variable name in {s:?}"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// A QEMU CPU model with its feature flags (`max,-avx2`): one word, since it
/// goes to QEMU inside a longer option string.
fn parse_cpu_model(s: &str) -> Result<String, String> {
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ",.+-_=".contains(c))
    {
        return Err(format!(
            "not a QEMU CPU model: {s:?} (e.g. qemu64, max,-avx2,-fma)"
        ));
    }
    Ok(s.to_string())
}

pub fn run(cmd: VmCommand) -> Result<i32> {
    match cmd {
        VmCommand::Run(args) => run_command(args),
        VmCommand::Kernel(args) => kernel_command(args),
    }
}

fn run_command(args: RunArgs) -> Result<i32> {
    let kernel = match &args.kernel {
        Some(path) => Kernel::open(path, KernelOrigin::Explicit)?,
        None => kernel::select_default()?,
    };
    let shares = args
        .shares
        .iter()
        .map(|s| {
            std::fs::canonicalize(s).map_err(|e| anyhow::anyhow!("--share {}: {e}", s.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    let spec = VmSpec {
        kernel,
        cpus: args.cpus,
        memory: args.mem,
        shares,
        timeout: Duration::from_secs(args.timeout),
        kvm: args.kvm,
        quiet: args.quiet,
        env: args.env,
        cwd: None,
        append: args.append,
        tap: args.tap,
        cpu_model: args.cpu_model,
    };
    runner::handle_interrupts();
    match runner::run(&spec, &args.command, Streams::Forward) {
        Ok(out) => Ok(out.code),
        Err(e) => {
            let code = match e.downcast_ref::<VmError>() {
                Some(VmError::Timeout { .. }) => 124,
                Some(VmError::Interrupted) => 130,
                _ => 125,
            };
            eprintln!("custos vm: {e:#}");
            Ok(code)
        }
    }
}

fn kernel_command(args: KernelArgs) -> Result<i32> {
    if args.list {
        let (found, rejected) = kernel::discover(&kernel::cache_dir(), &kernel::shared_dirs());
        for (i, k) in found.iter().enumerate() {
            println!(
                "{} {}\t{}\t{}",
                if i == 0 { "*" } else { " " },
                k.release,
                k.origin,
                k.vmlinuz.display()
            );
        }
        for r in rejected {
            println!("  rejected {}: {}", r.path.display(), r.reason);
        }
        return Ok(if found.is_empty() { 1 } else { 0 });
    }
    let source = Source {
        mirror: args.mirror,
        suite: args.suite,
        ..Source::default()
    };
    let k = provision::provision(&source, args.offline)?;
    eprintln!(
        "custos vm kernel: using {} ({}) at {}",
        k.release,
        k.origin,
        k.vmlinuz.display()
    );
    println!("{}", k.release);
    Ok(0)
}
