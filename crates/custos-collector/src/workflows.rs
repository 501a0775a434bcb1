//! Workflows: the events of one job, linked in the consumer as they leave
//! it in causal order (docs/workflows.md has the rule and its reasons).
//!
//! A workflow is one incarnation of a process group, the kernel's own unit
//! of "one command": a shell with job control gives each pipeline its own
//! group, and `setsid` starts a session (and a group) for each service,
//! login, cron job and container. Every record carries its process's group
//! (`pgid`, read in the kernel at the event), so the tracker only has to
//! notice when a process enters a group it has not seen running:
//!
//! - a process is born in its parent's workflow (the fork record);
//! - an event whose group differs from the one its process was last seen in
//!   moves the process: into the group's workflow if that group is running,
//!   or into a new workflow that this event starts;
//! - a workflow's id is the id of the event that started it, and that event
//!   names the workflow it came from and the fork that made its process;
//! - a process that makes a group of its own (`setsid`, `setpgid`; its pid
//!   is the group's number) starts a new run of that group; other members
//!   join the latest run of their group (a dead group cannot be joined);
//! - a pid is handed out again only when no group has its number: so a
//!   fork of a child with pid N ends what was known of process and group N.
//!
//! State is one entry per live process and per live group (both keyed by
//! pid numbers, so bounded by the kernel's `pid_max`); a process leaves at
//! its `exit_group`, or when its pid is forked again (killed processes
//! never call exit).

use std::collections::HashMap;

/// What the tracker needs of one event; kept beside its line until the
/// merge writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobStep {
    pub id: u64,
    pub pid: u32,
    pub ppid: u32,
    /// 0: no group (kernel threads): the process is its own workflow.
    pub pgid: u32,
    pub kind: StepKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    Other,
    /// The process created process `child` (the fork record).
    Fork {
        child: u32,
    },
    /// The process ends (`exit_group`).
    Exit,
    /// A successful `setpgid`: the process chose (or was put in) a group.
    Regroup,
    /// A successful `setsid`: a new session, so a new group.
    NewSession,
}

/// How a workflow began, told on the event that starts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    /// The workflow the process was in before (or its parent's).
    pub parent: Option<u64>,
    /// The fork record that created the process starting the workflow.
    pub cause: Option<u64>,
    /// The group was already running when the recording saw it first.
    pub running: bool,
}

#[derive(Clone, Copy, Debug)]
struct Member {
    pgid: u32,
    workflow: u64,
    /// When (the tracker's tick) it was born or entered its group.
    since: u64,
    /// The fork record that created this process, when recorded.
    born_by: Option<u64>,
}

#[derive(Default)]
pub struct Workflows {
    procs: HashMap<u32, Member>,
    /// The latest run of each group number: (workflow, tick it began).
    groups: HashMap<u32, (u64, u64)>,
    /// Counts the events seen: orders group runs and memberships.
    tick: u64,
    /// The last event's (pid, pgid, workflow): most events follow one of
    /// their own process, and then nothing but this needs looking at.
    last: Option<(u32, u32, u64)>,
    /// Workflows started so far.
    pub started: u64,
}

impl Workflows {
    pub fn new() -> Self {
        Self::default()
    }

    /// The workflow of `step`'s event, and how it began when this event
    /// starts it. Must see the events in causal order.
    pub fn assign(&mut self, step: &JobStep) -> (u64, Option<Start>) {
        if step.kind == StepKind::Other {
            if let Some((pid, pgid, workflow)) = self.last {
                if pid == step.pid && pgid == step.pgid {
                    return (workflow, None);
                }
            }
        }
        let (workflow, start) = self.assign_slow(step);
        self.last = (step.kind != StepKind::Exit).then_some((step.pid, step.pgid, workflow));
        (workflow, start)
    }

