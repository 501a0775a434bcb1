//! Workflows in the store (docs/workflows.md): the collector names each
//! event's workflow (the id of the event that started it); the store keeps
//! one row per workflow, which processes took part, and its events' ids in
//! stream order, so `custos query workflow` can list one without scanning
//! the raw events.

use crate::blocks::IdList;
use crate::record::{Event, Record, WorkflowStart};
use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;

/// What the open batch adds to one workflow.
#[derive(Default)]
struct Pending {
    first_ns: i64,
    last_ns: i64,
    events: i64,
    /// The events' ids, coded as an [`IdList`]: a workflow's events come
    /// from a few CPUs, so each takes two or three bytes.
    ids: Vec<u8>,
    coder: IdList,
    start: Option<(WorkflowStart, u32, Option<String>)>,
}

/// The workflows of the open batch, written at its commit.
#[derive(Default)]
pub struct WorkflowLog {
    pending: BTreeMap<(i64, u64), Pending>,
    /// (boot, pid, workflow) -> first time in this batch.
    procs: BTreeMap<(i64, u32, u64), i64>,
}

impl WorkflowLog {
    /// Notes an applied event (in time order).
    pub fn note(&mut self, boot: i64, ev: &Event) {
        let Some(w) = ev.workflow else { return };
        let t = ev.time_ns as i64;
        let p = self.pending.entry((boot, w)).or_insert_with(|| Pending {
            first_ns: t,
            ..Pending::default()
        });
        p.first_ns = p.first_ns.min(t);
        p.last_ns = p.last_ns.max(t);
        p.events += 1;
        p.coder.put(&mut p.ids, ev.id);
        if let Some(s) = ev.workflow_start.as_deref() {
            p.start = Some((s.clone(), ev.pid, ev.comm.clone()));
        }
        self.procs.entry((boot, ev.pid, w)).or_insert(t);
    }

    /// Writes the batch's part of each workflow; inside the batch transaction.
    pub fn flush(&mut self, db: &Connection) -> Result<()> {
        let mut row = db.prepare_cached(
            "INSERT INTO workflows(boot, id, parent, cause, running, leader, comm, start_ns, end_ns, events) \
             VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10) ON CONFLICT(boot, id) DO UPDATE SET \
             parent = COALESCE(parent, excluded.parent), cause = COALESCE(cause, excluded.cause), \
             running = COALESCE(running, excluded.running), leader = COALESCE(leader, excluded.leader), \
             comm = COALESCE(comm, excluded.comm), start_ns = MIN(start_ns, excluded.start_ns), \
             end_ns = MAX(end_ns, excluded.end_ns), events = events + excluded.events",
        )?;
        let mut part = db.prepare_cached(
            "INSERT INTO workflow_parts(boot, workflow, part, data) VALUES(?1, ?2, \
             (SELECT COALESCE(MAX(part) + 1, 0) FROM workflow_parts WHERE boot = ?1 AND workflow = ?2), ?3)",
        )?;
        for ((boot, w), p) in std::mem::take(&mut self.pending) {
            let (parent, cause, running, leader, comm) = match &p.start {
                Some((s, pid, comm)) => (
                    s.parent.map(|v| v as i64),
                    s.cause.map(|v| v as i64),
                    Some(s.running),
                    Some(*pid),
                    comm.clone(),
                ),
                None => (None, None, None, None, None),
            };
            row.execute(params![
                boot, w as i64, parent, cause, running, leader, comm, p.first_ns, p.last_ns,
                p.events
            ])?;
            part.execute(params![boot, w as i64, p.ids])?;
        }
        let mut proc = db.prepare_cached("INSERT OR IGNORE INTO workflow_procs(boot, pid, workflow, first_ns) VALUES(?1,?2,?3,?4)")?;
        for ((boot, pid, w), t) in std::mem::take(&mut self.procs) {
            proc.execute(params![boot, pid, w as i64, t])?;
        }
        Ok(())
    }

    /// Forgets the open batch (it was rolled back).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.procs.clear();
    }
}

/// One workflow as the store knows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Workflow {
    pub boot: i64,
    pub id: u64,
    /// The workflow it came from.
    pub parent: Option<u64>,
    /// The fork record that made its first process.
    pub cause: Option<u64>,
    /// Already running when the recording saw it first; None: its first
    /// event is not in the store.
    pub running: Option<bool>,
    pub leader: Option<u32>,
    pub comm: Option<String>,
    pub start_ns: i64,
    pub end_ns: i64,
    pub events: i64,
    pub pids: Vec<u32>,
}

/// A store written before workflows were kept has not their tables.
fn require_workflows(db: &Connection) -> Result<()> {
    if !crate::schema::has_table(db, "workflows")? {
        bail!("this store keeps no workflows (written by an older custos); re-ingest its archive into a new store");
    }
    Ok(())
}

