"""``GET /api/v1/runs/{run_id}/report``: a run's or a sweep's self-contained HTML report.

The same page ``cliffwatch report`` writes, made from the stored result (and, for a run, its time series); a
run with no result yet (queued, running) gets a page saying where it stands. The page carries its scripts
and data inline and needs nothing else, so its Content-Security-Policy allows inline scripts and styles and
nothing from anywhere: no requests, no frames, no forms. Documents stored by this service are escaped as
any other (``adapters/report``), and the policy is the second line should one ever slip through.
"""

from __future__ import annotations

from aiohttp import web

from cliffwatch.adapters.api.context import services
from cliffwatch.adapters.api.requests import Query
from cliffwatch.adapters.api.views import run_view
from cliffwatch.adapters.report.render import render_run_report, render_status_report, render_sweep_report
from cliffwatch.domain.runs import RunKind

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
REPORT_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A report changes while its run is in progress: always ask again.
    "Cache-Control": "no-store",
}


async def run_report(request: web.Request) -> web.Response:
    Query(request.query).close()
    api = services(request)
    run = await api.runs.get(request.match_info["run_id"])  # RunNotFound: 404 problem
    if run.result is None:
        text = render_status_report(run_view(run))
    elif run.kind is RunKind.SWEEP:
        text = render_sweep_report(run.result)
    else:
        text = render_run_report(run.result, await api.run_store.timeseries(run.id))
    return web.Response(text=text, content_type="text/html", charset="utf-8", headers=REPORT_HEADERS)
