"""Stamps a results file that a shell bench (or a Rust binary it runs) wrote
with where it was made, as write_results does for the Python benches:

    stamp() { PYTHONPATH=bench/harness python3 -m custos_bench.stamp "$@"; }
    state=$(mktemp); trap 'rm -f "$state"' EXIT
    stamp begin "$state" --binary target/release/custos      # before the runs
    ...the runs, which write bench/x/results.json...
    stamp end "$state" bench/x/results.json --vm-cpus 2 --guest-kernel "$release"

`begin` keeps the sitting's start in STATE (the commit, the binaries'
sha256, the host's load and CPU use); `end` adds `made_by` to each file.
A file not written since `begin`, or already stamped, is refused: stamping
old figures with a new commit is the error this exists to prevent.
"""
import argparse
import json
import sys
from pathlib import Path

from .paths import ROOT
from .provenance import Sitting, Start, json_object


class StampError(Exception):
    pass


def begin(state: Path, binaries):
    state.write_text(Sitting(binaries).start.to_json())


def end(state: Path, files, vm=None):
    """Adds made_by to each of `files`; `vm`: {"vcpus": n, "boots": n, ...} of
    the VM the runs booted, or None."""
    try:
        start = Start.from_json(state.read_text())
    except (OSError, ValueError, TypeError) as e:
        raise StampError(f"{state} holds no sitting's start (run `stamp begin {state}` before the runs): {e}") from None
    docs = {}
    for f in files:
        f = Path(f)
        if not f.is_file():
            raise StampError(f"{f} is missing: the runs wrote no results file there")
        # A second's slack: file times come from a coarser clock than time.time().
        if f.stat().st_mtime < start.time - 1:
            raise StampError(f"{f} was last written before this sitting began: not stamping older figures")
        doc = json_object(f, "an object a made_by can join", StampError)
        if "made_by" in doc:
            raise StampError(f"{f} is stamped already (made_by)")
        docs[f] = doc
    sitting = Sitting([ROOT / b for b in start.binaries], start=start)
    if vm:
        vm = dict(vm)
        boots = vm.pop("boots", 1)
        for _ in range(boots):
            sitting.saw_vm(**vm)
    made_by = sitting.made_by()
    for f, doc in docs.items():
        f.write_text(json.dumps({**doc, "made_by": made_by}, indent=2) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m custos_bench.stamp", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    b = sub.add_parser("begin", help="before the runs: keep the sitting's start in STATE")
    b.add_argument("state", type=Path)
    b.add_argument("--binary", action="append", default=[], type=Path,
                   help="a binary the runs measure (repeat for each); it must exist")
    e = sub.add_parser("end", help="after the runs: add made_by to each results file")
    e.add_argument("state", type=Path)
    e.add_argument("files", nargs="+", type=Path)
    e.add_argument("--vm-cpus", type=int, help="the runs were in a VM with this many vCPUs")
    e.add_argument("--vm-boots", type=int, default=1, help="how many times it booted")
    e.add_argument("--vm-memory", help="its memory, as given to `custos vm run --mem`")
    e.add_argument("--guest-kernel", help="the guest kernel's release")
    args = ap.parse_args(argv)
    try:
        if args.step == "begin":
            begin(args.state, args.binary)
        else:
            if args.vm_cpus is None and (args.guest_kernel or args.vm_memory):
                raise StampError("--guest-kernel and --vm-memory describe a VM: give its --vm-cpus too")
            vm = None if args.vm_cpus is None else {
                "vcpus": args.vm_cpus, "boots": args.vm_boots, "memory": args.vm_memory,
                "guest_kernel": args.guest_kernel}
            end(args.state, args.files, vm)
    except (StampError, FileNotFoundError, ValueError) as e:
        print(f"custos_bench.stamp: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
