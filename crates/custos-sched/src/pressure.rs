//! Who the consumers are and how much pressure they are under, for
//! provenance systems other than the Custos collector (which publishes both
//! through its pinned maps).
//!
//! auditd: the kernel's audit status (netlink `AUDIT_GET`) carries the
//! backlog (records queued for auditd), the backlog limit, and `lost`
//! (records the kernel dropped). Availability is the free share of the
//! backlog, consumer lag is the backlog itself.

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use crate::bpf_intf::custos_global_features;
use custos_policy::features::FEATURE_MAX;
use std::collections::BTreeSet;
use std::fs;

/// Thread-group ids of every process whose comm is one of `names`.
pub fn pids_by_name(names: &[String]) -> Result<BTreeSet<u32>> {
    let mut pids = BTreeSet::new();
    if names.is_empty() {
        return Ok(pids);
    }
    for entry in fs::read_dir("/proc").context("cannot list /proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes exit while we scan; a vanished one is simply not a consumer.
        let Ok(comm) = fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        if names.iter().any(|n| n == comm.trim_end()) {
            pids.insert(pid);
        }
    }
    Ok(pids)
}

/// The fields of `struct audit_status` the scheduler uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditStatus {
    pub enabled: u32,
    pub pid: u32,
    pub backlog_limit: u32,
    pub lost: u32,
    pub backlog: u32,
}

impl AuditStatus {
    /// Free share of the backlog in [0, 128]; an unlimited backlog is never full.
    pub fn availability(&self) -> u8 {
        if self.backlog_limit == 0 {
            return 128;
        }
        let free = self.backlog_limit.saturating_sub(self.backlog) as u64;
        (free * 128 / self.backlog_limit as u64) as u8
    }
}

/// The collector's published features (its pinned `global_features`), if
/// the map holds them.
pub fn read_global_features<M: MapCore>(map: &M) -> Option<custos_global_features> {
    let raw = map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).ok()??;
    (raw.len() >= std::mem::size_of::<custos_global_features>())
        // SAFETY: the map's value is this plain-old-data struct.
        .then(|| unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) })
}

/// Ring availability in [0, FEATURE_MAX] as main.bpf.c's ring_availability
/// computes it, in its u64 arithmetic (which wraps): the free share of the
/// fullest ring; FEATURE_MAX while no collector runs.
pub fn ring_availability(g: Option<&custos_global_features>) -> u8 {
    let max = u64::from(FEATURE_MAX);
    g.filter(|g| g.collector_running != 0)
        .and_then(|g| {
            (0..g.ring_size.len())
                .filter(|&r| g.ring_size[r] > 0)
                .map(|r| g.ring_free_bytes[r].wrapping_mul(max) / g.ring_size[r])
                .min()
        })
        .map_or(FEATURE_MAX, |a| a.min(max) as u8)
}

/// The ring that came closest to full while the scheduler looked: its
/// lowest free space, its reserve and its floor, in percent of the ring
/// (100, 0 and 0 until a ring was seen).
pub fn hold_headroom(g: Option<&custos_global_features>, lowest: &[u64]) -> (f64, f64, f64) {
    let mut closest = (100.0, 0.0, 0.0);
    let Some(g) = g else { return closest };
    for (r, &low) in lowest.iter().enumerate().take(g.ring_size.len()) {
        let size = g.ring_size[r];
        if size == 0 || low == u64::MAX {
            continue;
        }
        let pct = |b: u64| b as f64 * 100.0 / size as f64;
        let free = pct(low);
        if free < closest.0 {
            closest = (
                free,
                pct(g.hold_reserve_bytes[r]),
                pct(g.hold_floor_bytes[r]),
            );
        }
    }
    closest
}

const NETLINK_AUDIT: libc::c_int = 9;
const AUDIT_GET: u16 = 1000;

