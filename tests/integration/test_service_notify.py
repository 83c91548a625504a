"""A service run tells its scenario's webhooks how it ended, after its end is stored, and every delivery (one to
a signing receiver, one to a receiver answering 500, tried three times) is kept and answered by
GET /api/v1/runs/{run_id}/notifications, checked against the OpenAPI document."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_service_api import SMALL, call, served_instance

from api_examples_kit import schema_problems

pytestmark = pytest.mark.slow
KEY = "service-run-key"


@contextmanager
def receiver() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    """A loopback webhook receiver answering 500 on /broken and 204 elsewhere: its origin, and every (path,
    headers, body) it was sent."""
    received: list[tuple[str, dict[str, str], bytes]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.append((self.path, dict(self.headers.items()), body))
            self.send_response(500 if self.path == "/broken" else 204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()


def finished(base: str, token: str, run_id: str, *, within_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while (run := call(base, token, "GET", f"/api/v1/runs/{run_id}")[1])["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, run
        time.sleep(0.3)
    return run


def test_a_service_runs_deliveries_are_made_after_its_end_and_answered_by_the_api(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"
    with receiver() as (origin, received), served_instance(database, tmp_path, settings={"TARGET_RUN_KEY": KEY}) as (
        base, admin):  # fmt: skip
        scenario = {**SMALL, "name": "told", "notify": [
            {"webhook": f"{origin}/hooks/secret-path", "on": ["finished", "failed"],
             "secret": {"secret": "env:TARGET_RUN_KEY"}},
            {"webhook": f"{origin}/broken", "format": "slack", "on": ["finished"]},
        ]}  # fmt: skip
        status, run = call(base, admin, "POST", "/api/v1/runs", {"document": scenario})
        assert status == 202, run
        done = finished(base, admin, run["id"])
        assert done["status"] == "succeeded"
        deadline = time.monotonic() + 30  # told after the end is stored: the deliveries follow it
        while len(found := call(base, admin, "GET", f"/api/v1/runs/{run['id']}/notifications")[1]["notifications"]) < 2:
            assert time.monotonic() < deadline, found
            time.sleep(0.3)
        status, answer = call(base, admin, "GET", f"/api/v1/runs/{run['id']}/notifications")
        assert status == 200
        schema = {"$ref": "#/components/schemas/RunNotifications"}
        assert schema_problems(answer, schema) == []
        good, broken = answer["notifications"]
        assert (good["url"], good["event"], good["format"], good["ok"], good["attempts"], good["status"]) == (
            f"{origin}/…", "finished", "generic", True, 1, 204)  # fmt: skip
        assert (broken["format"], broken["ok"], broken["attempts"], broken["status"]) == ("slack", False, 3, 500)
        assert [path for path, _, _ in received].count("/broken") == 3  # a 5xx is tried again, three times in all
        ((headers, body),) = [(h, b) for path, h, b in received if path == "/hooks/secret-path"]
        expected = hmac.new(KEY.encode(), headers["X-Cliffwatch-Timestamp"].encode() + b"." + body, hashlib.sha256)
        assert headers["X-Cliffwatch-Signature"] == f"sha256={expected.hexdigest()}"
        notice = json.loads(body)
        assert (notice["run_id"], notice["status"], notice["score"]) == (run["id"], "succeeded", done["score"])
        assert notice["passed"] == done["passed"]

        status, missing = call(base, admin, "GET", "/api/v1/runs/no-such-run/notifications")
        assert status == 404, missing
        status, _ = call(base, admin, "PUT", "/api/v1/scenarios/told", scenario)
        assert status in (200, 201)
        status, kept = call(base, admin, "GET", "/api/v1/scenarios/told")
        assert status == 200, kept
        assert "secret-path" not in json.dumps(kept)  # a webhook's path is its secret: kept apart, put back to run
        status, again = call(base, admin, "POST", "/api/v1/runs", {"scenario": "told"})
        assert status == 202, again
        finished(base, admin, again["id"])
        deadline = time.monotonic() + 30
        while [path for path, _, _ in received].count("/hooks/secret-path") < 2:  # the stored run told the real URL
            assert time.monotonic() < deadline, received
            time.sleep(0.3)
