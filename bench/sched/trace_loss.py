#!/usr/bin/env python3
"""What ran while the rings overflowed: a super-producer run's in-band loss
records laid over its sched_switch trace.

    SP_TRACE=1 SP_KEEP_EVENTS=1 SP_SCHEDULERS=custos SP_RUNS=3 \\
        target/release/custos vm run --cpus 1 --share DIR -- \\
        sh -c 'SP_OUT=DIR bash scripts/superproducer-guest.sh'
    bench/sched/trace_loss.py DIR/custos-w16-r1     # TAG.trace, TAG.jsonl, TAG.loss.jsonl

The guest script writes the wall clock into the trace (a trace_marker line)
when tracing starts; the offset between that and the trace's monotonic clock
is then refined so that the thread of each delivered event is the one the
trace shows running at its time (reported as the match share). For every loss
record it prints what ran on the CPU from --before ms ahead of the window to
its end, and for the whole run the longest stretches the collector's draining
thread was runnable but not running, with who ran meanwhile.
"""
import argparse
import bisect
import json
import re

SWITCH = re.compile(r'\s([\d.]+): sched_switch: prev_comm=(.*) prev_pid=(\d+) prev_prio=\d+ '
                    r'prev_state=(\S+) ==> next_comm=(.*) next_pid=(\d+)')
MARK = re.compile(r'([\d.]+): tracing_mark_write: custos_wallclock (\d+)')


def load_trace(path):
    switches, mark = [], None
    for line in open(path, errors="replace"):
        m = SWITCH.search(line)
        if m:
            switches.append((float(m.group(1)), m.group(2), int(m.group(3)), m.group(4), m.group(5),
                             int(m.group(6))))
        elif mark is None and (m := MARK.search(line)):
            mark = (float(m.group(1)), int(m.group(2)))
    if mark is None:
        raise SystemExit(f"{path}: no custos_wallclock marker")
    return switches, mark


def calibrate(switches, events):
    """The offset (s) that puts each sampled event on its own thread's run."""
    ts = [s[0] for s in switches]
    pids = [s[5] for s in switches]

    def score(off):
        ok = 0
        for t, tid in events:
            i = bisect.bisect_right(ts, t + off) - 1
            ok += i >= 0 and pids[i] == tid
        return ok / max(1, len(events))
    return max((score(o / 1e4), o / 1e4) for o in range(-1000, 201))


def runs_of(switches):
    """(start, end, comm-pid, state when switched out) for every stretch on the CPU."""
    return [(a[0], b[0], f"{a[4]}-{a[5]}", b[3]) for a, b in zip(switches, switches[1:])]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tag", help="path prefix of one run: TAG.trace, TAG.jsonl, TAG.loss.jsonl")
    ap.add_argument("--before", type=float, default=30.0, help="ms shown ahead of each loss window")
    args = ap.parse_args()

    switches, (mono, wall) = load_trace(args.tag + ".trace")
    to_mono = lambda ns: mono + (ns - wall) / 1e9  # noqa: E731
    sample = []
    try:
        with open(args.tag + ".jsonl", errors="replace") as f:
            for i, line in enumerate(f):
                if i % 50 == 0 and '"type":"event"' in line:
                    e = json.loads(line)
                    sample.append((to_mono(e["time_ns"]), e["tid"]))
    except FileNotFoundError:
        pass
    match, off = calibrate(switches, sample) if sample else (0.0, 0.0)
    print(f"{args.tag}: {len(switches)} switches; clock offset {off * 1e3:+.1f} ms "
          f"({match:.1%} of sampled events on their thread's run)")
    runs = runs_of(switches)

    drain = next((s[2] for s in switches if s[1] == "custos" and s[3].startswith("S")), None)
    waits, out_at, who = [], None, {}
    for t, prev_comm, prev, state, next_comm, nxt in switches:
        if prev == drain and state.startswith("R"):
            out_at, who = t, {}
        if out_at is not None and nxt != drain:
            who[f"{next_comm}-{nxt}"] = who.get(f"{next_comm}-{nxt}", 0) + 1
        if nxt == drain and out_at is not None:
            waits.append((t - out_at, out_at, ", ".join(who)))
            out_at = None
    waits.sort(reverse=True)
    print(f"draining thread {drain}: runnable but off the CPU {len(waits)} times; longest:")
    for d, at, names in waits[:8]:
        print(f"   {d * 1e3:6.1f} ms from {at:.6f}: {names}")

    for rec in map(json.loads, open(args.tag + ".loss.jsonl")):
        s, e = to_mono(rec["start_ns"]) + off, to_mono(rec["end_ns"]) + off
        print(f"loss: cpu {rec['cpu']}, {rec['count']} records refused by the {rec['category']} ring, "
              f"window {s:.6f}-{e:.6f} ({(e - s) * 1e3:.1f} ms)")
        for a, b, name, state in runs:
            if b >= s - args.before / 1e3 and a <= e:
                print(f"   {a:.6f} {(b - a) * 1e3:7.2f} ms  {name:24s} out: {state}")


if __name__ == "__main__":
    main()
