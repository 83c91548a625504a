"""Sweeps through the API: queueing (POST /sweeps, or POST /runs with kind sweep), every sweep field named
when wrong, the caps and the allowlist, listing by kind, a finished sweep's document, capacity trends, and
schedules whose fires queue sweeps. Every response is checked against the OpenAPI document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_harness import Api, provisional_sweep, small_scenario

from cliffwatch.adapters.scheduler.cron import ApschedulerCron
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import Run, RunEnd, RunKind, Schedule, TokenRole, Trigger
from cliffwatch.services.runs import RunRequest
from cliffwatch.services.schedules import FireStatus, ScheduleService

SWEEP: dict[str, Any] = {"start": 2, "stop": 10, "step_s": 5, "warmup_s": 1, "cooldown_s": 0.5}
SPEC = SweepSpec(start=2.0, stop=10.0, step_s=5.0, warmup_s=1.0, cooldown_s=0.5)


async def _sweep(api: Api, body: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
    reply = await api.call("POST", "/api/v1/sweeps", role=TokenRole.OPERATOR, headers=headers,
                           json=body or {"scenario": "burst-storm", "sweep": SWEEP})  # fmt: skip
    assert reply.status in (200, 202), reply.body
    run: dict[str, Any] = reply.body
    assert reply.headers["Location"] == f"/api/v1/runs/{run['id']}"
    return run


async def test_a_sweep_is_queued_as_a_run_of_kind_sweep_with_its_parameters(api: Api) -> None:
    run = await _sweep(api)
    assert (run["kind"], run["status"], run["usable_rps"], run["result"]) == ("sweep", "queued", None, None)
    assert run["sweep"] == SPEC.to_dict()
    # 1 + 5 s steps are under 10 × burst-storm's 1-s TTFT bound: warned about, as the CLI warns
    [warning] = run["warnings"]
    assert warning.startswith("steps of 6 s (warm-up + window) are shorter than 10 × the 1000 ms TTFT SLO (10 s)")
    stored = await api.store.get_run(run["id"])
    assert stored is not None
    assert (stored.kind, stored.sweep) == (RunKind.SWEEP, SPEC)
    assert (await api.call("GET", f"/api/v1/runs/{run['id']}")).body["kind"] == "sweep"


async def test_post_runs_with_kind_sweep_queues_a_sweep_too_and_a_repeat_is_idempotent(api: Api) -> None:
    body = {"document": small_scenario("inline-sweep"), "kind": "sweep", "sweep": {"auto": True, "max_rate": 40}}
    first = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers={"Idempotency-Key": "k"}, json=body)
    again = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, headers={"Idempotency-Key": "k"}, json=body)
    assert (first.status, again.status) == (202, 200)
    assert again.body["id"] == first.body["id"]
    assert (first.body["kind"], first.body["scenario"], first.body["sweep"]["auto"]) == ("sweep", "inline-sweep", True)
    assert first.body["warnings"] == again.body["warnings"]
    long_enough = await _sweep(api, {"scenario": "burst-storm", "sweep": {**SWEEP, "step_s": 8, "warmup_s": 2}})
    assert long_enough["warnings"] == []
    plain = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, json={"scenario": "burst-storm"})
    assert "warnings" not in plain.body  # a run is not a sweep
    repeat = await _sweep(api, {"scenario": "burst-storm", "sweep": SWEEP}, **{"Idempotency-Key": "s"})
    assert (await _sweep(api, {"scenario": "burst-storm", "sweep": SWEEP}, **{"Idempotency-Key": "s"}))["id"] == (
        repeat["id"]
    )


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"trials": 0}, "sweep.trials", "must be >= 1"),
        ({"target": 1.5}, "sweep.target", "must be < 1"),
        ({"arrival": "gamma"}, "sweep.arrival", "must be one of poisson, constant"),
        ({"variants": ["sometimes"]}, "sweep.variants[0]", "must be as-written, none"),
        ({"stop": 1}, "sweep.stop", "must be > start (2)"),
        ({"steps": 3}, "sweep.steps", "unknown key"),
    ],
)
async def test_each_bad_sweep_field_is_a_422_naming_it(
    api: Api, change: dict[str, Any], path: str, message: str
) -> None:
    reply = await api.call("POST", "/api/v1/sweeps", json={"scenario": "burst-storm", "sweep": {**SWEEP, **change}})
    assert reply.status == 422
    assert reply.body["type"].endswith(":sweep-invalid")
    assert reply.body["title"] == "Invalid sweep"
    [problem] = reply.body["problems"]
    assert problem["path"] == path
    assert message in problem["message"]
    assert (await api.call("GET", "/api/v1/runs")).body["runs"] == []


@pytest.mark.parametrize(
    ("url", "body", "path"),
    [
        ("/api/v1/sweeps", {"scenario": "burst-storm"}, "sweep"),
        ("/api/v1/sweeps", {"scenario": "burst-storm", "sweep": SWEEP, "kind": "sweep"}, "kind"),
        ("/api/v1/runs", {"scenario": "burst-storm", "kind": "sweep"}, "sweep"),
        ("/api/v1/runs", {"scenario": "burst-storm", "sweep": SWEEP}, "sweep"),
        ("/api/v1/runs", {"scenario": "burst-storm", "kind": "burst"}, "kind"),
        ("/api/v1/sweeps", {"scenario": "burst-storm", "sweep": [1]}, "sweep"),
    ],
)
async def test_a_sweep_without_parameters_or_parameters_without_a_sweep_is_a_body_problem(
    api: Api, url: str, body: dict[str, Any], path: str
) -> None:
    reply = await api.call("POST", url, json=body)
    assert reply.status == 422
    assert reply.body["type"].endswith(":body-invalid")
    assert [p["path"] for p in reply.body["problems"]] == [path]


async def test_a_sweep_over_the_caps_is_refused_naming_the_fields_and_why(api: Api) -> None:
    too_much = {**SWEEP, "stop": 5_000, "step_s": 600}
    reply = await api.call("POST", "/api/v1/sweeps", json={"scenario": "burst-storm", "sweep": too_much})
    assert reply.status == 422
    assert reply.body["type"].endswith(":run-refused")
    problems = reply.body["problems"]
    assert problems[0] == {
        "path": "sweep.stop",
        "message": "the sweep may offer up to 5000 requests/s; this service runs at most 1000",
    }
    assert problems[1]["path"] == "sweep.max_steps"
    assert problems[1]["message"].startswith(
        "the sweep may last up to 54045s (1 variant(s) × 30 steps × up to 1801.5s of "
        "warm-up, step (extended: 1800s) and cool-down)"
    )
    auto_body = {"scenario": "burst-storm", "sweep": {"auto": True, "max_rate": 2_000}}
    auto = await api.call("POST", "/api/v1/sweeps", json=auto_body)
    assert auto.status == 422
    assert auto.body["problems"][0]["path"] == "sweep.max_rate"
    assert auto.body["problems"][0]["message"].startswith("the sweep may offer up to 2000")


async def test_an_auto_sweeps_length_counts_its_recheck_and_a_sweep_without_it_does_not(api: Api) -> None:
    long_steps = {"auto": True, "max_rate": 40, "step_s": 600, "extend_s": 1200}
    reply = await api.call("POST", "/api/v1/sweeps", json={"scenario": "burst-storm", "sweep": long_steps})
    assert reply.status == 422
    [problem] = reply.body["problems"]
    assert problem["path"] == "sweep.max_steps"
    assert problem["message"].startswith(
        "the sweep may last up to 37355s (1 variant(s) × 31 steps (max_steps and the recheck) × up to 1205s of "
    )
    without = await api.call("POST", "/api/v1/sweeps",
                             json={"scenario": "burst-storm", "sweep": {**long_steps, "recheck": False}})  # fmt: skip
    assert without.body["problems"][0]["message"].startswith(
        "the sweep may last up to 36150s (1 variant(s) × 30 steps ×"
    )


async def test_a_sweep_aimed_outside_the_allowlist_is_refused(api: Api) -> None:
    body = {"scenario": "burst-storm", "sweep": SWEEP, "overrides": {"target_url": "http://10.0.0.1:8000"}}
    reply = await api.call("POST", "/api/v1/sweeps", json=body)
    assert reply.status == 422
    assert reply.body["type"].endswith(":target-not-allowed")


async def test_runs_are_listed_by_kind(api: Api) -> None:
    run = await api.queue()
    sweep = await _sweep(api)
    sweeps = (await api.call("GET", "/api/v1/runs?kind=sweep", role=TokenRole.VIEWER)).body["runs"]
    runs = (await api.call("GET", "/api/v1/runs?kind=run", role=TokenRole.VIEWER)).body["runs"]
    assert [r["id"] for r in sweeps] == [sweep["id"]]
    assert [r["id"] for r in runs] == [run["id"]]
    assert (await api.call("GET", "/api/v1/runs?kind=both")).status == 400


def _document(usable: float | None, first_bad: float | None, variant: str = "as-written") -> dict[str, Any]:
    result = {"usable_rps": usable, "first_bad_rps": first_bad, "unit": "req/s", "target": 0.99,
              "usable_on_point_estimate": False, "verdict": "…", "steps": []}  # fmt: skip
    return {"format": 1, "kind": "sweep", "status": "succeeded", "usable_rps": usable,
            "variants": [{"variant": variant, "retry": "as written", "result": result}]}  # fmt: skip


async def _finish_sweep(api: Api, run_id: str, usable: float | None, first_bad: float | None) -> None:
    claimed = await api.store.claim_run(owner="t", now=api.clock(), lease_until=api.clock() + timedelta(minutes=5))
    assert claimed is not None
    assert claimed.id == run_id
    await _finish_sweep_claimed(api, run_id, usable, first_bad)


async def _finish_sweep_claimed(api: Api, run_id: str, usable: float | None, first_bad: float | None) -> None:
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=api.clock(), result=_document(usable, first_bad),
                 usable_rps=usable)  # fmt: skip
    assert await api.store.finish_run(run_id, owner="t", end=end)


async def test_a_finished_sweep_shows_its_document_and_usable_capacity(api: Api) -> None:
    sweep = await _sweep(api)
    await _finish_sweep(api, sweep["id"], 7.5, 8.0)
    run = (await api.call("GET", f"/api/v1/runs/{sweep['id']}", role=TokenRole.VIEWER)).body
    assert (run["status"], run["usable_rps"], run["score"]) == ("succeeded", 7.5, None)
    assert run["result"] == _document(7.5, 8.0)


async def test_capacity_trends_follow_usable_capacity_and_flag_a_fall_beyond_the_bracket(api: Api) -> None:
    for usable, first_bad in ((10.0, 10.5), (10.2, 10.7), (9.9, 10.4), (8.0, 8.4)):
        sweep = await _sweep(api)
        await _finish_sweep(api, sweep["id"], usable, first_bad)
    await api.queue()  # a plain run: never in a capacity series
    reply = await api.call("GET", "/api/v1/trends/capacity?scenario=burst-storm", role=TokenRole.VIEWER)
    [series] = reply.body["series"]
    assert (series["scenario"], series["variant"], series["mode"], series["unit"], series["target"]) == (
        "burst-storm", "as-written", "rate", "req/s", 0.99)  # fmt: skip
    assert [p["usable"] for p in series["points"]] == [10.0, 10.2, 9.9, 8.0]
    assert series["trailing_median"] == 10.0
    assert series["regression"] is True
    assert series["summary"].startswith("REGRESSION: latest usable capacity 8 req/s (the cliff now lies below 8.4")
    assert (await api.call("GET", "/api/v1/trends/capacity?scenario=other")).body["series"] == []
    assert (await api.call("GET", "/api/v1/trends/capacity?since=2100-01-01T00:00:00Z")).body["series"] == []
    assert (await api.call("GET", "/api/v1/trends/capacity?metric=x")).status == 400


async def test_a_sweep_schedule_keeps_its_parameters_and_its_fires_queue_sweeps(api: Api) -> None:
    body = {"name": "nightly capacity", "cron": "0 3 * * *", "timezone": "UTC", "scenario": "burst-storm",
            "kind": "sweep", "sweep": SWEEP}  # fmt: skip
    created = await api.call("POST", "/api/v1/schedules", json=body)
    assert created.status == 201, created.body
    assert (created.body["kind"], created.body["sweep"]["stop"]) == ("sweep", 10.0)
    replaced = await api.call("PUT", f"/api/v1/schedules/{created.body['id']}", json={**body, "kind": "run",
                                                                                       "sweep": None})  # fmt: skip
    assert replaced.status == 422  # sweep must be an object
    bad = await api.call("POST", "/api/v1/schedules", json={**body, "sweep": {**SWEEP, "trials": 0}})
    assert (bad.status, bad.body["problems"][0]["path"]) == (422, "sweep.trials")
    missing = await api.call("POST", "/api/v1/schedules", json={k: v for k, v in body.items() if k != "sweep"})
    assert (missing.status, missing.body["problems"][0]["path"]) == (422, "sweep")

    runs = api.services.runs

    async def make_run(schedule: Schedule, fire_time: datetime) -> Run:  # as bootstrap_service builds it
        request = RunRequest(scenario=schedule.scenario_name, overrides=schedule.overrides, trigger=Trigger.SCHEDULE,
                             triggered_by=schedule.id, schedule_id=schedule.id, fire_time=fire_time,
                             sweep=schedule.sweep)  # fmt: skip
        return await runs.build(request)

    fire_time = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    schedules = ScheduleService(schedules=api.store, runs=api.store, scenarios=api.store, calendar=ApschedulerCron(),
                                make_run=make_run, now=lambda: fire_time)  # fmt: skip
    fired = await schedules.fire(created.body["id"], fire_time)
    assert fired.status is FireStatus.QUEUED, fired.reason
    assert fired.run is not None
    assert (fired.run.kind, fired.run.trigger, fired.run.sweep) == (RunKind.SWEEP, Trigger.SCHEDULE, SPEC)


async def test_a_running_sweep_shows_its_steps_so_far_as_a_provisional_document_until_its_end(api: Api) -> None:
    sweep = await _sweep(api)
    assert (await api.call("GET", f"/api/v1/runs/{sweep['id']}")).body["result"] is None  # queued: nothing yet
    claimed = await api.store.claim_run(owner="t", now=api.clock(), lease_until=api.clock() + timedelta(minutes=5))
    assert claimed is not None
    provisional = provisional_sweep(sweep["id"], SPEC, [2.0, 4.0, 8.0])
    assert await api.store.save_provisional_result(sweep["id"], owner="t", result=provisional)
    run = (await api.call("GET", f"/api/v1/runs/{sweep['id']}", role=TokenRole.VIEWER)).body  # checked against OpenAPI
    assert (run["status"], run["usable_rps"]) == ("running", None)
    shown = run["result"]
    assert (shown["provisional"], shown["status"], shown["finished_at"], shown["steps_so_far"]) == (
        True, "running", None, 3)  # fmt: skip
    [variant] = shown["variants"]
    assert [s["rate"] for s in variant["result"]["steps"]] == [2.0, 4.0, 8.0]
    assert variant["result"]["first_bad_rps"] == 8.0  # the model's capacity is 6 req/s
    listed = (await api.call("GET", "/api/v1/runs?kind=sweep", role=TokenRole.VIEWER)).body["runs"]
    assert "result" not in listed[0]  # lists stay light
    report = await api.call("GET", f"/api/v1/runs/{sweep['id']}/report", role=TokenRole.VIEWER)
    assert "Provisional: the sweep is still running. 3 step(s) measured so far" in report.body
    assert 'data-chart="v0-throughput"' in report.body
    await _finish_sweep_claimed(api, sweep["id"], 4.0, 8.0)
    run = (await api.call("GET", f"/api/v1/runs/{sweep['id']}", role=TokenRole.VIEWER)).body
    assert run["result"] == _document(4.0, 8.0)  # the final document replaces the provisional one
    stored = await api.store.get_run(sweep["id"])
    assert stored is not None
    assert stored.provisional_result is None


async def test_a_sweep_whose_lease_expired_shows_the_steps_it_had_with_its_own_status(api: Api) -> None:
    sweep = await _sweep(api)
    now = api.clock()
    assert await api.store.claim_run(owner="t", now=now, lease_until=now + timedelta(seconds=1))
    provisional = provisional_sweep(sweep["id"], SPEC, [2.0, 4.0])
    assert await api.store.save_provisional_result(sweep["id"], owner="t", result=provisional)
    [expired] = await api.store.expire_leases(now + timedelta(minutes=1))
    run = (await api.call("GET", f"/api/v1/runs/{sweep['id']}", role=TokenRole.VIEWER)).body
    assert (run["status"], run["result"]["status"], run["result"]["provisional"]) == ("interrupted", "interrupted",
                                                                                      True)  # fmt: skip
    assert run["result"]["reason"] == expired.reason
    assert len(run["result"]["variants"][0]["result"]["steps"]) == 2
    report = await api.call("GET", f"/api/v1/runs/{sweep['id']}/report", role=TokenRole.VIEWER)
    assert "Below are the 2 step(s) recorded while it ran; its final summary was never written." in report.body
