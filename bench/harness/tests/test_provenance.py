"""Where a run ran: the record every results file carries (made_by), read
from a fake /proc and sysfs; the binaries refused when missing; sittings
combined into one made_by that names every commit."""
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from custos_bench import provenance, results, vm
from custos_bench.provenance import Sitting, Start

HEAD = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                      cwd=Path(__file__).parent).stdout.strip()


def stat_line(pid, comm, ppid, ticks, start=100):
    # Fields after "(comm)": state ppid ... utime (14th field) stime (15th) ... starttime (22nd).
    rest = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 6 + [str(start)] + ["0"] * 10
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


@pytest.fixture
def host(tmp_path):
    proc, sys_cpu = tmp_path / "proc", tmp_path / "cpu"
    proc.mkdir()
    (proc / "cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
                                  "microcode\t: 0xa0011d1\n\nprocessor\t: 1\nmodel name\t: another\n")
    (proc / "loadavg").write_text("1.50 0.80 0.40 2/300 4242\n")
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "osrelease").write_text("6.18.0-test\n")
    vuln = sys_cpu / "vulnerabilities"
    vuln.mkdir(parents=True)
    (vuln / "spec_rstack_overflow").write_text("Mitigation: Safe RET\n")
    (vuln / "meltdown").write_text("Not affected\n")
    binary = tmp_path / "custos"
    binary.write_bytes(b"\x7fELF a binary")
    return type("Host", (), {"proc": proc, "sys_cpu": sys_cpu, "binary": binary, "path": tmp_path})


def process(proc, pid, comm, ppid, ticks):
    d = proc / str(pid)
    d.mkdir(exist_ok=True)
    (d / "stat").write_text(stat_line(pid, comm, ppid, ticks))


def test_the_record_has_every_field_typed(host):
    process(host.proc, 9001, "qemu-system-x86", 1, 1000)
    sitting = Sitting([host.binary], proc=host.proc, sys_cpu=host.sys_cpu)
    process(host.proc, 9001, "qemu-system-x86", 1, 1000 + 50 * os.sysconf("SC_CLK_TCK"))  # 50 s of CPU meanwhile
    (host.proc / "loadavg").write_text("2.25 1.00 0.50 3/300 4243\n")
    sitting.saw_vm(2, memory="2G", guest_kernel="6.18.1-guest", guest_cpus=2)
    sitting.saw_vm(2, memory="2G", guest_kernel="6.18.1-guest", guest_cpus=2)
    sitting.saw_vm(1, memory="2G", guest_kernel="6.18.1-guest", guest_cpus=1)
    m = sitting.made_by()
    assert m["commit"] == HEAD and isinstance(m["dirty"], bool)
    assert isinstance(m["date"], str) and isinstance(m["started"], str) and m["started"] <= m["date"]
    assert m["binaries"] == {str(host.binary): hashlib.sha256(b"\x7fELF a binary").hexdigest()}
    assert m["host_kernel"] == "6.18.0-test"
    assert m["cpu_model"] == "AMD EPYC 7B13" and m["microcode"] == "0xa0011d1"
    assert m["mitigations"] == {"meltdown": "Not affected", "spec_rstack_overflow": "Mitigation: Safe RET"}
    assert isinstance(m["host_cpus"], int) and m["host_cpus"] >= 1
    # Two boots alike are one entry counted twice.
    assert m["vms"] == [{"vcpus": 2, "memory": "2G", "guest_kernel": "6.18.1-guest", "guest_cpus": 2, "boots": 2},
                        {"vcpus": 1, "memory": "2G", "guest_kernel": "6.18.1-guest", "guest_cpus": 1, "boots": 1}]
    load = m["host_load"]
    assert load["load1_start"] == 1.5 and load["load1_end"] == 2.25 and isinstance(load["seconds"], float)
    [busy] = load["other_processes"]
    assert busy["pid"] == 9001 and busy["comm"] == "qemu-system-x86" and busy["cpu_s"] == 50.0
    assert "commit_at_end" not in m and "binaries_at_end" not in m
    # As JSON, unchanged.
    assert json.loads(json.dumps(m)) == m


def test_a_binary_missing_is_refused_not_skipped(host):
    with pytest.raises(FileNotFoundError, match=r"nothing-here is missing: a bench records the sha256 of every "
                                                r"binary it measures.*make build"):
        Sitting([host.binary, host.path / "nothing-here"], proc=host.proc, sys_cpu=host.sys_cpu)
    sitting = Sitting([host.binary], proc=host.proc, sys_cpu=host.sys_cpu)
    host.binary.unlink()
    with pytest.raises(FileNotFoundError, match="custos is missing"):
        sitting.made_by()


def test_a_binary_rebuilt_during_the_sitting_is_said(host):
    sitting = Sitting([host.binary], proc=host.proc, sys_cpu=host.sys_cpu)
    host.binary.write_bytes(b"\x7fELF rebuilt")
    m = sitting.made_by()
    # The record names the binary the sitting began with, and the other one.
    assert m["binaries"][str(host.binary)] == hashlib.sha256(b"\x7fELF a binary").hexdigest()
    assert m["binaries_at_end"] == {str(host.binary): hashlib.sha256(b"\x7fELF rebuilt").hexdigest()}


def test_a_host_without_the_vulnerabilities_directory_says_unknown(host, tmp_path):
    m = provenance.provenance(proc=host.proc, sys_cpu=tmp_path / "no-sysfs")
    assert m["mitigations"] is None and m["binaries"] == {} and m["vms"] == []
    # Without a start: one load reading, nothing known of the run's span.
    assert m["host_load"] == {"load1_start": None, "load1_end": 1.5, "seconds": None, "other_processes": None}


