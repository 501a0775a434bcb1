#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Collector benchmark (issue 12): what the collector adds to a traced and to
an untraced syscall (custos, bpftrace and auditd side by side in one run), the
highest live event rate one consumer keeps up with, zero drops, writing JSON
Lines to a file, the loss account under overload, and the syscalls the kernel
skipped under the 64-worker super producer in the sched_ext VM.

    sudo .tools/venv/bin/python bench/collector/run.py            # ~10 minutes
    sudo .tools/venv/bin/python bench/collector/run.py --no-vm --out /tmp/c.json   # host parts only
    sudo .tools/venv/bin/python bench/collector/run.py --io-uring-only   # adds io_uring_overhead_ratio

The overhead rounds run every configuration round robin until each one's
median is known to ±5 % (its 95 % bootstrap interval; `--halfwidth`),
after `--rounds` (5) and at most `--max-rounds` (20); results.json says
how many rounds it took and which configurations converged. The io_uring
part (issue 30) times a file copy made of io_uring requests (uring_copy.c)
with and without the collector, in `--rounds` alternating rounds.

Writes bench/collector/results.json (made_by: where it ran, the host's CPU
and mitigations among it: the cost per syscall depends on them), a table on
stdout, and overhead.svg/.png and live.svg/.png beside it. Needs root, cc, `make build` (the VM part runs
target/release/custos), and installs Debian's bpftrace and auditd if missing.
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from custos_bench import plots, provenance, results, vm  # noqa: E402
from custos_bench.paths import CUSTOS, ROOT, WORKLOAD  # noqa: E402

HERE = Path(__file__).resolve().parent
PIN = Path("/sys/fs/bpf/custos/global_features")
SUMMARY = re.compile(r"produced (\d+) = delivered (\d+) \+ dropped (\d+)")
REQUIRED = ["command", "added_ns_per_syscall", "untraced_added_ns_per_syscall",
            "bpftrace_added_ns_per_syscall", "auditd_added_ns_per_syscall",
            "ratio_custos_to_bpftrace", "ratio_custos_to_auditd",
            "live_max_events_per_s_zero_drop", "consumer_cpu_pct_at_live_max",
            "superproducer_skipped_syscalls",
            "overload_produced", "overload_delivered", "overload_dropped",
            "io_uring_overhead_ratio"]


def log(msg):
    print(f"bench/collector: {msg}", file=sys.stderr, flush=True)


def ensure_tools():
    missing = [p for p, exe in (("bpftrace", "bpftrace"), ("auditd", "auditctl")) if not shutil.which(exe)]
    if missing:
        log(f"installing Debian packages: {' '.join(missing)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    # bpftrace finds the syscall tracepoints through tracefs, which a fresh
    # machine may not have mounted.
    tracefs = Path("/sys/kernel/tracing")
    if not (tracefs / "events").exists():
        log("mounting tracefs on /sys/kernel/tracing")
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(tracefs)], check=True)


def build_loadgen(work):
    if not CUSTOS.exists():
        sys.exit(f"bench/collector: {CUSTOS} is missing; run `make build` first")
    loadgen = work / "loadgen"
    subprocess.run(["cc", "-O2", "-Wall", "-o", str(loadgen), str(HERE / "loadgen.c")], check=True)
    return loadgen


def cpu_ticks(pid):
    """utime + stime of every thread of `pid` (the consumer has a writer thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Custos:
    """`custos collect` in the background, writing to `output` (a file, or /dev/null)."""

    def __init__(self, work, extra=(), output="/dev/null"):
        self.err = open(work / "custos.stderr", "w+")
        self.proc = subprocess.Popen([str(CUSTOS), "collect", "--force", "-o", str(output), "--stats-interval", "0", *extra],
                                     stderr=self.err, stdout=subprocess.DEVNULL)
        # Ready once it has published itself as the running collector, which
        # it does after attaching its programs (the pins outlive a
        # collector: their mere existence says nothing).
        deadline = time.time() + 60
        while not (PIN.exists() and self.published()):
            if self.proc.poll() is not None or time.time() > deadline:
                self.err.seek(0)
                raise RuntimeError(f"custos collect did not start: {self.err.read()}")
            time.sleep(0.05)

    def published(self):
        try:
            g = global_features()
        except subprocess.CalledProcessError:
            return False
        return g["collector_running"] == 1 and self.proc.pid in g["consumer_pids"]

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        self.err.seek(0)
        text = self.err.read()
        m = SUMMARY.search(text)
        if not m:
            raise RuntimeError(f"no summary from custos collect: {text}")
        return {"produced": int(m[1]), "delivered": int(m[2]), "dropped": int(m[3])}


class Bpftrace:
    SCRIPT = """
