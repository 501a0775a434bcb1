"""Results files: medians, ratios, intervals, repetitions until the
interval is tight, and checked writing of results.json (stamped with where
it was made: provenance.py)."""
import dataclasses
import json
import math
import statistics
from pathlib import Path

from .provenance import combined, provenance


def median(values):
    values = [v for v in values if v is not None]
    if not values:
        raise ValueError("no measurements to take a median of")
    return statistics.median(values)


def geomean(values):
    """The geometric mean of the positive values (None, NaN and ratios at or
    under 0 are left out), refusing none at all. Here, not in the matrix
    module, so that bench/report.py can use it without loading pandas."""
    values = [v for v in values if v is not None and v > 0]
    if not values:
        raise ValueError("no positive values to take a geometric mean of")
    return statistics.geometric_mean(values)


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


# ---------------------------------------------------------------- repetitions

# A fixed seed: the same runs give the same interval at every report.
BOOTSTRAP_SEED = 32
BOOTSTRAP_RESAMPLES = 9999


def _finite(values, what):
    out = []
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{what}: {v!r} is not a finite number")
        out.append(float(v))
    if not out:
        raise ValueError(f"{what}: no measurements")
    return out


def _bootstrap(samples, statistic, level, seed):
    """The percentile bootstrap interval of `statistic` over `samples` (each
    resampled apart). Percentile, not BCa: BCa's jackknife acceleration is
    undefined when the runs tie, which the median of few runs often does."""
    import numpy as np
    from scipy import stats

    ci = stats.bootstrap(samples, statistic, n_resamples=BOOTSTRAP_RESAMPLES, confidence_level=level,
                         method="percentile", vectorized=True, rng=np.random.default_rng(seed)).confidence_interval
    return float(ci.low), float(ci.high)


def median_interval(values, level=0.95, seed=BOOTSTRAP_SEED):
    """The median and the bootstrap interval (low, high) of it; with one
    value the interval is unknown (None, None)."""
    import numpy as np

    values = _finite(values, "median_interval")
    m = statistics.median(values)
    if len(values) < 2:
        return m, None, None
    lo, hi = _bootstrap((values,), lambda x, axis: np.median(x, axis=axis), level, seed)
    return m, lo, hi


def ratio_interval(a_runs, b_runs, level=0.95, seed=BOOTSTRAP_SEED):
    """median(a) / median(b) and the bootstrap interval (low, high) of that
    ratio, a and b resampled apart (runs of two configurations are not
    pairs). b's runs must be positive: a ratio to zero means nothing. With
    fewer than two runs on a side the interval is unknown (None, None)."""
    import numpy as np

    a, b = _finite(a_runs, "ratio_interval, a"), _finite(b_runs, "ratio_interval, b")
    if min(b) <= 0:
        raise ValueError(f"ratio_interval: b's runs must be positive to divide by, got {min(b)!r}")
    r = statistics.median(a) / statistics.median(b)
    if len(a) < 2 or len(b) < 2:
        return r, None, None
    lo, hi = _bootstrap((a, b), lambda x, y, axis: np.median(x, axis=axis) / np.median(y, axis=axis), level, seed)
    return r, lo, hi


def differs(a_runs, b_runs, level=0.95, seed=BOOTSTRAP_SEED) -> bool:
    """Whether a and b differ: True only when the interval of the ratio of
    their medians excludes 1 (an unknown interval does not)."""
    _, lo, hi = ratio_interval(a_runs, b_runs, level, seed)
    return lo is not None and (lo > 1 or hi < 1)


