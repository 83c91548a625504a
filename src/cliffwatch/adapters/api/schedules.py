"""Handlers for schedules (game days): create, read, replace, delete, pause, resume, next fire times.

A schedule's body is the same on create and replace (PUT replaces what a client sets, as a whole); the
service judges the cron expression, the time zone, the scenario and the overrides, and answers 422
``schedule-invalid`` with every problem. ``kind: sweep`` with a ``sweep`` object makes each fire queue a
capacity sweep; its parameters are judged as ``POST /sweeps`` judges them (422 ``sweep-invalid``).
"""

from __future__ import annotations

from aiohttp import web

from cliffwatch.adapters.api.context import caller, services
from cliffwatch.adapters.api.problems import body_invalid
from cliffwatch.adapters.api.requests import Body, Query, read_json, read_overrides
from cliffwatch.adapters.api.views import API_PREFIX, schedule_view, timestamp
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec
from cliffwatch.domain.errors import Problem
from cliffwatch.domain.service.runs import CatchUp, Overrides, RunKind
from cliffwatch.services.schedules import MAX_NAME_LENGTH, MAX_NEXT_FIRE_TIMES, ScheduleSpec

DEFAULT_NEXT = 5


async def _read_spec(request: web.Request) -> ScheduleSpec:
    body = Body(await read_json(request))
    name = body.string("name", required=True, max_length=MAX_NAME_LENGTH)
    cron = body.string("cron", required=True, max_length=100)
    timezone = body.string("timezone", required=True, max_length=64)
    suite = body.document("suite")
    scenario = body.string("scenario", required=suite is None, max_length=100)
    overrides = read_overrides(body.child("overrides"))
    enabled = body.boolean("enabled")
    catch_up = body.choice("catch_up", CatchUp)
    kind = body.choice("kind", RunKind) or RunKind.RUN
    sweep = body.document("sweep")
    if kind is RunKind.SWEEP and sweep is None and "sweep" not in body.data:
        body.problems.append(Problem(path="sweep", message="is required when kind is sweep"))
    if kind is RunKind.RUN and sweep is not None:
        body.problems.append(Problem(path="sweep", message="is for sweeps: set kind to sweep"))
    body.close()
    spec = None if sweep is None else parse_sweep_spec(sweep, "sweep")
    # close() refused the body when a required field was missing or wrong
    assert name is not None
    assert cron is not None
    assert timezone is not None
    if suite is not None and scenario is not None:
        raise body_invalid([Problem(path="scenario", message="a schedule fires a scenario or a suite, not both")])
    if suite is not None and overrides is not None:
        raise body_invalid([Problem(path="overrides", message="a suite sets each experiment's target itself (its own "
                                    "target:): give no overrides with a suite")])  # fmt: skip
    named = suite.get("name") if suite is not None else scenario
    return ScheduleSpec(
        name=name,
        cron=cron,
        timezone=timezone,
        scenario_name=named if isinstance(named, str) else "",
        suite=suite,
        overrides=overrides or Overrides(),
        enabled=True if enabled is None else enabled,
        catch_up=catch_up or CatchUp.SKIP,
        sweep=spec,
    )


def _schedule_id(request: web.Request) -> str:
    Query(request.query).close()
    return request.match_info["schedule_id"]


async def create_schedule(request: web.Request) -> web.Response:
    Query(request.query).close()
    spec = await _read_spec(request)
    schedule = await services(request).schedules.create(spec, created_by=caller(request).name)
    return web.json_response(
        schedule_view(schedule), status=201, headers={"Location": f"{API_PREFIX}/schedules/{schedule.id}"}
    )


async def list_schedules(request: web.Request) -> web.Response:
    Query(request.query).close()
    schedules = await services(request).schedules.list_schedules()
    return web.json_response({"schedules": [schedule_view(s) for s in schedules]})


async def get_schedule(request: web.Request) -> web.Response:
    schedule = await services(request).schedules.get(_schedule_id(request))
    return web.json_response(schedule_view(schedule))


async def replace_schedule(request: web.Request) -> web.Response:
    schedule_id = _schedule_id(request)
    spec = await _read_spec(request)
    schedule = await services(request).schedules.update(schedule_id, spec)
    return web.json_response(schedule_view(schedule))


async def delete_schedule(request: web.Request) -> web.Response:
    await services(request).schedules.delete(_schedule_id(request))
    return web.Response(status=204)


async def pause_schedule(request: web.Request) -> web.Response:
    schedule = await services(request).schedules.pause(_schedule_id(request))
    return web.json_response(schedule_view(schedule))


async def resume_schedule(request: web.Request) -> web.Response:
    schedule = await services(request).schedules.resume(_schedule_id(request))
    return web.json_response(schedule_view(schedule))


async def next_fire_times(request: web.Request) -> web.Response:
    query = Query(request.query)
    count = query.integer("count", minimum=1, maximum=MAX_NEXT_FIRE_TIMES, default=DEFAULT_NEXT)
    query.close()
    assert count is not None
    schedule_id = request.match_info["schedule_id"]
    times = await services(request).schedules.next_fire_times(schedule_id, count)
    return web.json_response({"schedule_id": schedule_id, "fire_times": [timestamp(t) for t in times]})
