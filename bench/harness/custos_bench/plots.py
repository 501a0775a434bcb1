"""Pictures of results, as SVG and PNG side by side."""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, stem: Path):
    stem.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("svg", "png"):
        fig.savefig(stem.with_suffix("." + ext), bbox_inches="tight", dpi=120)
    plt.close(fig)
    return [stem.with_suffix(".svg"), stem.with_suffix(".png")]


def ratio_bars(ratios: dict, title: str, stem: Path, reference: float = 1.0):
    """One bar per metric (measured / baseline), with the baseline drawn at 1."""
    names = list(ratios)
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(names), 3.6))
    bars = ax.bar(names, [ratios[n] for n in names], color="#4c72b0")
    ax.axhline(reference, color="black", linewidth=0.8, linestyle="--")
    ax.bar_label(bars, fmt="%.2f×")
    ax.set_ylabel("ratio to baseline")
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=20)
    return _save(fig, stem)


def grouped_bars(groups: dict, title: str, ylabel: str, stem: Path, order: list = None):
    """groups: {label: {series: value}} — e.g. loss % per scheduler per run.

    order: the series in legend order (default: sorted). With many series the
    figure widens, the legend moves beside the plot and each series keeps a
    colour of its own."""
    labels = list(groups)
    present = {s for g in groups.values() for s in g}
    series = [s for s in order if s in present] if order else sorted(present)
    many = len(series) > 6
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(1.5 + (0.35 * len(series) + 0.6 if many else 1.4) * len(labels), 3.6))
    colors = plt.get_cmap("tab20" if len(series) > 10 else "tab10").colors
    for i, s in enumerate(series):
        xs = [j + i * width for j in range(len(labels))]
        bars = ax.bar(xs, [groups[l].get(s, 0) for l in labels], width, label=s, color=colors[i % len(colors)])
        ax.bar_label(bars, fmt="%.3g", fontsize=6 if many else None, rotation=90 if many else 0, padding=2)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(labels))], labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.margins(y=0.15)
    if many:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    else:
        ax.legend()
    return _save(fig, stem)


def time_series(series: dict, title: str, xlabel: str, ylabel: str, stem: Path):
    """series: {name: [(x, y), ...]} — e.g. cumulative loss over time."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    return _save(fig, stem)