    fn assign_slow(&mut self, step: &JobStep) -> (u64, Option<Start>) {
        self.tick += 1;
        let tick = self.tick;
        let known = self.procs.get(&step.pid).copied();
        let (workflow, start) = match known {
            Some(m) if m.pgid == step.pgid => (m.workflow, None),
            _ => {
                let chose = matches!(step.kind, StepKind::Regroup | StepKind::NewSession);
                // A process that now leads a group of its own number made
                // that group (setsid, setpgid, or a move we see here first):
                // a new run of it, unless a member was seen joining it since
                // the leader came to be (a shell puts both in the group; the
                // member's record may come first). Members join whatever run
                // is latest: a dead group cannot be joined.
                let latest = match step.pgid {
                    0 => None,
                    pgid => self.groups.get(&pgid).copied(),
                };
                let leads = step.pgid == step.pid && (chose || known.is_some());
                let running_group = match (latest, step.kind) {
                    (_, StepKind::NewSession) => None,
                    (Some((_, began)), _) if leads && known.is_some_and(|m| began < m.since) => {
                        None
                    }
                    (Some(_), _) if leads && known.is_none() => None,
                    (run, _) => run.map(|(w, _)| w),
                };
                let born_by = known.and_then(|m| m.born_by);
                let (workflow, start) = match running_group {
                    Some(w) => (w, None),
                    None => {
                        let parent = known
                            .map(|m| m.workflow)
                            .or_else(|| self.procs.get(&step.ppid).map(|m| m.workflow));
                        let running = known.is_none() && parent.is_none() && !chose;
                        if step.pgid != 0 {
                            self.groups.insert(step.pgid, (step.id, tick));
                        }
                        self.started += 1;
                        (
                            step.id,
                            Some(Start {
                                parent,
                                cause: born_by,
                                running,
                            }),
                        )
                    }
                };
                self.procs.insert(
                    step.pid,
                    Member {
                        pgid: step.pgid,
                        workflow,
                        since: tick,
                        born_by,
                    },
                );
                (workflow, start)
            }
        };
        match step.kind {
            StepKind::Exit => {
                self.procs.remove(&step.pid);
            }
            StepKind::Fork { child } => {
                // pid `child` was free: whatever was known of a process (a
                // killed one never exits) or a group with that number is over.
                self.groups.remove(&child);
                self.procs.insert(
                    child,
                    Member {
                        pgid: step.pgid,
                        workflow,
                        since: tick,
                        born_by: Some(step.id),
                    },
                );
            }
            _ => {}
        }
        (workflow, start)
    }

    /// Processes and groups tracked (the bound is the kernel's pid_max).
    pub fn tracked(&self) -> (usize, usize) {
        (self.procs.len(), self.groups.len())
    }
}

