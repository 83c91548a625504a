"""Every endpoint of a real `cliffwatch serve` process, once, through real HTTP — on SQLite and PostgreSQL.

The in-process API tests check each endpoint's every case; this one checks that the served process wires
them all to the real store, worker and schedule driver. A small run executes for real (built-in target).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

SMALL = {
    "name": "small",
    "seed": 2,
    "target": {"url": "builtin", "builtin": {"max_batch": 8, "decode_base_ms": 2, "decode_per_seq_ms": 0.2},
               "request": {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": 8}},
    "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
    "phases": [
        {"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 5}},
        {"name": "push", "role": "stress", "duration_s": 1, "arrival": {"process": "constant", "rate": 10}},
        {"name": "after", "role": "recovery", "duration_s": 1, "arrival": {"process": "constant", "rate": 5}},
    ],
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(base: str, token: str | None, method: str, path: str, body: object | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            raw = response.read()
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")
    return response.status, (json.loads(raw) if raw and "json" in kind else raw.decode())


@contextlib.contextmanager
def served_instance(
    database_url: str, tmp_path: Path, *, settings: dict[str, str] | None = None
) -> Iterator[tuple[str, str]]:
    """A `cliffwatch serve` process on ``database_url`` and a free port, listening: its base URL and an admin
    token; stopped at the end of the block. ``settings``: more of its environment."""
    port = free_port()
    env = {**os.environ, "CLIFFWATCH_DATABASE_URL": database_url, "CLIFFWATCH_STATE_DIR": str(tmp_path / "state"),
           "CLIFFWATCH_LISTEN_PORT": str(port), "CLIFFWATCH_LOG_FORMAT": "json", **(settings or {})}  # fmt: skip
    admin = subprocess.run([sys.executable, "-m", "cliffwatch", "token", "create", "--role", "admin"], cwd=REPO,
                           env=env, capture_output=True, text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "cliffwatch", "serve"], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    drains: list[threading.Thread] = []
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        assert "listening on" in process.stdout.readline()
        # Its logs are read from here on: a full pipe would block the service on its next log line.
        drains = [threading.Thread(target=stream.read, daemon=True) for stream in (process.stdout, process.stderr)]
        for drain in drains:
            drain.start()
        yield base, admin
    finally:
        process.terminate()
        process.wait(timeout=30)
        for drain in drains:
            drain.join(5)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def walk_every_endpoint(database_url: str, tmp_path: Path) -> None:
    with served_instance(database_url, tmp_path) as (base, admin):
        assert call(base, None, "GET", "/healthz")[0] == 200
        assert call(base, None, "GET", "/readyz")[0] == 200
        assert call(base, None, "GET", "/api/v1/runs")[0] == 401

        status, created = call(base, admin, "POST", "/api/v1/tokens", {"name": "ci", "role": "operator"})
        assert status == 201
        operator = created["token"]
        assert call(base, admin, "GET", "/api/v1/tokens")[0] == 200

        assert call(base, admin, "PUT", "/api/v1/scenarios/small", SMALL)[0] in (200, 201)
        assert call(base, operator, "GET", "/api/v1/scenarios")[0] == 200
        assert call(base, operator, "GET", "/api/v1/scenarios/small")[0] == 200
        assert call(base, operator, "POST", "/api/v1/scenarios/validate", SMALL)[1]["valid"] is True

        status, run = call(base, operator, "POST", "/api/v1/runs", {"scenario": "small"})
        assert status == 202
        deadline = time.monotonic() + 60
        while (current := call(base, operator, "GET", f"/api/v1/runs/{run['id']}")[1])["status"] != "succeeded":
            assert current["status"] in ("queued", "running"), current
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert current["score"] is not None
        assert [p["name"] for p in current["result"]["phases"]] == ["calm", "push", "after"]
        assert call(base, operator, "GET", "/api/v1/runs?scenario=small")[1]["runs"][0]["id"] == run["id"]
        assert call(base, operator, "GET", f"/api/v1/runs/{run['id']}/timeseries")[0] == 200
        outcomes = call(base, operator, "GET", f"/api/v1/runs/{run['id']}/outcomes?limit=500")[1]["outcomes"]
        assert len(outcomes) == sum(p["offered"] for p in current["result"]["phases"])
        assert call(base, operator, "POST", f"/api/v1/runs/{run['id']}/abort")[1]["status"] == "succeeded"
        assert call(base, operator, "GET", "/api/v1/trends?scenario=small")[0] == 200

        nightly = {"name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "scenario": "small"}
        status, schedule = call(base, admin, "POST", "/api/v1/schedules", nightly)
        assert status == 201
        sid = schedule["id"]
        assert call(base, operator, "GET", "/api/v1/schedules")[0] == 200
        assert call(base, operator, "GET", f"/api/v1/schedules/{sid}")[0] == 200
        assert call(base, admin, "PUT", f"/api/v1/schedules/{sid}", {**nightly, "cron": "0 4 * * *"})[0] == 200
        assert call(base, admin, "POST", f"/api/v1/schedules/{sid}/pause")[1]["enabled"] is False
        assert call(base, admin, "POST", f"/api/v1/schedules/{sid}/resume")[1]["enabled"] is True
        assert len(call(base, operator, "GET", f"/api/v1/schedules/{sid}/next?count=3")[1]["fire_times"]) == 3
        assert call(base, admin, "DELETE", f"/api/v1/schedules/{sid}")[0] == 204

        assert call(base, admin, "POST", "/api/v1/stop-all", {"reason": "drill"})[0] == 200
        assert call(base, operator, "GET", "/api/v1/stop-all")[1]["active"] is True
        assert call(base, operator, "POST", "/api/v1/runs", {"scenario": "small"})[0] == 503
        assert call(base, admin, "DELETE", "/api/v1/stop-all")[0] in (200, 204)

        status, metrics = call(base, operator, "GET", "/metrics")
        assert status == 200
        assert 'cliffwatch_runs{status="succeeded"} 1' in metrics
        assert call(base, operator, "GET", "/api/v1/openapi.json")[1]["openapi"].startswith("3.1")
        assert call(base, admin, "DELETE", f"/api/v1/tokens/{created['id']}")[0] == 204
        assert call(base, operator, "GET", "/api/v1/runs")[0] == 401  # revoked


def test_every_endpoint_of_a_served_instance_on_sqlite(tmp_path: Path) -> None:
    """The whole API against `cliffwatch serve` on SQLite, a real run included."""
    walk_every_endpoint(f"sqlite+aiosqlite:///{tmp_path / 'cw.db'}", tmp_path)


def test_every_endpoint_of_a_served_instance_on_postgresql(postgres: Any, tmp_path: Path) -> None:
    """The same walk against `cliffwatch serve` on PostgreSQL."""
    url = asyncio.run(postgres.create_database(f"api_{uuid.uuid4().hex[:8]}"))
    walk_every_endpoint(url, tmp_path)


@pytest.mark.heavy  # worker processes (or a Ray cluster of two nodes) beside a service and its target
@pytest.mark.parametrize("on", ["processes", "ray"])
def test_the_services_worker_sends_from_worker_processes_and_stop_all_reaches_them(
    tmp_path: Path, on: str, request: pytest.FixtureRequest
) -> None:
    """A run with ``client.workers`` through the service: its worker coordinates two processes (local ones, or
    Ray actors on a local cluster of two nodes, ``CLIFFWATCH_RAY_ADDRESS``) that send the plan between them; an
    emergency stop during a long one reaches both, and neither outlives the run."""
    settings = {"CLIFFWATCH_RAY_ADDRESS": request.getfixturevalue("ray_cluster").address} if on == "ray" else {}
    database = f"sqlite+aiosqlite:///{tmp_path / 'cw.db'}"
    with served_instance(database, tmp_path, settings=settings) as (base, admin):
        put = call(base, admin, "PUT", "/api/v1/scenarios/split", {**SMALL, "name": "split", "client": {"workers": 2}})
        assert put[0] in (200, 201), put
        current = _finished(base, admin, call(base, admin, "POST", "/api/v1/runs", {"scenario": "split"})[1]["id"])
        assert current["status"] == "succeeded"
        workers = current["result"]["generator"]["workers"]
        assert len(workers) == 2
        offered = sum(p["offered"] for p in current["result"]["phases"])
        assert sum(w["finished"] for w in workers) == offered > 0
        assert all(w["failure"] is None for w in workers)
        assert len({w["node"] for w in workers}) == (2 if on == "ray" else 1)

        long_run = {**SMALL, "name": "split-long", "client": {"workers": 2},
                    "phases": [{**SMALL["phases"][0], "duration_s": 60}]}  # fmt: skip
        assert call(base, admin, "PUT", "/api/v1/scenarios/split-long", long_run)[0] in (200, 201)
        run = call(base, admin, "POST", "/api/v1/runs", {"scenario": "split-long"})[1]
        deadline = time.monotonic() + 60
        while call(base, admin, "GET", f"/api/v1/runs/{run['id']}")[1]["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(8.0 if on == "ray" else 2.0)  # an actor starts Ray's worker, then ours: the load is under way
        assert call(base, admin, "POST", "/api/v1/stop-all", {"reason": "drill"})[0] == 200
        stopped = _finished(base, admin, run["id"])
        assert stopped["status"] != "succeeded"
        assert stopped["result"]["duration_s"] < 30
        for worker in stopped["result"]["generator"]["workers"]:
            assert worker["planned"] > 0, worker
            assert _gone_soon(worker["pid"]), f"worker {worker['index'] + 1} outlived its run"
        assert call(base, admin, "DELETE", "/api/v1/stop-all")[0] in (200, 204)


def _gone_soon(pid: int, within_s: float = 10.0) -> bool:
    """The process has exited (a Ray actor's within a few seconds of being killed by the run's end)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _finished(base: str, token: str, run_id: str) -> Any:
    deadline = time.monotonic() + 60
    while (current := call(base, token, "GET", f"/api/v1/runs/{run_id}")[1])["status"] in ("queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return current
