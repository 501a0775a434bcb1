import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("placement_run", Path(__file__).resolve().parents[2] / "placement" / "run.py")
placement_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(placement_run)


def line(config, load, result):
    return json.dumps({"config": config, "load": load, "result": result})


def pairs(rtts):
    return [{"round_trip": {"mean_ns": r}} for r in rtts]


def lines_for(config, eps, ctxt):
    out = []
    for k in (1, 2, 3):  # three rounds: the median is the middle one
        out.append(line(config, "cpu1", {"events_per_s": eps * k, "latency_ms_median": 1.0, "latency_ms_p95": 1.5 * k,
                                         "latency_ms_max": 9.0}))
        out.append(line(config, "cpu8", {"events_per_s": 2 * eps * k, "latency_ms_median": 4.0, "latency_ms_p95": 8.0,
                                         "latency_ms_max": 50.0 * k}))
        out.append(line(config, "mixed", {"cpu": {"events_per_s": eps, "latency_ms_p95": 3.0},
                                          "context_switches": 10, "pairs_results": pairs([100 * k, 300 * k])}))
        out.append(line(config, "io", {"wall_ms": 1000 * k, "context_switches": ctxt * k,
                                       "pairs_results": pairs([50, 70])}))
    return out


def test_medians_per_configuration():
    s = placement_run.summarize(placement_run.parse(lines_for("default", 100, 1000) + lines_for("gru", 110, 500)))
    assert s["default"]["sysbench1_events_per_s"] == 200  # median of 100, 200, 300
    assert s["default"]["sysbench1_latency_ms_p95"] == 3.0
    assert s["gru"]["io_context_switches"] == 1000  # median of 500, 1000, 1500
    assert s["default"]["mixed_rtt_ns"] == 400  # median over rounds of each round's median pair (200, 400, 600)


def test_placement_shares_count_every_way_a_task_was_placed(tmp_path):
    # custos sched --stats-json: flat keys, "placement" names the placement in use.
    stats = {"placement": "gru (shipped model)", "placement_used": 60, "placement_fallbacks": 20,
             "placement_stale": 10, "placement_rejected_cpumask": 5, "placement_busy": 5,
             "placement_predictions": 90, "placement_prediction_errors": 10, "placement_inference_ns": 500_000,
             "placement_inference_p50_us": 30.0, "placement_inference_p99_us": 80.0}
    p = tmp_path / "stats.json"
    p.write_text(json.dumps(stats))
    got = placement_run.placement_stats(p)
    assert got["prediction_used_pct"] == 60.0
    assert got["fallback_pct"] == 40.0
    # Calls run batches: the cost of one window is the total over the windows run.
    assert got["inference_us_per_window"] == 5.0


def test_a_run_that_never_consulted_the_placement_layer_is_an_error(tmp_path):
    p = tmp_path / "stats.json"
    p.write_text(json.dumps({"placement": "gru (shipped model)", "placement_used": 0, "placement_fallbacks": 0,
                             "placement_stale": 0, "placement_rejected_cpumask": 0, "placement_predictions": 0,
                             "placement_inference_p50_us": 0, "placement_inference_p99_us": 0}))
    with pytest.raises(ValueError, match="no task"):
        placement_run.placement_stats(p)


def test_superproducer_loss_counts_skipped_syscalls(tmp_path):
    p = tmp_path / "results.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [
        {"scheduler": "custos", "produced": 900, "delivered": 900, "dropped": 0, "unnumbered": 100,
         "marker_delivered": True},
        {"scheduler": "custos", "produced": 1000, "delivered": 1000, "dropped": 0, "unnumbered": 0,
         "marker_delivered": True},
    ]))
    sp = placement_run.superproducer(p)
    assert sp["custos"]["runs"] == 2
    assert sp["custos"]["max_loss_pct"] == 10.0
