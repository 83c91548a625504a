"""The peers benchmark runs cliffwatch (the lean transport, its default) and the asyncio floor end to end and
reports what the server saw (it checks the bench, not speed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("go") is None, reason="the arrivals server is built with Go")
def test_cliffwatch_and_the_asyncio_floor_send_a_low_rate_whole(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    completed = subprocess.run(
        [sys.executable, str(BENCH / "peers" / "compare.py"), "--loads", "plain", "--tools",
         "cliffwatch,asyncio-floor", "--rates-plain", "50", "--duration", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr + completed.stdout
    document = json.loads(out.read_text())
    passes = {p["tool"]: p for p in document["passes"]}
    assert set(passes) == {"cliffwatch", "asyncio-floor"}
    for tool, measured in passes.items():
        assert measured["server"]["received"] == 100, (tool, measured["server"])  # 50 req/s for 2 s, all arrived
        assert measured["errors"] == 0, tool
        assert measured["p99_ms"] is not None
        assert measured["p99_ms"] >= 20, tool  # the server answers after 20 ms: no tool can see less
    assert document["summary"]["plain"]["asyncio-floor"]["highest_held"] == 50
