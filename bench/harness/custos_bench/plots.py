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


def subset_picture(names: list, z, chosen: list, title: str, stem: Path):
    """Seed 003 Figures 3 and 4 side by side: the workloads' standardized
    features projected on their first two principal components (the chosen
    representatives ringed), and the Ward dendrogram of the clustering."""
    import numpy as np
    from scipy.cluster.hierarchy import dendrogram, linkage

    z = np.asarray(z, dtype=float)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    centred = z - z.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    xy = centred @ vt[:2].T if vt.shape[0] >= 2 else np.c_[centred @ vt[:1].T, np.zeros(len(z))]
    for i, n in enumerate(names):
        picked = n in chosen
        ax1.scatter(xy[i, 0], xy[i, 1], s=90 if picked else 30, facecolors="none" if picked else "#4c72b0",
                    edgecolors="#c44e52" if picked else "#4c72b0", linewidths=2 if picked else 1)
        ax1.annotate(n, xy[i], textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax1.set_xlabel("principal component 1")
    ax1.set_ylabel("principal component 2")
    ax1.set_title(f"{title}: workloads (ringed: the subset)")
    dendrogram(linkage(z, method="ward"), labels=names, ax=ax2, leaf_rotation=60)
    ax2.set_ylabel("Ward distance")
    ax2.set_title("clustering")
    return _save(fig, stem)


def runs_with_intervals(groups: dict, title: str, ylabel: str, stem: Path, order: list = None,
                        symlog: bool = False):
    """groups: {label: {series: [value per run]}}: every run as a dot, the
    mean as a bar with its 95 % t-interval, so a reader sees the spread a
    single bar would hide. symlog: a scale that shows 0 and 70 % together."""
    from .results import mean_interval

    labels = list(groups)
    present = {s for g in groups.values() for s in g}
    series = [s for s in order if s in present] if order else sorted(present)
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(1.8 + 1.3 * len(labels) * max(1, len(series)) / 2, 3.8))
    colors = plt.get_cmap("tab10").colors
    for i, s in enumerate(series):
        for j, label in enumerate(labels):
            values = groups[label].get(s)
            if not values:
                continue
            x = j + i * width
            m, lo, hi = mean_interval(values)
            ax.bar(x, m, width * 0.9, color=colors[i % len(colors)], alpha=0.35,
                   label=s if j == 0 or s not in ax.get_legend_handles_labels()[1] else None)
            if lo is not None:
                ax.errorbar(x, m, yerr=[[m - max(lo, 0)], [hi - m]], color="black", capsize=3, linewidth=1)
            jitter = [x + width * 0.25 * ((k % 5) - 2) / 2 for k in range(len(values))]
            ax.scatter(jitter, values, s=10, color=colors[i % len(colors)], zorder=3)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(labels))], labels,
                  rotation=20 if len(labels) > 3 else 0)
    if symlog:
        ax.set_yscale("symlog", linthresh=0.01)
        top = max((v for g in groups.values() for vs in g.values() for v in vs), default=1)
        ax.set_ylim(0, max(1.0, top) * 3)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    return _save(fig, stem)


def time_panels(panels: list, spans: list, title: str, xlabel: str, stem: Path):
    """panels: [(ylabel, {name: [(x, y), ...]}), ...] stacked on one time
    axis; spans: [(x0, x1), ...] shaded on every panel (e.g. floods)."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.4 + 1.6 * len(panels)), sharex=True, squeeze=False)
    for ax, (ylabel, series) in zip(axes[:, 0], panels):
        for x0, x1 in spans:
            ax.axvspan(x0, x1, color="#f4a261", alpha=0.25, linewidth=0)
        for name, points in series.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], label=name, marker="." if len(points) < 60 else None)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="upper left")
    axes[-1, 0].set_xlabel(xlabel)
    axes[0, 0].set_title(title)
    return _save(fig, stem)
