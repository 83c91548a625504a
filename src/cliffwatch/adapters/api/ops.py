"""Handlers for operating the service: liveness, readiness, metrics and the API's own description.

``/healthz`` answers 200 while the process serves at all, and looks at nothing else: a liveness probe that
fails because the database is down gets a healthy process restarted for nothing. ``/readyz`` asks the
bootstrap's readiness check (the database reachable, migrations current) within a bounded time, and
answers 503 with the reasons when anything is wrong, so a load balancer stops sending traffic.
"""

from __future__ import annotations

import asyncio
import json

import structlog
from aiohttp import web

from cliffwatch.adapters.api.context import services
from cliffwatch.adapters.api.metrics import CONTENT_TYPE
from cliffwatch.adapters.api.openapi import openapi_document
from cliffwatch.adapters.api.problems import ApiError
from cliffwatch.adapters.api.requests import Query

log = structlog.get_logger(__name__)

READINESS_TIMEOUT_S = 5.0  # a probe that hangs is worse than one that says no
READINESS_RETRY_AFTER_S = 5


async def healthz(request: web.Request) -> web.Response:
    # No query check, nothing that can fail: liveness must not depend on how the probe is written.
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        async with asyncio.timeout(READINESS_TIMEOUT_S):
            problems = await services(request).readiness()
    except TimeoutError:
        problems = [f"the readiness check did not answer within {READINESS_TIMEOUT_S:g}s"]
    except Exception as exc:  # a probe must answer; the reason is logged, not shown
        log.exception("readiness check failed", exc_info=exc)
        problems = ["the readiness check failed; see the log"]
    if problems:
        raise ApiError(
            503,
            "not-ready",
            "Not ready",
            "; ".join(problems),
            headers={"Retry-After": str(READINESS_RETRY_AFTER_S)},
            extensions={"problems": [{"path": "", "message": p} for p in problems]},
        )
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    Query(request.query).close()
    api = services(request)
    counts = await api.run_store.count_runs()
    stop = await api.runs.emergency_stop()
    text = api.metrics.render(runs_by_status=counts, emergency_stop=stop is not None)
    return web.Response(text=text, headers={"Content-Type": CONTENT_TYPE})


async def openapi(request: web.Request) -> web.Response:
    Query(request.query).close()
    return web.Response(text=_DOCUMENT, content_type="application/json")


# Rendered once: the document is a constant of this version of the code.
_DOCUMENT = json.dumps(openapi_document(), indent=1)
