"""Game days through a served `cliffwatch serve` process, on SQLite and PostgreSQL: a two-experiment suite against
the built-in target, each experiment an ordinary run of the service, both hypotheses judged, the combined result
and the report read back through the API, and signed webhooks checked by a loopback receiver; the emergency stop
ending a suite with no experiment started after it."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_service_api import SMALL, call, served_instance
from webhook_kit import webhook_receiver

pytestmark = pytest.mark.slow
KEY = "service-gameday-key"
SETTINGS = {"TARGET_GAMEDAY_KEY": KEY}


def ended(base: str, token: str, gameday_id: str, *, within_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while (current := call(base, token, "GET", f"/api/v1/gamedays/{gameday_id}")[1])["status"] == "running":
        assert time.monotonic() < deadline, current
        time.sleep(0.3)
    return current


def two_experiments(database_url: str, tmp_path: Path) -> None:
    hopeless = {**SMALL, "name": "hopeless", "slo": {"e2e_ms": 1, "timeout_ms": 2000}}  # an SLO nothing can meet
    with (
        webhook_receiver() as (origin, received),
        served_instance(database_url, tmp_path, settings=SETTINGS) as (base, admin),
    ):
        assert call(base, admin, "PUT", "/api/v1/scenarios/small", SMALL)[0] in (200, 201)
        suite = {
            "name": "service-gameday",
            "experiments": [
                {"scenario": "small", "expect": {"no_capped": True}},
                {"scenario": hopeless, "expect": {"score_at_least": 90}, "pause_before_s": 1},
            ],
            "notify": [{"webhook": f"{origin}/hooks/T000/secret-path", "secret": {"secret": "env:TARGET_GAMEDAY_KEY"}}],
        }
        status, started = call(base, admin, "POST", "/api/v1/gamedays", suite)
        assert status == 202, started
        assert started["status"] == "running"
        assert [e["state"] for e in started["experiments"]] == ["pending", "pending"]
        done = ended(base, admin, started["id"])
        assert (done["status"], done["verdict"]) == ("finished", "broken"), done
        assert done["summary"] == "service-gameday: broken (1 held, 1 broken)"
        first, second = done["experiments"]
        assert (first["state"], second["state"]) == ("held", "broken")
        assert second["broken_because"][0].startswith("score ")
        combined = done["result"]
        assert combined["kind"] == "gameday"
        assert [e["name"] for e in combined["experiments"]] == ["small", "hopeless"]
        for experiment in (first, second):  # each an ordinary run of the service, stored with its result
            run = call(base, admin, "GET", f"/api/v1/runs/{experiment['run_id']}")[1]
            assert (run["status"], run["trigger"], run["triggered_by"]) == ("succeeded", "api", done["triggered_by"])
        assert [e["result"]["scenario"]["name"] for e in combined["experiments"]] == ["small", "hopeless"]
        assert call(base, admin, "GET", "/api/v1/gamedays")[1]["gamedays"][0]["id"] == started["id"]
        status, page = call(base, admin, "GET", f"/api/v1/gamedays/{started['id']}/report")
        assert status == 200
        assert 'id="gameday-summary"' in page
        assert page.count('class="experiment-report"') == 2

        deadline = time.monotonic() + 30  # told once the end is recorded: the deliveries follow it
        while len(told := call(base, admin, "GET", f"/api/v1/gamedays/{started['id']}/notifications")[1][
                "notifications"]) < 2:  # fmt: skip
            assert time.monotonic() < deadline, told
            time.sleep(0.3)
        assert sorted(json.loads(told_one.body)["event"] for told_one in received) == ["finished", "hypothesis_broken"]
        ended_at = datetime.fromisoformat(done["finished_at"]).timestamp()
        # the verdict was recorded before any webhook heard of it
        assert all(told_one.at >= ended_at for told_one in received)
        for told_one in received:
            headers, body = told_one.headers, told_one.body
            stamp = headers["X-Cliffwatch-Timestamp"]
            expected = hmac.new(KEY.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
            assert headers["X-Cliffwatch-Signature"] == f"sha256={expected}"
            assert json.loads(body)["name"] == "service-gameday"
        shown = {(n["url"], n["event"], n["ok"], n["status"]) for n in told}
        assert shown == {(f"{origin}/…", "finished", True, 204), (f"{origin}/…", "hypothesis_broken", True, 204)}
        again = call(base, admin, "GET", f"/api/v1/gamedays/{started['id']}")[1]
        assert [n["event"] for n in again["notifications"]] == [n["event"] for n in told]
        assert "secret-path" not in json.dumps(again)  # the suite kept and shown: its webhook cut to its host

        # a suite whose experiment would be refused as a run is refused whole, naming the field
        bad = {
            "name": "bad",
            "experiments": [{"scenario": "small"}, {"scenario": {**SMALL, "name": "bad-slo", "slo": {"e2e_ms": -1}}}],
        }
        status, problem = call(base, admin, "POST", "/api/v1/gamedays", bad)
        assert status == 422, problem
        assert any(p["path"].startswith("experiments[1].scenario.slo") for p in problem["problems"]), problem


def stopped_by_stop_all(database_url: str, tmp_path: Path) -> None:
    long = {**SMALL, "name": "long", "phases": [{**SMALL["phases"][0], "duration_s": 60}]}
    with served_instance(database_url, tmp_path) as (base, admin):
        suite = {
            "name": "interrupted-day",
            "experiments": [{"scenario": long}, {"scenario": {**SMALL, "name": "next"}}],
        }
        status, started = call(base, admin, "POST", "/api/v1/gamedays", suite)
        assert status == 202, started
        deadline = time.monotonic() + 60
        while True:
            current = call(base, admin, "GET", f"/api/v1/gamedays/{started['id']}")[1]
            run_id = current["experiments"][0]["run_id"]
            if run_id is not None and call(base, admin, "GET", f"/api/v1/runs/{run_id}")[1]["status"] == "running":
                break
            assert time.monotonic() < deadline, current
            time.sleep(0.2)
        time.sleep(1.0)  # its load under way
        assert call(base, admin, "POST", "/api/v1/stop-all", {"reason": "drill"})[0] == 200
        done = ended(base, admin, started["id"], within_s=30)
        assert (done["status"], done["verdict"]) == ("finished", "stopped"), done
        assert "emergency stop: drill" in (done["reason"] or "")
        first, second = done["experiments"]
        assert first["state"] == "stopped"  # its run was aborted: what it showed is no verdict either way
        assert (second["state"], second["run_id"]) == ("not run", None)
        assert call(base, admin, "GET", f"/api/v1/runs/{run_id}")[1]["status"] == "aborted"
        assert [r["id"] for r in call(base, admin, "GET", "/api/v1/runs")[1]["runs"]] == [run_id]  # none after it
        assert call(base, admin, "POST", "/api/v1/gamedays", suite)[0] == 503  # no suite starts under the stop
        assert call(base, admin, "DELETE", "/api/v1/stop-all")[0] in (200, 204)


def test_a_two_experiment_suite_through_a_served_instance_on_sqlite(tmp_path: Path) -> None:
    two_experiments(f"sqlite+aiosqlite:///{tmp_path / 'cw.db'}", tmp_path)


def test_a_two_experiment_suite_through_a_served_instance_on_postgresql(postgres: Any, tmp_path: Path) -> None:
    two_experiments(asyncio.run(postgres.create_database(f"gd_{uuid.uuid4().hex[:8]}")), tmp_path)


def test_stop_all_ends_the_whole_suite_on_sqlite(tmp_path: Path) -> None:
    stopped_by_stop_all(f"sqlite+aiosqlite:///{tmp_path / 'cw.db'}", tmp_path)


def test_stop_all_ends_the_whole_suite_on_postgresql(postgres: Any, tmp_path: Path) -> None:
    stopped_by_stop_all(asyncio.run(postgres.create_database(f"gd_{uuid.uuid4().hex[:8]}")), tmp_path)
