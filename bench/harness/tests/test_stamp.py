"""A shell bench's results file stamped with where it ran (python -m
custos_bench.stamp), as bench/vm/run.sh, bench/fleet/run.sh and
bench/store/run.sh do; and the files it refuses to stamp."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HEAD = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()

BENCH = """set -euo pipefail
stamp() { PYTHONPATH="$HARNESS" "$PYTHON" -m custos_bench.stamp "$@"; }
state=$(mktemp)
trap 'rm -f "$state"' EXIT
stamp begin "$state" --binary "$BINARY"
echo '{"boot_to_command_median_s": 21.5, "command": "bench/x/run.sh"}' > "$RESULTS"
stamp end "$state" "$RESULTS" --vm-cpus 2 --vm-memory 2G --vm-boots 3 --guest-kernel 6.18.1-guest
"""


def run_bench(tmp_path, script=BENCH, binary=None):
    binary = binary or tmp_path / "custos"
    env = dict(os.environ, HARNESS=str(ROOT / "bench" / "harness"), PYTHON=sys.executable, BINARY=str(binary),
               RESULTS=str(tmp_path / "results.json"))
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)


def stamp(*args):
    return subprocess.run([sys.executable, "-m", "custos_bench.stamp", *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "bench" / "harness")))


def test_a_shell_benchs_file_is_stamped_with_where_it_ran(tmp_path):
    (tmp_path / "custos").write_bytes(b"\x7fELF")
    proc = run_bench(tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    # The bench's figures as it wrote them, made_by added.
    assert doc["boot_to_command_median_s"] == 21.5 and doc["command"] == "bench/x/run.sh"
    m = doc["made_by"]
    assert m["commit"] == HEAD and isinstance(m["dirty"], bool) and m["started"] <= m["date"]
    assert m["binaries"] == {str(tmp_path / "custos"): hashlib.sha256(b"\x7fELF").hexdigest()}
    assert m["vms"] == [{"vcpus": 2, "memory": "2G", "guest_kernel": "6.18.1-guest", "boots": 3}]
    assert isinstance(m["host_load"]["load1_start"], float) and isinstance(m["host_load"]["other_processes"], list)
    assert isinstance(m["cpu_model"], (str, type(None))) and isinstance(m["host_cpus"], int)


def test_a_missing_binary_stops_the_bench_before_its_runs(tmp_path):
    proc = run_bench(tmp_path)
    assert proc.returncode == 1 and not (tmp_path / "results.json").exists()
    assert f"custos_bench.stamp: {tmp_path / 'custos'} is missing" in proc.stderr


def test_old_stamped_or_broken_files_are_refused(tmp_path):
    state, binary, f = tmp_path / "state", tmp_path / "custos", tmp_path / "results.json"
    binary.write_bytes(b"\x7fELF")
    f.write_text('{"a": 1}')
    os.utime(f, (1e9, 1e9))  # written long before the sitting
    assert stamp("begin", state, "--binary", binary).returncode == 0
    proc = stamp("end", state, f)
    assert proc.returncode == 1 and "was last written before this sitting began: not stamping older figures" in proc.stderr
    for text, why in (('{"a": 1, "made_by": {}}', "stamped already"), ("[1]", "holds a JSON list"),
                      ("{", "is not JSON")):
        f.write_text(text)
        proc = stamp("end", state, f)
        assert proc.returncode == 1 and why in proc.stderr, proc.stderr
    assert "is missing: the runs wrote no results file" in stamp("end", state, tmp_path / "none.json").stderr
    f.write_text('{"a": 1}')
    assert "holds no sitting's start" in stamp("end", tmp_path / "no-state", f).stderr
    assert "give its --vm-cpus too" in stamp("end", state, f, "--guest-kernel", "6.18").stderr
    # Nothing was stamped by the refusals.
    assert json.loads(f.read_text()) == {"a": 1}


@pytest.mark.parametrize("script", ["bench/vm/run.sh", "bench/fleet/run.sh", "bench/store/run.sh"])
def test_the_shell_benches_stamp_what_they_write(script):
    text = (ROOT / script).read_text()
    assert subprocess.run(["bash", "-n", str(ROOT / script)]).returncode == 0
    assert "stamp begin" in text and "stamp end" in text
    assert text.index("stamp begin") < text.index("stamp end")
