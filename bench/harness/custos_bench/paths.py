"""Where the checkout's binaries and tools are."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CUSTOS = ROOT / "target" / "release" / "custos"
WORKLOAD = ROOT / "target" / "release" / "custos-workload"
TOOLS_BIN = ROOT / ".tools" / "cargo" / "bin"


def bpf_clang():
    """The BPF compiler the workspace builds with (.cargo/config.toml's
    [env]), for a cargo that reads no project config: `cargo install` of a
    crates.io package."""
    with open(ROOT / ".cargo" / "config.toml", "rb") as f:
        return tomllib.load(f)["env"]["BPF_CLANG"]
