"""Where a run ran: the commit and the binaries it measured, the host's
kernel, CPU and speculation mitigations, the VM it booted, and how busy the
host was meanwhile. A figure without these cannot be compared with another:
the collector's cost per syscall is 2.6x higher on an AMD EPYC host with the
SRSO mitigation than on an Intel one.

A *sitting* is one stretch of runs by one invocation of a bench, on one
host, from one checkout. `Sitting` takes the host's state when it begins;
`Sitting.made_by()` gives the record (`provenance()` makes it) when it
ends. A results file made from runs of several sittings keeps each one's
record in a `sittings` list, and its `made_by` names their commits
(`combined()`): "several" where they differ.

Not for: judging whether a record is current (report.py does, from the
history).
"""
import dataclasses
import datetime
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from .paths import ROOT

PROC = Path("/proc")
SYS_CPU = Path("/sys/devices/system/cpu")
# Other processes are listed when they used at least this share of one CPU
# during the sitting; at most this many, the busiest first.
BUSY_PCT = 1.0
BUSY_MAX = 8
# What a combined record says where its sittings' commits (or another
# field) differ.
SEVERAL = "several"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- the checkout and its binaries

def git_state(root: Path = ROOT):
    """(commit, dirty) of the checkout; (None, False) outside a git checkout."""
    def git(*args):
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    return commit, bool(commit and git("status", "--porcelain", "--untracked-files=no"))


