"""The evaluation's workloads: one definition, read by the host (what to
run, what each means) and by the guest (how to run it). Standard library
only: the guest runs it with the system's python3.

Every workload has a fixed amount of work. Most report their runtime as the
wall time of that work; the two whose tools measure a rate over a fixed
time (wrk, openssl speed) report `work_s`, the time their fixed amount
of work takes at the measured rate, so that every runtime ratio means the
same thing: how much longer the same work took.

Sizes were chosen so that one run takes a few seconds in the one-vCPU,
emulated VM (bench/sched/README.md says why one vCPU), which keeps the full
matrix inside about three hours.
"""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # a priori class, for the subsetting picture (seed 003 Fig. 3b)
    size: str  # the fixed amount of work, for the README
    # Size parameters; `quick` overrides them for --quick runs.
    params: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)
    # The tool runs for a fixed time and reports a rate (work_s is derived):
    # its wall time says nothing about the consumer-bound limit.
    rate_based: bool = False

    def sized(self, quick: bool) -> dict:
        return {**self.params, **(self.quick if quick else {})}


WORKLOADS = [
    Workload("find16", "super producer", "16 workers × `find TREE -type f -exec cat {} +` over a tree of 1 000 files",
             {"workers": 16, "files": 1000}, quick={"files": 500}),
    Workload("find64", "super producer", "64 workers × `find -exec cat` over a tree of 250 files",
             {"workers": 64, "files": 250}, quick={"files": 125}),
    Workload("postmark", "file server", "postmark: 2 000 files of 0.5–10 kB, 12 000 transactions",
             {"files": 2000, "transactions": 12000}),
    Workload("nginx", "http server", "nginx 1.22 serving a 4 KiB file, wrk -t1 -c4 for 3 s; work = 3 000 requests at the measured rate",
             {"seconds": 3, "requests": 3000}, quick={"seconds": 2}, rate_based=True),
    Workload("redis", "kv server", "redis-server 7.0, redis-benchmark -n 12 000 SET and GET, 8 clients",
             {"requests": 12000}),
    # Not `7z b`: it calibrates its own duration (about 25 s a pass in the VM)
    # and reports a rating, so its work is not fixed; compressing a fixed input is.
    Workload("7z", "cpu", "`7z a -mx=1 -mmt1` of /usr/include/linux (about 900 files, 6.6 MB)",
             {"dir": "linux"}),
    Workload("openssl", "cpu", "`openssl speed -seconds 2 -bytes 8192 sha256`; work = 64 MB at the measured rate",
             {"seconds": 2, "megabytes": 64}, rate_based=True),
    Workload("tar", "archive", "tar create then extract of /usr/include/{linux,x86_64-linux-gnu,c++} (22 MB here)",
             {"dirs": "linux x86_64-linux-gnu c++"}),
    Workload("compile", "build", "`make -j2` of 8 of libbpf 1.7's C files (from the libbpf-sys crate) at -O0",
             {"jobs": 2, "objects": "features ringbuf btf_relocate elf zip hashmap nlattr strset"}),
    Workload("stress-ng", "mixed", "stress-ng: 300 fork ops and 20 000 pipe ops",
             {"fork_ops": 300, "pipe_ops": 20000}),
    Workload("pipe", "micro", "`custos-workload pipe-pingpong -n 20000`: round trips of one byte",
             {"n": 20000}, quick={"n": 5000}),
    Workload("unix", "micro", "`custos-workload unix-pingpong -n 20000`: round trips over an AF_UNIX socketpair",
             {"n": 20000}, quick={"n": 5000}),
    Workload("forkexec", "micro", "`custos-workload fork-exec -n 100`: fork, exec /bin/true, wait",
             {"n": 100}, quick={"n": 50}),
]

BY_NAME = {w.name: w for w in WORKLOADS}

# The provenance collectors compared. `none` is the baseline.
COLLECTORS = ["none", "custos", "bpftrace", "auditd"]

# The schedulers compared. scx_* are the sched_ext community's schedulers,
# built from crates.io; custos-learned is the learned policy (seed 000 §4.2).
SCHEDULERS = ["default", "custos", "custos-learned", "scx_lavd", "scx_bpfland", "scx_rusty"]
SCX_PEERS = ["scx_lavd", "scx_bpfland", "scx_rusty"]
# --quick (CI, ≤ 10 minutes): the kernel's scheduler and Custos's static one;
# the learned policy's runs are tests/attack.rs's, the peers take 25 minutes to build.
QUICK_SCHEDULERS = ["default", "custos"]
SCX_VERSION = "1.1.4"


def run_key(workload: str, collector: str, scheduler: str, rep: int) -> str:
    """The identity of one run in the plan and in the results (resumption)."""
    return f"{workload}/{collector}/{scheduler}/{rep}"
