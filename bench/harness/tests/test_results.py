import json
import math
import random
import subprocess
from pathlib import Path

import pytest

from custos_bench import plots, results


def test_ratio_and_median():
    assert results.ratio(3.0, 2.0) == 1.5
    assert results.median([3, 1, 2]) == 2
    with pytest.raises(ValueError):
        results.ratio(1.0, 0)
    with pytest.raises(ValueError):
        results.median([])


def test_write_results_refuses_missing_or_non_numeric_figures(tmp_path):
    path = tmp_path / "r.json"
    required = ["a_ratio", "command"]
    results.write_results(path, {"a_ratio": 1.2, "command": "x"}, required)
    written = json.loads(path.read_text())
    made_by = written.pop("made_by")
    assert written == {"a_ratio": 1.2, "command": "x"}
    # The commit that made it: this checkout's HEAD.
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent).stdout.strip()
    assert made_by["commit"] == head and isinstance(made_by["dirty"], bool) and made_by["host_kernel"]
    for bad in ({"command": "x"}, {"a_ratio": "1.2", "command": "x"}, {"a_ratio": math.nan, "command": "x"},
                {"a_ratio": True, "command": "x"}, {"a_ratio": 1.0, "command": ""}):
        with pytest.raises(ValueError):
            results.write_results(path, bad, required)


def test_intervals():
    # t(0.975, 4) = 2.776; mean 3, sd 1.5811 → half-width 1.963.
    m, lo, hi = results.mean_interval([1, 2, 3, 4, 5])
    assert m == 3 and lo == pytest.approx(3 - 1.963, abs=1e-3) and hi == pytest.approx(3 + 1.963, abs=1e-3)
    assert results.mean_interval([7]) == (7, None, None)
    # 0 of 5 runs lost anything: exact interval up to 52 %, not zero.
    lo, hi = results.proportion_interval(0, 5)
    assert lo == 0 and hi == pytest.approx(0.5218, abs=1e-3)
    lo, hi = results.proportion_interval(2, 5)
    assert lo == pytest.approx(0.0527, abs=1e-3) and hi == pytest.approx(0.8534, abs=1e-3)
    for bad in ((1, 0), (6, 5), (-1, 5)):
        with pytest.raises(ValueError):
            results.proportion_interval(*bad)
    with pytest.raises(ValueError):
        results.mean_interval([])


def test_table_lines_up():
    text = results.table([("pipe", 1.0512), ("fork-exec", 12)], ["metric", "ratio"])
    lines = text.splitlines()
    assert lines[0].startswith("metric") and set(lines[1]) <= {"-", " "}
    assert "1.05" in lines[2] and lines[3].startswith("fork-exec")


def test_plots_write_svg_and_png(tmp_path):
    files = plots.ratio_bars({"pipe": 1.1, "fork": 0.9}, "t", tmp_path / "ratios")
    files += plots.grouped_bars({"run": {"default": 12.5, "custos": 0.0}}, "t", "loss %", tmp_path / "loss")
    files += plots.time_series({"default": [(0, 0), (1, 5)]}, "t", "s", "lost", tmp_path / "series")
    files += plots.runs_with_intervals({"1 vCPU": {"default": [70.1, 72.3, 71.0], "custos": [0, 0, 0]},
                                        "2 vCPUs": {"default": [75.0], "custos": [0.1, 0, 2.0]}},
                                       "t", "loss %", tmp_path / "runs", order=["default", "custos"], symlog=True)
    for f in files:
        assert f.stat().st_size > 1000, f
    assert (tmp_path / "ratios.svg").read_text().lstrip().startswith("<?xml")
    assert (tmp_path / "ratios.png").read_bytes()[:4] == b"\x89PNG"


def test_many_series_keep_their_order_and_a_colour_each(tmp_path):
    names = [f"config-{i:02d}" for i in range(12)]
    groups = {"find x16": {n: float(i) for i, n in enumerate(names)}, "exec x16": {names[0]: 1.0}}
    order = list(reversed(names))
    plots.grouped_bars(groups, "t", "loss %", tmp_path / "many", order=order)
    svg = (tmp_path / "many.svg").read_text()
    # The legend lists the series in the given order.
    positions = [svg.index(n) for n in order]
    assert positions == sorted(positions)
    # Twelve series, twelve fill colours (tab20), none reused.
    import re
    fills = set(re.findall(r"fill: (#[0-9a-f]{6})", svg)) - {"#ffffff", "#000000"}
    assert len(fills) >= 12, fills


