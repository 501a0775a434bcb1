//! One line of the collector's JSON Lines stream (docs/event-schema.md).
//!
//! Parsed in one pass straight into typed fields: strings the store does not
//! keep (`type`, `boot_id`, `category`) are borrowed from the line, `args` is
//! read into the few integer arguments the graph uses, and syscall names are
//! static strings, so an event costs a handful of small allocations instead
//! of a `serde_json::Value` tree.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

#[path = "fastline.rs"]
mod fastline;
#[path = "shapeline.rs"]
mod shapeline;
pub(crate) use shapeline::ShapePlan;

/// A string borrowed from the line when it has no escapes (serde only
/// borrows a `Cow` that is a field of its own, not one inside an `Option`).
#[derive(Deserialize, Debug)]
struct Str<'a>(#[serde(borrow)] Cow<'a, str>);

/// Every field any record type may carry; which ones are required depends on `type`.
/// One flat struct keeps parsing to a single pass over the line.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    boot_id: Option<Str<'a>>,
    id: Option<u64>,
    cpu: Option<u32>,
    time_ns: Option<u64>,
    pid: Option<u32>,
    tid: Option<u32>,
    ppid: Option<u32>,
    uid: Option<u32>,
    euid: Option<u32>,
    comm: Option<String>,
    #[serde(borrow)]
    syscall: Option<Str<'a>>,
    ret: Option<i64>,
    args: Option<Box<Args>>,
    path: Option<String>,
    path2: Option<String>,
    argv: Option<Vec<String>>,
    addr: Option<String>,
    laddr: Option<String>,
    fd: Option<i32>,
    child_pid: Option<u32>,
    count: Option<u64>,
    // A flag on events, a counter on stats lines: accept both.
    incomplete: Option<Lenient<bool>>,
    dev: Option<u64>,
    inode: Option<u64>,
    root_dev: Option<u64>,
    root_inode: Option<u64>,
    first_seq: Option<u64>,
    last_seq: Option<u64>,
    #[serde(borrow)]
    category: Option<Str<'a>>,
    upper_bound: Option<bool>,
    start_ns: Option<u64>,
    end_ns: Option<u64>,
    container: Option<Box<ContainerRef>>,
    workflow: Option<u64>,
    workflow_parent: Option<u64>,
    workflow_cause: Option<u64>,
    workflow_running: Option<bool>,
}

/// An event's `container` (docs/containers.md): the container's id and
/// runtime always, its name, image and Kubernetes labels once the runtime
/// has answered the collector.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
pub struct ContainerRef {
    pub id: String,
    pub runtime: Option<String>,
    pub name: Option<String>,
    pub image: Option<String>,
    pub pod: Option<String>,
    pub namespace: Option<String>,
    pub container_name: Option<String>,
}

/// A value of any JSON type, kept when it is a `T` (an integer that fits,
/// `true`/`false`) and `None` otherwise, as `Value::as_i64`/`as_bool` did:
/// arguments of other types are not an error, the graph just cannot use them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Lenient<T>(Option<T>);

trait FromJsonScalar: Sized {
    fn from_i64(_: i64) -> Option<Self> {
        None
    }
    fn from_u64(_: u64) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
}
impl FromJsonScalar for i64 {
    fn from_i64(v: i64) -> Option<Self> {
        Some(v)
    }
    fn from_u64(v: u64) -> Option<Self> {
        i64::try_from(v).ok()
    }
}
impl FromJsonScalar for bool {
    fn from_bool(v: bool) -> Option<Self> {
        Some(v)
    }
}

struct LenientVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: FromJsonScalar> Visitor<'de> for LenientVisitor<T> {
    type Value = Lenient<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Lenient(T::from_i64(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Lenient(T::from_u64(v)))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Lenient(T::from_bool(v)))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Lenient(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Lenient(None))
    }
}

impl<'de, T: FromJsonScalar> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LenientVisitor(std::marker::PhantomData))
    }
}

