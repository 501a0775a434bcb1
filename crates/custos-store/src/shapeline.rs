//! A parse *by shape*: the raw segments cut every event line into its
//! skeleton (keys, punctuation, whitespace, literals) and its values
//! (rawseg.rs). When a skeleton is registered, [`ShapePlan::build`] reads it
//! once, as the fast-path parser (fastline.rs) would read every line of
//! it, into a list of steps: which value goes to which `Line` field, and
//! which fields the skeleton's literals set. A later line of that shape is
//! then read from the values the cut found, without parsing it again.
//!
//! It must read exactly what the fast path reads and give up wherever the
//! fast path gives up (the serde parse then decides, with its messages).
//! Over a fixed skeleton the fast path's walk does not depend on the
//! values but in two ways, both checked per line here: a string holding a
//! control byte (the fast path refuses it, wherever it is), and an integer
//! outside its field's type (`u64`, `u32`, `i32`: the fast path leaves it
//! to serde, which reports it). Everything else a skeleton may hold — a
//! repeated key, a literal or a value of the wrong type for a field, a
//! `container`, trailing text — is settled once: the plan is built only if
//! the fast path reads a line made of the skeleton and sample values, and
//! reads it as the plan does. Skeletons holding a number that is not a
//! canonical 64-bit integer (kept as text by the cutter) get no plan.

use super::{fastline, Args, Lenient, Line, Str};
use crate::rawseg::Val;
use std::borrow::Cow;

/// Markers of the values in a skeleton (rawseg.rs).
const INT: u8 = 1;
const STR: u8 = 2;

/// A `Line` field a value is read into.
#[derive(Clone, Copy, Debug)]
enum Field {
    // Borrowed strings.
    Kind,
    BootId,
    Syscall,
    Category,
    // Owned strings.
    Comm,
    Path,
    Path2,
    Addr,
    Laddr,
    // u64.
    Id,
    TimeNs,
    Count,
    Dev,
    Inode,
    FirstSeq,
    LastSeq,
    StartNs,
    EndNs,
    Workflow,
    WorkflowParent,
    WorkflowCause,
    RootDev,
    RootInode,
    // u32.
    Cpu,
    Pid,
    Tid,
    Ppid,
    Uid,
    Euid,
    ChildPid,
    // i64, i32.
    Ret,
    Fd,
    // Booleans (set by a literal only).
    UpperBound,
    WorkflowRunning,
}

impl Field {
    fn of(key: &[u8]) -> Option<Field> {
        use Field::*;
        Some(match key {
            b"type" => Kind,
            b"boot_id" => BootId,
            b"syscall" => Syscall,
            b"category" => Category,
            b"comm" => Comm,
            b"path" => Path,
            b"path2" => Path2,
            b"addr" => Addr,
            b"laddr" => Laddr,
            b"id" => Id,
            b"time_ns" => TimeNs,
            b"count" => Count,
            b"dev" => Dev,
            b"inode" => Inode,
            b"first_seq" => FirstSeq,
            b"last_seq" => LastSeq,
            b"start_ns" => StartNs,
            b"end_ns" => EndNs,
            b"workflow" => Workflow,
            b"workflow_parent" => WorkflowParent,
            b"workflow_cause" => WorkflowCause,
            b"root_dev" => RootDev,
            b"root_inode" => RootInode,
            b"cpu" => Cpu,
            b"pid" => Pid,
            b"tid" => Tid,
            b"ppid" => Ppid,
            b"uid" => Uid,
            b"euid" => Euid,
            b"child_pid" => ChildPid,
            b"ret" => Ret,
            b"fd" => Fd,
            b"upper_bound" => UpperBound,
            b"workflow_running" => WorkflowRunning,
            _ => return None,
        })
    }

    /// The marker of the value the field takes (0: none, a literal only).
    fn marker(self) -> u8 {
        use Field::*;
        match self {
            Kind | BootId | Syscall | Category | Comm | Path | Path2 | Addr | Laddr => STR,
            UpperBound | WorkflowRunning => 0,
            _ => INT,
        }
    }
}

/// The integer arguments of `Args`, by name, in the order of [`arg_slot`].
const ARG_NAMES: [&[u8]; 19] = [
    b"fd",
    b"sockfd",
    b"oldfd",
    b"newfd",
    b"cmd",
    b"prot",
    b"flags",
    b"read_fd",
    b"write_fd",
    b"in_fd",
    b"fd_in",
    b"out_fd",
    b"fd_out",
    b"uid",
    b"euid",
    b"fsuid",
    b"request",
    b"target_pid",
    b"dirfd",
];