/// Ends an event line (`...}\n`) with its workflow fields.
pub fn suffix(out: &mut Vec<u8>, workflow: u64, start: Option<Start>) {
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(b",\"workflow\":");
    out.extend_from_slice(num.format(workflow).as_bytes());
    if let Some(s) = start {
        if let Some(p) = s.parent {
            out.extend_from_slice(b",\"workflow_parent\":");
            out.extend_from_slice(num.format(p).as_bytes());
        }
        if let Some(c) = s.cause {
            out.extend_from_slice(b",\"workflow_cause\":");
            out.extend_from_slice(num.format(c).as_bytes());
        }
        if s.running {
            out.extend_from_slice(b",\"workflow_running\":true");
        }
    }
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Run {
        wf: Workflows,
        next_id: u64,
    }

    impl Run {
        fn new() -> Self {
            Run {
                wf: Workflows::new(),
                next_id: 100,
            }
        }
        fn ev(
            &mut self,
            pid: u32,
            ppid: u32,
            pgid: u32,
            kind: StepKind,
        ) -> (u64, u64, Option<Start>) {
            self.next_id += 1;
            let (w, s) = self.wf.assign(&JobStep {
                id: self.next_id,
                pid,
                ppid,
                pgid,
                kind,
            });
            (self.next_id, w, s)
        }
    }

    /// `bash -m -c 'cat f | wc -c; head g | od'`: bash (pid 10, group 10)
    /// runs two jobs; each is its own workflow started by its first
    /// member's setpgid, the second member joins, bash stays in its own.
    #[test]
    fn each_job_of_a_job_control_shell_is_one_workflow() {
        let mut r = Run::new();
        let (bash_first, shell, s) = r.ev(10, 1, 10, StepKind::Other);
        assert_eq!(shell, bash_first);
        assert!(s.unwrap().running, "bash was running before the recording");
        let (fork_cat, w, _) = r.ev(10, 1, 10, StepKind::Fork { child: 11 });
        assert_eq!(w, shell);
        // cat: setpgid(0, 0) makes group 11: a new workflow.
        let (setpgid_cat, job1, s) = r.ev(11, 10, 11, StepKind::Regroup);
        assert_eq!(job1, setpgid_cat);
        assert_eq!(
            s,
            Some(Start {
                parent: Some(shell),
                cause: Some(fork_cat),
                running: false
            })
        );
        // bash's own setpgid(11, 11) leaves bash where it is.
        assert_eq!(r.ev(10, 1, 10, StepKind::Regroup).1, shell);
        r.ev(10, 1, 10, StepKind::Fork { child: 12 });
        // wc starts in bash's workflow, then joins group 11.
        let (_, w, s) = r.ev(12, 10, 11, StepKind::Regroup);
        assert_eq!((w, s), (job1, None));
        assert_eq!(r.ev(11, 10, 11, StepKind::Other).1, job1);
        assert_eq!(r.ev(12, 10, 11, StepKind::Other).1, job1);
        assert_eq!(r.ev(11, 10, 11, StepKind::Exit).1, job1);
        assert_eq!(r.ev(12, 10, 11, StepKind::Exit).1, job1);
        // The second job: another group, another workflow.
        r.ev(10, 1, 10, StepKind::Fork { child: 13 });
        let (_, job2, s) = r.ev(13, 10, 13, StepKind::Regroup);
        assert!(job2 != job1 && s.is_some());
        assert_eq!(r.ev(10, 1, 10, StepKind::Other).1, shell);
        assert_eq!(r.wf.started, 3);
    }

    /// `clone` → `setsid` → `execve` → `openat` (a runtime starting a
    /// container process): the child's events from its setsid on are one
    /// workflow whose cause is the clone's fork record.
    #[test]
    fn a_new_session_starts_a_workflow_caused_by_the_fork() {
        let mut r = Run::new();
        let (_, runtime, _) = r.ev(20, 1, 20, StepKind::Other);
        let (fork, _, _) = r.ev(20, 1, 20, StepKind::Fork { child: 21 });
        // Before its setsid the child is in the runtime's workflow.
        assert_eq!(r.ev(21, 20, 20, StepKind::Other).1, runtime);
        let (setsid, init, s) = r.ev(21, 20, 21, StepKind::NewSession);
        assert_eq!(init, setsid);
        assert_eq!(
            s,
            Some(Start {
                parent: Some(runtime),
                cause: Some(fork),
                running: false
            })
        );
        for kind in [
            StepKind::Other,
            StepKind::Other,
            StepKind::Fork { child: 22 },
        ] {
            assert_eq!(r.ev(21, 20, 21, kind).1, init);
        }
        // Its child inherits the workflow; a grandchild's own setsid nests another.
        assert_eq!(r.ev(22, 21, 21, StepKind::Other).1, init);
        let (_, nested, s) = r.ev(22, 21, 22, StepKind::NewSession);
        assert_eq!(s.unwrap().parent, Some(init));
        assert_ne!(nested, init);
    }

    /// A group number comes back only after the group is gone; a new
    /// process with that pid forked later starts a new workflow with it.
    #[test]
    fn a_reused_group_number_is_a_new_workflow() {
        let mut r = Run::new();
        r.ev(30, 1, 30, StepKind::Other);
        r.ev(30, 1, 30, StepKind::Fork { child: 31 });
        let (_, first, _) = r.ev(31, 30, 31, StepKind::Regroup);
        r.ev(31, 30, 31, StepKind::Exit);
        // pid 31 handed out again.
        r.ev(30, 1, 30, StepKind::Fork { child: 31 });
        let (_, second, s) = r.ev(31, 30, 31, StepKind::Regroup);
        assert_ne!(second, first);
        assert!(s.is_some());
    }

    /// bash -m without a terminal makes its own group and goes back; a
    /// later setsid by the same process is a new workflow, not the old group.
    #[test]
    fn leaving_its_own_group_and_calling_setsid_starts_anew() {
        let mut r = Run::new();
        let (_, outer, _) = r.ev(50, 1, 49, StepKind::Other);
        let (_, own, _) = r.ev(50, 1, 50, StepKind::Regroup);
        assert_ne!(own, outer);
        assert_eq!(r.ev(50, 1, 49, StepKind::Regroup).1, outer);
        let (setsid, w, s) = r.ev(50, 1, 50, StepKind::NewSession);
        assert_eq!((w, s.map(|s| s.parent)), (setsid, Some(Some(outer))));
    }

    /// The shell puts both members of `a | b` in a's group; b's record of
    /// it can come before any of a's: a then joins the run b began.
    #[test]
    fn a_member_seen_before_its_leader_is_in_the_leaders_workflow() {
        let mut r = Run::new();
        let (_, shell, _) = r.ev(60, 1, 60, StepKind::Other);
        r.ev(60, 1, 60, StepKind::Fork { child: 61 });
        r.ev(60, 1, 60, StepKind::Fork { child: 62 });
        let (_, job, s) = r.ev(62, 60, 61, StepKind::Regroup);
        assert_eq!(s.map(|s| s.parent), Some(Some(shell)));
        let (_, w, s) = r.ev(61, 60, 61, StepKind::Regroup);
        assert_eq!((w, s), (job, None));
        assert_eq!(r.ev(61, 60, 61, StepKind::Other).1, job);
    }

    /// Without a group (kernel threads report 0) a process is its own workflow.
    #[test]
    fn a_process_without_a_group_is_its_own_workflow() {
        let mut r = Run::new();
        let (_, a, _) = r.ev(2, 0, 0, StepKind::Other);
        let (_, b, _) = r.ev(3, 0, 0, StepKind::Other);
        assert_ne!(a, b);
        assert_eq!(r.ev(2, 0, 0, StepKind::Other).1, a);
    }

    #[test]
    fn exits_and_refork_keep_the_state_bounded() {
        let mut r = Run::new();
        r.ev(40, 1, 40, StepKind::Other);
        for child in 41..1041 {
            r.ev(40, 1, 40, StepKind::Fork { child });
            r.ev(child, 40, child, StepKind::Regroup);
            r.ev(child, 40, child, StepKind::Exit);
        }
        // The groups of exited leaders stay until their number is forked again.
        assert_eq!(r.wf.tracked(), (1, 1001));
        // Killed processes never exit: forking their pid again ends them.
        for child in 41..1041 {
            r.ev(40, 1, 40, StepKind::Fork { child });
            r.ev(child, 40, child, StepKind::Regroup);
        }
        assert_eq!(r.wf.tracked(), (1001, 1001));
        for child in 41..1041 {
            r.ev(40, 1, 40, StepKind::Fork { child });
            r.ev(child, 40, 40, StepKind::Exit);
        }
        assert_eq!(r.wf.tracked(), (1, 1));
    }

    #[test]
    fn the_suffix_closes_the_line() {
        let mut line = b"{\"type\":\"event\",\"id\":7".to_vec();
        suffix(
            &mut line,
            7,
            Some(Start {
                parent: Some(3),
                cause: Some(5),
                running: false,
            }),
        );
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            (
                v["workflow"].as_u64(),
                v["workflow_parent"].as_u64(),
                v["workflow_cause"].as_u64()
            ),
            (Some(7), Some(3), Some(5))
        );
        assert!(v.get("workflow_running").is_none());
    }
}
