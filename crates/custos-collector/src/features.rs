//! Provenance features for the scheduler: the maps of
//! include/custos/provenance_features.h, pinned under /sys/fs/bpf/custos/.
//! The pins double as the single-instance lock: one collector at a time.

use std::ffi::CString;
use std::fs;
use std::mem::size_of;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::intf::*;

/// `struct custos_global_features` / `struct custos_task_features` of
/// include/custos/provenance_features.h.
pub use crate::intf::{
    custos_global_features as GlobalFeatures, custos_task_features as TaskFeatures,
};

const BPF_FS_MAGIC: i64 = 0xcafe4a11;

pub fn task_features_path() -> PathBuf {
    Path::new(PIN_DIR).join(TASK_FEATURES_MAP)
}

pub fn global_features_path() -> PathBuf {
    Path::new(PIN_DIR).join(GLOBAL_FEATURES_MAP)
}

fn is_bpffs(path: &str) -> bool {
    let c = CString::new(path).expect("no NUL in a constant path");
    // SAFETY: statfs fills the struct we own.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == BPF_FS_MAGIC
}

/// Mounts bpffs on /sys/fs/bpf if nothing is mounted there yet, and makes
/// sure no other collector is running. Returns whether feature maps are
/// pinned already — by a scheduler that started first, or a collector that
/// ran before — for this collector to reuse: the pins outlive both, so
/// either may start first and a restarted collector feeds the same maps.
pub fn prepare_pin_dir() -> Result<bool> {
    let root = "/sys/fs/bpf";
    if !is_bpffs(root) {
        let src = CString::new("bpf").unwrap();
        let dst = CString::new(root).unwrap();
        // SAFETY: plain mount(2) with constant C strings.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                dst.as_ptr(),
                src.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            bail!("{root} is not a BPF file system and mounting one failed ({err}); mount it with `mount -t bpf bpf {root}`");
        }
    }
    let (task, global) = (task_features_path(), global_features_path());
    if let Some(pid) = global
        .exists()
        .then(|| running_collector(&global))
        .flatten()
    {
        bail!(
            "another custos collector (pid {pid}) is running: its provenance features are pinned at {PIN_DIR}; stop it first (one collector per machine)"
        );
    }
    if task.exists() && global.exists() {
        match pinned_value_sizes(&task, &global) {
            Some(sizes) if sizes == (size_of::<TaskFeatures>(), size_of::<custos_global_features>()) => return Ok(true),
            // Left by another version of custos: a scheduler still holding
            // the old maps keeps its zeroed features until it restarts.
            _ => eprintln!(
                "custos collect: notice: the provenance features pinned at {PIN_DIR} have another layout (another custos version); replacing them (restart a running custos sched to read the new ones)"
            ),
        }
    }
    // Half a pair is of no use to anyone.
    remove_pins();
    fs::create_dir_all(PIN_DIR).with_context(|| format!("creating {PIN_DIR}"))?;
    Ok(false)
}

fn pinned_value_sizes(task: &Path, global: &Path) -> Option<(usize, usize)> {
    let size = |p: &Path| {
        Some(
            MapHandle::from_pinned_path(p)
                .ok()?
                .info()
                .ok()?
                .info
                .value_size as usize,
        )
    };
    Some((size(task)?, size(global)?))
}

/// Deletes the entries of threads that are gone (and of this process's
/// threads, which are never traced): they exited while no collector ran to
/// see it. Entries of a recycled tid are told apart by their start time.
pub fn forget_dead_tasks(map: &dyn MapCore) {
    let stale: Vec<Vec<u8>> = map
        .keys()
        .filter(|k| {
            let Ok(tid) = <[u8; 4]>::try_from(k.as_slice()).map(u32::from_ne_bytes) else {
                return false;
            };
            let own = Path::new(&format!("/proc/self/task/{tid}")).exists();
            own || !Path::new(&format!("/proc/{tid}")).exists()
        })
        .collect();
    for k in stale {
        let _ = map.delete(&k);
    }
}

/// The pid of the collector that pinned these maps, if it is still alive.
fn running_collector(global: &Path) -> Option<u32> {
    let map = MapHandle::from_pinned_path(global).ok()?;
    let raw = map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).ok()??;
    collector_pid(&read_global(&raw)?)
}