def test_busy_others_leaves_out_this_process_and_its_children_and_counts_new_ones_whole():
    hz = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    start = {"50:1": ["yes", 1, 0], f"{me}:2": ["python", 1, 0], "70:3": ["idle", 1, 5 * hz]}
    end = {"50:1": ["yes", 1, 8 * hz], f"{me}:2": ["python", 1, 9 * hz], "60:4": ["qemu", me, 9 * hz],
           "70:3": ["idle", 1, 5 * hz], "80:5": ["cc1", 1, 2 * hz], "50:9": ["reused", 1, 1 * hz]}
    rows = provenance.busy_others(start, end, 10.0, me=me)
    # The pid 50 reused (another start time) is a new process; the idle one used nothing.
    assert [(r["comm"], r["cpu_s"], r["cpu_pct"]) for r in rows] == [("yes", 8.0, 80.0), ("cc1", 2.0, 20.0),
                                                                    ("reused", 1.0, 10.0)]


def test_a_sittings_start_survives_a_file():
    start = Start("abc", False, "2026-11-30T10:00:00+00:00", 1.0, {"target/release/custos": "00"}, 0.5,
                  {"1:1": ["init", 0, 3]})
    assert Start.from_json(start.to_json()) == start


def test_vm_boots_need_a_vcpu_count():
    s = Sitting()
    for bad in (0, "2", None, True):
        with pytest.raises(ValueError, match="vCPUs must be a positive integer"):
            s.saw_vm(bad)


def test_the_guests_facts_are_read_from_the_share(tmp_path):
    assert vm.guest_facts(tmp_path) == {"guest_kernel": None, "guest_cpus": None}
    (tmp_path / vm.GUEST_FACTS).write_text("kernel 6.18.1-guest\ncpus 4\n")
    assert vm.guest_facts(tmp_path) == {"guest_kernel": "6.18.1-guest", "guest_cpus": 4}
    # The prologue writes what guest_facts reads (run here by the host's shell).
    subprocess.run(["bash", "-c", vm.guest_prologue(tmp_path)], check=True)
    facts = vm.guest_facts(tmp_path)
    assert facts["guest_kernel"] == os.uname().release and facts["guest_cpus"] >= 1


def record(commit, dirty=False, date="2026-11-30T10:00:00+00:00", cpu="AMD EPYC"):
    return {"commit": commit, "dirty": dirty, "date": date, "cpu_model": cpu, "host_load": {"load1_end": 1.0}}


def test_combined_names_every_commit_and_says_several_where_they_differ():
    one = provenance.combined([record("a" * 40), record("a" * 40, date="2026-12-01T00:00:00+00:00")])
    assert one["commit"] == "a" * 40 and one["commits"] == ["a" * 40] and one["dirty"] is False
    assert one["date"] == "2026-12-01T00:00:00+00:00" and one["cpu_model"] == "AMD EPYC" and one["sittings"] == 2
    two = provenance.combined([record("a" * 40), record("b" * 40, dirty=True, cpu="Intel Xeon")],
                              written={"commit": "c" * 40, "dirty": False, "date": "x", "cpu_model": "y"})
    assert two["commit"] == "several" and two["commits"] == ["a" * 40, "b" * 40] and two["dirty"] is True
    assert two["cpu_model"] == "several" and two["written"] == {"commit": "c" * 40, "dirty": False, "date": "x"}
    # Runs made before sittings were recorded: their commit is unknown, and said so.
    old = provenance.combined([None, record("a" * 40)])
    assert old["commit"] == "several" and old["commits"] == [None, "a" * 40] and old["dirty"] is None
    assert provenance.combined([None])["commit"] is None
    with pytest.raises(ValueError, match="no sittings"):
        provenance.combined([])


def test_a_part_made_again_moves_to_the_new_sitting():
    first = [provenance.sitting_entry(record("a" * 40), ["workloads", "superproducer", "series"])]
    after = provenance.replace_made(first, ["series"], record("b" * 40))
    assert [(s["provenance"]["commit"][0], s["made"]) for s in after] == [("a", ["workloads", "superproducer"]),
                                                                          ("b", ["series"])]
    # Everything made again: the older sitting is gone.
    again = provenance.replace_made(after, ["workloads", "superproducer"], record("c" * 40))
    assert [s["provenance"]["commit"][0] for s in again] == ["b", "c"]


def test_write_results_with_sittings_names_their_commits(tmp_path):
    path = tmp_path / "r.json"
    sittings = [provenance.sitting_entry(record("a" * 40), ["cell-1"]),
                provenance.sitting_entry(record("b" * 40), ["cell-2"])]
    results.write_results(path, {"command": "x"}, ["command"], sittings=sittings)
    doc = json.loads(path.read_text())
    assert doc["sittings"] == sittings
    assert doc["made_by"]["commit"] == "several" and doc["made_by"]["commits"] == ["a" * 40, "b" * 40]
    # What wrote the file is recorded apart from what made its runs.
    assert doc["made_by"]["written"]["commit"] == HEAD
    with pytest.raises(ValueError, match="not both"):
        results.write_results(path, {"command": "x"}, ["command"], made_by=record("a" * 40), sittings=sittings)


def test_a_record_kept_beside_the_runs_is_read_back_and_a_missing_one_is_unknown(tmp_path):
    assert provenance.kept(tmp_path) is None
    provenance.keep(tmp_path, record("a" * 40))
    assert provenance.kept(tmp_path) == record("a" * 40)
    (tmp_path / provenance.KEPT).write_text("[1]")
    with pytest.raises(ValueError, match="not a sitting's record"):
        provenance.kept(tmp_path)
    (tmp_path / provenance.KEPT).write_text("{")
    with pytest.raises(ValueError, match="is not JSON"):
        provenance.kept(tmp_path)