/// The integer arguments the graph reads (`args.fd`, `args.newfd`, ...);
/// others are skipped. Non-integer values read as absent, and a repeated
/// key keeps its last value, as with a JSON object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args {
    fd: Option<i64>,
    sockfd: Option<i64>,
    oldfd: Option<i64>,
    newfd: Option<i64>,
    cmd: Option<i64>,
    prot: Option<i64>,
    flags: Option<i64>,
    read_fd: Option<i64>,
    write_fd: Option<i64>,
    in_fd: Option<i64>,
    fd_in: Option<i64>,
    out_fd: Option<i64>,
    fd_out: Option<i64>,
    uid: Option<i64>,
    euid: Option<i64>,
    fsuid: Option<i64>,
    /// ptrace's request.
    request: Option<i64>,
    /// The process ptrace and process_vm_readv/writev act on.
    target_pid: Option<i64>,
    /// execveat's dirfd: with AT_EMPTY_PATH, the file it runs.
    dirfd: Option<i64>,
    /// `args.fds` of pipe/socketpair: its integer elements.
    pub fds: Vec<i64>,
}

impl Args {
    /// An integer argument by name; `None` for names the graph does not read.
    pub fn get(&self, name: &str) -> Option<i64> {
        match name {
            "fd" => self.fd,
            "sockfd" => self.sockfd,
            "oldfd" => self.oldfd,
            "newfd" => self.newfd,
            "cmd" => self.cmd,
            "prot" => self.prot,
            "flags" => self.flags,
            "read_fd" => self.read_fd,
            "write_fd" => self.write_fd,
            "in_fd" => self.in_fd,
            "fd_in" => self.fd_in,
            "out_fd" => self.out_fd,
            "fd_out" => self.fd_out,
            "uid" => self.uid,
            "euid" => self.euid,
            "fsuid" => self.fsuid,
            "request" => self.request,
            "target_pid" => self.target_pid,
            "dirfd" => self.dirfd,
            _ => {
                debug_assert!(false, "args.{name} is not parsed (add it to record::Args)");
                None
            }
        }
    }
}

/// The elements of `args.fds` that are integers; nothing for another type.
struct IntList(Vec<i64>);

