"""The service survives a crash: `kill -9` of `cliffwatch serve` mid-run, with a toxic on, then a restart.

After the restart the run is interrupted, its outcomes so far are readable through the API, its toxic is
gone from the (shared) Toxiproxy, and the schedules are as they were. Real processes, a real SQLite file,
the session's toxiproxy-server, and toxiproxy-python as the independent oracle.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import NotFound

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scenario(proxy: str) -> dict[str, Any]:
    return {
        "name": f"crash-{proxy}",
        "seed": 5,
        "target": {
            "url": "builtin",
            "builtin": {"max_batch": 8, "decode_base_ms": 2, "decode_per_seq_ms": 0.2},
            "via_proxy": proxy,
            "request": {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": 8},
        },
        "proxies": [{"name": proxy}],
        "slo": {"e2e_ms": 2000, "timeout_ms": 4000},
        "phases": [
            {"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 5}},
            {
                "name": "slow", "role": "stress", "duration_s": 120, "arrival": {"process": "constant", "rate": 5},
                "faults": [{"proxy": proxy, "type": "latency", "attributes": {"latency": 100}}],
            },
        ],
    }  # fmt: skip


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.token = token

    def call(self, method: str, path: str, body: object | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")


@contextmanager
def serving(env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "cliffwatch", "serve"], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "listening on" in line, line + (process.stderr.read() if process.stderr else "")
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def wait_for(predicate: Any, *, within_s: float, what: str) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} did not happen within {within_s}s"
        time.sleep(0.1)


def test_a_service_killed_mid_fault_recovers_everything_on_restart(toxiproxy: Any, tmp_path: Path) -> None:
    """kill -9 mid-fault, restart: the run is interrupted, its partial data readable, the toxic removed,
    the schedule intact."""
    port = free_port()
    proxy = f"svc-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "CLIFFWATCH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'cw.db'}",
        "CLIFFWATCH_STATE_DIR": str(tmp_path / "state"),
        "CLIFFWATCH_LISTEN_PORT": str(port),
        "CLIFFWATCH_TOXIPROXY_URL": toxiproxy.url,
        "CLIFFWATCH_LEASE_S": "3",
        "CLIFFWATCH_LOG_FORMAT": "json",
    }
    token = subprocess.run(
        [sys.executable, "-m", "cliffwatch", "token", "create", "--role", "admin", "--name", "crash-test"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    api = Api(f"http://127.0.0.1:{port}", token)
    oracle = Toxiproxy()
    oracle.update_api_consumer(toxiproxy.host, toxiproxy.port)

    def our_toxics() -> list[str]:
        found = oracle.get_proxy(proxy)
        try:
            return [] if found is None else sorted(found.toxics())
        except NotFound:  # the restarted service removed the proxy between the two calls: no toxic left either
            return []

    document = scenario(proxy)
    with serving(env) as first:
        assert api.call("PUT", f"/api/v1/scenarios/{document['name']}", document)[0] in (200, 201)
        nightly = {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "scenario": document["name"]}
        status, schedule = api.call("POST", "/api/v1/schedules", nightly)
        assert status == 201, schedule
        status, run = api.call("POST", "/api/v1/runs", {"scenario": document["name"]})
        assert status == 202, run
        wait_for(our_toxics, within_s=30, what="the toxic going on")
        stored = wait_for(
            lambda: len(api.call("GET", f"/api/v1/runs/{run['id']}/outcomes?limit=200")[1]["outcomes"]) >= 5,
            within_s=15, what="outcomes being stored",
        )  # fmt: skip
        before = len(api.call("GET", f"/api/v1/runs/{run['id']}/outcomes?limit=200")[1]["outcomes"])
        assert stored
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    assert our_toxics(), "the killed service could not have removed its toxic"

    with serving(env):
        finished = wait_for(
            lambda: (r := api.call("GET", f"/api/v1/runs/{run['id']}")[1])["status"] == "interrupted" and r,
            within_s=30, what="the run becoming interrupted",
        )  # fmt: skip
        assert "lease" in finished["reason"]
        wait_for(lambda: not our_toxics(), within_s=20, what="the leftover toxic's removal")
        status, page = api.call("GET", f"/api/v1/runs/{run['id']}/outcomes?limit=200")
        assert status == 200
        assert len(page["outcomes"]) >= before  # nothing stored before the crash was lost
        status, kept = api.call("GET", f"/api/v1/schedules/{schedule['id']}")
        assert status == 200
        assert (kept["cron"], kept["timezone"], kept["enabled"]) == ("0 3 * * *", "Europe/Berlin", True)


def test_sigterm_stops_the_service_gracefully_rolling_back_its_runs(toxiproxy: Any, tmp_path: Path) -> None:
    """SIGTERM mid-fault: the service stops claiming, interrupts its run, removes the toxic itself, records
    the run as interrupted and exits 0 within the grace period — nothing is left for a reconciler."""
    port = free_port()
    proxy = f"term-{uuid.uuid4().hex[:8]}"
    database = tmp_path / "cw.db"
    env = {
        **os.environ,
        "CLIFFWATCH_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
        "CLIFFWATCH_STATE_DIR": str(tmp_path / "state"),
        "CLIFFWATCH_LISTEN_PORT": str(port),
        "CLIFFWATCH_TOXIPROXY_URL": toxiproxy.url,
        "CLIFFWATCH_SHUTDOWN_GRACE_S": "10",
        "CLIFFWATCH_LOG_FORMAT": "json",
    }
    token = subprocess.run(
        [sys.executable, "-m", "cliffwatch", "token", "create", "--role", "operator"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    api = Api(f"http://127.0.0.1:{port}", token)
    oracle = Toxiproxy()
    oracle.update_api_consumer(toxiproxy.host, toxiproxy.port)
    document = scenario(proxy)
    with serving(env) as service:
        status, run = api.call("POST", "/api/v1/runs", {"document": document})  # an inline scenario
        assert status == 202, run
        wait_for(lambda: (found := oracle.get_proxy(proxy)) is not None and found.toxics(), within_s=30,
                 what="the toxic going on")  # fmt: skip
        started = time.monotonic()
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=30) == 0
        assert time.monotonic() - started < 15
    assert oracle.get_proxy(proxy) is None  # the run's proxy, with its toxic, was removed by the run itself
    import sqlite3

    with sqlite3.connect(database) as conn:
        [(state, reason)] = conn.execute("SELECT status, reason FROM runs WHERE id = ?", (run["id"],)).fetchall()
    assert state == "interrupted"
    assert reason
