"""The peers, installed by the benchmark itself into ``bench/.build/peers`` (never into the project's venv).

Each is pinned: Vegeta with ``go install`` (a static binary), GuideLLM and AIPerf with pip, each into its
own virtual environment because their dependency trees do not agree (GuideLLM pulls PyTorch with its CUDA
wheels: about 6 GB on disk; AIPerf about 1.2 GB). An environment is reused while its marker names the same
pin, and rebuilt when the pin changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PEERS = Path(__file__).resolve().parent.parent / ".build" / "peers"
VEGETA = "github.com/tsenart/vegeta/v12@v12.13.0"
PYTHON_PEERS = {"guidellm": "guidellm==0.8.1", "aiperf": "aiperf==0.13.0"}


def vegeta() -> Path:
    binary = PEERS / "vegeta"
    marker = PEERS / "vegeta.pin"
    if binary.exists() and marker.exists() and marker.read_text() == VEGETA:
        return binary
    if shutil.which("go") is None:
        raise SystemExit("Vegeta is installed with `go install`: Go was not found on PATH (https://go.dev/dl/)")
    PEERS.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "install", VEGETA], env={**os.environ, "GOBIN": str(PEERS)}, check=True)
    marker.write_text(VEGETA)
    return binary


def python_peer(name: str) -> Path:
    """The console script ``name`` from its own pinned virtual environment, installed on first use."""
    pin = PYTHON_PEERS[name]
    venv = PEERS / f"{name}-venv"
    marker = venv / "cliffwatch-bench.pin"
    script = venv / "bin" / name
    if script.exists() and marker.exists() and marker.read_text() == pin:
        return script
    print(f"installing {pin} into {venv} (once; GuideLLM's PyTorch takes a few minutes)", file=sys.stderr)
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, pin], check=True)
    marker.write_text(pin)
    return script


def tool_version(script: Path) -> str:
    """The installed version as pip records it (the pin, unless someone changed the environment)."""
    python = script.parent / "python"
    name = script.name
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
