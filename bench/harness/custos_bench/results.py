"""Results files: medians, ratios, intervals, and checked writing of
results.json (stamped with where it was made: provenance.py)."""
import json
import math
import statistics
from pathlib import Path

from .provenance import Sitting, combined, provenance, sitting_entry  # noqa: F401 (the benches' one import)


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


def write_results(path: Path, results: dict, required: list, made_by: dict = None, sittings: list = None):
    """Writes results.json after checking every required key is there and
    every headline figure is a finite number (a missing figure is an error,
    not a silent zero), stamped with what made it ("made_by"): the record
    of the sitting that made it (`Sitting.made_by()`), or, with `sittings`
    (entries of `sitting_entry()`: its runs came from several), their
    commits combined, the list kept beside. Without either, the record of
    this moment (no binaries, no load over the runs)."""
    check_figures(results, required)
    if made_by is not None and sittings is not None:
        raise ValueError("a results file is made by one sitting (made_by) or by several (sittings), not both")
    if sittings is not None:
        results = {**results, "sittings": sittings,
                   "made_by": combined([s["provenance"] for s in sittings], written=provenance())}
    else:
        results = {**results, "made_by": made_by if made_by is not None else provenance()}
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