/// Reads the audit status from the kernel (needs CAP_AUDIT_CONTROL).
pub fn audit_status() -> Result<AuditStatus> {
    // SAFETY: plain socket syscalls on a descriptor we own and close.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_AUDIT,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error())
                .context("cannot open the audit netlink socket (kernel without CONFIG_AUDIT?)");
        }
        let result = audit_get(fd);
        libc::close(fd);
        result
    }
}

unsafe fn audit_get(fd: libc::c_int) -> Result<AuditStatus> {
    let mut req = [0u8; 16];
    req[0..4].copy_from_slice(&16u32.to_ne_bytes());
    req[4..6].copy_from_slice(&AUDIT_GET.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    let mut addr: libc::sockaddr_nl = std::mem::zeroed();
    addr.nl_family = libc::AF_NETLINK as u16;
    let sent = libc::sendto(
        fd,
        req.as_ptr().cast(),
        req.len(),
        0,
        (&addr as *const libc::sockaddr_nl).cast(),
        std::mem::size_of::<libc::sockaddr_nl>() as u32,
    );
    if sent < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot send AUDIT_GET");
    }
    let mut buf = [0u8; 8192];
    let mut tv = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    libc::setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVTIMEO,
        (&mut tv as *mut libc::timeval).cast(),
        std::mem::size_of::<libc::timeval>() as u32,
    );
    let n = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
    if n < 0 {
        return Err(std::io::Error::last_os_error()).context("no reply to AUDIT_GET");
    }
    parse_audit_reply(&buf[..n as usize])
}