fn workflow_row(db: &Connection, boot: i64, id: u64) -> Result<Option<Workflow>> {
    let w = db
        .query_row(
            "SELECT parent, cause, running, leader, comm, start_ns, end_ns, events FROM workflows WHERE boot = ?1 AND id = ?2",
            params![boot, id as i64],
            |r| {
                Ok(Workflow {
                    boot,
                    id,
                    parent: r.get::<_, Option<i64>>(0)?.map(|v| v as u64),
                    cause: r.get::<_, Option<i64>>(1)?.map(|v| v as u64),
                    running: r.get(2)?,
                    leader: r.get(3)?,
                    comm: r.get(4)?,
                    start_ns: r.get(5)?,
                    end_ns: r.get(6)?,
                    events: r.get(7)?,
                    pids: Vec::new(),
                })
            },
        )
        .optional()?;
    let Some(mut w) = w else { return Ok(None) };
    w.pids = db
        .prepare_cached("SELECT pid FROM workflow_procs WHERE boot = ?1 AND workflow = ?2 ORDER BY first_ns, pid")?
        .query_map(params![boot, id as i64], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Some(w))
}

/// The workflows that event `event_id` (any event, or a workflow's own id)
/// belongs to, one per boot holding the event.
pub fn of_event(db: &Connection, event_id: i64) -> Result<Vec<Workflow>> {
    require_workflows(db)?;
    let mut out = Vec::new();
    for boot in crate::ingest::event_boots(db, event_id)? {
        let line = crate::ingest::raw_event(db, boot, event_id)?.context("the event's raw line")?;
        let Ok(Record::Event(ev, _)) = crate::record::parse_line(&line) else {
            bail!("event {event_id}'s raw line does not parse as an event (the store is damaged)")
        };
        let Some(w) = ev.workflow else {
            bail!("event {event_id} carries no workflow (recorded with --no-workflows, or by an older collector)")
        };
        out.extend(workflow_row(db, boot, w)?);
    }
    Ok(out)
}

/// The workflows process `pid` took part in, oldest first.
pub fn of_pid(db: &Connection, pid: u32) -> Result<Vec<Workflow>> {
    require_workflows(db)?;
    let keys: Vec<(i64, i64)> = db
        .prepare("SELECT boot, workflow FROM workflow_procs WHERE pid = ?1 ORDER BY first_ns")?
        .query_map([pid], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    for (boot, w) in keys {
        out.extend(workflow_row(db, boot, w as u64)?);
    }
    Ok(out)
}

/// The ids of a workflow's events, in stream order.
pub fn event_ids(db: &Connection, boot: i64, workflow: u64) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    let mut st = db.prepare_cached(
        "SELECT data FROM workflow_parts WHERE boot = ?1 AND workflow = ?2 ORDER BY part",
    )?;
    let mut rows = st.query(params![boot, workflow as i64])?;
    while let Some(r) = rows.next()? {
        let data: Vec<u8> = r.get(0)?;
        // Each part is a list of its own.
        let mut coder = IdList::default();
        let mut at = 0;
        while at < data.len() {
            ids.push(coder.get(&data, &mut at)?.context(
                "a workflow part holds an id past 16 bits of CPU (the store is damaged)",
            )?);
        }
    }
    Ok(ids)
}

/// One event of a workflow listing.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Step {
    pub id: u64,
    pub time_ns: u64,
    pub time: String,
    pub pid: u32,
    pub comm: Option<String>,
    pub syscall: String,
    pub ret: Option<i64>,
    /// The path, command line, address or child the event names.
    pub detail: Option<String>,
}

impl Step {
    fn of(line: &str) -> Option<Step> {
        let Record::Event(ev, _) = crate::record::parse_line(line).ok()? else {
            return None;
        };
        let detail = match (&ev.argv, &ev.path, &ev.addr, ev.child_pid) {
            (Some(argv), ..) if ev.ret.is_none_or(|r| r == 0) => Some(argv.join(" ")),
            (_, Some(p), ..) => Some(p.clone()),
            (_, _, Some(a), _) => Some(a.clone()),
            (.., Some(c)) => Some(format!("child {c}")),
            _ => None,
        };
        Some(Step {
            id: ev.id,
            time_ns: ev.time_ns,
            time: crate::timefmt::format_ns(ev.time_ns),
            pid: ev.pid,
            comm: ev.comm.clone(),
            syscall: ev.syscall.to_string(),
            ret: ev.ret,
            detail,
        })
    }
}

