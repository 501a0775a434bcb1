//! One line of the collector's JSON Lines stream (docs/event-schema.md).

use serde::Deserialize;
use serde_json::Value;

/// Every field any record type may carry; which ones are required depends on `type`.
/// One flat struct keeps parsing to a single pass over the line.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    boot_id: Option<String>,
    id: Option<u64>,
    cpu: Option<u32>,
    time_ns: Option<u64>,
    pid: Option<u32>,
    tid: Option<u32>,
    ppid: Option<u32>,
    uid: Option<u32>,
    euid: Option<u32>,
    comm: Option<String>,
    syscall: Option<String>,
    ret: Option<i64>,
    args: Option<serde_json::Map<String, Value>>,
    path: Option<String>,
    path2: Option<String>,
    argv: Option<Vec<String>>,
    addr: Option<String>,
    fd: Option<i32>,
    child_pid: Option<u32>,
    count: Option<u64>,
    // A flag on events, a counter on stats lines: accept both.
    incomplete: Option<Value>,
    dev: Option<u64>,
    inode: Option<u64>,
    first_seq: Option<u64>,
    last_seq: Option<u64>,
    category: Option<String>,
    upper_bound: Option<bool>,
    start_ns: Option<u64>,
    end_ns: Option<u64>,
}

/// A syscall/hook event, reduced to what the graph needs (the raw line is kept separately).
#[derive(Debug, Clone, Default)]
pub struct Event {
    pub boot_id: Option<String>,
    pub id: u64,
    pub cpu: u32,
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub uid: Option<u32>,
    pub euid: Option<u32>,
    pub comm: Option<String>,
    pub syscall: String,
    pub ret: Option<i64>,
    pub args: serde_json::Map<String, Value>,
    pub path: Option<String>,
    pub path2: Option<String>,
    pub argv: Option<Vec<String>>,
    pub addr: Option<String>,
    pub fd: Option<i32>,
    pub child_pid: Option<u32>,
    pub incomplete: bool,
    /// Device and inode of the event's file, when the collector resolved them.
    pub dev: Option<u64>,
    pub inode: Option<u64>,
}

impl Event {
    /// An integer argument by name (`args.fd`, `args.newfd`, ...).
    pub fn arg_i64(&self, name: &str) -> Option<i64> {
        self.args.get(name).and_then(Value::as_i64)
    }
    /// The call failed (negative errno).
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

#[derive(Debug)]
pub enum Record {
    Event(Box<Event>),
    Loss(Loss),
    /// `{"type":"boot","boot_id":...}`: names the boot of the lines that follow.
    Boot(String),
    Stats { boot_id: Option<String>, time_ns: u64 },
    /// A type this reader does not know; skipped as the schema says.
    Other(String),
}

fn need<T>(v: Option<T>, kind: &str, field: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("{kind} record lacks required field `{field}`"))
}

/// Parses one line. Errors are messages for the user (the caller adds the line number).
pub fn parse_line(text: &str) -> Result<Record, String> {
    let l: Line = serde_json::from_str(text).map_err(|e| format!("not valid JSON for the event schema: {e}"))?;
    let kind = l.kind.ok_or("no `type` field (expected \"event\", \"loss\", \"boot\" or \"stats\")")?;
    match kind.as_str() {
        "event" => {
            let id = need(l.id, "event", "id")?;
            Ok(Record::Event(Box::new(Event {
                boot_id: l.boot_id,
                id,
                cpu: l.cpu.unwrap_or((id >> 48) as u32),
                time_ns: need(l.time_ns, "event", "time_ns")?,
                pid: need(l.pid, "event", "pid")?,
                tid: l.tid.or(l.pid).unwrap_or(0),
                ppid: l.ppid.unwrap_or(0),
                uid: l.uid,
                euid: l.euid,
                comm: l.comm,
                syscall: need(l.syscall, "event", "syscall")?,
                ret: l.ret,
                args: l.args.unwrap_or_default(),
                path: l.path.filter(|p| !p.is_empty()),
                path2: l.path2.filter(|p| !p.is_empty()),
                argv: l.argv,
                addr: l.addr.filter(|a| !a.is_empty()),
                fd: l.fd,
                child_pid: l.child_pid,
                incomplete: l.incomplete.as_ref().and_then(Value::as_bool).unwrap_or(false),
                dev: l.dev,
                inode: l.inode,
            })))
        }
        "loss" => {
            let start_ns = need(l.start_ns, "loss", "start_ns")?;
            let end_ns = need(l.end_ns, "loss", "end_ns")?;
            if end_ns < start_ns {
                return Err(format!("loss record has end_ns {end_ns} before start_ns {start_ns}"));
            }
            let count = match (l.count, l.first_seq, l.last_seq) {
                (Some(c), _, _) => c,
                (None, Some(f), Some(t)) if t >= f => t - f + 1,
                _ => return Err("loss record lacks `count` (and first_seq/last_seq to derive it)".into()),
            };
            Ok(Record::Loss(Loss {
                boot_id: l.boot_id,
                cpu: l.cpu,
                first_seq: l.first_seq,
                last_seq: l.last_seq,
                count,
                category: match (l.category, l.upper_bound) {
                    (Some(c), Some(true)) => format!("{c}, upper bound"),
                    (c, _) => c.unwrap_or_else(|| "unknown".into()),
                },
                start_ns,
                end_ns,
            }))
        }
        "boot" => Ok(Record::Boot(need(l.boot_id, "boot", "boot_id")?)),
        "stats" => Ok(Record::Stats { boot_id: l.boot_id, time_ns: need(l.time_ns, "stats", "time_ns")? }),
        other => Ok(Record::Other(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_event_and_loss() {
        let r = parse_line(r#"{"type":"event","id":281474976710657,"time_ns":5,"pid":10,"tid":11,"syscall":"read","fd":3,"path":"/a","args":{"fd":3}}"#).unwrap();
        match r {
            Record::Event(e) => {
                assert_eq!(e.cpu, 1);
                assert_eq!(e.arg_i64("fd"), Some(3));
                assert_eq!(e.path.as_deref(), Some("/a"));
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
        assert!(parse_line(r#"{"type":"event","id":1,"time_ns":5,"syscall":"read"}"#).unwrap_err().contains("`pid`"));
        assert!(parse_line(r#"{"id":1}"#).unwrap_err().contains("type"));
        assert!(parse_line(r#"{"type":"loss","cpu":0,"start_ns":9,"end_ns":2,"count":1}"#).is_err());
        assert!(matches!(parse_line(r#"{"type":"future","x":1}"#).unwrap(), Record::Other(_)));
        // The collector's stats lines count `incomplete` events.
        assert!(matches!(parse_line(r#"{"type":"stats","time_ns":5,"incomplete":0,"count":3}"#).unwrap(), Record::Stats { .. }));
    }
}
