"""Schedules through the API: create, read, replace, pause, resume, next fire times, delete; and refusals."""

from __future__ import annotations

from typing import Any

import pytest
from api_harness import Api

from cliffwatch.domain.service.runs import TokenRole

WEEKDAYS_AT_NINE = {"name": "morning game day", "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin",
                    "scenario": "burst-storm"}  # fmt: skip


async def _create(api: Api, **changes: Any) -> dict[str, Any]:
    reply = await api.call("POST", "/api/v1/schedules", json={**WEEKDAYS_AT_NINE, **changes})
    assert reply.status == 201, reply.body
    schedule: dict[str, Any] = reply.body
    assert reply.headers["Location"] == f"/api/v1/schedules/{schedule['id']}"
    return schedule


async def test_a_schedule_is_created_with_its_defaults_and_creator(api: Api) -> None:
    schedule = await _create(api)
    assert schedule["enabled"] is True
    assert schedule["catch_up"] == "skip"
    assert schedule["overrides"] == {}
    assert schedule["created_by"] == "admin-token"
    assert schedule["last_fire_time"] is None
    assert (await api.call("GET", f"/api/v1/schedules/{schedule['id']}", role=TokenRole.VIEWER)).body == schedule
    assert (await api.call("GET", "/api/v1/schedules", role=TokenRole.VIEWER)).body == {"schedules": [schedule]}


async def test_next_fire_times_are_in_utc_in_order_and_follow_the_time_zone(api: Api) -> None:
    """Weekdays at 09:00 in Berlin are 08:00 UTC in winter; the clock starts on Monday 30 November 2026."""
    schedule = await _create(api)
    reply = await api.call("GET", f"/api/v1/schedules/{schedule['id']}/next?count=3", role=TokenRole.VIEWER)
    assert reply.body == {
        "schedule_id": schedule["id"],
        "fire_times": ["2026-12-01T08:00:00+00:00", "2026-12-02T08:00:00+00:00", "2026-12-03T08:00:00+00:00"],
    }
    default = await api.call("GET", f"/api/v1/schedules/{schedule['id']}/next")
    assert len(default.body["fire_times"]) == 5
    assert (await api.call("GET", f"/api/v1/schedules/{schedule['id']}/next?count=101")).status == 400
    assert (await api.call("GET", "/api/v1/schedules/nope/next")).status == 404


async def test_pause_and_resume_switch_the_schedule_and_its_fire_times(api: Api) -> None:
    schedule = await _create(api)
    paused = await api.call("POST", f"/api/v1/schedules/{schedule['id']}/pause")
    assert paused.body["enabled"] is False
    assert (await api.call("GET", f"/api/v1/schedules/{schedule['id']}/next")).body["fire_times"] == []
    resumed = await api.call("POST", f"/api/v1/schedules/{schedule['id']}/resume")
    assert resumed.body["enabled"] is True
    assert len((await api.call("GET", f"/api/v1/schedules/{schedule['id']}/next")).body["fire_times"]) == 5


async def test_replacing_a_schedule_changes_what_the_client_sets_only(api: Api) -> None:
    schedule = await _create(api)
    body = {**WEEKDAYS_AT_NINE, "name": "evening", "cron": "30 18 * * *", "catch_up": "run_once",
            "overrides": {"seed": 5}, "enabled": False}  # fmt: skip
    reply = await api.call("PUT", f"/api/v1/schedules/{schedule['id']}", json=body)
    assert reply.status == 200
    replaced = reply.body
    assert (replaced["id"], replaced["created_at"], replaced["created_by"]) == (
        schedule["id"], schedule["created_at"], schedule["created_by"],
    )  # fmt: skip
    assert (replaced["name"], replaced["cron"], replaced["catch_up"]) == ("evening", "30 18 * * *", "run_once")
    assert (replaced["overrides"], replaced["enabled"]) == ({"seed": 5}, False)


async def test_deleting_a_schedule_makes_it_404(api: Api) -> None:
    schedule = await _create(api)
    deleted = await api.call("DELETE", f"/api/v1/schedules/{schedule['id']}")
    assert deleted.status == 204
    for method, suffix in [("GET", ""), ("PUT", ""), ("DELETE", ""), ("POST", "/pause"), ("POST", "/resume")]:
        body = WEEKDAYS_AT_NINE if method == "PUT" else None
        reply = await api.call(method, f"/api/v1/schedules/{schedule['id']}{suffix}", json=body)
        assert reply.status == 404, (method, suffix)
        assert reply.body["type"].endswith(":schedule-not-found")


@pytest.mark.parametrize(
    ("changes", "paths"),
    [
        ({"cron": "0 9 * *"}, ["cron"]),
        ({"cron": "61 * * * *"}, ["cron"]),
        ({"timezone": "Mars/Olympus"}, ["timezone"]),
        ({"scenario": "no-such-scenario"}, ["scenario"]),
        ({"overrides": {"target_url": "ftp://127.0.0.1/", "seed": 1}}, ["overrides.target_url"]),
    ],
)
async def test_an_invalid_schedule_is_422_naming_each_field(
    api: Api, changes: dict[str, Any], paths: list[str]
) -> None:
    reply = await api.call("POST", "/api/v1/schedules", json={**WEEKDAYS_AT_NINE, **changes})
    assert reply.status == 422
    assert reply.body["type"].endswith(":schedule-invalid")
    assert [p["path"] for p in reply.body["problems"]] == paths
    assert (await api.call("GET", "/api/v1/schedules")).body == {"schedules": []}


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        ({}, ["name", "cron", "timezone", "scenario"]),
        ({**WEEKDAYS_AT_NINE, "enabled": "yes"}, ["enabled"]),
        ({**WEEKDAYS_AT_NINE, "catch_up": "always"}, ["catch_up"]),
        ({**WEEKDAYS_AT_NINE, "overrides": {"seeds": 3}}, ["overrides.seeds"]),
        ({**WEEKDAYS_AT_NINE, "scenario_name": "x"}, ["scenario_name"]),
    ],
)
async def test_a_malformed_schedule_body_is_422_before_the_service_sees_it(
    api: Api, body: dict[str, Any], paths: list[str]
) -> None:
    reply = await api.call("POST", "/api/v1/schedules", json=body)
    assert reply.status == 422
    assert reply.body["type"].endswith(":body-invalid")
    assert [p["path"] for p in reply.body["problems"]] == paths


async def test_a_suites_schedule_is_judged_when_stored_and_takes_no_overrides(api: Api) -> None:
    """A suite's experiments are checked as runs when the schedule is stored (not refused silently at every fire),
    and overrides, which a suite would ignore, are refused."""
    suite = {"name": "nightly", "experiments": [{"scenario": "no-such-scenario"}]}
    body = {"name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "suite": suite}
    missing = await api.call("POST", "/api/v1/schedules", json=body)
    assert missing.status == 422, missing.body
    assert [p["path"] for p in missing.body["problems"]] == ["suite.experiments[0].scenario"]
    good = {**body, "suite": {"name": "nightly", "experiments": [{"scenario": "burst-storm"}]}}
    overridden = await api.call("POST", "/api/v1/schedules", json={**good, "overrides": {"seed": 3}})
    assert overridden.status == 422
    assert [p["path"] for p in overridden.body["problems"]] == ["overrides"]
    created = await api.call("POST", "/api/v1/schedules", json=good)
    assert created.status == 201, created.body
