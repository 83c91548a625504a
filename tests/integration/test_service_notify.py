"""A service run tells its scenario's webhooks how it ended, after its end is stored, and every delivery (one to
a signing receiver, one to a receiver answering 500, tried three times) is kept and answered by
GET /api/v1/runs/{run_id}/notifications, checked against the OpenAPI document."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import pytest
from test_service_api import SMALL, call, served_instance
from webhook_kit import webhook_receiver

from api_examples_kit import schema_problems

pytestmark = pytest.mark.slow
KEY = "service-run-key"


def finished(base: str, token: str, run_id: str, *, within_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while (run := call(base, token, "GET", f"/api/v1/runs/{run_id}")[1])["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, run
        time.sleep(0.3)
    return run


def test_a_service_runs_deliveries_are_made_after_its_end_and_answered_by_the_api(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'service.db'}"
    settings = {"TARGET_RUN_KEY": KEY}
    with webhook_receiver() as (origin, received), served_instance(database, tmp_path, settings=settings) as (
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
        assert [call.path for call in received].count("/broken") == 3  # a 5xx is tried again, three times in all
        ((headers, body),) = [(c.headers, c.body) for c in received if c.path == "/hooks/secret-path"]
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
        while [call.path for call in received].count("/hooks/secret-path") < 2:  # the stored run told the real URL
            assert time.monotonic() < deadline, received
            time.sleep(0.3)
