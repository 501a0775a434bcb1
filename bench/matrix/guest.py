#!/usr/bin/env python3
"""Runs inside the sched_ext VM (bench/matrix/run.py starts it): the runs of
the plan that are not yet in the results, one by one, each a workload under
one collector and one scheduler; then each collector's drain rate (the
consumer-bound limit). One JSON line per run is appended to OUT/runs.jsonl as
soon as the run ends, so an interrupted matrix resumes where it stopped.

Standard library only (the guest runs the system's python3).

    guest.py PLAN.json OUT_DIR
"""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import BY_NAME, run_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target" / "release"
CUSTOS = BIN / "custos"
WORKLOAD = BIN / "custos-workload"
SCX_BIN = ROOT / ".tools" / "cargo" / "bin"
STATE = Path("/sys/kernel/sched_ext/state")
PINS = Path("/sys/fs/bpf/custos")
WORK = Path("/tmp/matrix")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def nginx_temp_paths(d):
    """nginx's temp directories under d: its built-in ones (/var/lib/nginx/body, ...) sit on the host's
    root, which the guest sees read-only, and exist only where nginx once ran on the host, so a fresh
    machine's nginx could not start. One directive per temp-using module nginx was built with."""
    build = subprocess.run(["nginx", "-V"], capture_output=True, text=True).stderr
    directives = []
    for module, directive in [("client_body", "client_body_temp_path"), ("proxy", "proxy_temp_path"),
                              ("fastcgi", "fastcgi_temp_path"), ("uwsgi", "uwsgi_temp_path"),
                              ("scgi", "scgi_temp_path")]:
        if module != "client_body" and f"--without-http_{module}_module" in build:
            continue
        (d / "temp" / module).mkdir(parents=True, exist_ok=True)
        directives.append(f"{directive} {d}/temp/{module};")
    return " ".join(directives)


class RunFailed(Exception):
    pass


def note(msg):
    print(f"matrix: {msg}", file=sys.stderr, flush=True)