@dataclasses.dataclass
class Repetitions:
    """What repeat_until ran: every configuration's runs and the order of
    all runs, each median with its interval, and whether it converged."""
    runs: dict  # name: [value, ...] in the order run
    order: list  # the names in the order they ran
    medians: dict
    intervals: dict  # name: (low, high), (None, None) with one run
    converged: dict  # name: the interval within ±rel_halfwidth of the median
    rounds: int
    rel_halfwidth: float
    level: float

    def summary(self) -> dict:
        """For a results file: rounds, the target, and per configuration its
        median, interval and convergence."""
        return {"rounds": self.rounds, "rel_halfwidth": self.rel_halfwidth, "level": self.level,
                "how": "round-robin rounds of every configuration until each median's bootstrap interval "
                       "(percentile, fixed seed) is within ±rel_halfwidth of it, or the cap",
                "configurations": {n: {"median": self.medians[n], "interval": list(self.intervals[n]),
                                       "converged": self.converged[n]} for n in self.runs}}


def tight(median, lo, hi, rel_halfwidth) -> bool:
    """The interval (lo, hi) is within ±rel_halfwidth of the median."""
    return lo is not None and max(hi - median, median - lo) <= rel_halfwidth * abs(median)


def repeat_until(configs, min_runs=5, max_runs=20, rel_halfwidth=0.05, level=0.95, seed=BOOTSTRAP_SEED,
                 progress=None) -> Repetitions:
    """Runs the configurations, interleaved, until each one's median is known
    to ±rel_halfwidth (its `level` bootstrap interval within that share of
    it), or max_runs.

    `configs`: named callables, a dict or (name, callable) pairs; each call
    is one run and returns one finite number. A round calls each once, in
    the order given (round robin: a drift of the machine hits them alike,
    never all of A before all of B). After min_runs rounds, and after each
    one from then on, the intervals are checked; the rounds stop when all
    are tight. `progress(name, round, value)` is called after every run."""
    configs = list(configs.items()) if isinstance(configs, dict) else list(configs)
    names = [n for n, _ in configs]
    if not configs or len(set(names)) != len(names) or not all(callable(f) for _, f in configs):
        raise ValueError(f"repeat_until needs configurations with distinct names, each a callable; got {names}")
    if not 2 <= min_runs <= max_runs:
        raise ValueError(f"repeat_until needs 2 <= min_runs <= max_runs (an interval needs two runs); "
                         f"got min_runs={min_runs}, max_runs={max_runs}")
    if not 0 < rel_halfwidth < 1 or not 0 < level < 1:
        raise ValueError(f"rel_halfwidth and level must be between 0 and 1; got {rel_halfwidth}, {level}")
    runs, order = {n: [] for n in names}, []

    def intervals():
        return {n: median_interval(runs[n], level, seed) for n in names}

    rounds = 0
    while rounds < max_runs:
        rounds += 1
        for name, run in configs:
            value = run()
            runs[name].append(_finite([value], f"configuration {name!r}, run {rounds}")[0])
            order.append(name)
            if progress:
                progress(name, rounds, value)
        if rounds >= min_runs and all(tight(*m, rel_halfwidth) for m in intervals().values()):
            break
    final = intervals()
    return Repetitions(runs, order, {n: final[n][0] for n in names}, {n: final[n][1:] for n in names},
                       {n: tight(*final[n], rel_halfwidth) for n in names}, rounds, rel_halfwidth, level)


def write_results(path: Path, results: dict, required: list, made_by: dict = None, sittings: list = None):
    """Writes results.json after checking every required key is there and
    every headline figure is a finite number (a missing figure is an error,
    not a silent zero), stamped with what made it ("made_by"): the record
    of the sitting that made it (`Sitting.made_by()`), or, with `sittings`
    (entries of `sitting_entry()`: its runs came from several), their
    commits combined, the list kept beside. Without either, the record of
    this moment (no binaries, no load over the runs). Returns what it wrote."""
    check_figures(results, required)
    if made_by is not None and sittings is not None:
        raise ValueError("a results file is made by one sitting (made_by) or by several (sittings), not both")
    if sittings is not None:
        results = {**results, "sittings": sittings,
                   "made_by": combined([s["provenance"] for s in sittings], written=provenance())}
    else:
        results = {**results, "made_by": made_by if made_by is not None else provenance()}
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results


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
