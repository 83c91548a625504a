"""Handlers for the scenario catalog: list, read (the latest version, or one by hash), validate, register.

Validation answers 200 whether the document is valid or not (``valid`` and every ``problems`` entry): the
request itself succeeded, its answer is the verdict. Registering an invalid document is a failed request:
422 ``scenario-invalid`` with the same problems.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from aiohttp import web

from cliffwatch.adapters.api.context import services
from cliffwatch.adapters.api.problems import invalid
from cliffwatch.adapters.api.requests import Query, read_json
from cliffwatch.adapters.api.views import API_PREFIX, scenario_detail, scenario_summary
from cliffwatch.domain.errors import Problem

_HASH = re.compile(r"[0-9a-f]{64}")


async def list_scenarios(request: web.Request) -> web.Response:
    Query(request.query).close()
    versions = await services(request).catalog.all_latest()
    return web.json_response({"scenarios": [scenario_summary(v) for v in sorted(versions, key=lambda v: v.name)]})


async def get_scenario(request: web.Request) -> web.Response:
    query = Query(request.query)
    content_hash = query.string("hash", max_length=64, pattern=_HASH)
    query.close()
    catalog = services(request).catalog
    name = request.match_info["name"]
    version = await (catalog.latest(name) if content_hash is None else catalog.version(name, content_hash))
    return web.json_response(scenario_detail(version))


async def validate_scenario(request: web.Request) -> web.Response:
    Query(request.query).close()
    document = await read_json(request)
    problems = await services(request).catalog.problems(document)
    return web.json_response(
        {"valid": not problems, "problems": [{"path": p.path, "message": p.message} for p in problems]}
    )


async def register_scenario(request: web.Request) -> web.Response:
    """Stores the document as the name's latest version (unchanged documents keep their version): 200."""
    Query(request.query).close()
    name = request.match_info["name"]
    document = await read_json(request)
    catalog = services(request).catalog
    named = document.get("name") if isinstance(document, Mapping) else None
    if not isinstance(document, Mapping) or (isinstance(named, str) and named != name):
        # A mismatch is reported with the document's own problems, so one answer lists everything to fix.
        mismatch = [] if named is None else [Problem(path="name", message=f"must be {name!r} as in the path")]
        problems = [*mismatch, *(await catalog.problems(document))]
        raise invalid(422, "scenario-invalid", "Invalid scenario", problems, "the scenario")
    version = await catalog.register(document)
    return web.json_response(scenario_detail(version), headers={"Location": f"{API_PREFIX}/scenarios/{version.name}"})