def test_median_and_ratio_intervals_on_known_data():
    # Every run alike: the interval is the value itself.
    assert results.median_interval([5.0] * 6) == (5.0, 5.0, 5.0)
    assert results.ratio_interval([2.0] * 5, [1.0] * 5) == (2.0, 2.0, 2.0)
    assert results.median_interval([7.0]) == (7.0, None, None)
    rng = random.Random(7)
    a = [100 + rng.gauss(0, 1) for _ in range(12)]
    b = [200 + rng.gauss(0, 1) for _ in range(12)]
    same = [100 + rng.gauss(0, 1) for _ in range(12)]
    r, lo, hi = results.ratio_interval(a, b)
    assert r == pytest.approx(0.5, abs=0.01) and lo < r < hi and hi < 1
    assert results.differs(a, b) and results.differs(b, a)
    # Two samples of one distribution: the interval holds 1, so no difference is claimed.
    r, lo, hi = results.ratio_interval(a, same)
    assert lo < 1 < hi and not results.differs(a, same)
    # One run a side: no interval, no claim.
    assert results.ratio_interval([3.0], [1.0, 1.0]) == (3.0, None, None) and not results.differs([3.0], [1.0, 1.0])
    # The same runs, the same interval (a fixed seed).
    assert results.ratio_interval(a, b) == results.ratio_interval(a, b)
    for bad_a, bad_b, match in (([1.0], [0.0, 1.0], "positive"), ([math.nan], [1.0], "finite"), ([], [1.0], "no measurements")):
        with pytest.raises(ValueError, match=match):
            results.ratio_interval(bad_a, bad_b)


def counting(values):
    """A configuration returning `values` in turn."""
    it = iter(values)
    return lambda: next(it)


def test_repeat_until_interleaves_round_robin_and_stops_when_every_interval_is_tight():
    order = []

    def config(name, values):
        it = iter(values)

        def run():
            order.append(name)
            return next(it)
        return name, run

    # A converges at once; B is noisy for six rounds, then steady.
    b = [100, 140, 60, 130, 70, 100] + [100] * 30
    rep = results.repeat_until([config("A", [50.0] * 40), config("B", b)], min_runs=5, max_runs=20)
    assert order[:6] == ["A", "B", "A", "B", "A", "B"] and order == rep.order
    assert rep.rounds == len(rep.runs["A"]) == len(rep.runs["B"]) and 5 < rep.rounds < 20
    assert rep.converged == {"A": True, "B": True}
    lo, hi = rep.intervals["B"]
    assert max(hi - rep.medians["B"], rep.medians["B"] - lo) <= 0.05 * rep.medians["B"]
    # It stopped at the first round after which both were tight, not later.
    shorter = results.median_interval(b[:rep.rounds - 1])
    assert not results.tight(*shorter, 0.05)
    assert rep.summary()["configurations"]["B"]["converged"] is True


def test_repeat_until_stops_at_min_runs_when_tight_and_at_the_cap_when_never():
    rep = results.repeat_until({"steady": counting([10.0] * 10)}, min_runs=5, max_runs=10)
    assert rep.rounds == 5 and rep.converged == {"steady": True}
    wild = [1.0, 100.0] * 10
    seen = []
    rep = results.repeat_until({"steady": counting([10.0] * 20), "wild": counting(wild)}, min_runs=3, max_runs=8,
                               progress=lambda name, rnd, value: seen.append((name, rnd)))
    assert rep.rounds == 8 and rep.converged == {"steady": True, "wild": False}
    assert seen[:3] == [("steady", 1), ("wild", 1), ("steady", 2)] and len(seen) == 16


def test_repeat_until_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="finite number"):
        results.repeat_until({"broken": lambda: None}, min_runs=2, max_runs=3)
    with pytest.raises(ValueError, match="distinct names"):
        results.repeat_until([("a", lambda: 1.0), ("a", lambda: 1.0)])
    with pytest.raises(ValueError, match="min_runs <= max_runs"):
        results.repeat_until({"a": lambda: 1.0}, min_runs=1, max_runs=3)
    with pytest.raises(ValueError, match="min_runs <= max_runs"):
        results.repeat_until({"a": lambda: 1.0}, min_runs=6, max_runs=5)