fn parse_audit_reply(msg: &[u8]) -> Result<AuditStatus> {
    let u32_at = |off: usize| -> Result<u32> {
        msg.get(off..off + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
            .context("short audit status reply")
    };
    let ty = msg
        .get(4..6)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .context("short reply")?;
    if ty == libc::NLMSG_ERROR as u16 {
        let errno = -(u32_at(16)? as i32);
        bail!(
            "the kernel refused AUDIT_GET: {}",
            std::io::Error::from_raw_os_error(errno)
        );
    }
    if ty != AUDIT_GET {
        bail!("unexpected audit netlink reply type {ty}");
    }
    // struct audit_status: mask, enabled, failure, pid, rate_limit,
    // backlog_limit, lost, backlog, ... after the 16-byte nlmsghdr.
    Ok(AuditStatus {
        enabled: u32_at(16 + 4)?,
        pid: u32_at(16 + 12)?,
        backlog_limit: u32_at(16 + 20)?,
        lost: u32_at(16 + 24)?,
        backlog: u32_at(16 + 28)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fullest ring decides; no collector, or no sized ring, is no pressure.
    #[test]
    fn ring_availability_is_the_fullest_rings_free_share() {
        // SAFETY: plain integers.
        let mut g: custos_global_features = unsafe { std::mem::zeroed() };
        assert_eq!(ring_availability(None), 128);
        g.ring_size[0] = 1 << 20;
        g.ring_free_bytes[0] = 1 << 19;
        assert_eq!(ring_availability(Some(&g)), 128, "collector not running");
        g.collector_running = 1;
        assert_eq!(ring_availability(Some(&g)), 64);
        g.ring_size[1] = 4096;
        g.ring_free_bytes[1] = 1024;
        assert_eq!(ring_availability(Some(&g)), 32);
        g.ring_size = Default::default();
        assert_eq!(ring_availability(Some(&g)), 128, "no ring sized");
    }

    /// The scheduler's BPF side computes the availability feature with
    /// main.bpf.c's ring_availability; user space (placement snapshots,
    /// statistics) with this one. The C function, as main.bpf.c defines
    /// it, is compiled for the host with the scheduler's intf.h and both
    /// run on the same table: edge cases, then random maps, most with the
    /// sizes a ring can have (a BPF ring buffer is under 4 GiB), some with
    /// any u64 (a free space that wrapped, a map written by hand).
    #[test]
    fn main_bpf_cs_ring_availability_agrees_with_this_one() {
        use rand::{Rng, SeedableRng};
        use std::io::Write;

        let source = include_str!("bpf/main.bpf.c");
        let head =
            "static __always_inline u8 ring_availability(const struct custos_global_features *g)\n";
        let start = source.find(head).expect(
            "main.bpf.c defines ring_availability with another signature: update this test",
        );
        let len = source[start..].find("\n}\n").expect("the function's end") + 3;
        let dir = tempfile::tempdir().unwrap();
        let program = format!(
            "#include \"intf.h\"\n#include <stdio.h>\n{}\n\
             int main(void)\n{{\n\tstruct custos_global_features g;\n\n\
             \tputchar(ring_availability(NULL));\n\
             \twhile (fread(&g, sizeof(g), 1, stdin) == 1)\n\
             \t\tputchar(ring_availability(&g));\n\treturn 0;\n}}\n",
            &source[start..start + len]
        );
        fs::write(dir.path().join("t.c"), program).unwrap();
        let manifest = env!("CARGO_MANIFEST_DIR");
        let cc = std::process::Command::new("cc")
            .args(["-Wall", "-Werror", "-O2", "-o", "t", "t.c"])
            .arg("-D__always_inline=inline __attribute__((always_inline))")
            .arg(format!("-I{manifest}/src/bpf"))
            .arg(format!("-I{manifest}/../../include"))
            .current_dir(dir.path())
            .output()
            .expect("running cc");
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );

        let mut table = Vec::new();
        // SAFETY: plain integers.
        let zero: custos_global_features = unsafe { std::mem::zeroed() };
        let mut g = zero;
        table.push(g);
        g.collector_running = 1;
        table.push(g);
        for (size, free) in [
            (4096, 0),
            (4096, 4096),
            (4096, 4095),
            (4096, 1),
            (4096, 8192),
        ] {
            g.ring_size[1] = size;
            g.ring_free_bytes[1] = free;
            table.push(g);
        }
        g.ring_size = [(1 << 32) - 4096, 1 << 12, 1 << 20];
        g.ring_free_bytes = [(1 << 32) - 4096, 1 << 11, 3 << 18];
        table.push(g);
        g.ring_free_bytes[1] = 0u64.wrapping_sub(8);
        table.push(g);
        let mut rng = rand::rngs::StdRng::seed_from_u64(33);
        for _ in 0..5000 {
            let mut g = zero;
            g.collector_running = rng.gen_range(0..4);
            for r in 0..g.ring_size.len() {
                if rng.gen_bool(0.8) {
                    g.ring_size[r] = rng.gen_range(1..1u64 << 32);
                    g.ring_free_bytes[r] = match rng.gen_range(0..10) {
                        0 => g.ring_size[r],
                        1 => rng.gen::<u64>() >> rng.gen_range(0..64),
                        _ => rng.gen_range(0..=g.ring_size[r]),
                    };
                }
                if rng.gen_bool(0.05) {
                    g.ring_size[r] = rng.gen::<u64>() >> rng.gen_range(0..64);
                }
            }
            table.push(g);
        }
        let mut input = Vec::new();
        for g in &table {
            // SAFETY: plain-old-data struct viewed as bytes, as the C side reads it.
            input.extend_from_slice(unsafe {
                std::slice::from_raw_parts(
                    (g as *const custos_global_features).cast::<u8>(),
                    std::mem::size_of_val(g),
                )
            });
        }
        let mut run = std::process::Command::new(dir.path().join("t"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        run.stdin.take().unwrap().write_all(&input).unwrap();
        let c = run.wait_with_output().unwrap().stdout;
        assert_eq!(c.len(), 1 + table.len());
        assert_eq!(c[0], ring_availability(None), "no features map");
        for (g, &c) in table.iter().zip(&c[1..]) {
            assert_eq!(
                c,
                ring_availability(Some(g)),
                "running {}, sizes {:?}, free {:?}",
                g.collector_running,
                g.ring_size,
                g.ring_free_bytes
            );
        }
    }

    /// The VM suite's guest builds the shared maps by hand (its policy
    /// section) at the sizes tests/vm.rs gives it from the header's
    /// structs, never at a number of its own: one went stale when
    /// custos_task_features grew, and the scheduler refused the maps.
    #[test]
    fn the_guest_builds_the_feature_maps_at_the_headers_sizes() {
        let script = include_str!("../tests/guest/backbone.sh");
        for (name, size) in [
            ("global_features", "$GLOBAL_FEATURES_BYTES"),
            ("task_features", "$TASK_FEATURES_BYTES"),
        ] {
            let line = script
                .lines()
                .find(|l| l.contains("bpftool map create") && l.ends_with(&format!("name {name}")))
                .unwrap_or_else(|| panic!("no {name} map in backbone.sh"));
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "value").unwrap();
            assert_eq!(words[at + 1], size, "{line}");
        }
        let vm = include_str!("../tests/vm.rs");
        assert!(
            vm.contains("size_of::<custos_sched::bpf_intf::custos_task_features>()")
                && vm.contains("size_of::<custos_sched::bpf_intf::custos_global_features>()"),
            "tests/vm.rs no longer passes the structs' sizes to the guest"
        );
    }

    /// The ring that came closest to full is reported, with its own
    /// reserve and floor (as the collector published them).
    #[test]
    fn hold_headroom_reports_the_closest_ring_against_its_reserve() {
        // SAFETY: plain integers.
        let mut g: custos_global_features = unsafe { std::mem::zeroed() };
        assert_eq!(hold_headroom(None, &[0; 3]), (100.0, 0.0, 0.0));
        g.ring_size = [1 << 20, 1 << 16, 1 << 16];
        g.hold_reserve_bytes = [1 << 18, (1 << 16) / 8 * 3, 1 << 10];
        g.hold_floor_bytes = [1 << 17, (1 << 16) / 16 * 3, 1 << 9];
        assert_eq!(
            hold_headroom(Some(&g), &[u64::MAX; 3]),
            (100.0, 0.0, 0.0),
            "nothing seen"
        );
        let lowest = [1 << 19, 1 << 14, 1 << 15];
        assert_eq!(hold_headroom(Some(&g), &lowest), (25.0, 37.5, 18.75));
        let lowest = [1 << 17, 1 << 15, 1 << 15];
        assert_eq!(hold_headroom(Some(&g), &lowest), (12.5, 25.0, 12.5));
    }

    #[test]
    fn finds_this_test_process_by_name() {
        let comm = fs::read_to_string("/proc/self/comm").unwrap();
        let pids = pids_by_name(&[comm.trim_end().to_string()]).unwrap();
        assert!(pids.contains(&std::process::id()), "{pids:?}");
        assert!(pids_by_name(&["no-such-comm-xyz".into()])
            .unwrap()
            .is_empty());
    }

    #[test]
    fn audit_availability_is_free_backlog_share() {
        let s = AuditStatus {
            backlog_limit: 8192,
            backlog: 6144,
            ..Default::default()
        };
        assert_eq!(s.availability(), 32);
        let s = AuditStatus {
            backlog_limit: 0,
            backlog: 10,
            ..Default::default()
        };
        assert_eq!(s.availability(), 128);
    }

    #[test]
    fn reads_the_real_audit_status() {
        // Root on a kernel with CONFIG_AUDIT (host and VM kernels here).
        if unsafe { libc::geteuid() } != 0 {
            assert!(audit_status().is_err());
            return;
        }
        let s = audit_status().expect("AUDIT_GET as root");
        // enabled is 0, 1 or 2 (locked); the backlog may exceed its limit
        // briefly, which availability() reads as a full backlog.
        assert!(s.enabled <= 2, "misparsed status: {s:?}");
        assert!(
            s.pid == 0 || std::path::Path::new(&format!("/proc/{}", s.pid)).exists(),
            "{s:?}"
        );
        assert!(s.availability() <= 128);
    }
}