def wait_for(cond, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise RunFailed(f"{what} within {seconds} s")


def stop(proc, sig=signal.SIGINT, timeout=60):
    """Stops a started helper process and returns its exit status."""
    if proc is None or proc.poll() is not None:
        return None if proc is None else proc.returncode
    proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RunFailed(f"{proc.args[0]} did not stop within {timeout} s of {sig.name}")


def cpu_seconds(pid):
    """user+sys CPU seconds of a live process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def sched_state():
    return STATE.read_text().strip() if STATE.exists() else "absent"


# --- workloads ------------------------------------------------------------

class Workloads:
    """Sets up each workload once per boot and runs it; `run` returns the
    command's rusage and, for rate-measured workloads, `work_s`."""

    def __init__(self, params, quick):
        self.quick = quick
        self.libbpf_src = params.get("libbpf_src")
        self.ready = set()
        self.servers = []

    def setup(self, name, p):
        if name in self.ready:
            return
        d = WORK / name
        d.mkdir(parents=True, exist_ok=True)
        if name.startswith("find"):
            subprocess.run([WORKLOAD, "tree", d / "tree", "--files", str(p["files"])], check=True,
                           stdout=subprocess.DEVNULL)
        elif name == "7z":
            shutil.copytree(Path("/usr/include") / p["dir"], d / "src", symlinks=True, dirs_exist_ok=True)
        elif name == "tar":
            src = d / "src"
            src.mkdir(exist_ok=True)
            for sub in p["dirs"].split():
                shutil.copytree(Path("/usr/include") / sub, src / sub, symlinks=True, dirs_exist_ok=True)
        elif name == "nginx":
            (d / "www").mkdir(exist_ok=True)
            (d / "www" / "file.bin").write_bytes(os.urandom(4096))
            (d / "nginx.conf").write_text(
                f"daemon off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;\n"
                "events { worker_connections 256; }\n"
                f"http {{ access_log off; {nginx_temp_paths(d)} server {{ listen 127.0.0.1:18080; root {d}/www; }} }}\n")
        elif name == "compile" and not self.libbpf_src:
            raise RunFailed("no libbpf source tree (run.py passes libbpf-sys's from `cargo metadata`)")
        self.ready.add(name)

    def start_servers(self, name, log):
        """Servers are started before the collector: their start is setup, their serving is the workload."""
        d = WORK / name
        if name == "nginx":
            self.servers = [subprocess.Popen(["nginx", "-c", d / "nginx.conf", "-p", d], stdout=log, stderr=log)]
            wait_for(lambda: (d / "nginx.pid").exists(), 30, "nginx did not start")
        elif name == "redis":
            self.servers = [subprocess.Popen(["redis-server", "--port", "16379", "--save", "", "--appendonly", "no",
                                              "--dir", str(d)], stdout=log, stderr=log)]
            wait_for(lambda: subprocess.run(["redis-cli", "-p", "16379", "ping"], capture_output=True)
                     .stdout.strip() == b"PONG", 30, "redis-server did not answer")

    def stop_servers(self):
        for s in self.servers:
            stop(s, signal.SIGTERM)
        self.servers = []

    def command(self, name, p):
        d = WORK / name
        w = str(WORKLOAD)
        if name.startswith("find"):
            return ["bash", "-c", f'for i in $(seq {p["workers"]}); do find {d}/tree -type f -exec cat {{}} + >/dev/null & done; wait']
        if name == "postmark":
            shutil.rmtree(d / "pm", ignore_errors=True)
            (d / "pm").mkdir()
            (d / "pm.cfg").write_text(f"set size 500 10000\nset number {p['files']}\nset transactions {p['transactions']}\n"
                                      f"set location {d}/pm\nrun\nquit\n")
            return ["postmark", str(d / "pm.cfg")]
        if name == "nginx":
            return ["wrk", "-t1", "-c4", f"-d{p['seconds']}s", "http://127.0.0.1:18080/file.bin"]
        if name == "redis":
            return ["redis-benchmark", "-p", "16379", "-n", str(p["requests"]), "-q", "-t", "set,get", "-c", "8"]
        if name == "7z":
            (d / "out.7z").unlink(missing_ok=True)
            return ["7z", "a", "-bd", "-mx=1", "-mmt1", str(d / "out.7z"), str(d / "src")]
        if name == "openssl":
            return ["openssl", "speed", "-seconds", str(p["seconds"]), "-bytes", "8192", "sha256"]
        if name == "tar":
            shutil.rmtree(d / "x", ignore_errors=True)
            (d / "x").mkdir()
            return ["bash", "-c", f"tar -cf {d}/src.tar -C {d}/src . && tar -xf {d}/src.tar -C {d}/x"]
        if name == "compile":
            shutil.rmtree(d / "obj", ignore_errors=True)
            return ["make", "-s", "-C", self.libbpf_src, f"-j{p['jobs']}", f"OBJDIR={d}/obj", "BUILD_STATIC_ONLY=1",
                    "CFLAGS=-O0 -g0"] + [f"{d}/obj/staticobjs/{o}.o" for o in p["objects"].split()]
        if name == "stress-ng":
            return ["stress-ng", "--temp-path", str(d), "--fork", "1", "--fork-ops", str(p["fork_ops"]), "--pipe", "1", "--pipe-ops",
                    str(p["pipe_ops"]), "--quiet"]
        if name == "pipe":
            return [w, "pipe-pingpong", "-n", str(p["n"])]
        if name == "unix":
            return [w, "unix-pingpong", "-n", str(p["n"])]
        if name == "forkexec":
            return [w, "fork-exec", "-n", str(p["n"])]
        raise RunFailed(f"unknown workload {name}")

    @staticmethod
    def work_seconds(name, p, out, wall_s):
        """The fixed work's time: the wall time, or for rate-measured tools the work at their rate."""
        if name == "nginx":
            m = re.search(r"Requests/sec:\s*([\d.]+)", out)
            if not m:
                raise RunFailed("wrk printed no Requests/sec")
            return p["requests"] / float(m.group(1))
        if name == "openssl":
            m = re.search(r"^sha256\s+([\d.]+)k", out, re.M)
            if not m:
                raise RunFailed("openssl speed printed no sha256 rate")
            return p["megabytes"] * 1e6 / (float(m.group(1)) * 1000)
        return wall_s

    def run(self, name, p, log):
        cmd = self.command(name, p)
        out_path = WORK / "workload.out"
        with open(out_path, "w") as out:
            t0 = time.monotonic()
            proc = subprocess.Popen(cmd, stdout=out, stderr=log, cwd=WORK / name)
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.monotonic() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
        text = out_path.read_text(errors="replace")
        if proc.returncode != 0:
            log.flush()
            err = Path(log.name).read_text(errors="replace")
            raise RunFailed(f"{cmd[0]} exited with {proc.returncode}: {text[-300:]} {err[-300:]}")
        return {"wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
                "work_s": self.work_seconds(name, p, text, wall)}


# --- collectors -----------------------------------------------------------

def syscall_names():
    out = subprocess.run([CUSTOS, "collect", "--list-syscalls"], check=True, capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def start_custos_collect(args, log_path, what):
    """`custos collect ARGS` on fresh pins, once it has published its features."""
    shutil.rmtree(PINS, ignore_errors=True)
    proc = subprocess.Popen([CUSTOS, "collect", *args], stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
    wait_for(lambda: (PINS / "global_features").exists() or proc.poll() is not None, 120, f"{what} did not start")
    if proc.poll() is not None:
        raise RunFailed(f"{what} exited: {log_path.read_text()[-500:]}")
    return proc


BPFTRACE_READY = "custos-bench: traced table filled"


def bpftrace_program(names):
    """bpftrace printing the syscalls Custos records: one line per syscall
    exit (time, pid, tid, comm, number, return value), plus the path of
    every openat and execve at entry."""
    table = {}
    for line in subprocess.run(["ausyscall", "--dump"], capture_output=True, text=True).stdout.splitlines()[1:]:
        nr, name = line.split()
        table[name] = int(nr)
    ids = sorted(table[n] for n in names if n in table)
    init = " ".join(f"@traced[{i}] = 1;" for i in ids)
    # BEGIN says when the table is full: until then every syscall is filtered out.
    return (f"BEGIN {{ {init} printf(\"{BPFTRACE_READY}\\n\"); }}\n"
            "tracepoint:raw_syscalls:sys_exit /@traced[args->id]/ {\n"
            '  printf("%llu %d %d %s %ld %ld\\n", nsecs, pid, tid, comm, args->id, args->ret);\n}\n'
            'tracepoint:syscalls:sys_enter_openat { printf("%llu %d %s openat %s\\n", nsecs, tid, comm, str(args->filename)); }\n'
            'tracepoint:syscalls:sys_enter_execve { printf("%llu %d %s execve %s\\n", nsecs, tid, comm, str(args->filename)); }\n'
            "END { clear(@traced); }\n"), len(ids)


def audit_status():
    """auditctl -s as a dict of integers (lost, backlog, backlog_wait_time_actual, ...)."""
    out = subprocess.run(["auditctl", "-s"], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in re.findall(r"^(\w+) (\d+)$", out, re.M)}


class Collector:
    """Starts one collector, and after the workload stops it and returns its figures."""

    def __init__(self, name, ring_kb, names, d):
        self.name, self.ring_kb, self.names, self.d = name, ring_kb, names, d
        self.proc = None

    def start(self, log, extra_env=None):
        d = self.d
        if self.name == "custos":
            kb = str(self.ring_kb)
            self.proc = start_custos_collect(["--force", "-o", d / "events.jsonl", "--events-ring-kb", kb, "--attrs-ring-kb", kb,
                                              "--critical-ring-kb", kb, "--stats-interval", "0"],
                                             d / "collect.log", "the Custos collector")
        elif self.name == "bpftrace":
            program, n = bpftrace_program(self.names)
            (d / "trace.bt").write_text(program)
            env = dict(os.environ, **(extra_env or {}))
            self.proc = subprocess.Popen(["bpftrace", "-o", d / "bpftrace.out", d / "trace.bt"],
                                         stdout=subprocess.DEVNULL, stderr=open(d / "bpftrace.err", "w"), env=env)
            # Ready once BEGIN has filled the id table (a fixed sleep after
            # "Attaching" was too short on a slow emulator: nothing traced).
            out = d / "bpftrace.out"
            wait_for(lambda: (out.exists() and BPFTRACE_READY in out.read_text(errors="replace")[:1 << 20])
                     or self.proc.poll() is not None, 180, "bpftrace did not attach and fill its table")
            if self.proc.poll() is not None:
                raise RunFailed(f"bpftrace exited: {(d / 'bpftrace.err').read_text()[-500:]}")
        elif self.name == "auditd":
            (d / "audit").mkdir(exist_ok=True)
            (d / "audit" / "auditd.conf").write_text(
                f"log_file = {d}/audit/audit.log\nlog_format = RAW\nflush = INCREMENTAL_ASYNC\nfreq = 50\n"
                "max_log_file = 0\nmax_log_file_action = ignore\nspace_left = 2\nspace_left_action = ignore\n"
                "admin_space_left = 1\nadmin_space_left_action = ignore\ndisk_full_action = ignore\n"
                "disk_error_action = ignore\nnum_logs = 0\nwrite_logs = yes\n")
            subprocess.run(["auditctl", "-D"], check=True, stdout=subprocess.DEVNULL)
            self.proc = subprocess.Popen(["auditd", "-n", "-c", d / "audit"], stdout=subprocess.DEVNULL,
                                         stderr=open(d / "auditd.err", "w"))
            wait_for(lambda: audit_status().get("pid") == self.proc.pid or self.proc.poll() is not None, 60,
                     "auditd did not register")
            if self.proc.poll() is not None:
                raise RunFailed(f"auditd exited: {(d / 'auditd.err').read_text()[-500:]}")
            known = set(subprocess.run(["ausyscall", "--dump"], capture_output=True, text=True).stdout.split())
            rule = ["auditctl", "-a", "always,exit", "-F", "arch=b64"]
            for n in self.names:
                if n in known:
                    rule += ["-S", n]
            # Debian's default backlog, and the kernel's default wait when it is full (60 s)
            subprocess.run(["auditctl", "-b", "8192", "--backlog_wait_time", "60000"], check=True,
                           stdout=subprocess.DEVNULL)
            subprocess.run(rule, check=True, stdout=subprocess.DEVNULL)
            self.audit_before = audit_status()

    def cpu(self):
        return cpu_seconds(self.proc.pid) if self.proc and self.proc.poll() is None else None

    def finish(self):
        """Stops the collector after the workload; returns its figures."""
        d = self.d
        r = {"collector_cpu_s": self.cpu()}
        if self.name == "custos":
            stop(self.proc, timeout=600)
            log = (d / "collect.log").read_text(errors="replace")
            m = re.search(r"produced (\d+) = delivered (\d+) \+ dropped (\d+) \(critical (\d+), events (\d+)\); "
                          r"incomplete (\d+); loss records (\d+); unnumbered (\d+)", log)
            if not m:
                raise RunFailed(f"custos collect printed no summary: {log[-500:]}")
            keys = ["produced", "delivered", "dropped", "dropped_critical", "dropped_events", "incomplete",
                    "loss_records", "unnumbered"]
            r.update(dict(zip(keys, map(int, m.groups()))))
            r["invariant_ok"] = "loss accounting does not balance" not in log and \
                r["produced"] == r["delivered"] + r["dropped"]
            r["events_bytes"] = (d / "events.jsonl").stat().st_size
        elif self.name == "bpftrace":
            stop(self.proc, timeout=300)
            lines = delivered = lost = 0
            with open(d / "bpftrace.out", errors="replace") as f:
                for line in f:
                    lines += 1
                    if line[:1].isdigit():
                        delivered += 1
                    else:
                        m = re.match(r"Lost (\d+) events", line)
                        lost += int(m.group(1)) if m else 0
            for m in re.finditer(r"Lost (\d+) events", (d / "bpftrace.err").read_text(errors="replace")):
                lost += int(m.group(1))
            r.update(produced=delivered + lost, delivered=delivered, dropped=lost, unnumbered=0)
        elif self.name == "auditd":
            subprocess.run(["auditctl", "-D"], check=True, stdout=subprocess.DEVNULL)
            # Everything queued is auditd's to write before it stops.
            wait_for(lambda: audit_status().get("backlog", 1) == 0, 300, "the audit backlog did not drain")
            after = audit_status()
            stop(self.proc, signal.SIGTERM, timeout=300)
            delivered = 0
            with open(d / "audit" / "audit.log", errors="replace") as f:
                for line in f:
                    delivered += line.startswith("type=SYSCALL ")
            lost = after.get("lost", 0) - self.audit_before.get("lost", 0)
            r.update(produced=delivered + lost, delivered=delivered, dropped=lost, unnumbered=0,
                     audit_wait_ms=after.get("backlog_wait_time_actual", 0)
                     - self.audit_before.get("backlog_wait_time_actual", 0))
        return r


# --- schedulers -----------------------------------------------------------

def start_features_only(d):
    """Custos's collector in features-only mode: it records nothing and
    publishes per-task event rates, so that Custos's scheduler can budget the
    producers a third-party collector (bpftrace, auditd) cannot keep up with."""
    return start_custos_collect(["--features-only", "--stats-interval", "0"], d / "features.log",
                                "the features-only collector")


def start_scheduler(name, collector, d):
    if name == "default":
        return None
    if name.startswith("custos"):
        cmd = [CUSTOS, "sched", "--stats-json", d / "sched.json"]
        if name == "custos-learned":
            cmd += ["--policy", "learned"]
        # A third-party collector is the consumer to protect (issue 11).
        if collector == "auditd":
            cmd += ["--consumer", "auditd", "--audit-pressure"]
        elif collector == "bpftrace":
            cmd += ["--consumer", "bpftrace"]
    else:
        cmd = [SCX_BIN / name]
        if not cmd[0].exists():
            raise RunFailed(f"{cmd[0]} is not built (run.py builds the scx peers)")
    proc = subprocess.Popen(cmd, stdout=open(d / "sched.log", "w"), stderr=subprocess.STDOUT)
    wait_for(lambda: sched_state() == "enabled" or proc.poll() is not None, 120, f"{name} did not reach enabled")
    if proc.poll() is not None:
        raise RunFailed(f"{name} exited: {(d / 'sched.log').read_text()[-500:]}")
    return proc


def stop_scheduler(name, proc, d):
    if proc is None:
        return {}
    stop(proc, timeout=120)
    wait_for(lambda: sched_state() != "enabled", 60, f"{name} did not detach")
    stats = {}
    if (d / "sched.json").exists():
        try:
            stats = json.loads((d / "sched.json").read_text())
        except json.JSONDecodeError:
            pass
    return {"sched_stats": json.dumps(stats, sort_keys=True) if stats else None}


# --- one run --------------------------------------------------------------

def one_run(run, wl, names, params):
    d = WORK / "run"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    log = open(d / "workload.log", "w")
    w = BY_NAME[run["workload"]]
    p = w.sized(params["quick"])
    wl.setup(w.name, p)
    rec = {"workload": w.name, "collector": run["collector"], "scheduler": run["scheduler"], "rep": run["rep"],
           "key": run["key"], "order": run["order"], "ring_kb": params["ring_kb"], "quick": params["quick"],
           "boot": params["boot"], "started": time.time()}
    coll = sched = features = None
    try:
        wl.start_servers(w.name, log)
        coll = Collector(run["collector"], params["ring_kb"], names, d)
        coll.start(log)
        if run["scheduler"].startswith("custos") and run["collector"] in ("bpftrace", "auditd"):
            features = start_features_only(d)
            rec["features_only"] = True
        sched = start_scheduler(run["scheduler"], run["collector"], d)
        rec.update(wl.run(w.name, p, log))
        rec["sched_ext_state"] = sched_state()
        rec.update(stop_scheduler(run["scheduler"], sched, d))
        sched = None
        if features is not None:
            rec["features_cpu_s"] = cpu_seconds(features.pid)
            if stop(features) != 0:
                raise RunFailed(f"custos collect --features-only failed: {(d / 'features.log').read_text()[-500:]}")
            features = None
        rec.update(coll.finish())
        coll = None
        if run["scheduler"] != "default" and rec["sched_ext_state"] != "enabled":
            raise RunFailed(f"{run['scheduler']} was no longer enabled at the end ({rec['sched_ext_state']})")
        rec["ok"] = True
    except (RunFailed, subprocess.CalledProcessError, OSError) as e:
        rec["ok"] = False
        rec["error"] = str(e)[-800:]
        logs = [f for f in ("sched.log", "collect.log", "features.log", "bpftrace.err", "auditd.err") if (d / f).exists()]
        for f in logs:
            rec.setdefault("logs", {})[f] = (d / f).read_text(errors="replace")[-1500:]
    finally:
        if sched is not None:
            stop(sched, timeout=120)
        if features is not None:
            stop(features)
        if coll is not None and coll.proc is not None:
            stop(coll.proc, signal.SIGTERM if coll.name == "auditd" else signal.SIGINT, timeout=120)
            if coll.name == "auditd":
                subprocess.run(["auditctl", "-D"], stdout=subprocess.DEVNULL)
        wl.stop_servers()
    rec["ended"] = time.time()
    return rec


# --- the consumer-bound limit -----------------------------------------------

def drain_rate(collector, names, params):
    """The collector's drop-free consumption rate alone: its consumer is
    stopped (SIGSTOP) while a known storm fills buffers large enough to hold
    it all, then resumed with nothing else running; the rate is what it then
    writes per second of wall time until its output stops growing."""
    d = WORK / "drain"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    c = Collector(collector, 65536, names, d)  # 64 MiB rings: the storm fits
    env = {"BPFTRACE_PERF_RB_PAGES": "16384"}
    c.start(None, env)
    if collector == "auditd":
        subprocess.run(["auditctl", "-b", "2000000", "--backlog_wait_time", "0"], check=True, stdout=subprocess.DEVNULL)
    out = {"custos": d / "events.jsonl", "bpftrace": d / "bpftrace.out", "auditd": d / "audit" / "audit.log"}[collector]
    os.kill(c.proc.pid, signal.SIGSTOP)
    subprocess.run([WORKLOAD, "storm", "--procs", "1", "--seconds", str(params["drain_storm_s"])], check=True,
                   stdout=subprocess.DEVNULL)
    size0 = out.stat().st_size if out.exists() else 0
    t0 = time.monotonic()
    os.kill(c.proc.pid, signal.SIGCONT)
    # The first write may take a while on a slow emulator (a resumed process,
    # a buffered writer); after it, 2 s without growth ends the drain.
    wait_for(lambda: (out.stat().st_size if out.exists() else 0) != size0, 60,
             f"{collector} wrote nothing after it was resumed")
    last_size, last_growth = out.stat().st_size, time.monotonic()
    while time.monotonic() - last_growth < 2.0:
        time.sleep(0.05)
        size = out.stat().st_size if out.exists() else 0
        if size != last_size:
            last_size, last_growth = size, time.monotonic()
    drain_s = last_growth - t0
    r = c.finish()
    if not r["delivered"]:
        raise RunFailed(f"{collector}: nothing drained ({last_size - size0} bytes written)")
    return {"collector": collector, "drain_s": drain_s, "delivered": r["delivered"], "dropped": r["dropped"],
            "rate_eps": r["delivered"] / drain_s, "boot": params["boot"], "started": t0}


def main():
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    results = out / "runs.jsonl"
    done = set()
    if results.exists():
        done = {json.loads(l)["key"] for l in results.read_text().splitlines() if l.strip()}
    params = dict(plan["params"], boot=plan["boot"])
    todo = [r for r in plan["runs"] if r["key"] not in done]
    WORK.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3G", "none", str(WORK)], check=True)
    names = syscall_names()
    wl = Workloads(params, params["quick"])
    note(f"{len(done)} runs done before this boot, {len(todo)} to go")
    deadline = time.monotonic() + params.get("budget_s", 1e9)
    for i, run in enumerate(todo, 1):
        if time.monotonic() > deadline:
            note("this boot's time budget is spent; the next boot resumes")
            break
        rec = one_run(run, wl, names, params)
        with open(results, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
        loss = ""
        if rec.get("produced"):
            loss = f", loss {100.0 * (rec['dropped'] + rec['unnumbered']) / (rec['produced'] + rec['unnumbered']):.2f} %"
        status = f"{rec['work_s']:.2f} s{loss}" if rec["ok"] else f"FAILED: {rec['error']}"
        note(f"[{len(done) + i}/{len(plan['runs'])}] {run['key']}: {status}")
    drains = out / "drain.jsonl"
    have = set()
    if drains.exists():
        have = {json.loads(l)["collector"] for l in drains.read_text().splitlines() if l.strip()}
    for c in plan["drain_collectors"]:
        if c in have or time.monotonic() > deadline:
            continue
        try:
            rec = drain_rate(c, names, params)
            note(f"drain {c}: {rec['rate_eps']:.0f} events/s ({rec['delivered']} in {rec['drain_s']:.2f} s)")
        except (RunFailed, subprocess.CalledProcessError, OSError) as e:
            rec = {"collector": c, "error": str(e)[-800:], "boot": params["boot"]}
            note(f"drain {c}: FAILED: {e}")
        with open(drains, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
