"""Results files: medians, ratios, intervals, and checked writing of
results.json (stamped with the commit that made it)."""
import datetime
import json
import math
import statistics
import subprocess
from pathlib import Path

from .paths import ROOT


def median(values):
    values = [v for v in values if v is not None]
    if not values:
        raise ValueError("no measurements to take a median of")
    return statistics.median(values)


def ratio(measured, baseline):
    """measured / baseline, refusing a zero or missing baseline."""
    if baseline is None or baseline == 0:
        raise ValueError(f"baseline {baseline!r} cannot be divided by")
    return measured / baseline


def mean_interval(values, level=0.95):
    """The mean and its Student-t confidence interval (low, high); with one
    value the interval is unknown (None, None), never a zero-width claim."""
    from scipy import stats

    values = [float(v) for v in values]
    if not values:
        raise ValueError("no measurements to take a mean of")
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, None, None
    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - half, m + half


def proportion_interval(k, n, level=0.95):
    """k of n (e.g. runs that lost anything): the exact (Clopper-Pearson)
    interval of the proportion, so 0 of 5 reads "up to 52 %", not "never"."""
    from scipy import stats

    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"{k} of {n} is not a proportion")
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return ci.low, ci.high


def provenance():
    """What made a results file: the commit (and whether the tree had
    uncommitted changes), the time, and the host's kernel."""
    def git(*args):
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None

    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host_kernel": Path("/proc/sys/kernel/osrelease").read_text().strip(),
    }


def write_results(path: Path, results: dict, required: list):
    """Writes results.json after checking every required key is there and
    every headline figure is a finite number (a missing figure is an error,
    not a silent zero). The commit that made it is stamped in ("made_by")."""
    check_figures(results, required)
    results = {**results, "made_by": provenance()}
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def check_figures(results: dict, required: list):
    """Every required key is there, `command` a string, each other a finite number."""
    missing = [k for k in required if k not in results]
    if missing:
        raise ValueError(f"results lack {', '.join(missing)}")
    for k in required:
        v = results[k]
        if k == "command":
            if not isinstance(v, str) or not v:
                raise ValueError("results need the command that reproduces them")
        elif not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{k} must be a finite number, got {v!r}")


def table(rows, headers):
    """A plain-text table for the terminal."""
    cells = [[str(h) for h in headers]] + [[f"{c:.3g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
