"""A short real sweep through a served `cliffwatch serve` process, on SQLite and PostgreSQL: queued through
the API, executed by the worker against the built-in target, the steps so far shown (provisional) while it
runs, its document, usable capacity and capacity trend read back through the API."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_service_api import SMALL, call, served_instance

pytestmark = pytest.mark.slow

SWEEP = {"start": 4, "stop": 40, "coarse_steps": 2, "max_steps": 4, "trials": 1, "step_s": 1, "warmup_s": 0,
         "cooldown_s": 0, "arrival": "constant", "variants": ["as-written", "none"]}  # fmt: skip


def sweep_through_a_served_instance(database_url: str, tmp_path: Path) -> None:
    with served_instance(database_url, tmp_path) as (base, admin):
        assert call(base, admin, "PUT", "/api/v1/scenarios/small", SMALL)[0] in (200, 201)
        status, queued = call(base, admin, "POST", "/api/v1/sweeps", {"scenario": "small", "sweep": SWEEP})
        assert status == 202, queued
        assert (queued["kind"], queued["status"]) == ("sweep", "queued")
        deadline = time.monotonic() + 90
        provisional: list[dict[str, Any]] = []  # the documents of the steps so far, seen while it ran
        while (run := call(base, admin, "GET", f"/api/v1/runs/{queued['id']}")[1])["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, run
            if run["result"] is not None:
                provisional.append(run["result"])
            time.sleep(0.3)
        assert run["status"] == "succeeded", run["reason"]
        assert provisional, "no step was shown before the sweep ended"
        assert all((d["provisional"], d["status"], d["finished_at"]) == (True, "running", None) for d in provisional)
        counts = [d["steps_so_far"] for d in provisional]
        assert counts == sorted(counts)
        assert counts[0] >= 1
        document: dict[str, Any] = run["result"]
        assert (document["kind"], document["status"]) == ("sweep", "succeeded")
        assert "provisional" not in document
        assert sum(len(v["result"]["steps"]) for v in document["variants"]) >= counts[-1]
        assert [v["variant"] for v in document["variants"]] == ["as-written", "none"]
        first = document["variants"][0]["result"]
        assert first["steps"], "the sweep measured nothing"
        assert run["usable_rps"] == first["usable_rps"]
        assert run["score"] is None
        assert [r["id"] for r in call(base, admin, "GET", "/api/v1/runs?kind=sweep")[1]["runs"]] == [queued["id"]]
        assert call(base, admin, "GET", "/api/v1/runs?kind=run")[1]["runs"] == []
        series = call(base, admin, "GET", "/api/v1/trends/capacity?scenario=small")[1]["series"]
        assert sorted(s["variant"] for s in series) == ["as-written", "none"]
        assert all(len(s["points"]) == 1 for s in series)


def test_a_real_sweep_through_a_served_instance_on_sqlite(tmp_path: Path) -> None:
    sweep_through_a_served_instance(f"sqlite+aiosqlite:///{tmp_path / 'cw.db'}", tmp_path)


def test_a_real_sweep_through_a_served_instance_on_postgresql(postgres: Any, tmp_path: Path) -> None:
    url = asyncio.run(postgres.create_database(f"sweep_{uuid.uuid4().hex[:8]}"))
    sweep_through_a_served_instance(url, tmp_path)
