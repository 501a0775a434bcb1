"""Run a shell script inside the sched_ext VM through `custos vm run`."""
import shlex
import subprocess
import sys
from pathlib import Path

from .paths import CUSTOS, ROOT

# What the guest says of itself, written into the share before the script
# runs: its kernel and the CPUs it sees.
GUEST_FACTS = "vm-guest.txt"


class VmFailed(RuntimeError):
    pass


def guest_prologue(share: Path) -> str:
    """The shell line a guest script starts with so the host learns the guest's kernel and vCPUs."""
    facts = shlex.quote(str(Path(share).resolve() / GUEST_FACTS))
    return f"printf 'kernel %s\\ncpus %s\\n' \"$(uname -r)\" \"$(nproc)\" > {facts}\n"


def guest_facts(share: Path) -> dict:
    """{"guest_kernel", "guest_cpus"} as the guest wrote them; None each where it did not."""
    facts = {"guest_kernel": None, "guest_cpus": None}
    try:
        lines = (Path(share) / GUEST_FACTS).read_text().splitlines()
    except OSError:
        return facts
    for line in lines:
        key, _, value = line.partition(" ")
        if key == "kernel" and value:
            facts["guest_kernel"] = value
        elif key == "cpus" and value.isdigit():
            facts["guest_cpus"] = int(value)
    return facts


def run_script(script: str, share: Path, timeout_s: int = 3600, cpus: int = 2, mem: str = "2G",
               cpu_model: str | None = None, sitting=None) -> str:
    """Runs `script` with bash as root in the VM; `share` is writable there.

    Progress lines of the runner and the script's stderr go to our stderr as
    they happen, so a long benchmark shows where it is. Returns stdout.
    `sitting` (provenance.Sitting): the boot is recorded there, with the
    guest's kernel and vCPUs, failed or not.
    """
    share.mkdir(parents=True, exist_ok=True)
    (share / GUEST_FACTS).unlink(missing_ok=True)
    path = share / "guest-script.sh"
    path.write_text(guest_prologue(share) + script)
    cmd = [str(CUSTOS), "vm", "run", "--cpus", str(cpus), "--mem", mem, "--timeout", str(timeout_s),
           "--share", str(share.resolve())]
    if cpu_model:
        cmd += ["--cpu-model", cpu_model]
    cmd += ["--", "bash", str(path.resolve())]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if sitting is not None:
        # Without --cpu-model the runner picks (max under emulation, host under KVM).
        sitting.saw_vm(cpus, memory=mem, cpu_model=cpu_model or "the runner's default", **guest_facts(share))
    if proc.returncode != 0:
        raise VmFailed(f"guest script failed with exit code {proc.returncode} (see stderr above)")
    return proc.stdout
