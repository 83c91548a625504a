"""``GET /api/v1/runs/{run_id}/report``: a run's or a sweep's self-contained HTML report.

The same page ``cliffwatch report`` writes, made from the stored result (and, for a run, its time series); a
running sweep's is made from the steps so far (its provisional document, flagged as such on the page); a run
with no result yet (queued, running) gets a page saying where it stands. The page carries its scripts
and data inline and needs nothing else, so its Content-Security-Policy allows exactly its two inline
scripts (uPlot and report.js, by their SHA-256) and inline styles, and nothing from anywhere: no requests,
no frames, no forms. Documents stored by this service are escaped as any other (``adapters/report``); the
policy is the second line should markup ever slip through: a script it brought would not run.
"""

from __future__ import annotations

from aiohttp import web

from cliffwatch.adapters.api.context import ApiServices, services
from cliffwatch.adapters.api.requests import Query
from cliffwatch.adapters.api.views import run_view, shown_result
from cliffwatch.adapters.report.assets import script_hashes
from cliffwatch.adapters.report.render import render_run_report, render_status_report, render_sweep_report
from cliffwatch.domain.service.runs import Run, RunKind


def content_security_policy() -> str:
    """Only the report's own two scripts (by hash) and inline styles; nothing fetched, framed or submitted."""
    return (
        f"default-src 'none'; script-src {' '.join(script_hashes())}; style-src 'unsafe-inline'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def report_headers() -> dict[str, str]:
    return {
        "Content-Security-Policy": content_security_policy(),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        # A report changes while its run is in progress: always ask again.
        "Cache-Control": "no-store",
    }


async def report_page(api: ApiServices, run: Run) -> str:
    """The report of a stored run or sweep (a status page before its result); the dashboard serves it too."""
    document = shown_result(run)  # a running sweep's: the steps so far, marked provisional
    if document is None:
        return render_status_report(run_view(run))
    if run.kind is RunKind.SWEEP:
        return render_sweep_report(document)
    return render_run_report(document, await api.run_store.timeseries(run.id))


async def run_report(request: web.Request) -> web.Response:
    Query(request.query).close()
    api = services(request)
    run = await api.runs.get(request.match_info["run_id"])  # RunNotFound: 404 problem
    text = await report_page(api, run)
    return web.Response(text=text, content_type="text/html", charset="utf-8", headers=report_headers())
