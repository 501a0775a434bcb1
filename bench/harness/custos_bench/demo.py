"""The case study of seed 000 §2.1 as `make demo`: a scripted attack during a
super-producer flood, recorded under the kernel's default scheduler and under
Custos in one VM session (scripts/demo-guest.sh), then put in the store and
asked step by step.

Leaves in one folder: the timeline of events lost per millisecond with the
attack's steps marked (Figure 1a), each scheduler's causal graph of the attack
from the store (Figure 1b), a one-screen summary (summary.txt, summary.json)
and index.html showing them together.

    python -m custos_bench.demo [--out DIR] [--workers N] [--report-only]
"""
import argparse
import html
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

from .paths import CUSTOS, ROOT

SCHEDULERS = ["default", "custos"]
TITLES = {"default": "default scheduler (EEVDF)", "custos": "Custos"}
VICTIM = "/tmp/demo/victim"
SECRETS = ["id_rsa", "shadow", "db.conf", "wallet"]
# What every program reads on its way in (shared libraries, locales, system
# configuration), left out of the pictures: the attack's own steps remain.
HIDE = ["*.so*", "/usr/share/*", "/usr/lib/locale/*", "/usr/lib/python3*", "*.pth", "/etc/*", "/proc/*",
        "/sys/*", "/dev/*"]


def steps(port: int):
    """The attack's steps (scripts/attack.sh) and the evidence the store must
    hold for each: (name in the steps file, label, [(query, target, needed)]).
    `needed`: names the answer's nodes must include; for who-touched, the
    program that must have read the target."""
    endpoint = f"127.0.0.1:{port}"
    secrets = [f"{VICTIM}/secret/{s}" for s in SECRETS]
    return [
        ("read secrets", "read the four secrets (cat)", [("who-touched", s, ["/usr/bin/cat"]) for s in secrets]),
        ("archive", "archive them (tar)", [("ancestors", f"{VICTIM}/archive.tar", ["/usr/bin/tar", *secrets])]),
        ("upload", "upload it to the attacker's server (curl)", [("descendants", f"{VICTIM}/archive.tar", [endpoint])]),
        ("download", "download suspicious.sh from there",
         [("ancestors", f"{VICTIM}/suspicious.sh", ["/usr/bin/curl", endpoint])]),
        ("overwrite", "overwrite maintenance.sh with it (cp)",
         [("ancestors", f"{VICTIM}/maintenance.sh", ["/usr/bin/cp", f"{VICTIM}/suspicious.sh"])]),
    ]


def progress(msg: str):
    print(f"demo: {msg}", file=sys.stderr, flush=True)