/// The pid of the collector these global features say is attached, if
/// that process is alive (one killed outright never said it stopped).
pub fn collector_pid(g: &GlobalFeatures) -> Option<u32> {
    if g.collector_running == 0 {
        return None;
    }
    let pid = g.consumer_pids[0];
    // SAFETY: kill with signal 0 only checks that the process exists.
    let alive = pid != 0 && unsafe { libc::kill(pid as i32, 0) } == 0;
    alive.then_some(pid)
}

/// The rings by their index in the features (enum custos_ring), as the
/// metrics and `custos status` name them.
pub const RING_NAMES: [&str; NR_RINGS] = ["critical", "events", "attrs"];

/// The global features pinned in `pin_dir` (the collector's
/// [`PIN_DIR`], or `custos sched --pin-dir`): `None` when nothing is
/// pinned there; an error when they cannot be read (not root) or have
/// another layout (pinned by another custos version).
pub fn read_pinned_global(pin_dir: &Path) -> Result<Option<GlobalFeatures>> {
    let path = pin_dir.join(GLOBAL_FEATURES_MAP);
    match path.try_exists() {
        Ok(false) => return Ok(None),
        Ok(true) => {}
        Err(e) => return Err(e).with_context(|| format!("looking for {}", path.display())),
    }
    let map = MapHandle::from_pinned_path(&path).with_context(|| {
        format!(
            "cannot open the pinned map {} (reading pinned BPF maps needs root)",
            path.display()
        )
    })?;
    let size = map
        .info()
        .with_context(|| format!("reading {}", path.display()))?
        .info
        .value_size as usize;
    if size != size_of::<GlobalFeatures>() {
        bail!(
            "{} holds {size}-byte values, this custos reads {}: it was pinned by another custos version (a collector of this version replaces it as it starts)",
            path.display(),
            size_of::<GlobalFeatures>()
        );
    }
    let raw = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(raw.as_deref().and_then(read_global))
}

/// The version the collector wrote into the global features ("" before
/// any collector did).
pub fn collector_version(g: &GlobalFeatures) -> String {
    let bytes: Vec<u8> = g
        .collector_version
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The two feature structs are plain old data (include/custos/
/// provenance_features.h): these four wrappers are the only callers of the
/// two unsafe views below.
fn read_pod<T: Copy>(raw: &[u8]) -> Option<T> {
    // SAFETY: T is one of the feature structs (plain old data, any bit
    // pattern valid), and the length is checked.
    (raw.len() >= std::mem::size_of::<T>())
        .then(|| unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) })
}

fn pod_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is one of the feature structs, viewed as bytes for a map update.
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
}

pub fn read_global(raw: &[u8]) -> Option<custos_global_features> {
    read_pod(raw)
}

pub fn global_bytes(g: &custos_global_features) -> &[u8] {
    pod_bytes(g)
}

pub fn task_bytes(t: &TaskFeatures) -> &[u8] {
    pod_bytes(t)
}

pub fn read_task(raw: &[u8]) -> Option<TaskFeatures> {
    read_pod(raw)
}

pub fn remove_pins() {
    let _ = fs::remove_file(task_features_path());
    let _ = fs::remove_file(global_features_path());
    let _ = fs::remove_dir(PIN_DIR);
}

/// Forgets the rings a previous collector left in the kept map (sizes,
/// free space, hold levels): their sizes read 0 ("no ring", which the
/// scheduler skips) until this collector publishes its own. A
/// features-only collector has none: its programs never write them, and
/// [`publish`] keeps them.
pub fn forget_rings(map: &dyn MapCore) -> Result<()> {
    let key = 0u32.to_ne_bytes();
    let raw = map
        .lookup(&key, MapFlags::ANY)
        .context("reading global_features")?;
    let mut g = raw.as_deref().and_then(read_global).unwrap_or_default();
    g.ring_size = Default::default();
    g.ring_free_bytes = Default::default();
    g.hold_reserve_bytes = Default::default();
    g.hold_floor_bytes = Default::default();
    map.update(&key, global_bytes(&g), MapFlags::ANY)
        .context("updating global_features")
}