tracepoint:syscalls:sys_enter_openat { printf("enter openat %d %d %s %s\\n", pid, tid, comm, str(args->filename)); }
tracepoint:syscalls:sys_exit_openat { printf("exit openat %d %d %s %d\\n", pid, tid, comm, args->ret); }
tracepoint:syscalls:sys_enter_close { printf("enter close %d %d %s %d\\n", pid, tid, comm, args->fd); }
tracepoint:syscalls:sys_exit_close { printf("exit close %d %d %s %d\\n", pid, tid, comm, args->ret); }
"""

    def __init__(self, work):
        self.out = work / "bpftrace.out"
        self.fh = open(self.out, "w")
        self.proc = subprocess.Popen(["bpftrace", "-B", "full", "-e", self.SCRIPT], stdout=self.fh, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while "Attaching" not in self.out.read_text():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"bpftrace did not start: {self.out.read_text()[:2000]}")
            time.sleep(0.05)
        time.sleep(0.5)  # attach finishes after the banner

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        self.fh.close()
        self.out.unlink()
        return {}


class Auditd:
    RULE = ["-a", "always,exit", "-F", "arch=b64", "-S", "openat", "-S", "close", "-k", "custos_bench"]

    def __init__(self, work):
        self.proc = subprocess.Popen(["auditd", "-n"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        if self.proc.poll() is not None:
            raise RuntimeError("auditd did not start")
        subprocess.run(["auditctl", "-e", "1"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["auditctl", *self.RULE], check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        subprocess.run(["auditctl", "-d", *self.RULE[1:]], check=False, stdout=subprocess.DEVNULL)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        subprocess.run(["auditctl", "-e", "0"], check=False, stdout=subprocess.DEVNULL)
        return {}


def build_uring_copy(work):
    prog = work / "uring_copy"
    subprocess.run(["cc", "-O2", "-Wall", "-o", str(prog), str(HERE / "uring_copy.c")], check=True)
    return prog


def uring_copy_ns(prog, src, dst, block):
    """One copy of `src` through io_uring; (ns per request, requests)."""
    out = subprocess.run([str(prog), str(src), str(dst), str(block)], check=True, capture_output=True, text=True)
    ns, requests, copied = out.stdout.split()
    if int(copied) != src.stat().st_size:
        raise RuntimeError(f"uring_copy copied {copied} of {src.stat().st_size} bytes")
    return float(ns), int(requests)


def io_uring_overhead(work, rounds, size_mib=32, block=4096, copies=3):
    """What the collector adds to a file copy made of io_uring requests
    (issue 30: each request is an event, recorded from the io_uring
    tracepoints). Rounds interleave a copy with nothing attached and one
    under `custos collect` (its whole default set, JSON to /dev/null),
    in alternating order; a round's sample per mode is the median of
    `copies` copies. The ratio custos/none of each round, their mean and
    its 95 % t interval."""
    prog = build_uring_copy(work)
    src, dst = work / "uring-src.bin", work / "uring-dst.bin"
    with open(src, "wb") as f:
        f.write(os.urandom(size_mib << 20))
    uring_copy_ns(prog, src, dst, block)  # the page cache warm for both modes
    samples = {"none": [], "custos": []}
    accounts = []
    for r in range(rounds):
        for mode in (("none", "custos") if r % 2 == 0 else ("custos", "none")):
            tracer = Custos(work) if mode == "custos" else None
            try:
                runs = [uring_copy_ns(prog, src, dst, block) for _ in range(copies)]
            finally:
                if tracer:
                    acct = tracer.stop()
            if tracer:
                # The collector saw at least every request (it records the whole machine).
                requests = sum(n for _, n in runs)
                if acct["produced"] < requests:
                    raise RuntimeError(f"custos produced {acct['produced']} events for {requests} io_uring requests")
                accounts.append(acct)
            samples[mode].append(results.median([ns for ns, _ in runs]))
            log(f"io_uring round {r + 1}/{rounds} {mode:>6}: {samples[mode][-1]:.0f} ns per request")
    ratios = [c / n for n, c in zip(samples["none"], samples["custos"])]
    mean, lo, hi = results.mean_interval(ratios)
    return {
        "ratio": mean,
        "ratio_interval_95": [lo, hi],
        "ratios": ratios,
        "median_ns_per_request": {m: results.median(v) for m, v in samples.items()},
        "samples_ns_per_request": samples,
        "custos_accounts": accounts,
        "how": f"uring_copy.c: a {size_mib} MiB file (page cache) copied in {block}-byte IORING_OP_READ and "
               f"IORING_OP_WRITE requests, each submitted and waited for alone; {copies} copies per mode and round "
               f"(their median), {rounds} interleaved rounds in alternating order",
    }


def merge_part(out, key, value, part, details, command, made_by):
    """Adds one figure measured alone (`key` = `value`, its `details` under
    details.`part`) to an existing results file, keeping its keys and the
    record of what made them; the new figure carries its own."""
    res = json.loads(out.read_text())
    res[key] = round(value, 3)
    res.setdefault("details", {})[part] = {**details, "command": command, "made_by": made_by}
    results.check_figures(res, [key])
    out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")


def measure_alone(args, flag, measure):
    """`--io-uring-only`, `--metrics-only`: `measure(work)` in a scratch
    directory, with the record of what made it and the command; for
    merge_part."""
    if not args.out.exists():
        sys.exit(f"bench/collector: {flag} adds to {args.out}, which does not exist")
    if not CUSTOS.exists():
        sys.exit(f"bench/collector: {CUSTOS} is missing; run `make build` first")
    sitting = provenance.Sitting([CUSTOS])
    with tempfile.TemporaryDirectory(prefix="custos-bench-", dir=ROOT / "target") as tmp:
        m = measure(Path(tmp))
    command = f"sudo .tools/venv/bin/python bench/collector/run.py {flag}" + (
        f" --rounds {args.rounds}" if args.rounds != 5 else "")
    return m, command, sitting.made_by()


def loop_ns(loadgen, kind, n):
    out = subprocess.run([str(loadgen), kind, str(n)], check=True, capture_output=True, text=True)
    return float(out.stdout)


# The untraced syscall's configurations: getpid with custos and with nothing.
GETPID = ("none", "custos")


def overhead(loadgen, work, min_rounds, max_rounds, halfwidth, iterations):
    """Rounds of every configuration, round robin (results.repeat_until),
    until each median is known to ±halfwidth or max_rounds: per mode the ns
    per openat+close iteration, and (custos and none, each under a tracer
    of its own) per getpid call. Returns ({mode: samples}, {mode: getpid
    samples}, the repetitions)."""
    modes = {
        "none": lambda: None,
        "custos": lambda: Custos(work),
        "custos_same_syscalls": lambda: Custos(work, ["--syscalls", "openat,close"]),
        "bpftrace": lambda: Bpftrace(work),
        "auditd": lambda: Auditd(work),
    }

    def measure(start, kind, n):
        def run():
            tracer = start()
            try:
                return loop_ns(loadgen, kind, n)
            finally:
                if tracer:
                    tracer.stop()
        return run

    configs = []
    for mode, start in modes.items():
        configs.append((mode, measure(start, "openclose", iterations)))
        if mode in GETPID:
            configs.append((f"{mode}_getpid", measure(start, "getpid", 10 * iterations)))

    def progress(name, rnd, ns):
        what = "getpid" if name.endswith("_getpid") else "openat+close"
        log(f"round {rnd} (of {min_rounds}-{max_rounds}) {name.removesuffix('_getpid'):>22}: {ns:.0f} ns per {what}")

    rep = results.repeat_until(configs, min_runs=min_rounds, max_runs=max_rounds, rel_halfwidth=halfwidth,
                               progress=progress)
    loose = [n for n, ok in rep.converged.items() if not ok]
    log(f"overhead: {rep.rounds} rounds; " + (f"not within ±{halfwidth:.0%} after them: {', '.join(loose)}"
                                             if loose else f"every median within ±{halfwidth:.0%}"))
    return {m: rep.runs[m] for m in modes}, {m: rep.runs[f"{m}_getpid"] for m in GETPID}, rep


def against_none(openclose, getpid):
    """Each mode's time over nothing's (openat+close; getpid for custos):
    the ratio of medians, its 95 % bootstrap interval, and whether the
    interval excludes 1 (a cost told apart from none)."""
    def entry(a, b):
        r, lo, hi = results.ratio_interval(a, b)
        return {"ratio": r, "interval_95": [lo, hi], "differs": results.differs(a, b)}
    out = {m: entry(v, openclose["none"]) for m, v in openclose.items() if m != "none"}
    out["custos_getpid"] = entry(getpid["custos"], getpid["none"])
    return out


def peer_versions():
    """bpftrace's and auditd's versions: the comparison is with these."""
    def first_line(*cmd):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        return (proc.stdout or proc.stderr).strip().splitlines()[0] if proc.returncode == 0 else None
    return {"bpftrace": first_line("bpftrace", "--version"), "auditd": first_line("auditctl", "-v")}


def live_step(loadgen, work, rate, producers=2, seconds=3.0):
    """`producers` paced `loadgen read` processes offering `rate` reads/s in
    all, the collector writing every event as JSON Lines to a file."""
    stream = work / "live.jsonl"
    c = Custos(work, output=stream)
    pid = c.proc.pid
    t0, c0 = time.time(), cpu_ticks(pid)
    gens = [subprocess.Popen([str(loadgen), "read", str(rate / producers), str(seconds)], stdout=subprocess.PIPE, text=True)
            for _ in range(producers)]
    calls = sum(int(g.communicate()[0]) for g in gens)
    t1, c1 = time.time(), cpu_ticks(pid)
    res = c.stop()
    res.update(offered_per_s=rate, achieved_per_s=calls / seconds, output_bytes=stream.stat().st_size,
               consumer_cpu_pct=100.0 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0))
    stream.unlink()
    log(f"live {rate:>9.0f}/s offered, {res['achieved_per_s']:>9.0f}/s achieved, dropped {res['dropped']:>8}, "
        f"consumer cpu {res['consumer_cpu_pct']:.0f}%")
    return res


def live_max(loadgen, work):
    """Doubles the offered rate from 50 k/s until the collector drops or the
    producers cannot offer more; then bisects between the last good and the
    first bad rate. Returns the best zero-drop step, every step, and why it stopped."""
    steps, good, rate = [], None, 50_000
    while True:
        s = live_step(loadgen, work, rate)
        steps.append(s)
        if s["dropped"] == 0 and s["achieved_per_s"] >= 0.95 * rate:
            good, rate = s, rate * 2
            continue
        bad = s
        break
    if bad["dropped"] == 0:
        # The producers ran out of CPU first: the consumer kept up with all they could make.
        return max([good, bad], key=lambda x: x["achieved_per_s"] if x else 0), steps, "producers saturated, consumer never dropped"
    lo, hi = (good["offered_per_s"] if good else 0), bad["offered_per_s"]
    for _ in range(3):
        mid = (lo + hi) / 2
        s = live_step(loadgen, work, mid)
        steps.append(s)
        if s["dropped"] == 0 and s["achieved_per_s"] >= 0.95 * mid:
            good, lo = s, mid
        else:
            hi = mid
    return good, steps, "highest offered rate with zero drops (bisection)"


def global_features():
    out = subprocess.run(["bpftool", "map", "dump", "pinned", str(PIN), "-j"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)[0]["formatted"]["value"]


def drain_rate(loadgen, work, backlog_seconds=2.5, producer_rate=800_000, extra=()):
    """Consumer capacity on a backlog: the collector is stopped (SIGSTOP)
    while two producers fill a 1 GiB ring, then resumed; events drained per
    second of wall clock and of the consumer's CPU. A drain that dropped
    anything (the backlog outgrew the ring) measures nothing: an error.
    The producers are paced (at most 4 M events; the ring holds about 5 M
    `read` records) because unpaced ones outgrow it on a fast CPU. `extra`:
    more `custos collect` options (`--no-seal` for the unsealed figure)."""
    stream = work / "drain.jsonl"
    c = Custos(work, ["--events-ring-kb", str(1024 * 1024), "--attrs-ring-kb", str(64 * 1024), *extra], output=stream)
    pid = c.proc.pid
    os.kill(pid, signal.SIGSTOP)
    gens = [subprocess.Popen([str(loadgen), "read", str(producer_rate), str(backlog_seconds)], stdout=subprocess.DEVNULL)
            for _ in range(2)]
    for g in gens:
        g.wait()
    start_consumed = global_features()["consumed"]
    c0, t0, resumed_ns = cpu_ticks(pid), time.time(), time.monotonic_ns()
    os.kill(pid, signal.SIGCONT)
    # The consumer publishes `produced` and `consumed` every 100 ms (on the
    # monotonic clock, `updated_ns`). The backlog is what had been produced
    # when it resumed: the first `produced` published after that (a trickle
    # more, from this benchmark's own polling). The drain ends when
    # `consumed` reaches it. (Ending at the first slow step instead ended
    # early whenever the consumer lost its CPU for 100 ms on a busy host.)
    target = last = t1 = c1 = None
    while time.time() - t0 < 120:
        time.sleep(0.02)
        g, now, ticks = global_features(), time.time(), cpu_ticks(pid)
        if target is None and g["updated_ns"] > resumed_ns:
            target = g["produced"]
        if target is not None and g["consumed"] >= target:
            last, t1, c1 = g["consumed"], now, ticks
            break
    if last is None:
        c.stop()
        raise RuntimeError("the drain did not end within 120 s")
    drained = last - start_consumed
    res = c.stop()
    stream.unlink()
    cpu_s = (c1 - c0) / os.sysconf("SC_CLK_TCK")
    res.update(drained_events=drained, seconds=t1 - t0, events_per_s=drained / (t1 - t0), consumer_cpu_s=cpu_s,
               events_per_core_s=drained / cpu_s if cpu_s > 0 else 0, consumer_cpu_pct=100.0 * cpu_s / (t1 - t0))
    log(f"drain: {drained} events in {t1 - t0:.2f} s wall ({res['events_per_s']:.0f}/s), "
        f"{cpu_s:.2f} s consumer CPU, dropped {res['dropped']}")
    if res["dropped"]:
        raise RuntimeError(f"the drain's backlog outgrew its ring ({res['dropped']} dropped): shorten backlog_seconds")
    return res


class Scraper:
    """Reads `GET /metrics` from a port every `every` seconds, as a
    Prometheus server would (its usual interval is 15 s; 1 s is harsher),
    until stopped: the scrapes answered and the bytes read. A scrape of a
    stopped (SIGSTOPped) collector times out and counts as unanswered."""

    def __init__(self, port, every=1.0):
        import threading
        self.port, self.every, self.answered, self.unanswered, self.bytes = port, every, 0, 0, 0
        self.produced_seen = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        import urllib.request
        while not self.done.wait(self.every):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=1) as r:
                    body = r.read()
                self.answered += 1
                self.bytes += len(body)
                self.produced_seen |= b"custos_events_produced_total" in body
            except OSError:
                self.unanswered += 1

    def stop(self):
        self.done.set()
        self.thread.join()
        return {"scrapes_answered": self.answered, "scrapes_unanswered": self.unanswered, "bytes": self.bytes}


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics_cost(loadgen, work, rounds):
    """What serving `--metrics` costs the consumer (issue 34): the drain
    (`drain_rate`) with and without `custos collect --metrics`, scraped every
    second while it runs, in rounds of alternating order. Per round the
    ratio with/without of events drained per wall second and per consumer
    CPU-second; their means with 95 % t intervals, and the ratio of the
    medians with its bootstrap interval."""
    samples = {"none": [], "metrics": []}
    scrapes = []
    for r in range(rounds):
        for mode in (("none", "metrics") if r % 2 == 0 else ("metrics", "none")):
            if mode == "none":
                d = drain_rate(loadgen, work)
            else:
                port = free_port()
                scraper = Scraper(port)
                try:
                    d = drain_rate(loadgen, work, extra=["--metrics", f"127.0.0.1:{port}"])
                finally:
                    sc = scraper.stop()
                if not sc["scrapes_answered"] or not scraper.produced_seen:
                    raise RuntimeError(f"--metrics was never scraped with its counters: {sc}")
                scrapes.append(sc)
            samples[mode].append(d)
            log(f"metrics round {r + 1}/{rounds} {mode:>7}: {d['events_per_s']:.0f} events/s, "
                f"{d['events_per_core_s']:.0f} per consumer CPU-second")
    res = {}
    for key in ("events_per_s", "events_per_core_s"):
        ratios = [m[key] / n[key] for n, m in zip(samples["none"], samples["metrics"])]
        mean, lo, hi = results.mean_interval(ratios)
        med, mlo, mhi = results.ratio_interval([m[key] for m in samples["metrics"]], [n[key] for n in samples["none"]])
        res[key] = {"ratio": mean, "ratio_interval_95": [lo, hi], "ratios": ratios,
                    "median_ratio": med, "median_ratio_interval_95": [mlo, mhi],
                    "median": {mode: results.median([d[key] for d in v]) for mode, v in samples.items()}}
    return {
        **res,
        "samples": samples,
        "scrapes": scrapes,
        "how": f"drain_rate (a 1 GiB ring filled while the collector is stopped, then drained) with and without "
               f"`--metrics 127.0.0.1:PORT`, a scraper reading /metrics every second during the metrics runs; "
               f"{rounds} rounds in alternating order",
    }


def overload(loadgen, work):
    c = Custos(work, ["--events-ring-kb", "4", "--attrs-ring-kb", "4"])
    storm = [subprocess.Popen([str(loadgen), "read", "0", "2"], stdout=subprocess.DEVNULL) for _ in range(4)]
    for p in storm:
        p.wait()
    res = c.stop()
    log(f"overload: produced {res['produced']} delivered {res['delivered']} dropped {res['dropped']}")
    return res


def superproducer_skips(share, sitting):
    """One 64-worker super-producer run under `custos sched` in the VM (one
    vCPU): the syscalls no copy of the collector's programs saw."""
    env = {"SP_SCHEDULERS": "custos", "SP_WORKERS": "64", "SP_FILES": "2000", "SP_RUNS": "1",
           "SP_KEEP_EVENTS": "0", "SP_OUT": str(share), "CUSTOS_BIN": str(CUSTOS.parent)}
    script = "".join(f"export {k}={json.dumps(v)}\n" for k, v in env.items())
    script += f"exec bash {ROOT / 'scripts' / 'superproducer-guest.sh'}\n"
    log("super producer, 64 workers, custos sched, in the VM (a few minutes)")
    print(vm.run_script(script, share, timeout_s=1800, cpus=1, sitting=sitting), end="", file=sys.stderr)
    rows = [json.loads(l) for l in (share / "results.jsonl").read_text().splitlines() if l.strip()]
    if len(rows) != 1 or rows[0]["unnumbered"] is None:
        raise RuntimeError(f"the super-producer run gave no account: {rows}")
    logs = sorted(share.glob("custos*.collect.log"))
    if len(logs) != 1:
        raise RuntimeError(f"expected one collect log of the run in {share}, found {logs}")
    log_text = logs[0].read_text()
    first = re.search(r"the first copy skipped (\d+), backups saw (\d+)", log_text)
    return dict(rows[0], first_copy_skipped=int(first[1]) if first else None,
                backups_covered=int(first[2]) if first else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5,
                    help="overhead: rounds before the intervals are first checked; io_uring: its rounds")
    ap.add_argument("--max-rounds", type=int, default=20,
                    help="overhead: rounds at most, tight intervals or not (--max-rounds = --rounds: fixed rounds)")
    ap.add_argument("--halfwidth", type=float, default=0.05,
                    help="overhead: stop once each median's 95 %% interval is within this share of it")
    ap.add_argument("--iterations", type=int, default=200_000)
    ap.add_argument("--no-vm", action="store_true", help="skip the VM run (its key is then missing: use another --out)")
    ap.add_argument("--out", type=Path, default=HERE / "results.json")
    ap.add_argument("--io-uring-only", action="store_true",
                    help="measure only the io_uring copy overhead and add it to --out, keeping its other figures")
    ap.add_argument("--metrics-only", action="store_true",
                    help="measure only what --metrics costs the consumer's drain (--rounds rounds) and add it to "
                         "--out, keeping its other figures")
    args = ap.parse_args()
    if args.io_uring_only and args.metrics_only:
        ap.error("--io-uring-only and --metrics-only each measure one figure: give one")
    if not 2 <= args.rounds <= args.max_rounds or not 0 < args.halfwidth < 1:
        ap.error("--rounds must be at least 2 and at most --max-rounds; --halfwidth between 0 and 1")
    if os.geteuid() != 0:
        sys.exit("bench/collector: run as root (it loads BPF programs and starts auditd)")
    if PIN.exists():
        # The pins outlive a collector; only a live one that published itself is in the way.
        g = global_features()
        live = [p for p in g["consumer_pids"] if p and Path(f"/proc/{p}").exists()]
        if g["collector_running"] == 1 and live:
            sys.exit(f"bench/collector: a collector is running (pid {live[0]}); stop it first")
    if args.io_uring_only:
        u, command, made_by = measure_alone(args, "--io-uring-only", lambda work: io_uring_overhead(work, args.rounds))
        merge_part(args.out, "io_uring_overhead_ratio", u["ratio"], "io_uring", u, command, made_by)
        lo, hi = u["ratio_interval_95"]
        print(results.table([("io_uring_overhead_ratio", u["ratio"]), ("95 % interval", f"{lo:.3f} - {hi:.3f}")],
                            ["key", "value"]))
        return
    if args.metrics_only:
        m, command, made_by = measure_alone(args, "--metrics-only",
                                            lambda work: metrics_cost(build_loadgen(work), work, args.rounds))
        merge_part(args.out, "metrics_drain_ratio", m["events_per_s"]["ratio"], "metrics_cost", m, command, made_by)
        rows = []
        for key, what in (("events_per_s", "events/s drained"), ("events_per_core_s", "per consumer CPU-second")):
            lo, hi = m[key]["ratio_interval_95"]
            rows.append((f"with/without --metrics, {what}", f"{m[key]['ratio']:.3f} [{lo:.3f}, {hi:.3f}]"))
        print(results.table(rows, ["key", "mean ratio [95 % interval]"]))
        return
    if args.no_vm and args.out == HERE / "results.json":
        sys.exit("bench/collector: --no-vm leaves superproducer_skipped_syscalls out; write to another --out")
    ensure_tools()
    if not CUSTOS.exists():
        sys.exit(f"bench/collector: {CUSTOS} is missing; run `make build` first")
    # The VM part's super producer runs custos-workload too.
    sitting = provenance.Sitting([CUSTOS] + ([] if args.no_vm else [WORKLOAD]))
    with tempfile.TemporaryDirectory(prefix="custos-bench-", dir=ROOT / "target") as tmp:
        work = Path(tmp)
        loadgen = build_loadgen(work)
        openclose, getpid, repetitions = overhead(loadgen, work, args.rounds, args.max_rounds, args.halfwidth,
                                                  args.iterations)
        best, steps, how = live_max(loadgen, work)
        drain = drain_rate(loadgen, work)
        # What sealing the stream (on by default, docs/tamper-evidence.md) costs the consumer.
        drain_unsealed = drain_rate(loadgen, work, extra=["--no-seal"])
        over = overload(loadgen, work)
        u = io_uring_overhead(work, args.rounds)
        sp = None if args.no_vm else superproducer_skips(work / "superproducer", sitting)

    med = {m: results.median(v) for m, v in openclose.items()}
    # One iteration is two traced syscalls (openat + close).
    added = {m: (med[m] - med["none"]) / 2 for m in med}
    untraced = results.median(getpid["custos"]) - results.median(getpid["none"])
    command = "sudo .tools/venv/bin/python bench/collector/run.py" + (
        f" --rounds {args.rounds}" if args.rounds != 5 else "") + (
        f" --max-rounds {args.max_rounds}" if args.max_rounds != 20 else "") + (
        f" --halfwidth {args.halfwidth}" if args.halfwidth != 0.05 else "") + (
        f" --iterations {args.iterations}" if args.iterations != 200_000 else "")
    res = {
        "command": command,
        "added_ns_per_syscall": round(added["custos"], 1),
        "untraced_added_ns_per_syscall": round(untraced, 1),
        "bpftrace_added_ns_per_syscall": round(added["bpftrace"], 1),
        "auditd_added_ns_per_syscall": round(added["auditd"], 1),
        "ratio_custos_to_bpftrace": round(results.ratio(added["custos"], added["bpftrace"]), 3),
        "ratio_custos_to_auditd": round(results.ratio(added["custos"], added["auditd"]), 3),
        "live_max_events_per_s_zero_drop": round(best["achieved_per_s"]),
        "consumer_cpu_pct_at_live_max": round(best["consumer_cpu_pct"], 1),
        "overload_produced": over["produced"],
        "overload_delivered": over["delivered"],
        "overload_dropped": over["dropped"],
        "io_uring_overhead_ratio": round(u["ratio"], 3),
        "details": {
            "io_uring": u,
            "baseline_ns_per_openat_close": round(med["none"], 1),
            "median_ns_per_openat_close": {m: round(v, 1) for m, v in med.items()},
            "samples_ns_per_openat_close": openclose,
            "samples_ns_per_getpid": getpid,
            # How many rounds, and whether each configuration's median came within the target.
            "overhead_repetitions": repetitions.summary(),
            "overhead_ratio_to_none": against_none(openclose, getpid),
            "peer_versions": peer_versions(),
            "custos_same_syscalls_added_ns_per_syscall": round(added["custos_same_syscalls"], 1),
            "live_how": how,
            "live_steps": steps,
            "live_consumer_events_per_cpu_s": round(best["achieved_per_s"] / (best["consumer_cpu_pct"] / 100))
            if best["consumer_cpu_pct"] > 0 else None,
            "consumer_drain": drain,
            "consumer_drain_no_seal": drain_unsealed,
            "overload_invariant_holds": over["produced"] == over["delivered"] + over["dropped"],
            "superproducer": sp,
            "notes": "custos traces its whole default set (JSON to /dev/null in the overhead rounds, to a file in the "
                     "live and drain runs); custos_same_syscalls only openat+close like the bpftrace script and the "
                     "audit rule. getpid is not traced. Live rates come from two paced `loadgen read` producers, "
                     "one traced event per read(2).",
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "load_average_at_end": os.getloadavg()},
        },
    }
    if sp is not None:
        res["superproducer_skipped_syscalls"] = sp["unnumbered"]
    results.write_results(args.out, res, REQUIRED if sp is not None else [k for k in REQUIRED if k != "superproducer_skipped_syscalls"],
                          made_by=sitting.made_by())
    stem = args.out.with_name("overhead")
    plots.grouped_bars({"traced (openat, close)": {"custos": added["custos"], "custos, 2 syscalls": added["custos_same_syscalls"],
                                                    "bpftrace": added["bpftrace"], "auditd": added["auditd"]},
                        "untraced (getpid)": {"custos": untraced}},
                       "Time added per syscall, ns (medians of interleaved rounds)", "ns", stem,
                       order=["custos", "custos, 2 syscalls", "bpftrace", "auditd"])
    ordered = sorted(steps, key=lambda s: s["offered_per_s"])
    plots.time_series({"events/s the producers made": [(s["offered_per_s"], s["achieved_per_s"]) for s in ordered],
                       "consumer CPU, % of a core × 10 000": [(s["offered_per_s"], s["consumer_cpu_pct"] * 1e4)
                                                              for s in ordered]},
                      f"Live: JSON Lines to a file; zero drops up to {best['achieved_per_s']:,.0f} events/s",
                      "offered events/s", "events/s", args.out.with_name("live"))
    rows = [(k, res[k]) for k in REQUIRED if k != "command" and k in res]
    print(results.table(rows, ["key", "value"]))


if __name__ == "__main__":
    main()
