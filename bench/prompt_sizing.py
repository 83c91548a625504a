"""How close do prompts come to the sizes asked, by a real llama.cpp server's own count? The figures of
docs/scenarios.md ("Prompt sizes").

Builds ``llama-server`` once (tests/engines/build-llama-server.sh: the llama.cpp sources the llama-cpp-python
sdist vendors, into ~/.cache/cliffwatch/engines), serves a tiny random-weight model around Phi-3's real
tokenizer and chat template (tests/engines/tiny_gguf.py) with one slot of each ``--contexts`` size, and runs
``cliffwatch run`` (this checkout, or ``--src`` for another one's ``src/``: the before of a change) for each
sizing: ``tokenizer: server`` and the default calibration, each at ``prompt_tokens: 64`` and at
``{dist: uniform, min: 40, max: M}`` (M: 600, or 60 % of a small slot). Prints, per case, the server-counted
error of the result's ``prompt_tokens.error`` and whether the run flagged ``workload_mismatch``.

    .venv/bin/python bench/prompt_sizing.py
    .venv/bin/python bench/prompt_sizing.py --src /tmp/base/src --contexts 512    # an older checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from engines.llama_server import running_llama_server  # noqa: E402


def scenario(url: str, *, server: bool, prompt_tokens: str) -> str:
    tokenizer = ", tokenizer: server" if server else ""
    request = f"{{model: tiny, prompt_tokens: {prompt_tokens}, max_tokens: 2, include_usage: true{tokenizer}}}"
    phase = "{name: only, role: baseline, duration_s: 5, arrival: {process: constant, rate: 8}}"
    return (f"name: prompt-sizing\nseed: 5\nslo: {{e2e_ms: 5000, timeout_ms: 60000}}\n"
            f"target:\n  url: {url}\n  api: openai-chat\n  request: {request}\nphases:\n  - {phase}\n")  # fmt: skip


def run_case(url: str, work: Path, src: Path | None, *, server: bool, prompt_tokens: str) -> dict[str, Any]:
    spec, out = work / "scenario.yaml", work / "result.json"
    out.unlink(missing_ok=True)
    spec.write_text(scenario(url, server=server, prompt_tokens=prompt_tokens))
    env = {**os.environ, **({"PYTHONPATH": str(src)} if src else {})}
    subprocess.run([sys.executable, "-m", "cliffwatch", "run", str(spec), "--json", str(out)], env=env,
                   capture_output=True, check=False)  # fmt: skip
    if not out.exists():
        return {"error": "no result"}
    document = json.loads(out.read_text())
    sizing = document["prompt_tokens"]
    return {"source": sizing["source"], "error": sizing["error"], "mismatch": document.get("workload_mismatch"),
            "detail": sizing.get("detail")}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 512], help="one slot's context, each")
    parser.add_argument("--src", type=Path, help="run another checkout's src/ (the before of a change)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for context in args.contexts:
            largest = min(600, int(context * 0.6))
            with running_llama_server(work, context=context) as url:
                for server in (True, False):
                    for prompt_tokens in ("64", f"{{dist: uniform, min: 40, max: {largest}}}"):
                        found = run_case(url, work, args.src, server=server, prompt_tokens=prompt_tokens)
                        error = found.get("error") or {}
                        how = "tokenizer: server" if server else "calibration"
                        print(f"slot {context:5}  {how:17}  {prompt_tokens:34}  source {found.get('source')!s:10}  "
                              f"mean {error.get('mean_pct')}%  mean abs {error.get('mean_abs_pct')}%  "
                              f"p99 abs {error.get('p99_abs_pct')}%  mismatch {found.get('mismatch')}  "
                              f"{(found.get('detail') or '')[:90]}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
