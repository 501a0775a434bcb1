"""bench/soak's summary of a run, from the files the guest leaves (no VM):
a clean run passes, and each kind of failure (an event neither stored nor
counted, an ejected scheduler, a stall, memory that grows, a query that
failed or a marker the store never named) fails it."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("soak", ROOT / "bench" / "soak" / "run.py")
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)

HEADER = ("t_s,flooding,collector_alive,collector_rss_kb,collector_anon_kb,collector_file_kb,collector_shmem_kb,"
          "sched_alive,sched_rss_kb,sched_anon_kb,sched_ext_state,sched_ops")
FINAL_LINE = ("custos collect: produced {p} = delivered {d} + dropped {x} (critical 0, events {x}); incomplete 0; "
              "loss records 3; unnumbered 0 (lost to the kernel's skips: 0 syscalls found, at most 0 unseen, "
              "0 hook runs; the first copy skipped 0, backups saw 0)\n")


def write_run(d: Path, produced=600_000, stored=599_000, losses=None, state=lambda t: "enabled",
              anon_mb=lambda t, flooding: 60 + 40 * flooding, late_marker=None, missing_marker=None,
              failed_query=None, probe_max_ms=300, wait_max_ms=400, stats_gap=None, lag_standing=None):
    """A 7-minute run as bench/soak/guest.sh leaves it: samples every 5 s,
    floods at 30 and 210 s, a marker a sample, each named by the store at
    the next sample."""
    losses = {"events": {"records": 3, "count": 1000}} if losses is None else losses
    dropped = sum(v["count"] for c, v in losses.items() if c in soak.GAP_CATEGORIES)
    floods = [(1, 30.0, 95.0), (2, 210.0, 272.0)]
    rows, markers, queries = [HEADER], ["marker,written_s"], ["t_s,marker,written_s,ms,rc,answered,found"]
    for i in range(84):
        t = i * 5.0
        flooding = int(any(s <= t < e for _, s, e in floods))
        a = int(anon_mb(t, flooding) * 1024)
        rows.append(f"{t:.3f},{flooding},1,{a + 16000},{a},16000,0,1,20000,8000,{state(t)},custos")
        m = i + 1
        markers.append(f"{m},{t + 0.05:.3f}")
        answer_at = t + 5 if m != late_marker else t + 45
        if m == missing_marker:
            queries.append(f"{t + 5:.3f},{m},{t + 0.05:.3f},40,1,1,0")
        elif answer_at < 420:
            answered = 0 if m == failed_query else 1
            queries.append(f"{answer_at:.3f},{m},{t + 0.05:.3f},40,{1 - answered},{answered},{answered}")
        if m == failed_query:
            queries.append(f"{answer_at + 5:.3f},{m},{t + 0.05:.3f},40,0,1,1")
    queries.append("425.000,84,415.050,30,0,1,1")
    (d / "samples.csv").write_text("\n".join(rows) + "\n")
    (d / "markers.csv").write_text("\n".join(markers) + "\n")
    (d / "queries.csv").write_text("\n".join(queries) + "\n")
    (d / "floods.csv").write_text("flood,start_s,end_s,workers\n" + "".join(f"{n},{s},{e},16\n" for n, s, e in floods))
    (d / "meta.json").write_text(json.dumps({
        "minutes": 7, "flood_every_s": 180, "flood_s": 60, "flood_first_s": 30, "workers": 16, "files": 500,
        "sample_s": 5, "ring_kb": 64, "db_cache_mb": 8, "scheduler": "custos", "cpus": 2, "kernel": "7.2.0", "end_s": 420.5,
        "sched_ext_state_end": state(420.5), "sched_ops_start": "custos", "sched_ops_end": "custos",
        "enable_seq_start": 1, "enable_seq_end": 1, "collector_rc": 0, "sched_rc": 0, "db_bytes": 40 << 20}))
    (d / "store.json").write_text(json.dumps({
        "stored": stored, "losses": losses, "rejects": 0, "ingests": [],
        "final_stats": {"produced": produced, "delivered": produced - dropped, "dropped": dropped,
                        "unnumbered": 0, "incomplete": 0, "invariant_holds": True, "final": True}}))
    (d / "collect.log").write_text("custos collect: 1 ev/s ...\n" + FINAL_LINE.format(p=produced, d=produced - dropped,
                                                                                        x=dropped))
    # The collector's stats records, every 5 s (time_ns from a wall clock of 1e18).
    stats, delivered = [], 0
    for i in range(85):
        t = i * 5.0 + (40 if stats_gap is not None and i * 5.0 >= stats_gap else 0)
        standing = lag_standing is not None and lag_standing <= t < lag_standing + 40
        delivered += 0 if standing else 3000
        stats.append({"time_ns": int(1e18 + t * 1e9), "produced": delivered + (500 if standing else 0),
                      "delivered": delivered, "consumer_lag": 500 if standing else 0})
    (d / "stats.jsonl").write_text("".join(json.dumps(x) + "\n" for x in stats))
    (d / "sched.json").write_text(json.dumps({"queues": [{"wait_max_us": wait_max_ms * 1000}, {"wait_max_us": 0.0}]}))
    for n in range(1, 8):
        (d / f"probe-{n}.start").write_text(f"{(n - 1) * 60}.000")
        (d / f"probe-{n}.json").write_text(json.dumps({"p50_ns": 1e6, "p99_ns": 1e8, "max_ns": probe_max_ms * 1e6}))
    (d / "dmesg-start.txt").write_text("sched_ext: BPF scheduler \"custos\" enabled\n")
    (d / "dmesg.txt").write_text("sched_ext: BPF scheduler \"custos\" enabled\n")
    return d


def test_a_clean_run_passes_every_check(tmp_path):
    s = soak.summarise(write_run(tmp_path))
    assert s["checks"] == {k: True for k in s["checks"]} and s["passed"]
    assert (s["produced"], s["stored"], s["lost_counted"], s["lost_unaccounted"]) == (600_000, 599_000, 1000, 0)
    assert s["floods"] == 2 and s["stalls"] == 0 and s["scheduler_ejected"] == 0
    assert s["collector_rss_max_mb"] == pytest.approx((100 * 1024 + 16000) / 1024)
    assert s["sched_rss_max_mb"] == pytest.approx(20000 / 1024)
    assert s["marker_freshness_s_max"] == pytest.approx(4.95 + 0.04)
    soak.results.check_figures({**s, "command": "bench/soak/run.py"}, soak.REQUIRED)


def test_an_event_neither_stored_nor_counted_fails(tmp_path):
    s = soak.summarise(write_run(tmp_path, stored=598_999))
    assert s["lost_unaccounted"] == 1
    assert not s["checks"]["produced_is_stored_plus_lost"] and not s["passed"]


def test_loss_records_short_of_the_dropped_count_fail(tmp_path):
    # Stored + gaps add up only if the skipped records are (wrongly) counted as gaps.
    d = write_run(tmp_path, losses={"events": {"records": 3, "count": 1000}})
    store = json.loads((d / "store.json").read_text())
    store["losses"] = {"events": {"records": 2, "count": 900}, "skipped": {"records": 1, "count": 100}}
    (d / "store.json").write_text(json.dumps(store))
    s = soak.summarise(d)
    assert s["lost_counted"] == 900 and s["lost_unaccounted"] == 100 and not s["passed"]


def test_a_scheduler_that_left_is_an_ejection(tmp_path):
    s = soak.summarise(write_run(tmp_path, state=lambda t: "disabled" if t > 300 else "enabled"))
    assert s["scheduler_ejected"] == 1 and not s["checks"]["scheduler_stayed"] and not s["passed"]
    (tmp_path / "x").mkdir()
    d = write_run(tmp_path / "x")
    (d / "dmesg.txt").write_text((d / "dmesg-start.txt").read_text()
                                 + "sched_ext: BPF scheduler \"custos\" disabled (runnable task stall)\n")
    assert soak.summarise(d)["scheduler_ejected"] == 1


def test_stalls_of_the_pipeline_of_a_task_and_of_the_probe_count(tmp_path):
    def run(name, **kw):
        (tmp_path / name).mkdir()
        return soak.summarise(write_run(tmp_path / name, **kw))

    # The collector's loop stood still 45 s: no stats record.
    s = run("gap", stats_gap=100.0)
    assert [k for k, *_ in s["stall_detail"]["pipeline"]] == ["no stats record"] and s["stalls"] == 1
    assert not s["checks"]["no_stall"] and not s["passed"]
    # Events waiting and none delivered for 40 s.
    s = run("lag", lag_standing=150.0)
    assert [k for k, *_ in s["stall_detail"]["pipeline"]] == ["lag standing"] and not s["passed"]
    # A runnable task waited the watchdog's 30 s.
    s = run("wait", wait_max_ms=30_000)
    assert s["stall_detail"]["task_wait_stalls"] == 1 and not s["passed"]
    assert run("wait29", wait_max_ms=29_000)["passed"]
    # The probe late by 2.5 s in each of its 7 windows.
    s = run("probe", probe_max_ms=2500)
    assert s["stalls"] == 7 and not s["checks"]["no_stall"]
    # A marker named late by a busy monitor is a figure, not a stall.
    s = run("late", late_marker=10)
    assert s["marker_freshness_s_max"] > 30 and s["passed"]


def test_memory_that_grows_flood_after_flood_is_not_bounded(tmp_path):
    s = soak.summarise(write_run(tmp_path, anon_mb=lambda t, flooding: 60 + t / 5 + 40 * flooding))
    assert s["collector_anon_growth"]["floor_growth_mb"] > 16 and not s["checks"]["rss_bounded"]
    assert not s["passed"]


def test_a_failed_query_or_a_marker_never_named_fails(tmp_path):
    s = soak.summarise(write_run(tmp_path, failed_query=20))
    assert s["queries_failed"] == 1 and not s["checks"]["store_answered"]
    (tmp_path / "m").mkdir()
    s = soak.summarise(write_run(tmp_path / "m", missing_marker=30))
    assert s["markers_missing"] == [30] and not s["checks"]["store_answered"] and not s["passed"]


def test_a_run_that_did_not_finish_is_refused(tmp_path):
    d = write_run(tmp_path)
    (d / "store.json").unlink()
    with pytest.raises(ValueError, match="store.json"):
        soak.summarise(d)