fn arg_slot(a: &mut Args, k: u8) -> &mut Option<i64> {
    match k {
        0 => &mut a.fd,
        1 => &mut a.sockfd,
        2 => &mut a.oldfd,
        3 => &mut a.newfd,
        4 => &mut a.cmd,
        5 => &mut a.prot,
        6 => &mut a.flags,
        7 => &mut a.read_fd,
        8 => &mut a.write_fd,
        9 => &mut a.in_fd,
        10 => &mut a.fd_in,
        11 => &mut a.out_fd,
        12 => &mut a.fd_out,
        13 => &mut a.uid,
        14 => &mut a.euid,
        15 => &mut a.fsuid,
        16 => &mut a.request,
        17 => &mut a.target_pid,
        _ => &mut a.dirfd,
    }
}

/// One step of a plan, in the skeleton's order. The first five take the
/// next value of the line.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// A value the parse skips (an unknown key's, `incomplete`'s).
    Skip,
    /// A value read into a field.
    Set(Field),
    /// A string of `argv`.
    ArgvPush,
    /// An argument's value: an integer is kept, a string reads as absent.
    Arg(u8),
    /// An element of `args.fds`: kept if it is an integer.
    FdsPush,
    /// `"argv":[`: the list, empty so far.
    ArgvNew,
    /// `"args":{`: the arguments, none so far.
    ArgsNew,
    /// An argument given as a literal, an object or an array: absent.
    ArgNone(u8),
    /// `"fds":` starts afresh (a repeated key keeps its last value).
    FdsClear,
    /// `incomplete`: a literal `true`/`false` (Some), or any other value (None).
    Incomplete(Option<bool>),
    /// A boolean field's literal.
    Bool(Field, bool),
}

/// How the fast-path parser reads every line of one shape.
#[derive(Debug)]
pub(crate) struct ShapePlan {
    ops: Box<[Op]>,
}

/// The skeleton, read as the fast parser reads a line, its values as markers.
struct Sk<'a> {
    b: &'a [u8],
    i: usize,
    ops: Vec<Op>,
}

impl<'a> Sk<'a> {
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn lit(&mut self, word: &[u8]) -> Option<()> {
        self.b
            .get(self.i..self.i + word.len())
            .filter(|w| *w == word)?;
        self.i += word.len();
        Some(())
    }

