import json
import math

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
    assert json.loads(path.read_text()) == {"a_ratio": 1.2, "command": "x"}
    for bad in ({"command": "x"}, {"a_ratio": "1.2", "command": "x"}, {"a_ratio": math.nan, "command": "x"},
                {"a_ratio": True, "command": "x"}, {"a_ratio": 1.0, "command": ""}):
        with pytest.raises(ValueError):
            results.write_results(path, bad, required)


def test_table_lines_up():
    text = results.table([("pipe", 1.0512), ("fork-exec", 12)], ["metric", "ratio"])
    lines = text.splitlines()
    assert lines[0].startswith("metric") and set(lines[1]) <= {"-", " "}
    assert "1.05" in lines[2] and lines[3].startswith("fork-exec")


def test_plots_write_svg_and_png(tmp_path):
    files = plots.ratio_bars({"pipe": 1.1, "fork": 0.9}, "t", tmp_path / "ratios")
    files += plots.grouped_bars({"run": {"default": 12.5, "custos": 0.0}}, "t", "loss %", tmp_path / "loss")
    files += plots.time_series({"default": [(0, 0), (1, 5)]}, "t", "s", "lost", tmp_path / "series")
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
