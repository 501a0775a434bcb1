"""Where the checkout's binaries and tools are."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CUSTOS = ROOT / "target" / "release" / "custos"
WORKLOAD = ROOT / "target" / "release" / "custos-workload"
TOOLS_BIN = ROOT / ".tools" / "cargo" / "bin"