    /// A key: a string without markers, escapes or control bytes.
    fn key(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let n = self.b[start..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if self.b[start + n] != b'"' {
            return None;
        }
        self.i = start + n + 1;
        Some(&self.b[start..start + n])
    }

    /// What comes next: a value's marker (its text consumed), a literal
    /// (consumed: `t`, `f`, `n`), or `{`/`[` (not consumed).
    fn scalar(&mut self) -> Option<u8> {
        match self.peek()? {
            b'"' => {
                self.lit(&[b'"', STR, b'"'])?;
                Some(STR)
            }
            INT => {
                self.i += 1;
                Some(INT)
            }
            b't' => self.lit(b"true").map(|_| b't'),
            b'f' => self.lit(b"false").map(|_| b'f'),
            b'n' => self.lit(b"null").map(|_| b'n'),
            c @ (b'{' | b'[') => Some(c),
            _ => None,
        }
    }

    /// Any value, skipped: each value in it a `Skip`.
    fn skip(&mut self) -> Option<()> {
        match self.scalar()? {
            STR | INT => self.ops.push(Op::Skip),
            b'{' => {
                self.i += 1;
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.key()?;
                    self.eat(b':')?;
                    self.skip()?;
                    if self.end_of(b'}')? {
                        return Some(());
                    }
                }
            }
            b'[' => {
                self.i += 1;
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip()?;
                    if self.end_of(b']')? {
                        return Some(());
                    }
                }
            }
            _ => {}
        }
        Some(())
    }

    /// After a member or element: `,` (false) or the closing `close` (true).
    fn end_of(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.i += 1;
                Some(false)
            }
            c if c == close => {
                self.i += 1;
                Some(true)
            }
            _ => None,
        }
    }

    /// `args`' object, as `Args` deserializes it.
    fn args(&mut self) -> Option<()> {
        self.eat(b'{')?;
        self.ops.push(Op::ArgsNew);
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            self.eat(b':')?;
            if key == b"fds" {
                // `IntList`: an array's integer elements, nothing for another value.
                self.ops.push(Op::FdsClear);
                match self.scalar()? {
                    b'[' => {
                        self.i += 1;
                        if self.peek()? == b']' {
                            self.i += 1;
                        } else {
                            loop {
                                match self.scalar()? {
                                    INT => self.ops.push(Op::FdsPush),
                                    b'{' | b'[' => self.skip()?,
                                    STR => self.ops.push(Op::Skip),
                                    _ => {}
                                }
                                if self.end_of(b']')? {
                                    break;
                                }
                            }
                        }
                    }
                    b'{' => self.skip()?,
                    STR | INT => self.ops.push(Op::Skip),
                    _ => {}
                }
            } else if let Some(k) = ARG_NAMES.iter().position(|n| *n == key) {
                // `Lenient<i64>`: an integer, else absent.
                let k = k as u8;
                match self.scalar()? {
                    STR | INT => self.ops.push(Op::Arg(k)),
                    b'{' | b'[' => {
                        self.skip()?;
                        self.ops.push(Op::ArgNone(k));
                    }
                    _ => self.ops.push(Op::ArgNone(k)),
                }
            } else {
                self.skip()?;
            }
            if self.end_of(b'}')? {
                return Some(());
            }
        }
    }

    /// The line's object.
    fn line(&mut self) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
        } else {
            loop {
                let key = self.key()?;
                self.eat(b':')?;
                match key {
                    b"args" => match self.peek()? {
                        b'n' => self.lit(b"null")?,
                        _ => self.args()?,
                    },
                    b"argv" => match self.scalar()? {
                        b'n' => {}
                        b'[' => {
                            self.i += 1;
                            self.ops.push(Op::ArgvNew);
                            if self.peek()? == b']' {
                                self.i += 1;
                            } else {
                                loop {
                                    if self.scalar()? != STR {
                                        return None;
                                    }
                                    self.ops.push(Op::ArgvPush);
                                    if self.end_of(b']')? {
                                        break;
                                    }
                                }
                            }
                        }
                        _ => return None,
                    },
                    b"incomplete" => match self.scalar()? {
                        b'n' => {}
                        b't' => self.ops.push(Op::Incomplete(Some(true))),
                        b'f' => self.ops.push(Op::Incomplete(Some(false))),
                        STR | INT => self.ops.extend([Op::Skip, Op::Incomplete(None)]),
                        _ => {
                            self.skip()?;
                            self.ops.push(Op::Incomplete(None));
                        }
                    },
                    b"container" => return None,
                    _ => match Field::of(key) {
                        Some(f) => match (self.scalar()?, f.marker()) {
                            (b'n', _) => {}
                            (b't', 0) => self.ops.push(Op::Bool(f, true)),
                            (b'f', 0) => self.ops.push(Op::Bool(f, false)),
                            (m, want) if m == want => self.ops.push(Op::Set(f)),
                            _ => return None,
                        },
                        None => self.skip()?,
                    },
                }
                if self.end_of(b'}')? {
                    break;
                }
            }
        }
        (self.peek().is_none()).then_some(())
    }
}

/// A string value: its text if the fast parser takes it (no control byte).
fn text(line: &str, v: Val) -> Option<&str> {
    match v {
        Val::Text(a, e) => {
            let s = line.get(a as usize..e as usize)?;
            s.bytes().all(|c| c >= 0x20).then_some(s)
        }
        Val::Int(_) => None,
    }
}

fn int(v: Val) -> Option<i64> {
    match v {
        Val::Int(v) => Some(v),
        Val::Text(..) => None,
    }
}

impl ShapePlan {
    /// The plan of a skeleton (markers where its values are), if every line
    /// of it can be read by the plan as the fast path reads it.
    pub(crate) fn build(skel: &[u8]) -> Option<ShapePlan> {
        let mut sk = Sk {
            b: skel,
            i: 0,
            ops: Vec::new(),
        };
        sk.line()?;
        let plan = ShapePlan { ops: sk.ops.into() };
        // Proof by a line of this shape with distinct sample values: the fast
        // path must take it, and read it as the plan does. Its walk over the
        // skeleton does not depend on the values beyond what `read` checks.
        let (mut bytes, mut vals) = (Vec::with_capacity(skel.len() + 64), Vec::new());
        for &c in skel {
            let k = vals.len();
            match c {
                INT => {
                    let v = 100 + k as i64;
                    bytes.extend_from_slice(v.to_string().as_bytes());
                    vals.push((0, Val::Int(v)));
                }
                STR => {
                    let a = bytes.len() as u32;
                    bytes.extend_from_slice(format!("v{k}").as_bytes());
                    vals.push((0, Val::Text(a, bytes.len() as u32)));
                }
                c => bytes.push(c),
            }
        }
        // A skeleton is UTF-8 but for its markers (keys hold no control bytes).
        let line = String::from_utf8(bytes).ok()?;
        let fast = fastline::fast_line(&line)?;
        let ours = plan.read(&line, &vals)?;
        (format!("{fast:?}") == format!("{ours:?}")).then_some(plan)
    }

