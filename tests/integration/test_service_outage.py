"""A real `cliffwatch serve` through a real database outage: PostgreSQL stopped mid-run, and a SQLite file
locked by another process, each for less and for more than a lease.

The target is a loopback server of the test's own that records when each request arrived (the system's
monotonic clock, which the test and the service share), so "no request after the lease expired" is read
from the target's side, not from cliffwatch's own account. The lease is counted from the last renewal that
could have succeeded: every renewal asked before the database went down, so the lease ends by the moment
it went down plus its length.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from postgres_kit import PostgresCluster, postgres_cluster

REPO = Path(__file__).resolve().parents[2]
RATE = 20

pytestmark = pytest.mark.slow


@dataclass
class RecordingTarget:
    """An HTTP server on 127.0.0.1 in a thread of its own, answering every request after 10 ms and keeping
    the monotonic time each one arrived."""

    arrivals: list[float] = field(default_factory=list)
    url: str = ""

    @contextlib.contextmanager
    def running(self) -> Iterator[RecordingTarget]:
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        async def answer(request: web.Request) -> web.Response:
            self.arrivals.append(time.monotonic())
            await asyncio.sleep(0.01)
            return web.Response(text="ok")

        async def start() -> web.AppRunner:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", answer)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            self.url = f"http://127.0.0.1:{port}"
            return runner

        def serve() -> None:
            asyncio.set_event_loop(loop)
            runner = loop.run_until_complete(start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        assert ready.wait(10)
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)


def scenario(target_url: str, duration_s: float) -> dict[str, Any]:
    return {
        "name": "outage",
        "seed": 3,
        "target": {"url": target_url, "api": "http", "request": {"method": "GET", "path": "/"}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "phases": [{"name": "steady", "role": "baseline", "duration_s": duration_s,
                    "arrival": {"process": "constant", "rate": RATE}}],
    }  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(base: str, token: str, method: str, path: str, body: object | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        return 0, str(error)


@dataclass
class Service:
    base: str
    token: str
    process: subprocess.Popen[str]
    logs: list[str] = field(default_factory=list)

    def wait_for(
        self, run_id: str, statuses: tuple[str, ...], within_s: float, *, with_result: bool = False
    ) -> dict[str, Any]:
        """The run once in one of ``statuses`` (and, ``with_result``, once its worker recorded its result: the
        reaper of the instance may have marked it interrupted first)."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            status, run = call(self.base, self.token, "GET", f"/api/v1/runs/{run_id}")
            if status == 200 and run["status"] in statuses and (not with_result or run["result"] is not None):
                return dict(run)
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} not {statuses} within {within_s}s (last: {status} {run})")

    def outcomes(self, run_id: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        after = ""
        while True:
            status, page = call(self.base, self.token, "GET", f"/api/v1/runs/{run_id}/outcomes?limit=500{after}")
            assert status == 200, page
            found += page["outcomes"]
            if page["next_after"] is None:
                return found
            after = f"&after={page['next_after']}"


@contextlib.contextmanager
def served(database_url: str, tmp_path: Path, *, lease_s: float, grace_s: float) -> Iterator[Service]:
    port = free_port()
    env = {**os.environ, "CLIFFWATCH_DATABASE_URL": database_url, "CLIFFWATCH_STATE_DIR": str(tmp_path / "state"),
           "CLIFFWATCH_LISTEN_PORT": str(port), "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_LEASE_S": str(lease_s),
           "CLIFFWATCH_LEASE_GRACE_S": str(grace_s)}  # fmt: skip
    token = subprocess.run([sys.executable, "-m", "cliffwatch", "token", "create", "--role", "admin"], cwd=REPO,
                           env=env, capture_output=True, text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "cliffwatch", "serve"], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    service = Service(base=f"http://127.0.0.1:{port}", token=token, process=process)
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: service.logs.extend(iter(process.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not any("listening on" in line for line in service.logs):
            assert time.monotonic() < deadline, service.logs
            assert process.poll() is None, service.logs
            time.sleep(0.05)
        yield service
    finally:
        process.terminate()
        process.wait(timeout=30)
        reader.join(5)
        process.stdout.close()


def start_run(service: Service, target: RecordingTarget, duration_s: float) -> str:
    status, run = call(service.base, service.token, "POST", "/api/v1/runs",
                       {"document": scenario(target.url, duration_s)})  # fmt: skip
    assert status == 202, run
    service.wait_for(run["id"], ("running",), within_s=20)
    return str(run["id"])


def outage_longer_than_the_lease(
    service: Service, target: RecordingTarget, *, lease_s: float, down: Callable[[], None], up: Callable[[], None]
) -> None:
    run_id = start_run(service, target, duration_s=30)
    time.sleep(1.5)
    down()
    went_down = time.monotonic()  # every renewal that could succeed was asked before now
    time.sleep(lease_s + 3)
    up()
    run = service.wait_for(run_id, ("interrupted", "succeeded", "failed", "aborted"), within_s=30, with_result=True)
    assert target.arrivals, "the run sent nothing before the outage"
    late = max(target.arrivals) - (went_down + lease_s)
    assert late <= 1.0, f"the target got a request {late:.2f}s after the lease expired"
    assert run["status"] == "interrupted", run
    assert run["reason"].startswith("fenced: the lease could not be renewed"), run["reason"]
    offered = sum(p["offered"] for p in run["result"]["phases"])
    assert offered == 30 * RATE
    outcomes = service.outcomes(run_id)
    assert len(outcomes) == offered, "outcomes were lost"
    sent = sum(1 for o in outcomes if o["outcome"] != "not_sent")
    assert sent <= len(target.arrivals)


def outage_shorter_than_the_lease(
    service: Service, target: RecordingTarget, *, outage_s: float, down: Callable[[], None], up: Callable[[], None]
) -> None:
    run_id = start_run(service, target, duration_s=10)
    time.sleep(1.5)
    down()
    time.sleep(outage_s)
    up()
    run = service.wait_for(run_id, ("interrupted", "succeeded", "failed", "aborted"), within_s=40)
    assert run["status"] == "succeeded", run
    assert len(service.outcomes(run_id)) == 10 * RATE == sum(p["offered"] for p in run["result"]["phases"])
    assert any("could not store outcomes" in line for line in service.logs), "the outage missed the outcome writes"


@pytest.fixture
def cluster() -> Iterator[PostgresCluster]:
    with postgres_cluster() as made:
        asyncio.run(made.server.create_database("cliffwatch"))
        yield made


def test_postgres_down_for_longer_than_the_lease_fences_the_run_and_loses_no_outcome(
    cluster: PostgresCluster, tmp_path: Path
) -> None:
    url = cluster.server.url_for("cliffwatch")
    with RecordingTarget().running() as target, served(url, tmp_path, lease_s=3, grace_s=2) as service:
        outage_longer_than_the_lease(service, target, lease_s=3, down=cluster.stop, up=cluster.start)


def test_postgres_down_for_less_than_the_lease_loses_nothing(cluster: PostgresCluster, tmp_path: Path) -> None:
    url = cluster.server.url_for("cliffwatch")
    with RecordingTarget().running() as target, served(url, tmp_path, lease_s=9, grace_s=2) as service:
        outage_shorter_than_the_lease(service, target, outage_s=1.5, down=cluster.stop, up=cluster.start)


class SqliteLock:
    """An exclusive lock on a SQLite database held by another connection, as another process would hold it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connection: sqlite3.Connection | None = None

    def take(self) -> None:
        self.connection = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        self.connection.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        assert self.connection is not None
        self.connection.execute("COMMIT")
        self.connection.close()


def test_a_sqlite_lock_longer_than_the_lease_fences_the_run_and_loses_no_outcome(tmp_path: Path) -> None:
    path = tmp_path / "service.db"
    lock = SqliteLock(path)
    with RecordingTarget().running() as target, served(f"sqlite+aiosqlite:///{path}", tmp_path, lease_s=3,
                                                       grace_s=2) as service:  # fmt: skip
        outage_longer_than_the_lease(service, target, lease_s=3, down=lock.take, up=lock.release)


def test_a_sqlite_lock_past_the_busy_timeout_but_shorter_than_the_lease_loses_nothing(tmp_path: Path) -> None:
    """Held 7 s, past the 5 s busy timeout (a flush every second meets it early enough to fail): outcome batches
    fail and are written again once it is gone; a 15 s lease outlasts it wherever it falls."""
    path = tmp_path / "service.db"
    lock = SqliteLock(path)
    with RecordingTarget().running() as target, served(f"sqlite+aiosqlite:///{path}", tmp_path, lease_s=15,
                                                       grace_s=2) as service:  # fmt: skip
        outage_shorter_than_the_lease(service, target, outage_s=7, down=lock.take, up=lock.release)


def test_a_stop_the_locked_database_could_not_record_refuses_new_runs_and_none_fires_on_release(
    tmp_path: Path,
) -> None:
    """The issue's reproduction: stop-all while the SQLite file is locked answers 503 emergency-stop-not-recorded;
    a run asked for once the lock is gone is refused the same way (it was answered 202, stayed queued and ran as
    soon as the stop was released); after the release the target has received nothing and nothing is queued."""
    path = tmp_path / "service.db"
    lock = SqliteLock(path)
    with RecordingTarget().running() as target, served(f"sqlite+aiosqlite:///{path}", tmp_path, lease_s=30,
                                                       grace_s=2) as service:  # fmt: skip
        assert call(service.base, service.token, "GET", "/api/v1/stop-all")[0] == 200  # the token is known here
        lock.take()
        try:
            status, problem = call(service.base, service.token, "POST", "/api/v1/stop-all", {"reason": "pager"})
        finally:
            lock.release()
        assert status == 503, problem
        assert problem["type"].endswith(":emergency-stop-not-recorded")

        status, problem = call(service.base, service.token, "POST", "/api/v1/runs",
                               {"document": scenario(target.url, 2)})  # fmt: skip
        assert status == 503, problem
        assert problem["type"].endswith(":emergency-stop-not-recorded")

        status, _ = call(service.base, service.token, "DELETE", "/api/v1/stop-all")
        assert status in (200, 204)
        time.sleep(2)  # a worker polls for runs every half second or so: long enough for one to have started
        status, page = call(service.base, service.token, "GET", "/api/v1/runs")
        assert status == 200
        assert [run["status"] for run in page["runs"]] == []
        assert target.arrivals == []