/// Syscalls a CPU may run between a ring crossing one of the hold's levels
/// and its task being off the CPU (`custos sched`'s hold): the collector's
/// program kicks its own CPU at the syscall that crossed, and the
/// scheduler kicks the others when the hold begins; a task kicked inside
/// the program runs on to leave it. Measured: 64 KiB rings on 2 vCPUs fell
/// 13 KiB past the reserve, about 25 syscalls a CPU. The worst case of a
/// run is the lowest free space `custos sched --stats` reports
/// (`hold_lowest_free`) against the floor.
pub const HOLD_IN_FLIGHT: u64 = 32;

/// The hold's floor on each ring (enum custos_ring order), in bytes: the
/// most one syscall writes to the ring, times the CPUs, times
/// [`HOLD_IN_FLIGHT`]. A syscall writes at most two events (an exec: its
/// LSM check and its return), each with at most one attribute record; the
/// critical ring carries both halves. io_uring completions are the
/// exception (one io_uring_enter may complete many requests).
pub fn hold_floor(nr_cpus: u64) -> [u64; NR_RINGS] {
    // A ring record: its 8-byte header, the length rounded up to 8.
    let record = |len: usize| (8 + len.div_ceil(8) * 8) as u64;
    let event = record(size_of::<custos_event>());
    let attrs = record(size_of::<custos_attr_hdr>() + ATTR_DATA_MAX + 1);
    let per_syscall = [2 * (event + attrs), 2 * event, 2 * attrs];
    per_syscall.map(|b| b * nr_cpus * HOLD_IN_FLIGHT)
}

/// On a ring too small for the bound ([`HoldLevels::bounded`]), the floor is
/// at most this many sixteenths of it, so that the hold still has a light
/// tasks' share and ends (the scheduler releases at half free).
pub const HOLD_FLOOR_MAX_SIXTEENTHS: u64 = 3;

/// The light tasks' share of a ring, in sixteenths: between the reserve
/// and the floor, producers are held and the tasks that make few events
/// (a shell, the one that will resume a stopped consumer) run on this
/// share of the ring, all of them together.
pub const HOLD_LIGHT_SIXTEENTHS: u64 = 3;

/// The reserve is at most this many sixteenths of its ring: under the
/// scheduler's release at half free, so that a hold ends.
pub const HOLD_RESERVE_MAX_SIXTEENTHS: u64 = 6;

/// The hold's levels on one ring, in free bytes: under `reserve` the
/// producers are held, under `floor` every task but the consumers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldLevels {
    pub floor: u64,
    pub reserve: u64,
    /// The ring is large enough for the hold to rule loss out: what the
    /// producers write after the reserve is crossed (at most the computed
    /// floor, [`hold_floor`]) leaves the light tasks their whole share,
    /// and what they write after the floor is crossed (at most as much)
    /// still fits.
    pub bounded: bool,
}

/// The levels published for a ring of `size` bytes whose computed floor
/// ([`hold_floor`]) is `floor`. Bounded: the floor as computed and the
/// reserve above it by the producers' overshoot (the floor again) and the
/// light tasks' share. Without that the light tasks' share was spent by the
/// producers' overshoot alone: 64 KiB rings on 2 vCPUs fell from the
/// reserve (37.5 % free) to 17.3 % before every producer was off its CPU,
/// under the floor (18.8 %), so the shell resuming a stopped consumer was
/// held and a 2 s stop lasted 11 s. On a ring too small for that, the
/// floor capped at [`HOLD_FLOOR_MAX_SIXTEENTHS`] and the share above it:
/// the hold limits loss there but cannot rule it out.
pub fn hold_levels(floor: u64, size: u64) -> HoldLevels {
    let share = size / 16 * HOLD_LIGHT_SIXTEENTHS;
    let reserve = 2 * floor + share;
    if reserve <= size / 16 * HOLD_RESERVE_MAX_SIXTEENTHS {
        return HoldLevels {
            floor,
            reserve,
            bounded: true,
        };
    }
    let floor = floor.min(size / 16 * HOLD_FLOOR_MAX_SIXTEENTHS);
    HoldLevels {
        floor,
        reserve: floor + share,
        bounded: false,
    }
}

/// The smallest ring (a power of two, in bytes) on which the hold's levels
/// for the computed floor `floor` are bounded.
pub fn hold_min_ring(floor: u64) -> u64 {
    let mut size = 4096u64;
    while !hold_levels(floor, size).bounded {
        size *= 2;
    }
    size
}

