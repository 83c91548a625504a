"""Admin handlers: API tokens and the emergency stop.

A new token is in exactly one response, the one that created it (``Cache-Control: no-store`` so no cache
keeps it); listings show records only. The emergency stop aborts every queued and running run and refuses
new ones (503) until it is released; it is shared by every instance on the database.
"""

from __future__ import annotations

from aiohttp import web

from cliffwatch.adapters.api.context import caller, services
from cliffwatch.adapters.api.problems import not_found
from cliffwatch.adapters.api.requests import Body, Query, read_json
from cliffwatch.adapters.api.views import token_view
from cliffwatch.domain.service.runs import TokenRole


async def create_token(request: web.Request) -> web.Response:
    Query(request.query).close()
    body = Body(await read_json(request))
    name = body.string("name", required=True, max_length=100)
    role = body.choice("role", TokenRole, required=True)
    body.close()
    assert name is not None  # close() refused the body otherwise
    assert role is not None
    record, token = await services(request).tokens.create(name, role)
    return web.json_response({**token_view(record), "token": token}, status=201, headers={"Cache-Control": "no-store"})


async def list_tokens(request: web.Request) -> web.Response:
    Query(request.query).close()
    tokens = await services(request).tokens.all()
    return web.json_response({"tokens": [token_view(t) for t in tokens]})


async def revoke_token(request: web.Request) -> web.Response:
    Query(request.query).close()
    token_id = request.match_info["token_id"]
    if not await services(request).tokens.revoke(token_id):
        raise not_found(f"no token {token_id!r}")
    return web.Response(status=204)


async def stop_state(request: web.Request) -> web.Response:
    Query(request.query).close()
    reason = await services(request).runs.emergency_stop()
    return web.json_response({"active": reason is not None, "reason": reason})


async def stop_all(request: web.Request) -> web.Response:
    Query(request.query).close()
    body = Body(await read_json(request, optional=True))
    reason = body.string("reason", max_length=500)
    body.close()
    reason = reason or f"emergency stop by {caller(request).name}"
    stopped = await services(request).runs.stop_all(reason)
    return web.json_response({"active": True, "reason": reason, "aborted": [run.id for run in stopped]})


async def release_stop(request: web.Request) -> web.Response:
    Query(request.query).close()
    await services(request).runs.release_stop()
    return web.json_response({"active": False, "reason": None})
