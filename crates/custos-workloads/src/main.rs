//! `custos-workload`: the real workloads Custos's tests and benchmarks run
//! under each scheduler and collector. Each prints one JSON object on stdout.
//!
//! They are small on purpose: a latency figure should measure the scheduler's
//! wake-up path, not an interpreter, so the ping-pongs are two processes
//! bouncing one byte through the kernel and nothing else.
//!
//! Not for: generating provenance graphs (bench/store has its own generator).

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use serde_json::json;
use std::ffi::CString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "custos-workload",
    about = "Workloads for Custos tests and benchmarks; one JSON result on stdout"
)]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// Round trips of one byte between two processes over a pipe pair.
    PipePingpong {
        #[arg(short = 'n', long, default_value_t = 20000)]
        iterations: u64,
    },
    /// Round trips of one byte between two processes over an AF_UNIX socketpair.
    UnixPingpong {
        #[arg(short = 'n', long, default_value_t = 20000)]
        iterations: u64,
    },
    /// fork + exec + wait of a trivial program, timed one by one.
    ForkExec {
        #[arg(short = 'n', long, default_value_t = 500)]
        iterations: u64,
        /// Program to exec.
        #[arg(long, default_value = "/bin/true")]
        program: String,
    },
    /// A fixed amount of CPU work; reports how long it took.
    Cpu {
        /// Work units (each about a million integer operations).
        #[arg(long, default_value_t = 2000)]
        units: u64,
    },
    /// Processes issuing openat+close as fast as they can: a syscall storm.
    Storm {
        #[arg(long, default_value_t = 4)]
        procs: u32,
        /// Stop after this long.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// File each open names.
        #[arg(long, default_value = "/proc/self/stat")]
        path: PathBuf,
    },
    /// An innocent task beside a flood: wakes every period (an absolute
    /// deadline, clock_nanosleep, which no collector traces), spins the
    /// work, and records how late each wake-up ran, until SIGINT/SIGTERM or
    /// --seconds. It makes no traced syscall until it prints its result.
    Ticker {
        #[arg(long, default_value_t = 10.0)]
        period_ms: f64,
        #[arg(long, default_value_t = 100.0)]
        work_us: f64,
        /// Stop after this long at the latest.
        #[arg(long, default_value_t = 3600.0)]
        seconds: f64,
    },
    /// Creates a directory tree of N files (for `find`-based super producers).
    Tree {
        dir: PathBuf,
        #[arg(long, default_value_t = 20000)]
        files: u64,
        /// Files per directory.
        #[arg(long, default_value_t = 100)]
        fanout: u64,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.workload {
        Workload::PipePingpong { iterations } => pingpong(Channel::Pipe, iterations),
        Workload::UnixPingpong { iterations } => pingpong(Channel::Unix, iterations),
        Workload::ForkExec {
            iterations,
            program,
        } => fork_exec(iterations, &program),
        Workload::Cpu { units } => cpu(units),
        Workload::Storm {
            procs,
            seconds,
            path,
        } => storm(procs, Duration::from_secs_f64(seconds), &path),
        Workload::Tree { dir, files, fanout } => tree(&dir, files, fanout),
        Workload::Ticker {
            period_ms,
            work_us,
            seconds,
        } => ticker(period_ms, work_us, seconds),
    };
    match result {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("custos-workload: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Mean and percentiles of per-operation latencies, in nanoseconds.
fn latency_summary(mut ns: Vec<u64>) -> serde_json::Value {
    ns.sort_unstable();
    let pct = |p: f64| ns[((ns.len() - 1) as f64 * p).round() as usize];
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64;
    json!({ "mean_ns": mean, "p50_ns": pct(0.5), "p99_ns": pct(0.99), "max_ns": ns[ns.len() - 1] })
}

fn check(ret: libc::c_int, what: &str) -> Result<libc::c_int> {
    if ret < 0 {
        bail!("{what}: {}", std::io::Error::last_os_error());
    }
    Ok(ret)
}

#[derive(Clone, Copy)]
enum Channel {
    Pipe,
    Unix,
}

/// Two fds each way; the child echoes every byte back until EOF.
fn pingpong(channel: Channel, iterations: u64) -> Result<serde_json::Value> {
    if iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    // (parent writes, child reads) and (child writes, parent reads)
    let (p_w, c_r, c_w, p_r) = match channel {
        Channel::Pipe => {
            let mut a = [0; 2];
            let mut b = [0; 2];
            // SAFETY: pipe(2) fills the two-element arrays.
            unsafe {
                check(libc::pipe(a.as_mut_ptr()), "pipe")?;
                check(libc::pipe(b.as_mut_ptr()), "pipe")?;
            }
            (a[1], a[0], b[1], b[0])
        }
        Channel::Unix => {
            let mut s = [0; 2];
            // SAFETY: socketpair(2) fills the two-element array.
            unsafe {
                check(
                    libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, s.as_mut_ptr()),
                    "socketpair",
                )?
            };
            (s[0], s[1], s[1], s[0])
        }
    };
    // SAFETY: the child only calls read/write/_exit, all async-signal-safe.
    let pid = unsafe { check(libc::fork(), "fork")? };
    if pid == 0 {
        let mut byte = 0u8;
        unsafe {
            // Drop the parent's ends, or the child would keep its own input open and never see EOF.
            libc::close(p_w);
            if p_r != p_w {
                libc::close(p_r);
            }
            while libc::read(c_r, &mut byte as *mut u8 as *mut libc::c_void, 1) == 1 {
                if libc::write(c_w, &byte as *const u8 as *const libc::c_void, 1) != 1 {
                    break;
                }
            }
            libc::_exit(0);
        }
    }
    // SAFETY: closing the child's ends in the parent.
    unsafe {
        libc::close(c_r);
        if c_w != c_r {
            libc::close(c_w);
        }
    }
    let mut lat = Vec::with_capacity(iterations as usize);
    let total = Instant::now();
    let mut byte = 1u8;
    for _ in 0..iterations {
        let t = Instant::now();
        // SAFETY: one-byte reads and writes on fds we own.
        unsafe {
            if libc::write(p_w, &byte as *const u8 as *const libc::c_void, 1) != 1
                || libc::read(p_r, &mut byte as *mut u8 as *mut libc::c_void, 1) != 1
            {
                bail!(
                    "ping-pong partner went away: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let total = total.elapsed();
    // SAFETY: closing our ends lets the child see EOF; then reap it.
    unsafe {
        libc::close(p_w);
        if p_r != p_w {
            libc::close(p_r);
        }
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let name = match channel {
        Channel::Pipe => "pipe-pingpong",
        Channel::Unix => "unix-pingpong",
    };
    Ok(
        json!({ "workload": name, "iterations": iterations, "total_ns": total.as_nanos() as u64, "round_trip": latency_summary(lat) }),
    )
}

fn fork_exec(iterations: u64, program: &str) -> Result<serde_json::Value> {
    if iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    let mut lat = Vec::with_capacity(iterations as usize);
    let total = Instant::now();
    for _ in 0..iterations {
        let t = Instant::now();
        let status = std::process::Command::new(program)
            .status()
            .with_context(|| format!("cannot exec {program}"))?;
        if !status.success() {
            bail!("{program} exited with {status}");
        }
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Ok(
        json!({ "workload": "fork-exec", "iterations": iterations, "total_ns": total.elapsed().as_nanos() as u64, "latency": latency_summary(lat) }),
    )
}

fn cpu_time_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills ts.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn cpu(units: u64) -> Result<serde_json::Value> {
    let start = Instant::now();
    let cpu0 = cpu_time_ns();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..units * 1_000_000 {
        // xorshift: cheap, and its result is printed so it cannot be optimised away.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    Ok(
        json!({ "workload": "cpu", "units": units, "wall_ns": start.elapsed().as_nanos() as u64, "cpu_ns": cpu_time_ns() - cpu0, "checksum": x }),
    )
}

fn storm(procs: u32, duration: Duration, path: &std::path::Path) -> Result<serde_json::Value> {
    if procs == 0 {
        bail!("--procs must be at least 1");
    }
    let cpath = CString::new(path.as_os_str().as_encoded_bytes()).context("path has a NUL byte")?;
    // Each child reports its count through a pipe, 8 bytes.
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the array.
    unsafe { check(libc::pipe(fds.as_mut_ptr()), "pipe")? };
    let start = Instant::now();
    let mut children = Vec::new();
    for _ in 0..procs {
        // SAFETY: the child runs only syscalls and _exit.
        let pid = unsafe { check(libc::fork(), "fork")? };
        if pid == 0 {
            let mut ops: u64 = 0;
            let deadline = start + duration;
            unsafe {
                while !ops.is_multiple_of(256) || Instant::now() < deadline {
                    let fd = libc::openat(libc::AT_FDCWD, cpath.as_ptr(), libc::O_RDONLY);
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    ops += 1;
                }
                libc::write(fds[1], &ops as *const u64 as *const libc::c_void, 8);
                libc::_exit(0);
            }
        }
        children.push(pid);
    }
    let mut total = 0u64;
    // SAFETY: reading the children's 8-byte reports and reaping them.
    unsafe {
        libc::close(fds[1]);
        let mut n = 0u64;
        while libc::read(fds[0], &mut n as *mut u64 as *mut libc::c_void, 8) == 8 {
            total += n;
        }
        for pid in children {
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    let elapsed = start.elapsed();
    Ok(json!({
        "workload": "storm", "procs": procs, "seconds": elapsed.as_secs_f64(),
        "syscalls": total * 2, "syscalls_per_s": (total * 2) as f64 / elapsed.as_secs_f64(),
    }))
}

fn tree(dir: &std::path::Path, files: u64, fanout: u64) -> Result<serde_json::Value> {
    if fanout == 0 {
        bail!("--fanout must be at least 1");
    }
    let start = Instant::now();
    let mut dirs = 0;
    for i in 0..files {
        let sub = dir
            .join(format!("d{:03}", i / fanout / fanout))
            .join(format!("d{:03}", (i / fanout) % fanout));
        if i % fanout == 0 {
            std::fs::create_dir_all(&sub)
                .with_context(|| format!("cannot create {}", sub.display()))?;
            dirs += 1;
        }
        std::fs::write(sub.join(format!("f{i}")), b"x")
            .with_context(|| format!("cannot write in {}", sub.display()))?;
    }
    Ok(
        json!({ "workload": "tree", "dir": dir, "files": files, "dirs": dirs, "wall_ns": start.elapsed().as_nanos() as u64 }),
    )
}

/// See `Workload::Ticker`. The latency of a wake-up is how long after its
/// deadline the task ran; a deadline missed by more than a period is still
/// one sample (the next deadline is the next period after now).
fn ticker(period_ms: f64, work_us: f64, seconds: f64) -> Result<serde_json::Value> {
    // Ranges, so that NaN fails each check too.
    if !((f64::MIN_POSITIVE..=10_000.0).contains(&period_ms)
        && (0.0..=period_ms * 1000.0).contains(&work_us))
    {
        bail!("--period-ms must be in (0, 10000] and --work-us in [0, the period]");
    }
    if !(f64::MIN_POSITIVE..=f64::MAX).contains(&seconds) {
        bail!("--seconds must be positive");
    }
    static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    extern "C" fn on_signal(_: libc::c_int) {
        STOP.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let now = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let period = (period_ms * 1e6) as u64;
    let work = (work_us * 1e3) as u64;
    let start = now();
    let end = start + (seconds * 1e9) as u64;
    let mut late = Vec::with_capacity(((seconds * 1e9) as u64 / period).min(1 << 20) as usize);
    let mut deadline = start + period;
    while !STOP.load(std::sync::atomic::Ordering::Relaxed) && deadline < end {
        let ts = libc::timespec {
            tv_sec: (deadline / 1_000_000_000) as libc::time_t,
            tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: a valid timespec; EINTR (a signal) ends the loop above.
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if r == libc::EINTR {
            continue;
        }
        let woke = now();
        late.push(woke.saturating_sub(deadline));
        while now() < woke + work {
            std::hint::spin_loop();
        }
        deadline += period;
        let t = now();
        if deadline <= t {
            deadline = t + period - (t - deadline) % period;
        }
    }
    if late.is_empty() {
        bail!("stopped before its first wake-up");
    }
    let mut v = latency_summary(late.clone());
    v["wakeups"] = json!(late.len());
    v["period_ms"] = json!(period_ms);
    v["work_us"] = json!(work_us);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpongs_complete_every_round_trip() {
        for ch in [Channel::Pipe, Channel::Unix] {
            let v = pingpong(ch, 200).unwrap();
            assert_eq!(v["iterations"], 200);
            let rt = &v["round_trip"];
            assert!(
                rt["p50_ns"].as_u64().unwrap() > 0
                    && rt["p50_ns"].as_u64() <= rt["max_ns"].as_u64()
            );
        }
    }

    #[test]
    fn fork_exec_runs_the_program_each_time() {
        assert_eq!(fork_exec(5, "/bin/true").unwrap()["iterations"], 5);
        assert!(fork_exec(1, "/bin/false").is_err());
        assert!(fork_exec(1, "/nonexistent").is_err());
    }

    #[test]
    fn storm_counts_the_syscalls_of_every_process() {
        let v = storm(
            2,
            Duration::from_millis(200),
            std::path::Path::new("/proc/self/stat"),
        )
        .unwrap();
        assert!(v["syscalls"].as_u64().unwrap() >= 2 * 2 * 256, "{v}");
    }

    #[test]
    fn tree_writes_the_files_it_claims() {
        let d = tempfile_dir();
        let v = tree(&d, 250, 10).unwrap();
        assert_eq!(v["files"], 250);
        let count = walk(&d);
        assert_eq!(count, 250);
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("custos-tree-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn walk(d: &std::path::Path) -> usize {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| if p.is_dir() { walk(&p) } else { 1 })
            .sum()
    }

    #[test]
    fn the_ticker_refuses_bad_periods_and_reports_its_wakeups() {
        assert!(ticker(0.0, 0.0, 1.0).is_err());
        assert!(ticker(f64::NAN, 0.0, 1.0).is_err());
        assert!(
            ticker(10.0, 10_001.0, 1.0).is_err(),
            "work longer than the period"
        );
        assert!(ticker(10.0, 100.0, 0.0).is_err());
        let v = ticker(5.0, 50.0, 0.1).unwrap();
        // 0.1 s of 5 ms periods: at most 20 wake-ups (fewer when a loaded
        // machine makes it miss deadlines), each a latency sample.
        let n = v["wakeups"].as_u64().unwrap();
        assert!((1..=20).contains(&n), "{v}");
        assert!(v["p99_ns"].as_u64().unwrap() >= v["p50_ns"].as_u64().unwrap());
    }
}
