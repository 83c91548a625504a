"""A real `cliffwatch serve` preparing a run with a 35 MB trace keeps answering: its preparation reads the file in
a worker thread, so /healthz (and the run's lease renewals, and stop-all) are served meanwhile.

Before the preparation stage had its home off the loop, the same 990,000-row Azure CSV held /healthz for ten
seconds and the run fenced itself (its lease could not be renewed).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_service_api import call, served_instance

pytestmark = pytest.mark.slow

ROWS = 990_000


def azure_trace(path: Path) -> Path:
    """An Azure LLM inference trace (AzurePublicDataset's CSV columns) of ``ROWS`` requests, 0.1 s apart."""
    start = datetime(2023, 11, 16, 18, 15, 46, tzinfo=UTC)
    with path.open("w", encoding="utf-8") as out:
        out.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for i in range(ROWS):
            moment = start + timedelta(milliseconds=100 * i)
            out.write(f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond:06d}0,{1000 + i % 8000},{10 + i % 90}\n")
    return path


def test_healthz_answers_within_100_ms_while_a_35_mb_trace_is_prepared(tmp_path: Path) -> None:
    trace = azure_trace(tmp_path / "azure.csv")
    assert trace.stat().st_size > 35_000_000
    document = {
        "name": "replay", "seed": 1,
        "target": {"url": "builtin", "request": {"model": "sim-llm"}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1,
                    "arrival": {"process": "trace", "path": str(trace), "format": "azure"}}],
    }  # fmt: skip
    settings = {"CLIFFWATCH_DATA_DIRS": str(tmp_path), "CLIFFWATCH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/db"}
    with served_instance(settings["CLIFFWATCH_DATABASE_URL"], tmp_path, settings=settings) as (base, admin):
        slowest: list[float] = []
        done = threading.Event()

        def probe() -> None:
            while not done.is_set():
                started = time.monotonic()
                with urllib.request.urlopen(base + "/healthz", timeout=30) as response:
                    assert response.status == 200
                slowest.append(time.monotonic() - started)
                time.sleep(0.02)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        status, run = call(base, admin, "POST", "/api/v1/runs", {"document": document})
        assert status == 202, run
        deadline = time.monotonic() + 180
        while (current := call(base, admin, "GET", f"/api/v1/runs/{run['id']}")[1])["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, "the run did not end in 3 minutes"
            time.sleep(0.2)
        done.set()
        prober.join(30)

    assert current["status"] == "succeeded", current.get("reason")
    notes = current["result"]["notes"]
    assert any(f"replays 10 of the {ROWS:,} requests" in note for note in notes), notes
    assert len(slowest) > 50  # asked all along the preparation (seconds of it)
    assert max(slowest) < 0.1, f"slowest /healthz {max(slowest) * 1000:.0f} ms of {len(slowest)}"
