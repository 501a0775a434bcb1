"""bench/collector's overhead rounds (without root: the tracers and the
load generator faked): every configuration round robin until its median is
known, getpid under a tracer of its own, and the ratios to no tracer with
their intervals."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("collector_run", ROOT / "bench" / "collector" / "run.py")
collector = importlib.util.module_from_spec(spec)
spec.loader.exec_module(collector)

# ns per openat+close and per getpid under each tracer (custos_same_syscalls is a Custos too).
COST = {None: {"openclose": 1000.0, "getpid": 60.0}, "custos": {"openclose": 1600.0, "getpid": 61.0},
        "bpftrace": {"openclose": 9000.0}, "auditd": {"openclose": 14000.0}}


def fake(monkeypatch, noise=()):
    """Fakes the tracers and loadgen; returns the log of (tracer, loop) in the order run."""
    calls, current, jitter = [], [None], iter(noise)

    def tracer(name):
        class Tracer:
            def __init__(self, work, extra=()):
                current[0] = name

            def stop(self):
                current[0] = None
                return {}
        return Tracer

    def loop_ns(loadgen, kind, n):
        calls.append((current[0], kind))
        return COST[current[0]][kind] * (1 + next(jitter, 0.0))

    for name, cls in (("custos", "Custos"), ("bpftrace", "Bpftrace"), ("auditd", "Auditd")):
        monkeypatch.setattr(collector, cls, tracer(name))
    monkeypatch.setattr(collector, "loop_ns", loop_ns)
    return calls


def test_overhead_runs_round_robin_and_stops_once_every_median_is_known(monkeypatch):
    calls = fake(monkeypatch)
    openclose, getpid, rep = collector.overhead("loadgen", Path("/tmp"), 5, 20, 0.05, 1000)
    # One round: every mode in turn, getpid right after its mode under a start of its own.
    assert calls[:7] == [(None, "openclose"), (None, "getpid"), ("custos", "openclose"), ("custos", "getpid"),
                         ("custos", "openclose"), ("bpftrace", "openclose"), ("auditd", "openclose")]
    assert calls[7:14] == calls[:7]
    # Steady figures: tight after the first five rounds.
    assert rep.rounds == 5 and all(rep.converged.values()) and len(openclose["auditd"]) == 5
    assert getpid == {"none": [60.0] * 5, "custos": [61.0] * 5}
    ratios = collector.against_none(openclose, getpid)
    assert ratios["custos"] == {"ratio": 1.6, "interval_95": [1.6, 1.6], "differs": True}
    assert ratios["custos_getpid"]["ratio"] == 61.0 / 60.0 and ratios["custos_getpid"]["differs"]
    assert set(ratios) == {"custos", "custos_same_syscalls", "bpftrace", "auditd", "custos_getpid"}


def test_overhead_goes_on_while_a_median_is_loose_and_stops_at_the_cap(monkeypatch):
    # Every run off by ±30 %, alternately: no median comes within ±5 % of itself.
    fake(monkeypatch, noise=[0.3, -0.3, 0.1] * 200)
    openclose, _, rep = collector.overhead("loadgen", Path("/tmp"), 3, 8, 0.05, 1000)
    assert rep.rounds == 8 and len(openclose["none"]) == 8 and not all(rep.converged.values())
    assert rep.summary()["rounds"] == 8