impl<'de> Deserialize<'de> for IntList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IntList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IntList, A::Error> {
                let mut v = Vec::new();
                while let Some(Lenient(x)) = seq.next_element::<Lenient<i64>>()? {
                    v.extend(x);
                }
                Ok(IntList(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IntList, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(IntList(Vec::new()))
            }
            fn visit_i64<E>(self, _: i64) -> Result<IntList, E> {
                Ok(IntList(Vec::new()))
            }
            fn visit_u64<E>(self, _: u64) -> Result<IntList, E> {
                Ok(IntList(Vec::new()))
            }
            fn visit_f64<E>(self, _: f64) -> Result<IntList, E> {
                Ok(IntList(Vec::new()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<IntList, E> {
                Ok(IntList(Vec::new()))
            }
            fn visit_str<E>(self, _: &str) -> Result<IntList, E> {
                Ok(IntList(Vec::new()))
            }
            fn visit_unit<E>(self) -> Result<IntList, E> {
                Ok(IntList(Vec::new()))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Args {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Args;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object of arguments")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Args, A::Error> {
                let mut a = Args::default();
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    let slot = match &*key.0 {
                        "fd" => &mut a.fd,
                        "sockfd" => &mut a.sockfd,
                        "oldfd" => &mut a.oldfd,
                        "newfd" => &mut a.newfd,
                        "cmd" => &mut a.cmd,
                        "prot" => &mut a.prot,
                        "flags" => &mut a.flags,
                        "read_fd" => &mut a.read_fd,
                        "write_fd" => &mut a.write_fd,
                        "in_fd" => &mut a.in_fd,
                        "fd_in" => &mut a.fd_in,
                        "out_fd" => &mut a.out_fd,
                        "fd_out" => &mut a.fd_out,
                        "uid" => &mut a.uid,
                        "euid" => &mut a.euid,
                        "fsuid" => &mut a.fsuid,
                        "request" => &mut a.request,
                        "target_pid" => &mut a.target_pid,
                        "dirfd" => &mut a.dirfd,
                        "fds" => {
                            a.fds = map.next_value::<IntList>()?.0;
                            continue;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = map.next_value::<Lenient<i64>>()?.0;
                }
                Ok(a)
            }
        }
        d.deserialize_map(V)
    }
}

/// The syscall names the stream uses most, as static strings: no allocation
/// for them (any other name is kept as its own string).
fn syscall_name(s: Cow<'_, str>) -> Cow<'static, str> {
    const KNOWN: &[&str] = &[
        "read",
        "write",
        "openat",
        "close",
        "mmap",
        "execve",
        "clone",
        "clone3",
        "exit_group",
        "exit",
        "pread64",
        "pwrite64",
        "readv",
        "writev",
        "open",
        "creat",
        "openat2",
        "unlink",
        "unlinkat",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "pipe",
        "pipe2",
        "dup",
        "dup2",
        "dup3",
        "fcntl",
        "connect",
        "accept",
        "accept4",
        "recvfrom",
        "sendto",
        "recvmsg",
        "sendmsg",
        "fork",
        "vfork",
        "execveat",
        "sched:process_fork",
        "lsm:file_open",
        "truncate",
        "ftruncate",
        "setuid",
        "setresuid",
        "setreuid",
        "setfsuid",
        "socketpair",
        "sendfile",
        "splice",
        "copy_file_range",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "mmap2",
        "rmdir",
    ];
    match KNOWN.iter().find(|k| **k == s) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(s.into_owned()),
    }
}

/// A syscall/hook event, reduced to what the graph needs (the raw line is kept separately).
#[derive(Debug, Clone, Default)]
pub struct Event {
    pub id: u64,
    pub cpu: u32,
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub uid: Option<u32>,
    pub euid: Option<u32>,
    pub comm: Option<String>,
    pub syscall: Cow<'static, str>,
    pub ret: Option<i64>,
    /// Boxed: most events carry none, and the event is moved around.
    pub args: Option<Box<Args>>,
    pub path: Option<String>,
    pub path2: Option<String>,
    pub argv: Option<Vec<String>>,
    pub addr: Option<String>,
    /// connect/accept: the socket's own address (with `addr`, the connection's 4-tuple).
    pub laddr: Option<String>,
    pub fd: Option<i32>,
    pub child_pid: Option<u32>,
    pub incomplete: bool,
    /// Device and inode of the event's file, when the collector resolved them.
    pub dev: Option<u64>,
    pub inode: Option<u64>,
    /// The root directory the paths are relative to, as (device, inode),
    /// when it is not the host's (a container's, a chroot): None is the host's.
    pub root: Option<(u64, u64)>,
    /// The container the process runs in, if any.
    pub container: Option<Box<ContainerRef>>,
    /// The workflow (docs/workflows.md): the id of the event that started it.
    pub workflow: Option<u64>,
    /// How the workflow began, on the event that started it.
    pub workflow_start: Option<Box<WorkflowStart>>,
}

/// The start of a workflow, as its first event tells it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowStart {
    pub parent: Option<u64>,
    pub cause: Option<u64>,
    pub running: bool,
}

impl Event {
    /// An integer argument by name (`args.fd`, `args.newfd`, ...).
    pub fn arg_i64(&self, name: &str) -> Option<i64> {
        self.args.as_ref().and_then(|a| a.get(name))
    }
    /// The integer elements of `args.fds` (pipe, socketpair).
    pub fn arg_fds(&self) -> &[i64] {
        self.args.as_ref().map_or(&[], |a| &a.fds)
    }
    /// Whether the call failed. A non-blocking `connect` returning
    /// -EINPROGRESS has not: it is how most network clients connect, and the
    /// socket is bound to its peer from then on (a later failure shows in
    /// the socket's own calls).
    pub fn failed(&self) -> bool {
        const EINPROGRESS: i64 = 115;
        match self.ret {
            Some(r) if r == -EINPROGRESS && self.syscall == "connect" => false,
            Some(r) => r < 0,
            None => false,
        }
    }
}

/// A `loss` record: events the collector knows it did not deliver.
#[derive(Debug, Clone, PartialEq)]
pub struct Loss {
    pub boot_id: Option<String>,
    /// None: the CPU is not known (syscalls skipped wholly, see docs/event-schema.md).
    pub cpu: Option<u32>,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    pub count: u64,
    pub category: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One parsed line; borrows from it (the event's boot identity).
#[derive(Debug)]
pub enum Record<'a> {
    /// An event and the boot it names, if it names one.
    Event(Box<Event>, Option<Cow<'a, str>>),
    Loss(Loss),
    /// `{"type":"boot","boot_id":...}`: names the boot of the lines that follow.
    Boot(String),
    Stats {
        boot_id: Option<String>,
        time_ns: u64,
    },
    /// A type this reader does not know; skipped as the schema says.
    Other(String),
}

fn need<T>(v: Option<T>, kind: &str, field: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("{kind} record lacks required field `{field}`"))
}

/// A count, sequence number, id or time the store keeps as an SQLite
/// integer (i64): larger would be stored wrapped, as a negative number.
fn in_range(v: u64, kind: &str, field: &str) -> Result<u64, String> {
    match i64::try_from(v) {
        Ok(_) => Ok(v),
        Err(_) => Err(format!(
            "{kind} record's `{field}` {v} is past the store's range (at most {})",
            i64::MAX
        )),
    }
}

/// Parses one line. Errors are messages for the user (the caller adds the line number).
pub fn parse_line(text: &str) -> Result<Record<'_>, String> {
    // The collector's plain lines take the fast path; serde decides the rest.
    let l: Line = match fastline::fast_line(text) {
        Some(l) => l,
        None => serde_json::from_str(text)
            .map_err(|e| format!("not valid JSON for the event schema: {e}"))?,
    };
    record(l)
}

/// The fast path's and serde's readings of a line (their `Debug` text;
/// None: refused), for the differential fuzz target (fuzz/): the fast path
/// may give up on any line, but what it reads serde must read the same.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fast_and_serde(text: &str) -> (Option<String>, Option<String>) {
    (
        fastline::fast_line(text).map(|l| format!("{l:?}")),
        serde_json::from_str::<Line>(text)
            .ok()
            .map(|l| format!("{l:?}")),
    )
}

/// A line of a known shape read by its plan from the values its cut found
/// (rawseg.rs), as [`parse_line`] reads it; None where the fast path would
/// give up on it (then [`parse_line`] decides).
pub(crate) fn parse_by_shape<'l>(
    plan: &ShapePlan,
    text: &'l str,
    vals: &[(u32, crate::rawseg::Val)],
) -> Option<Result<Record<'l>, String>> {
    plan.read(text, vals).map(record)
}

