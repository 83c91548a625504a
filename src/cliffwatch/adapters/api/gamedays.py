"""Handlers for game days: start a suite, list and read them, stop one, and its one HTML report.

``POST /gamedays`` takes the suite itself as its body (the shape ``cliffwatch gameday`` reads as YAML) and
answers 202 with the game day, which this instance then drives; a suite with a bad field, or an experiment whose
run would be refused (its scenario, its target, the caps), is refused whole with 422 ``suite-invalid`` naming
each field (``experiments[1].scenario.target.url``), and 503 while the emergency stop is on. The game day's
``result`` is the combined document ``cliffwatch gameday --json`` writes.
"""

from __future__ import annotations

from aiohttp import web

from cliffwatch.adapters.api.context import caller, services
from cliffwatch.adapters.api.problems import ApiError
from cliffwatch.adapters.api.reports import report_headers
from cliffwatch.adapters.api.requests import Body, Query, idempotency_key, read_json
from cliffwatch.adapters.api.views import API_PREFIX, gameday_view
from cliffwatch.adapters.report.gameday_report import render_gameday_report
from cliffwatch.domain.service.runs import Trigger
from cliffwatch.services.gamedays import GamedaysService

MAX_PAGE = 200
DEFAULT_PAGE = 50


def _service(request: web.Request) -> GamedaysService:
    found = services(request).gamedays
    if found is None:  # an API built without game days (some tests' apps)
        raise ApiError(404, "not-found", "Not found", "this instance runs no game days")
    return found


def location(gameday_id: str) -> str:
    return f"{API_PREFIX}/gamedays/{gameday_id}"


async def create_gameday(request: web.Request) -> web.Response:
    Query(request.query).close()
    document = await read_json(request)
    token = caller(request)
    gameday, created = await _service(request).start(document, trigger=Trigger.API, triggered_by=token.name,
                                                     idempotency_key=idempotency_key(request, token.id))  # fmt: skip
    # 200: a repeat with the first request's Idempotency-Key, answered with the game day it started
    return web.json_response(gameday_view(gameday), status=202 if created else 200,
                             headers={"Location": location(gameday.id)})  # fmt: skip


async def list_gamedays(request: web.Request) -> web.Response:
    query = Query(request.query)
    limit = query.integer("limit", minimum=1, maximum=MAX_PAGE, default=DEFAULT_PAGE) or DEFAULT_PAGE
    query.close()
    found = await _service(request).latest(limit)
    return web.json_response({"gamedays": [gameday_view(g, with_suite=False) for g in found]})


async def get_gameday(request: web.Request) -> web.Response:
    Query(request.query).close()
    gamedays = _service(request)
    gameday = await gamedays.get(request.match_info["gameday_id"])
    return web.json_response({**gameday_view(gameday), "result": await gamedays.combined(gameday)})


async def gameday_notifications(request: web.Request) -> web.Response:
    """Every webhook delivery of a game day, in the order made (empty until it ends, and without notify:)."""
    Query(request.query).close()
    gameday = await _service(request).get(request.match_info["gameday_id"])  # GamedayNotFound: 404
    return web.json_response({"gameday_id": gameday.id, "notifications": [dict(n) for n in gameday.notifications]})


async def abort_gameday(request: web.Request) -> web.Response:
    Query(request.query).close()
    body = Body(await read_json(request, optional=True))
    reason = body.string("reason", max_length=500)
    body.close()
    reason = reason or f"stopped through the API by {caller(request).name}"
    gameday = await _service(request).abort(request.match_info["gameday_id"], reason)
    return web.json_response(gameday_view(gameday))


async def gameday_report(request: web.Request) -> web.Response:
    Query(request.query).close()
    text = await report_page(_service(request), request.match_info["gameday_id"])
    return web.Response(text=text, content_type="text/html", charset="utf-8", headers=report_headers())


async def report_page(gamedays: GamedaysService, gameday_id: str) -> str:
    """The page ``cliffwatch gameday --report`` writes, each experiment's run with its per-second rows (the
    dashboard serves it too)."""
    gameday = await gamedays.get(gameday_id)
    document = await gamedays.combined(gameday, timeseries=True)
    if document["summary"] is None:
        document["summary"] = f"{gameday.name}: {gameday.status.value}"
    return render_gameday_report(document)
