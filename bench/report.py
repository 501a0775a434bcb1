#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""One source for every figure: the figures and tables the documents quote
from results files, made from those files, and each results file's status
(which commit made it; whether the code it measures changed since).

    python bench/report.py            # rewrite every marked section and figure in place
    python bench/report.py --check    # exit 1 where a document differs from what would be written
    python bench/report.py --strict   # --check, and exit 1 while any results file is not current

The registry (benchmarks, results files, measured code, sections, figures)
is bench/harness/custos_bench/registry.py; the machinery is report.py beside it.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "harness"))
from custos_bench import report, results  # noqa: E402
from custos_bench.paths import ROOT  # noqa: E402
from custos_bench.registry import PROJECT  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; fail where a document differs")
    ap.add_argument("--strict", action="store_true", help="as --check, and fail on any results file not current")
    ap.add_argument("--quiet", "-q", action="store_true", help="no status table")
    args = ap.parse_args(argv)

    ctx = report.Context(ROOT, PROJECT)
    try:
        if args.check or args.strict:
            failures = report.check(ctx)
            if args.strict:
                failures += report.strict(ctx)
        else:
            for path in report.rewrite(ctx):
                print(f"bench/report.py: rewrote {path}", file=sys.stderr)
            failures = []
        if not args.quiet:
            print(results.table(report.status_rows(ctx), ["results file", "measured at", "status", "why"]))
    except report.ReportError as e:
        print(f"bench/report.py: {e}", file=sys.stderr)
        return 1
    for f in failures:
        print(f"bench/report.py: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