/// The record of a parsed line.
fn record(l: Line<'_>) -> Result<Record<'_>, String> {
    let kind = l
        .kind
        .ok_or("no `type` field (expected \"event\", \"loss\", \"boot\" or \"stats\")")?
        .0;
    let owned = |s: Option<Str<'_>>| s.map(|s| s.0.into_owned());
    match &*kind {
        "event" => {
            let id = in_range(need(l.id, "event", "id")?, "event", "id")?;
            let time_ns = in_range(need(l.time_ns, "event", "time_ns")?, "event", "time_ns")?;
            let pid = need(l.pid, "event", "pid")?;
            let syscall = syscall_name(need(l.syscall, "event", "syscall")?.0);
            Ok(Record::Event(
                Box::new(Event {
                    id,
                    cpu: l.cpu.unwrap_or((id >> 48) as u32),
                    time_ns,
                    pid,
                    tid: l.tid.or(l.pid).unwrap_or(0),
                    ppid: l.ppid.unwrap_or(0),
                    uid: l.uid,
                    euid: l.euid,
                    comm: l.comm,
                    syscall,
                    ret: l.ret,
                    args: l.args,
                    path: l.path.filter(|p| !p.is_empty()),
                    path2: l.path2.filter(|p| !p.is_empty()),
                    argv: l.argv,
                    addr: l.addr.filter(|a| !a.is_empty()),
                    laddr: l.laddr.filter(|a| !a.is_empty()),
                    fd: l.fd,
                    child_pid: l.child_pid,
                    incomplete: l.incomplete.and_then(|v| v.0).unwrap_or(false),
                    dev: l.dev,
                    inode: l.inode,
                    root: l.root_dev.zip(l.root_inode),
                    container: l.container,
                    workflow: l.workflow,
                    workflow_start: match (
                        l.workflow,
                        l.workflow_parent,
                        l.workflow_cause,
                        l.workflow_running,
                    ) {
                        (Some(w), parent, cause, running) if w == id => {
                            Some(Box::new(WorkflowStart {
                                parent,
                                cause,
                                running: running.unwrap_or(false),
                            }))
                        }
                        _ => None,
                    },
                }),
                l.boot_id.map(|b| b.0),
            ))
        }
        "loss" => {
            let start_ns = in_range(need(l.start_ns, "loss", "start_ns")?, "loss", "start_ns")?;
            let end_ns = in_range(need(l.end_ns, "loss", "end_ns")?, "loss", "end_ns")?;
            for (field, v) in [("first_seq", l.first_seq), ("last_seq", l.last_seq)] {
                v.map(|v| in_range(v, "loss", field)).transpose()?;
            }
            if end_ns < start_ns {
                return Err(format!(
                    "loss record has end_ns {end_ns} before start_ns {start_ns}"
                ));
            }
            let count = match (l.count, l.first_seq, l.last_seq) {
                (Some(c), _, _) => in_range(c, "loss", "count")?,
                (None, Some(f), Some(t)) if t < f => {
                    return Err(format!("loss record has last_seq {t} before first_seq {f}"))
                }
                // Both in range, so the span (at most i64::MAX + 1) is a u64;
                // past i64::MAX it could not be stored.
                (None, Some(f), Some(t)) => {
                    in_range(t - f + 1, "loss", "count (last_seq - first_seq + 1)")?
                }
                _ => {
                    return Err(
                        "loss record lacks `count` (and first_seq/last_seq to derive it)".into(),
                    )
                }
            };
            let category = owned(l.category);
            Ok(Record::Loss(Loss {
                boot_id: owned(l.boot_id),
                cpu: l.cpu,
                first_seq: l.first_seq,
                last_seq: l.last_seq,
                count,
                category: match (category, l.upper_bound) {
                    (Some(c), Some(true)) => format!("{c}, upper bound"),
                    (c, _) => c.unwrap_or_else(|| "unknown".into()),
                },
                start_ns,
                end_ns,
            }))
        }
        "boot" => Ok(Record::Boot(need(owned(l.boot_id), "boot", "boot_id")?)),
        "stats" => Ok(Record::Stats {
            boot_id: owned(l.boot_id),
            time_ns: in_range(need(l.time_ns, "stats", "time_ns")?, "stats", "time_ns")?,
        }),
        other => Ok(Record::Other(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts, spans, ids and times past what the store can hold are
    /// rejected with the reason, never wrapped into a wrong or negative number.
    #[test]
    fn numbers_past_the_store_s_range_are_rejected_not_wrapped() {
        let max = u64::MAX;
        let big = i64::MAX as u64 + 1;
        // The count of a loss record with these fields, or why it is rejected.
        let loss = |fields: &str| {
            parse_line(&format!(
                r#"{{"type":"loss","cpu":0,"category":"events","start_ns":1,"end_ns":2,{fields}}}"#
            ))
            .map(|r| match r {
                Record::Loss(l) => l.count,
                r => panic!("{r:?}"),
            })
        };
        let bad = [
            // last_seq - first_seq + 1 wraps to 0 at u64::MAX.
            (format!(r#""first_seq":0,"last_seq":{max}"#), "last_seq"),
            (format!(r#""first_seq":0,"last_seq":{}"#, i64::MAX), "count"),
            (format!(r#""count":{big}"#), "count"),
            (format!(r#""count":{max}"#), "count"),
            (
                r#""first_seq":9,"last_seq":4"#.to_string(),
                "before first_seq",
            ),
            (
                format!(r#""count":1,"first_seq":{big},"last_seq":{big}"#),
                "first_seq",
            ),
        ];
        for (fields, why) in bad {
            let e = loss(&fields).expect_err(&fields);
            assert!(e.contains(why), "{fields}: {e}");
        }
        // A negative count is not a count.
        assert!(loss(r#""count":-5"#).is_err());
        let e = parse_line(&format!(
            r#"{{"type":"loss","cpu":0,"start_ns":1,"end_ns":{big},"count":1}}"#
        ))
        .expect_err("end_ns");
        assert!(e.contains("end_ns"), "{e}");
        // The widest span that fits is kept exactly.
        assert_eq!(
            loss(&format!(r#""first_seq":1,"last_seq":{}"#, i64::MAX)),
            Ok(i64::MAX as u64)
        );
        for field in ["id", "time_ns"] {
            let line = format!(
                r#"{{"type":"event","id":1,"time_ns":1,"pid":1,"syscall":"read","{field}":{max}}}"#
            )
            .replacen(&format!(r#""{field}":1,"#), "", 1);
            let e = parse_line(&line).expect_err(&line);
            assert!(e.contains(field), "{e}");
        }
        let e = parse_line(&format!(r#"{{"type":"stats","time_ns":{big}}}"#)).expect_err("stats");
        assert!(e.contains("time_ns"), "{e}");
    }

    #[test]
    fn parses_event_and_loss() {
        let r = parse_line(r#"{"type":"event","id":281474976710657,"time_ns":5,"pid":10,"tid":11,"syscall":"read","fd":3,"path":"/a","args":{"fd":3}}"#).unwrap();
        match r {
            Record::Event(e, boot) => {
                assert_eq!(e.cpu, 1);
                assert_eq!(e.arg_i64("fd"), Some(3));
                assert_eq!(e.path.as_deref(), Some("/a"));
                assert_eq!(boot, None);
            }
            _ => panic!("not an event"),
        }
        let r = parse_line(r#"{"type":"loss","cpu":1,"first_seq":4,"last_seq":9,"category":"events","start_ns":1,"end_ns":2}"#).unwrap();
        match r {
            Record::Loss(l) => assert_eq!(l.count, 6),
            _ => panic!("not a loss"),
        }
    }

    #[test]
    fn rejects_with_reason() {
        assert!(parse_line("{").unwrap_err().contains("JSON"));
        assert!(
            parse_line(r#"{"type":"event","id":1,"time_ns":5,"syscall":"read"}"#)
                .unwrap_err()
                .contains("`pid`")
        );
        assert!(parse_line(r#"{"id":1}"#).unwrap_err().contains("type"));
        assert!(
            parse_line(r#"{"type":"loss","cpu":0,"start_ns":9,"end_ns":2,"count":1}"#).is_err()
        );
        assert!(matches!(
            parse_line(r#"{"type":"future","x":1}"#).unwrap(),
            Record::Other(_)
        ));
        // The collector's stats lines count `incomplete` events.
        assert!(matches!(
            parse_line(r#"{"type":"stats","time_ns":5,"incomplete":0,"count":3}"#).unwrap(),
            Record::Stats { .. }
        ));
    }

    /// The typed parse reads what the `serde_json::Value` parse read:
    /// escaped strings, arguments of any type (only integers count), the
    /// last of a repeated argument, `fds` arrays, `incomplete` of any type.
    #[test]
    fn typed_parse_keeps_escapes_and_reads_arguments_leniently() {
        let line = r#"{"type":"event","boot_id":"b\u0031","id":7,"time_ns":5,"pid":10,"comm":"a\"b","syscall":"pipe2","path":"/tmp/x\\y\u00e9","args":{"flags":"O_CLOEXEC","fd":1.5,"newfd":18446744073709551615,"cmd":-3,"cmd":4,"fds":[3,"x",4,null,{"a":1}],"nested":{"fd":9},"read_fd":[1]},"incomplete":true,"extra":[1,{"b":[2]}]}"#;
        let Record::Event(e, boot) = parse_line(line).unwrap() else {
            panic!("not an event")
        };
        assert_eq!(boot.as_deref(), Some("b1"));
        assert_eq!(e.comm.as_deref(), Some("a\"b"));
        assert_eq!(e.path.as_deref(), Some("/tmp/x\\yé"));
        assert_eq!(e.syscall, "pipe2");
        assert_eq!(e.arg_i64("flags"), None, "a string flag is not an integer");
        assert_eq!(e.arg_i64("fd"), None, "nor a fraction");
        assert_eq!(e.arg_i64("newfd"), None, "nor one past i64");
        assert_eq!(e.arg_i64("cmd"), Some(4), "the last of a repeated key");
        assert_eq!(e.arg_i64("read_fd"), None);
        assert_eq!(e.arg_fds(), &[3, 4]);
        assert!(e.incomplete);
        let Record::Event(e, _) = parse_line(r#"{"type":"event","id":7,"time_ns":5,"pid":10,"syscall":"frobnicate","incomplete":1,"args":{"fds":5}}"#).unwrap() else {
            panic!("not an event")
        };
        assert_eq!(e.syscall, "frobnicate");
        assert!(!e.incomplete, "only `true` marks an event incomplete");
        assert!(e.arg_fds().is_empty());
        // Wrong types of the fields the store needs are still errors, with the column.
        let err = parse_line(r#"{"type":"event","id":7,"time_ns":5,"pid":"ten","syscall":"read"}"#)
            .unwrap_err();
        assert!(
            err.contains("invalid type") && err.contains("column"),
            "{err}"
        );
        let err = parse_line(
            r#"{"type":"event","id":7,"time_ns":5,"pid":1,"syscall":"read","args":[1]}"#,
        )
        .unwrap_err();
        assert!(err.contains("invalid type"), "{err}");
        let err = parse_line(
            r#"{"type":"event","id":7,"time_ns":5,"pid":1,"syscall":"read","args":{"fd":3"#,
        )
        .unwrap_err();
        assert!(err.contains("EOF"), "{err}");
    }
}