def read_jsonl(path: Path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def stream_account(stream: Path):
    """The final stats record and the loss records of a stream."""
    final, losses = None, []
    with open(stream, encoding="utf-8") as f:
        for line in f:
            if '"type":"loss"' in line:
                losses.append(json.loads(line))
            elif '"type":"stats"' in line and '"final":true' in line:
                final = json.loads(line)
    if final is None:
        raise SystemExit(f"{stream}: no final stats record (did the collector stop cleanly?)")
    return final, losses


def loss_per_ms(losses, start_ns: int, end_ns: int):
    """Events lost per millisecond from start_ns to end_ns, by kind: refused by
    full rings, and skipped by the kernel (exact per CPU, or the upper bound
    of syscalls wholly unseen). A record's count is spread evenly over its
    window, which is all the stream says of when inside it they were lost."""
    n = max(1, math.ceil((end_ns - start_ns) / 1e6))
    kinds = {"refused by full rings": [0.0] * n, "skipped by the kernel": [0.0] * n,
             "skipped, upper bound": [0.0] * n}
    for rec in losses:
        if rec["category"] == "skipped":
            kind = "skipped, upper bound" if rec.get("upper_bound") else "skipped by the kernel"
        else:
            kind = "refused by full rings"
        lo = min(n - 1, max(0, (rec["start_ns"] - start_ns) // 1_000_000))
        hi = min(n - 1, max(lo, (rec["end_ns"] - start_ns) // 1_000_000))
        share = rec["count"] / (hi - lo + 1)
        series = kinds[kind]
        for i in range(lo, hi + 1):
            series[i] += share
    return kinds


def custos(*args, check=True):
    proc = subprocess.run([str(CUSTOS), *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"custos {' '.join(map(str, args))} failed: {proc.stderr.strip()}")
    return proc


def query(db: Path, direction: str, target: str):
    """The store's answer as JSON, or None when the target is not in it
    (any other failure stops the demo with the store's message)."""
    proc = custos("query", "--db", db, "--json", direction, target, check=False)
    if proc.returncode != 0:
        if "nothing in the store matches" in proc.stderr:
            return None
        raise SystemExit(f"custos query {direction} {target} failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def evidence(answer, query_kind: str, needed):
    """The needed names the answer lacks."""
    if query_kind == "who-touched":
        by_id = {n["node"]: n.get("name") for n in answer["nodes"]}
        readers = {by_id.get(r["process"]) for r in answer["rows"] if r["action"] == "read"}
        return [x for x in needed if x not in readers]
    names = {n.get("name") for n in answer["nodes"]}
    return [x for x in needed if x not in names]


def check_steps(db: Path, port: int):
    found = []
    for name, label, checks in steps(port):
        lacking, complete = [], True
        for query_kind, target, needed in checks:
            answer = query(db, query_kind, target)
            if answer is None:
                lacking.append(f"{target} is not in the store")
                complete = False if complete is False else None  # no answer: unknown
                continue
            complete = complete and answer["complete"]
            lacking += [f"{query_kind} {target}: no {x}" for x in evidence(answer, query_kind, needed)]
        found.append({"step": name, "label": label, "recorded": not lacking, "complete": complete,
                      "why": "; ".join(lacking)})
    return found


def render_graph(db: Path, out: Path, scheduler: str, since_ns: int):
    """Figure 1b: everything maintenance.sh depends on since the flood began."""
    prefix = out / f"{scheduler}-graph"
    hide = [a for h in HIDE for a in ("--hide", h)]
    proc = custos("graph", "--db", db, "-o", prefix, *hide, "ancestors", "--since", since_ns,
                  f"{VICTIM}/maintenance.sh", check=False)
    if proc.returncode != 0:
        return None, proc.stderr.strip()
    dot = prefix.with_suffix(".dot")
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tpng", "-Gdpi=80", "-o", str(prefix.with_suffix(".png")), str(dot)], check=False)
    svg = prefix.with_suffix(".svg")
    return (svg if svg.exists() else None), ""


def plot_timeline(runs: dict, out: Path):
    """Figure 1a: events lost per millisecond under each scheduler, the
    attack's steps shaded."""
    from .plots import plt, _save

    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), sharex=True, squeeze=False)
    colors = {"refused by full rings": "#c44e52", "skipped by the kernel": "#dd8452", "skipped, upper bound": "#ccb974"}
    longest = 0.0
    for ax, (s, run) in zip(axes[:, 0], runs.items()):
        start = run["info"]["start_ns"]
        bottom = None
        for kind, series in run["timeline"].items():
            if not any(series):
                continue
            xs = [i / 1000 for i in range(len(series))]
            base = bottom or [0.0] * len(series)
            # Tens of thousands of steps: drawn as pixels, or the SVG weighs megabytes.
            ax.fill_between(xs, base, [b + v for b, v in zip(base, series)], step="post", color=colors[kind],
                            label=kind, linewidth=0, rasterized=True)
            bottom = [b + v for b, v in zip(base, series)]
        for i, st in enumerate(run["steps_spans"]):
            x0, x1 = (st["start_ns"] - start) / 1e9, (st["end_ns"] - start) / 1e9
            ax.axvspan(x0, max(x1, x0 + 0.02), color="#4c72b0", alpha=0.25, linewidth=0)
            ax.annotate(str(i + 1), (x0, 1), xycoords=("data", "axes fraction"), ha="left", va="top",
                        fontsize=8, color="#4c72b0")
        lost = run["lost"]
        ax.set_title(f"{TITLES[s]}: {lost:,} events lost ({run['loss_pct']:.1f} %)", fontsize=10, loc="left")
        ax.set_ylabel("events lost / ms")
        if bottom is None:
            ax.text(0.5, 0.5, "no event lost", transform=ax.transAxes, ha="center", va="center", color="#55a868")
            ax.set_ylim(0, 1)
        else:
            ax.legend(loc="upper right", fontsize=8)
        longest = max(longest, (run["info"]["end_ns"] - start) / 1e9)
    axes[-1, 0].set_xlim(0, longest)
    axes[-1, 0].set_xlabel("seconds since the flood began (blue: the attack's steps 1-5)")
    return _save(fig, out / "timeline")


def summary_text(report: dict) -> str:
    runs = report["schedulers"]
    names = [s for s in SCHEDULERS if s in runs]
    w, label_w = 24, 46
    head = report["setup"]
    lines = [
        "Custos case study (seed 000 §2.1): a scripted attack during a super-producer flood",
        f"{head['workers']} `find -exec cat` workers, {head['ring_kb']} KiB rings, one vCPU; the attack starts 2 s in",
        "",
        f"{'':{label_w}}" + "".join(f"{TITLES[s]:>{w}}" for s in names),
    ]

    def row(label, cell):
        lines.append(f"{label:{label_w}}" + "".join(f"{cell(runs[s]):>{w}}" for s in names))

    row("events produced", lambda r: f"{r['produced']:,}")
    row("lost: refused by full rings", lambda r: f"{r['dropped']:,}")
    row("lost: skipped by the kernel", lambda r: f"{r['unnumbered']:,}")
    row("loss", lambda r: f"{r['loss_pct']:.1f} %")
    row("flood runtime", lambda r: f"{r['runtime_s']:.1f} s")
    row("attack ran (s into the flood)", lambda r: "{:.1f} to {:.1f} s".format(*r["attack_s"]) if r.get("attack_s") else "?")
    lines.append("")
    lines.append("attack step, as the store has it")
    for i, st in enumerate(runs[names[0]]["steps"]):
        row(f"{i + 1} {st['label']}"[:label_w], lambda r, i=i: "recorded" if r["steps"][i]["recorded"] else "MISSING")
    row("the queries say", lambda r: "complete" if all(x["complete"] for x in r["steps"]) else "may be incomplete")
    return "\n".join(lines) + "\n"


def write_html(report: dict, out: Path):
    runs = report["schedulers"]
    parts = [
        "<!doctype html><meta charset='utf-8'><title>Custos case study</title>",
        "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto}pre{background:#f6f6f6;padding:1em}"
        "img{max-width:100%;border:1px solid #ddd}.g{display:flex;gap:1em}.g>div{flex:1;min-width:0}</style>",
        "<h1>The super-producer attack, recorded under two schedulers</h1>",
        f"<pre>{html.escape(report['summary'])}</pre>",
        "<h2>Events lost per millisecond (seed 000, Figure 1a)</h2>",
        "<img src='timeline.svg' alt='events lost per millisecond'>",
        "<h2>What maintenance.sh depends on, from the store (Figure 1b)</h2><div class='g'>",
    ]
    for s, r in runs.items():
        parts.append(f"<div><h3>{html.escape(TITLES[s])}</h3>")
        if r.get("graph"):
            parts.append(f"<a href='{r['graph']}'><img src='{r['graph']}' alt='causal graph'></a>")
        else:
            parts.append(f"<p>No graph: {html.escape(r.get('graph_error') or 'maintenance.sh is not in the store')}</p>")
        parts.append("</div>")
    parts.append("</div>")
    (out / "index.html").write_text("\n".join(parts) + "\n", encoding="utf-8")


def report(out: Path) -> dict:
    runs = {}
    setup = None
    for s in SCHEDULERS:
        stream = out / f"{s}.jsonl"
        if not stream.exists():
            continue
        info = json.loads((out / f"{s}.json").read_text())
        setup = setup or info
        progress(f"{s}: reading the stream and putting it in the store")
        final, losses = stream_account(stream)
        db = out / f"{s}.db"
        for p in out.glob(f"{s}.db*"):
            p.unlink()
        custos("ingest", "-q", "--db", db, stream)
        progress(f"{s}: asking the store for each step of the attack")
        found = check_steps(db, info["port"])
        graph, graph_error = render_graph(db, out, s, info["start_ns"])
        lost = final["dropped"] + final["unnumbered"]
        runs[s] = {
            "produced": final["produced"], "delivered": final["delivered"], "dropped": final["dropped"],
            "unnumbered": final["unnumbered"], "incomplete": final["incomplete"], "lost": lost,
            "loss_pct": 100.0 * lost / max(1, final["produced"] + final["unnumbered"]),
            "runtime_s": (info["end_ns"] - info["start_ns"]) / 1e9, "sched_ext_state": info["sched_ext_state"],
            "steps": found, "graph": graph.name if graph else None, "graph_error": graph_error,
            "timeline": loss_per_ms(losses, info["start_ns"], info["end_ns"]),
            "steps_spans": list(read_jsonl(out / f"{s}.steps.jsonl")), "info": info,
        }
        spans = runs[s]["steps_spans"]
        runs[s]["attack_s"] = [(min(x["start_ns"] for x in spans) - info["start_ns"]) / 1e9,
                               (max(x["end_ns"] for x in spans) - info["start_ns"]) / 1e9] if spans else None
    if not runs:
        raise SystemExit(f"{out}: no run to report (expected default.jsonl and custos.jsonl)")
    progress("drawing the timeline")
    plot_timeline(runs, out)
    rep = {"setup": {k: setup[k] for k in ("workers", "files", "ring_kb")},
           "schedulers": {s: {k: v for k, v in r.items() if k not in ("timeline", "info")} for s, r in runs.items()},
           "command": "make demo"}
    rep["summary"] = summary_text(rep)
    (out / "summary.json").write_text(json.dumps(rep, indent=1) + "\n")
    (out / "summary.txt").write_text(rep["summary"])
    write_html(rep, out)
    return rep


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "demo", help="where everything goes (default: out/demo)")
    ap.add_argument("--workers", type=int, default=16, help="find workers (16 and more overflow the default's rings)")
    ap.add_argument("--report-only", action="store_true", help="report on the runs already in --out")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if not args.report_only:
        out.mkdir(parents=True, exist_ok=True)
        for p in out.iterdir():
            if p.is_file():
                p.unlink()
        progress(f"booting the sched_ext VM (one vCPU); {args.workers} workers, default scheduler then Custos")
        cmd = [str(CUSTOS), "vm", "run", "-q", "--cpus", "1", "--timeout", "1200", "--share", str(out), "--",
               "env", f"OUT={out}", f"DEMO_WORKERS={args.workers}", f"CUSTOS_BIN={CUSTOS.parent}",
               "bash", str(ROOT / "scripts" / "demo-guest.sh")]
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            raise SystemExit("demo: the VM run failed (see above)")
    rep = report(out)
    print(rep["summary"])
    print(f"pictures and summary: {out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
