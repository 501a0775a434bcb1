"""Results files: medians, ratios, and checked writing of results.json."""
import json
import math
import statistics
from pathlib import Path


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


def write_results(path: Path, results: dict, required: list):
    """Writes results.json after checking every required key is there and
    every headline figure is a finite number (a missing figure is an error,
    not a silent zero)."""
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
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def table(rows, headers):
    """A plain-text table for the terminal."""
    cells = [[str(h) for h in headers]] + [[f"{c:.3g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