/// The rings as the consumer sees them between two drains: sizes and free
/// bytes read from the ring positions (current even while no producer
/// submits, as when all of them are held), and the hold's levels.
pub struct RingView {
    pub size: [u64; NR_RINGS],
    pub free: [u64; NR_RINGS],
    pub reserve: [u64; NR_RINGS],
    pub floor: [u64; NR_RINGS],
}

/// The collector's account so far, as [`publish`] writes it for
/// `custos status`: what the consumer received and what was lost, by cause.
#[derive(Clone, Copy, Debug, Default)]
pub struct Account {
    pub delivered: u64,
    /// By ring (enum custos_ring): events refused by the critical and
    /// events rings, attribute halves by the attrs ring.
    pub dropped: [u64; NR_RINGS],
    /// Events lost to the kernel's skips, at most (stats `unnumbered`).
    pub lost_to_skips: u64,
}

/// Publishes the consumer side of the global features (produced, consumed,
/// consumer lag, consumer pids, the account, the version, and the rings
/// when given); the BPF side also writes ring availability, at submit.
pub fn publish(
    map: &dyn MapCore,
    produced: u64,
    consumed: u64,
    running: bool,
    now_ns: u64,
    rings: Option<&RingView>,
    account: &Account,
) -> Result<()> {
    let key = 0u32.to_ne_bytes();
    let raw = map
        .lookup(&key, MapFlags::ANY)
        .context("reading global_features")?;
    let mut g = raw.as_deref().and_then(read_global).unwrap_or_default();
    g.produced = produced;
    g.consumed = consumed;
    g.consumer_lag = produced.saturating_sub(consumed);
    g.updated_ns = now_ns;
    g.consumer_pids = [0; MAX_CONSUMERS];
    g.consumer_pids[0] = std::process::id();
    g.nr_consumers = 1;
    g.collector_running = running as u32;
    g.delivered = account.delivered;
    g.dropped = account.dropped;
    g.lost_to_skips = account.lost_to_skips;
    let version = env!("CARGO_PKG_VERSION").as_bytes();
    let n = version.len().min(VERSION_LEN - 1);
    g.collector_version = [0; VERSION_LEN];
    for (to, from) in g.collector_version.iter_mut().zip(&version[..n]) {
        *to = *from as _;
    }
    if let Some(r) = rings {
        g.ring_size = r.size;
        g.ring_free_bytes = r.free;
        g.hold_reserve_bytes = r.reserve;
        g.hold_floor_bytes = r.floor;
    }
    map.update(&key, global_bytes(&g), MapFlags::ANY)
        .context("updating global_features")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound's arithmetic: on the smallest bounded ring the producers'
    /// overshoot past the reserve leaves the light tasks their share above
    /// the floor, and the floor takes the light tasks' own overshoot; half
    /// that ring is not bounded; a hold always ends under half free.
    #[test]
    fn hold_levels_leave_the_light_share_past_the_producers_overshoot() {
        for cpus in [1, 2, 4, 64] {
            for (r, &floor) in hold_floor(cpus).iter().enumerate() {
                let min = hold_min_ring(floor);
                assert!(min.is_power_of_two(), "ring {r}, {cpus} CPUs");
                let l = hold_levels(floor, min);
                assert!(l.bounded, "ring {r}, {cpus} CPUs");
                assert_eq!(l.floor, floor);
                assert!(l.reserve - floor >= l.floor + min / 16 * HOLD_LIGHT_SIXTEENTHS);
                assert!(
                    !hold_levels(floor, min / 2).bounded,
                    "ring {r}, {cpus} CPUs"
                );
                for size in [min / 64, min / 2, min, min * 4] {
                    let l = hold_levels(floor, size.max(4096));
                    assert!(
                        l.floor < l.reserve && l.reserve < size.max(4096) / 2,
                        "ring {r} {size}"
                    );
                }
            }
        }
        // The rings of the 2-vCPU stall that lasted 11 s (64 KiB) are too
        // small for the bound; the events ring needs 256 KiB there.
        let events = hold_floor(2)[crate::intf::RING_EVENTS];
        assert!(!hold_levels(events, 64 << 10).bounded);
        assert_eq!(hold_min_ring(events), 256 << 10);
    }
}