    /// A line of this shape read from its values (in the line's order, as
    /// the cut found them); None where the fast path would give up on it.
    pub(super) fn read<'l>(&self, line: &'l str, vals: &[(u32, Val)]) -> Option<Line<'l>> {
        let mut l = Line::default();
        let mut vals = vals.iter().map(|v| v.1);
        let mut next = || vals.next();
        for &op in self.ops.iter() {
            match op {
                Op::Skip => {
                    let v = next()?;
                    if let Val::Text(..) = v {
                        text(line, v)?;
                    }
                }
                Op::Set(f) => set(&mut l, f, line, next()?)?,
                Op::ArgvPush => l.argv.as_mut()?.push(text(line, next()?)?.to_string()),
                Op::Arg(k) => {
                    let v = next()?;
                    let x = match v {
                        Val::Int(v) => Some(v),
                        Val::Text(..) => text(line, v).map(|_| None)?,
                    };
                    *arg_slot(l.args.as_mut()?, k) = x;
                }
                Op::FdsPush => l.args.as_mut()?.fds.push(int(next()?)?),
                Op::ArgvNew => l.argv = Some(Vec::new()),
                Op::ArgsNew => l.args = Some(Box::default()),
                Op::ArgNone(k) => *arg_slot(l.args.as_mut()?, k) = None,
                Op::FdsClear => l.args.as_mut()?.fds.clear(),
                Op::Incomplete(b) => l.incomplete = Some(Lenient(b)),
                Op::Bool(Field::UpperBound, b) => l.upper_bound = Some(b),
                Op::Bool(_, b) => l.workflow_running = Some(b),
            }
        }
        next().is_none().then_some(l)
    }
}

/// A value into its field, with the field's type's range (as the fast path's `u64`, `u32`, `i32`).
fn set<'l>(l: &mut Line<'l>, f: Field, line: &'l str, v: Val) -> Option<()> {
    use Field::*;
    let borrowed = |v| text(line, v).map(|s| Str(Cow::Borrowed(s)));
    let owned = |v| text(line, v).map(str::to_string);
    let u64_ = |v| int(v).and_then(|v| u64::try_from(v).ok());
    let u32_ = |v| int(v).and_then(|v| u32::try_from(v).ok());
    match f {
        Kind => l.kind = Some(borrowed(v)?),
        BootId => l.boot_id = Some(borrowed(v)?),
        Syscall => l.syscall = Some(borrowed(v)?),
        Category => l.category = Some(borrowed(v)?),
        Comm => l.comm = Some(owned(v)?),
        Path => l.path = Some(owned(v)?),
        Path2 => l.path2 = Some(owned(v)?),
        Addr => l.addr = Some(owned(v)?),
        Laddr => l.laddr = Some(owned(v)?),
        Id => l.id = Some(u64_(v)?),
        TimeNs => l.time_ns = Some(u64_(v)?),
        Count => l.count = Some(u64_(v)?),
        Dev => l.dev = Some(u64_(v)?),
        Inode => l.inode = Some(u64_(v)?),
        FirstSeq => l.first_seq = Some(u64_(v)?),
        LastSeq => l.last_seq = Some(u64_(v)?),
        StartNs => l.start_ns = Some(u64_(v)?),
        EndNs => l.end_ns = Some(u64_(v)?),
        Workflow => l.workflow = Some(u64_(v)?),
        WorkflowParent => l.workflow_parent = Some(u64_(v)?),
        WorkflowCause => l.workflow_cause = Some(u64_(v)?),
        RootDev => l.root_dev = Some(u64_(v)?),
        RootInode => l.root_inode = Some(u64_(v)?),
        Cpu => l.cpu = Some(u32_(v)?),
        Pid => l.pid = Some(u32_(v)?),
        Tid => l.tid = Some(u32_(v)?),
        Ppid => l.ppid = Some(u32_(v)?),
        Uid => l.uid = Some(u32_(v)?),
        Euid => l.euid = Some(u32_(v)?),
        ChildPid => l.child_pid = Some(u32_(v)?),
        Ret => l.ret = Some(int(v)?),
        Fd => l.fd = Some(int(v).and_then(|v| i32::try_from(v).ok())?),
        UpperBound | WorkflowRunning => return None,
    }
    Some(())
}
