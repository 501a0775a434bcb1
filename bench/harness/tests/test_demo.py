from custos_bench.demo import loss_per_ms, summary_text


def test_loss_per_ms_spreads_each_record_over_its_window_and_keeps_the_kinds_apart():
    t0 = 1_000_000_000
    losses = [
        # 30 records refused between 1 ms and 3 ms: 10 in each of 3 bins.
        {"type": "loss", "category": "events", "count": 30, "start_ns": t0 + 1_000_000, "end_ns": t0 + 3_500_000},
        {"type": "loss", "category": "skipped", "count": 4, "start_ns": t0, "end_ns": t0 + 1_999_999},
        {"type": "loss", "category": "skipped", "upper_bound": True, "count": 7, "start_ns": t0 + 4_000_000,
         "end_ns": t0 + 4_000_000},
        # Before the flood began and after it ended: clamped to its edges.
        {"type": "loss", "category": "critical", "count": 1, "start_ns": t0 - 5_000_000, "end_ns": t0 - 4_000_000},
        {"type": "loss", "category": "critical", "count": 2, "start_ns": t0 + 9_000_000, "end_ns": t0 + 9_000_000},
    ]
    kinds = loss_per_ms(losses, t0, t0 + 5_000_000)
    assert kinds["refused by full rings"] == [1, 10, 10, 10, 2]
    assert kinds["skipped by the kernel"] == [2, 2, 0, 0, 0]
    assert kinds["skipped, upper bound"] == [0, 0, 0, 0, 7]
    assert sum(sum(v) for v in kinds.values()) == 30 + 4 + 7 + 1 + 2


def test_the_summary_says_per_step_what_each_scheduler_kept():
    step = lambda label, rec, complete: {"label": label, "recorded": rec, "complete": complete}
    runs = {
        "default": {"produced": 1000, "dropped": 700, "unnumbered": 20, "loss_pct": 70.6, "runtime_s": 30.0,
                    "steps": [step("read the four secrets", False, None), step("archive them with tar", True, False)]},
        "custos": {"produced": 2000, "dropped": 0, "unnumbered": 0, "loss_pct": 0.0, "runtime_s": 40.0,
                   "steps": [step("read the four secrets", True, True), step("archive them with tar", True, True)]},
    }
    text = summary_text({"setup": {"workers": 16, "files": 4000, "ring_kb": 64}, "schedulers": runs})
    lines = text.splitlines()
    assert any(l.startswith("1 read the four secrets") and "MISSING" in l and l.rstrip().endswith("recorded") for l in lines)
    assert any(l.startswith("the queries say") and "may be incomplete" in l and l.rstrip().endswith("complete") for l in lines)
    assert "70.6 %" in text and "0.0 %" in text
