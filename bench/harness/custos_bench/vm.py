"""Run a shell script inside the sched_ext VM through `custos vm run`."""
import subprocess
import sys
from pathlib import Path

from .paths import CUSTOS, ROOT


class VmFailed(RuntimeError):
    pass


def run_script(script: str, share: Path, timeout_s: int = 3600, cpus: int = 2, mem: str = "2G",
               cpu_model: str | None = None) -> str:
    """Runs `script` with bash as root in the VM; `share` is writable there.

    Progress lines of the runner and the script's stderr go to our stderr as
    they happen, so a long benchmark shows where it is. Returns stdout.
    """
    share.mkdir(parents=True, exist_ok=True)
    path = share / "guest-script.sh"
    path.write_text(script)
    cmd = [str(CUSTOS), "vm", "run", "--cpus", str(cpus), "--mem", mem, "--timeout", str(timeout_s),
           "--share", str(share.resolve())]
    if cpu_model:
        cmd += ["--cpu-model", cpu_model]
    cmd += ["--", "bash", str(path.resolve())]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if proc.returncode != 0:
        raise VmFailed(f"guest script failed with exit code {proc.returncode} (see stderr above)")
    return proc.stdout