def binary_name(path: Path, root: Path = ROOT) -> str:
    """target/release/custos for a binary of the checkout, else its absolute path."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def sha256_of(binaries, root: Path = ROOT) -> dict:
    """{name: sha256} of every binary a bench measures. A missing one is an
    error: a record that names no binary cannot say what was measured."""
    out = {}
    for b in binaries:
        p = Path(b)
        if not p.is_file():
            raise FileNotFoundError(f"{p} is missing: a bench records the sha256 of every binary it measures, "
                                    f"so it needs them all built (`make build`)")
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        out[binary_name(p, root)] = h.hexdigest()
    return out


# ---------------------------------------------------------------- the host

def cpuinfo(proc: Path = PROC) -> dict:
    """The first CPU's fields of /proc/cpuinfo ("model name", "microcode", ...)."""
    fields = {}
    try:
        text = (proc / "cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def mitigations(sys_cpu: Path = SYS_CPU):
    """{vulnerability: the kernel's text} from sys_cpu/vulnerabilities, e.g.
    "spec_rstack_overflow": "Mitigation: Safe RET"; None where the kernel
    has no such directory."""
    d = Path(sys_cpu) / "vulnerabilities"
    if not d.is_dir():
        return None
    out = {}
    for f in sorted(d.iterdir()):
        try:
            out[f.name] = f.read_text().strip()
        except OSError as e:
            out[f.name] = f"unreadable: {e.strerror}"
    return out


def host_kernel(proc: Path = PROC) -> str:
    try:
        return (proc / "sys" / "kernel" / "osrelease").read_text().strip()
    except OSError:
        return os.uname().release


def load1(proc: Path = PROC):
    """The 1-minute load average."""
    try:
        return float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_ticks(proc: Path = PROC) -> dict:
    """{"pid:starttime": [comm, ppid, utime + stime]} of every process (the
    start time tells a pid's reuse apart)."""
    out = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            text = (d / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        comm = text[text.find("(") + 1:text.rfind(")")]
        f = text[text.rfind(")") + 2:].split()
        try:
            out[f"{d.name}:{f[19]}"] = [comm, int(f[1]), int(f[11]) + int(f[12])]
        except (IndexError, ValueError):
            continue
    return out


def busy_others(start: dict, end: dict, seconds: float, me: int = None) -> list:
    """Processes other than this one and its descendants that used CPU
    between two cpu_ticks() snapshots: a process new since the start counts
    whole. The busiest first, each at least BUSY_PCT % of one CPU."""
    me = os.getpid() if me is None else me
    parent = {int(k.split(":")[0]): v[1] for k, v in end.items()}

    def ours(pid):
        seen = set()
        while pid and pid not in seen:
            if pid == me:
                return True
            seen.add(pid)
            pid = parent.get(pid)
        return False

    hz = os.sysconf("SC_CLK_TCK")
    rows = []
    for key, (comm, _, ticks) in end.items():
        pid = int(key.split(":")[0])
        used = (ticks - start[key][2] if key in start else ticks) / hz
        pct = 100.0 * used / seconds if seconds > 0 else 0.0
        if pct >= BUSY_PCT and not ours(pid):
            rows.append({"pid": pid, "comm": comm, "cpu_s": round(used, 2), "cpu_pct": round(pct, 1)})
    rows.sort(key=lambda r: -r["cpu_s"])
    return rows[:BUSY_MAX]


# ---------------------------------------------------------------- the record

@dataclasses.dataclass
class Start:
    """What a sitting saw when it began (JSON-able: a shell bench keeps it in a file)."""
    commit: object
    dirty: bool
    date: str
    time: float
    binaries: dict
    load1: object
    ticks: dict

    @classmethod
    def take(cls, binaries=(), root: Path = ROOT, proc: Path = PROC):
        commit, dirty = git_state(root)
        return cls(commit, dirty, now(), time.time(), sha256_of(binaries, root), load1(proc), cpu_ticks(proc))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str):
        return cls(**json.loads(text))


def provenance(binaries=(), vms=(), start: Start = None, *, root: Path = ROOT, proc: Path = PROC,
               sys_cpu: Path = SYS_CPU) -> dict:
    """The record of where a run ran: `made_by` in a results file.

    commit, dirty: the checkout (at the start when `start` is given);
    date (and started): when; binaries: {path: sha256} of the binaries the
    bench measured (each must exist); host_kernel, cpu_model, microcode,
    mitigations ({vulnerability: text}), host_cpus: the host; vms: each VM
    configuration booted (vcpus, guest_kernel, ...; [] when none);
    host_load: the 1-minute load average at the start and the end, and the
    other processes that used CPU meanwhile (None without a start).
    Where HEAD or a binary changed during the sitting, commit_at_end and
    binaries_at_end say so: its runs may have measured two."""
    end_binaries = sha256_of(binaries, root)
    commit, dirty = git_state(root)
    cpu = cpuinfo(proc)
    record = {
        "commit": start.commit if start else commit,
        "dirty": start.dirty if start else dirty,
        "date": now(),
        "started": start.date if start else None,
        "binaries": dict(start.binaries) if start else end_binaries,
        "host_kernel": host_kernel(proc),
        "cpu_model": cpu.get("model name"),
        "microcode": cpu.get("microcode"),
        "mitigations": mitigations(sys_cpu),
        "host_cpus": os.cpu_count(),
        "vms": [dict(v) for v in vms],
    }
    if start:
        seconds = time.time() - start.time
        record["host_load"] = {"load1_start": start.load1, "load1_end": load1(proc), "seconds": round(seconds, 1),
                               "other_processes": busy_others(start.ticks, cpu_ticks(proc), seconds)}
        if commit != start.commit:
            record["commit_at_end"] = commit
        changed = {k: v for k, v in end_binaries.items() if start.binaries.get(k) != v}
        if changed:
            record["binaries_at_end"] = changed
    else:
        record["host_load"] = {"load1_start": None, "load1_end": load1(proc), "seconds": None,
                               "other_processes": None}
    return record


class Sitting:
    """One stretch of runs: begun when made, ended by made_by().

        sitting = Sitting([CUSTOS, WORKLOAD])
        vm.run_script(..., sitting=sitting)   # records the VM it booted
        results.write_results(path, res, REQUIRED, made_by=sitting.made_by())
    """

    def __init__(self, binaries=(), *, start: Start = None, root: Path = ROOT, proc: Path = PROC,
                 sys_cpu: Path = SYS_CPU):
        self.binaries = tuple(binaries)
        self.root, self.proc, self.sys_cpu = root, proc, sys_cpu
        self.start = start or Start.take(self.binaries, root, proc)
        self.vms = []

    def saw_vm(self, vcpus: int, **facts):
        """A VM boot: its vCPUs and what else the bench knows of it (guest_kernel,
        memory, cpu_model). Boots alike are counted, not repeated."""
        if not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus < 1:
            raise ValueError(f"a VM's vCPUs must be a positive integer, got {vcpus!r}")
        entry = {"vcpus": vcpus, **{k: v for k, v in facts.items() if v is not None}}
        for v in self.vms:
            if {k: x for k, x in v.items() if k != "boots"} == entry:
                v["boots"] += 1
                return
        self.vms.append({**entry, "boots": 1})

    def made_by(self) -> dict:
        return provenance(self.binaries, self.vms, self.start, root=self.root, proc=self.proc, sys_cpu=self.sys_cpu)


# ---------------------------------------------------------------- several sittings

# The record of the sitting that made the runs in a directory, kept beside
# them for a report made later (`--report`, `--from`).
KEPT = "sitting.json"


def keep(directory: Path, made_by: dict):
    """Keeps a sitting's record beside the runs it left in `directory`."""
    (Path(directory) / KEPT).write_text(json.dumps(made_by, indent=1) + "\n")


def kept(directory: Path):
    """The record kept beside the runs in `directory`; None for runs made
    before records were kept (their commit is unknown, not the reader's)."""
    f = Path(directory) / KEPT
    if not f.exists():
        return None
    return json_object(f, "a sitting's record")


def json_object(f: Path, what: str, error=ValueError) -> dict:
    """The JSON object in file `f`, or `error` saying it is not JSON or
    not an object (`what` it should hold)."""
    try:
        doc = json.loads(Path(f).read_text())
    except json.JSONDecodeError as e:
        raise error(f"{f} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise error(f"{f} holds a JSON {type(doc).__name__}, not {what}")
    return doc


def sitting_entry(made_by, made) -> dict:
    """One entry of a results file's `sittings`: its record (None where the
    runs predate the records) and what it made (run names, cells, parts)."""
    return {"provenance": made_by, "made": list(made)}


def replace_made(sittings, made, made_by) -> list:
    """`sittings` after a new sitting made `made` again: those parts leave the
    older entries (an entry left with nothing is dropped) and join the new one."""
    made = list(made)
    out = []
    for s in sittings:
        left = [m for m in s["made"] if m not in made]
        if left:
            out.append(dict(s, made=left))
    return out + [sitting_entry(made_by, made)]


def combined(records, written: dict = None) -> dict:
    """The `made_by` of a file made from several sittings' records: `commits`
    lists their commits in order (None for runs without a record); `commit`
    is the one commit, or "several". Any other field is the sittings' common
    value, or "several" where they differ (each sitting keeps its own).
    `written`: what wrote the file (commit, dirty, date), for the record."""
    records = list(records)
    if not records:
        raise ValueError("no sittings to name the commits of")
    commits = list(dict.fromkeys(r.get("commit") if r else None for r in records))
    dirty = [r.get("dirty") if r else None for r in records]
    out = {"commit": commits[0] if len(commits) == 1 else SEVERAL, "commits": commits,
           # Dirty if any was; unknown if none was but one did not say.
           "dirty": True if True in dirty else (False if all(d is False for d in dirty) else None),
           "sittings": len(records)}
    dates = [r["date"] for r in records if r and r.get("date")]
    out["date"] = max(dates) if dates else None
    known = [r for r in records if r]
    for key in dict.fromkeys(k for r in known for k in r):
        if key in out:
            continue
        # A sitting without a record differs from every other.
        values = [json.dumps(r.get(key) if r else None, sort_keys=True) for r in records]
        out[key] = known[0].get(key) if len(set(values)) == 1 else SEVERAL
    if written is not None:
        out["written"] = {k: written.get(k) for k in ("commit", "dirty", "date")}
    return out