/// A workflow with its events (at most `limit` of them; 0: all), the fork
/// that caused it, and the losses that may have taken events from it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listing {
    pub workflow: Workflow,
    pub start_time: String,
    pub end_time: String,
    /// The fork record (in the parent workflow) that made its first process.
    pub cause: Option<Step>,
    pub steps: Vec<Step>,
    /// Events not listed because of the limit.
    pub more: u64,
    pub losses: Vec<crate::query::LossNote>,
}

/// `custos query workflow SPEC`: SPEC is an event id (decimal or 0x hex;
/// a workflow's id is its first event's) or `pid:N`.
pub fn query(db: &Connection, spec: &str, limit: usize) -> Result<Vec<Listing>> {
    let spec = spec.trim();
    let found = match spec.strip_prefix("pid:") {
        Some(pid) => {
            let pid: u32 = pid
                .parse()
                .with_context(|| format!("{spec:?}: expected pid:N"))?;
            let w = of_pid(db, pid)?;
            if w.is_empty() {
                bail!("no workflow holds pid {pid}");
            }
            w
        }
        None => {
            let id = crate::query::event_id_of(spec).with_context(|| {
                format!("{spec:?}: expected an event id (decimal or 0x hex) or pid:N")
            })?;
            let w = of_event(db, id)?;
            if w.is_empty() {
                bail!("no event {id} in the store");
            }
            w
        }
    };
    let mut out = Vec::new();
    for w in found {
        let ids = event_ids(db, w.boot, w.id)?;
        let shown = if limit == 0 {
            ids.len()
        } else {
            ids.len().min(limit)
        };
        let mut want: Vec<u64> = ids[..shown].to_vec();
        want.extend(w.cause);
        let mut lines = crate::ingest::raw_events(db, w.boot, &want)?;
        let steps = ids[..shown]
            .iter()
            .filter_map(|id| lines.remove(id))
            .filter_map(|l| Step::of(&l))
            .collect();
        let cause = w
            .cause
            .and_then(|c| lines.remove(&c))
            .and_then(|l| Step::of(&l));
        let boots = std::collections::HashSet::from([w.boot]);
        let losses = crate::query::losses_for(db, &boots, Some((w.start_ns, w.end_ns)))?;
        out.push(Listing {
            start_time: crate::timefmt::format_ns(w.start_ns as u64),
            end_time: crate::timefmt::format_ns(w.end_ns as u64),
            more: (ids.len() - shown) as u64,
            workflow: w,
            cause,
            steps,
            losses,
        });
    }
    Ok(out)
}

/// The listings as a table.
pub fn render_text(listings: &[Listing]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for l in listings {
        let w = &l.workflow;
        let _ = write!(s, "workflow {}", w.id);
        if let (Some(pid), Some(comm)) = (w.leader, &w.comm) {
            let _ = write!(s, ", started by {comm} (pid {pid})");
        }
        match (w.running, w.parent) {
            (Some(true), _) => s.push_str(", already running when the recording began"),
            (_, Some(p)) => {
                let _ = write!(s, ", from workflow {p}");
            }
            (None, _) => s.push_str(" (its first event is not in the store)"),
            _ => {}
        }
        let _ = writeln!(s);
        let pids: Vec<String> = w.pids.iter().map(u32::to_string).collect();
        let _ = writeln!(
            s,
            "  {} events, {} – {}; processes: {}",
            w.events,
            l.start_time,
            l.end_time,
            pids.join(" ")
        );
        for loss in &l.losses {
            let _ = writeln!(s, "  {}", loss.message());
        }
        // Return values as numbers, but addresses (mmap) in hex; the column as wide as its widest.
        let ret_of = |st: &Step| {
            st.ret
                .map(|r| {
                    if r > u32::MAX as i64 {
                        format!("{r:#x}")
                    } else {
                        r.to_string()
                    }
                })
                .unwrap_or_default()
        };
        let ret_width = l
            .cause
            .iter()
            .chain(&l.steps)
            .map(|st| ret_of(st).len())
            .max()
            .unwrap_or(0)
            .max(3);
        let mut row = |mark: &str, st: &Step| {
            let ret = ret_of(st);
            let _ = writeln!(
                s,
                "  {mark} {}  {:>16}  {:>7}  {:<15}  {:<22} {ret:>ret_width$}  {}",
                st.time,
                st.id,
                st.pid,
                st.comm.as_deref().unwrap_or("?"),
                st.syscall,
                st.detail.as_deref().unwrap_or("")
            );
        };
        if let Some(c) = &l.cause {
            row("<", c);
        }
        for st in &l.steps {
            row(" ", st);
        }
        if l.more > 0 {
            let _ = writeln!(s, "  ... {} more events (--limit 0 lists all)", l.more);
        }
    }
    s
}
