import json
import math
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
