"""The trends, schedules and scenarios pages.

Trends are the API's trends (``TrendsService``): score and components per scenario over time with the
regression flag, and usable capacity from sweeps; the page draws them with uPlot from the JSON it embeds.
Schedules show their next fire times; admins may pause and resume them. Scenarios can be read, and a
pasted document (YAML or JSON) validated with the same rules as the API's ``/scenarios/validate``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aiohttp import web

from cliffwatch.adapters.api.views import schedule_view
from cliffwatch.adapters.dashboard.context import ui_services
from cliffwatch.adapters.dashboard.render import render
from cliffwatch.adapters.dashboard.security import Redirect
from cliffwatch.adapters.documents import (
    SCENARIO_LIMITS,
    DocumentInvalid,
    dump_yaml,
    load_off_loop,
    load_yaml,
    off_loop,
)
from cliffwatch.domain.service.trends import Bucket

NEXT_FIRE_TIMES = 3
MAX_PASTED_BYTES = 256 * 1024
PASTE_LIMITS = replace(SCENARIO_LIMITS, max_bytes=MAX_PASTED_BYTES)


async def trends_page(request: web.Request) -> web.Response:
    services = ui_services(request).api
    scenario = (request.query.get("scenario") or "").strip()[:100] or None
    bucket = {b.value: b for b in Bucket}.get(request.query.get("bucket") or "", Bucket.RUN)
    series = [s.to_dict() for s in await services.trends.series(scenario=scenario, target_url=None, since=None,
                                                                bucket=bucket)]  # fmt: skip
    capacity = [s.to_dict() for s in await services.trends.capacity(scenario=scenario, target_url=None, since=None)]
    scenarios = sorted(v.name for v in await services.catalog.all_latest())
    return render("trends.html", series=series, capacity=capacity, scenarios=scenarios, scenario=scenario or "",
                  bucket=bucket.value, buckets=[b.value for b in Bucket],
                  data={"series": series, "capacity": capacity})  # fmt: skip


async def schedules_page(request: web.Request) -> web.Response:
    schedules = ui_services(request).api.schedules
    rows = []
    for schedule in await schedules.list_schedules():
        upcoming = await schedules.next_fire_times(schedule.id, NEXT_FIRE_TIMES) if schedule.enabled else []
        rows.append({**schedule_view(schedule), "next": upcoming})
    return render("schedules.html", schedules=rows)


async def pause_schedule(request: web.Request) -> web.Response:
    await ui_services(request).api.schedules.pause(request.match_info["schedule_id"])
    raise Redirect("/ui/schedules")


async def resume_schedule(request: web.Request) -> web.Response:
    await ui_services(request).api.schedules.resume(request.match_info["schedule_id"])
    raise Redirect("/ui/schedules")


async def scenarios_page(request: web.Request) -> web.Response:
    versions = sorted(await ui_services(request).api.catalog.all_latest(), key=lambda v: v.name)
    return render("scenarios.html", scenarios=versions, pasted="", verdict=None)


async def scenario_page(request: web.Request) -> web.Response:
    version = await ui_services(request).api.catalog.latest(request.match_info["name"])
    # Off the loop: a document at the limits takes tens of milliseconds to write as YAML.
    text = await off_loop(lambda: dump_yaml(dict(version.document)))
    return render("scenario.html", scenario=version, text=text)


async def _parse_pasted(text: str) -> tuple[Any, str | None]:
    """The pasted document (JSON is YAML too), read by the bounded loader off the loop, or why not."""
    try:
        return await load_off_loop(load_yaml, text, PASTE_LIMITS), None
    except DocumentInvalid as exc:
        return None, str(exc)


async def validate_scenario(request: web.Request) -> web.Response:
    form = await request.post()
    pasted = form.get("document")
    text = pasted if isinstance(pasted, str) else ""
    versions = sorted(await ui_services(request).api.catalog.all_latest(), key=lambda v: v.name)
    if len(text.encode()) > MAX_PASTED_BYTES:
        verdict = {"valid": False, "problems": [("", f"the document is over {MAX_PASTED_BYTES // 1024} KiB")]}
        return render("scenarios.html", status=422, scenarios=versions, pasted="", verdict=verdict)
    document, error = await _parse_pasted(text)
    if error is not None:
        problems = [("", error)]
    else:
        problems = [(p.path, p.message) for p in await ui_services(request).api.catalog.problems(document)]
    verdict = {"valid": not problems, "problems": problems}
    return render("scenarios.html", status=200, scenarios=versions, pasted=text, verdict=verdict)
