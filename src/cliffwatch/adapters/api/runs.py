"""Handlers for runs, sweeps and trends: parse the request, call the service, shape the answer. Nothing else.

Run creation answers 202 (the run is queued; a worker executes it later) with the run and its
``Location``; repeating a request with the same ``Idempotency-Key`` answers 200 with the run the first
one queued. Keys are scoped to the token that sends them, so two clients cannot collide. A sweep is a run
of kind sweep: ``POST /sweeps`` (or ``POST /runs`` with ``kind: sweep``) queues one, with its ``sweep``
parameters judged by ``parse_sweep_spec`` (422 ``sweep-invalid`` naming each ``sweep.…`` field); its answer
adds the sweep's ``warnings`` (``sweep_plan.sweep_warnings``: steps too short for the SLO, say).
"""

from __future__ import annotations

from aiohttp import web

from cliffwatch.adapters.api.context import caller, services
from cliffwatch.adapters.api.problems import ApiError
from cliffwatch.adapters.api.requests import Body, Query, idempotency_key, read_json, read_overrides
from cliffwatch.adapters.api.views import outcome_view, run_detail, run_location, run_view
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec
from cliffwatch.domain.errors import Problem
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import Overrides, RunKind, RunQuery, Trigger
from cliffwatch.domain.service.trends import Bucket
from cliffwatch.services.runs import RunRequest

MAX_PAGE = 200
DEFAULT_PAGE = 50
MAX_OUTCOME_PAGE = 1_000
DEFAULT_OUTCOME_PAGE = 100


async def create_run(request: web.Request) -> web.Response:
    return await _create(request, sweep_endpoint=False)


async def create_sweep(request: web.Request) -> web.Response:
    return await _create(request, sweep_endpoint=True)


async def _create(request: web.Request, *, sweep_endpoint: bool) -> web.Response:
    Query(request.query).close()
    body = Body(await read_json(request))
    scenario = body.string("scenario", max_length=100)
    document = body.document("document")
    overrides = read_overrides(body.child("overrides"))
    kind = RunKind.SWEEP if sweep_endpoint else (body.choice("kind", RunKind) or RunKind.RUN)
    sweep = body.document("sweep")
    if (scenario is None) == (document is None) and not body.problems:
        body.problems.append(Problem(path="", message="give either scenario (a name) or document (a scenario)"))
    if kind is RunKind.SWEEP and sweep is None and "sweep" not in body.data:
        body.problems.append(Problem(path="sweep", message="is required for a sweep (its rates, steps and target)"))
    if kind is RunKind.RUN and sweep is not None:
        body.problems.append(Problem(path="sweep", message="is for sweeps: set kind to sweep, or POST /api/v1/sweeps"))
    body.close()
    spec = None if sweep is None else parse_sweep_spec(sweep, "sweep")  # SweepInvalid: 422 sweep-invalid
    token = caller(request)
    run, created = await services(request).runs.submit(
        RunRequest(
            scenario=scenario,
            document=document,
            overrides=overrides or Overrides(),
            idempotency_key=idempotency_key(request, token.id),
            trigger=Trigger.API,
            triggered_by=token.name,
            sweep=spec,
        )
    )
    answer = run_detail(run)
    if run.kind is RunKind.SWEEP:  # what the sweep as asked should be warned about (steps too short, say)
        answer["warnings"] = list(await services(request).runs.warnings(run))
    return web.json_response(answer, status=202 if created else 200, headers={"Location": run_location(run.id)})


async def list_runs(request: web.Request) -> web.Response:
    query = Query(request.query)
    run_query = RunQuery(
        scenario=query.string("scenario", max_length=100),
        status=query.choice("status", RunStatus),
        kind=query.choice("kind", RunKind),
        schedule_id=query.string("schedule", max_length=100),
        since=query.timestamp("since"),
        until=query.timestamp("until"),
        cursor=query.string("cursor", max_length=500),
        limit=query.integer("limit", minimum=1, maximum=MAX_PAGE, default=DEFAULT_PAGE) or DEFAULT_PAGE,
    )
    query.close()
    try:
        page = await services(request).runs.page(run_query)
    except ValueError as exc:
        # The stores' contract: a cursor that is not one of theirs raises ValueError. Anything else is a bug.
        if run_query.cursor is None:
            raise
        raise ApiError(400, "cursor-invalid", "Invalid cursor", "the cursor is not one this API gave out") from exc
    headers = {}
    if page.next_cursor is not None:
        headers["Link"] = _next_link(request, cursor=page.next_cursor)
    return web.json_response(
        {"runs": [run_view(r) for r in page.runs], "next_cursor": page.next_cursor}, headers=headers
    )


def _next_link(request: web.Request, **query: str) -> str:
    # A relative reference: behind a proxy this process does not know the scheme and host clients use.
    return f'<{request.rel_url.update_query(query)}>; rel="next"'


async def get_run(request: web.Request) -> web.Response:
    Query(request.query).close()
    run = await services(request).runs.get(request.match_info["run_id"])
    return web.json_response(run_detail(run))


async def run_notifications(request: web.Request) -> web.Response:
    """Every webhook delivery of a run or sweep, in the order made (empty until it ends, and without notify:)."""
    Query(request.query).close()
    api = services(request)
    run = await api.runs.get(request.match_info["run_id"])
    found = [] if api.deliveries is None else await api.deliveries.list_deliveries(run_id=run.id)
    return web.json_response({"run_id": run.id, "notifications": [d.to_dict() for d in found]})


async def run_timeseries(request: web.Request) -> web.Response:
    Query(request.query).close()
    api = services(request)
    run = await api.runs.get(request.match_info["run_id"])
    rows = await api.run_store.timeseries(run.id)
    return web.json_response({"run_id": run.id, "rows": [dict(row) for row in rows]})


async def run_server_metrics(request: web.Request) -> web.Response:
    """The target's own series the run scraped (``target.metrics``), with their scrape times; null without."""
    Query(request.query).close()
    run = await services(request).runs.get(request.match_info["run_id"])
    document = None if run.result is None else run.result.get("server_metrics")
    return web.json_response({"run_id": run.id, "server_metrics": document if isinstance(document, dict) else None})


async def run_outcomes(request: web.Request) -> web.Response:
    query = Query(request.query)
    after = query.integer("after", minimum=0, maximum=2**53)
    limit = query.integer("limit", minimum=1, maximum=MAX_OUTCOME_PAGE, default=DEFAULT_OUTCOME_PAGE)
    query.close()
    assert limit is not None
    api = services(request)
    run = await api.runs.get(request.match_info["run_id"])
    outcomes = await api.run_store.list_outcomes(run.id, after=after, limit=limit)
    # A full page may be followed by more; a short one is the last.
    next_after = outcomes[-1].request_id if len(outcomes) == limit else None
    headers = {} if next_after is None else {"Link": _next_link(request, after=str(next_after))}
    return web.json_response(
        {"run_id": run.id, "outcomes": [outcome_view(o) for o in outcomes], "next_after": next_after},
        headers=headers,
    )


async def abort_run(request: web.Request) -> web.Response:
    Query(request.query).close()
    body = Body(await read_json(request, optional=True))
    reason = body.string("reason", max_length=500)
    body.close()
    token = caller(request)
    run = await services(request).runs.abort(
        request.match_info["run_id"], reason or f"aborted through the API by {token.name}"
    )
    return web.json_response(run_detail(run))


async def trends(request: web.Request) -> web.Response:
    query = Query(request.query)
    scenario = query.string("scenario", max_length=100)
    target = query.string("target", max_length=2_000)
    since = query.timestamp("since")
    bucket = query.choice("bucket", Bucket) or Bucket.RUN
    query.close()
    series = await services(request).trends.series(scenario=scenario, target_url=target, since=since, bucket=bucket)
    return web.json_response({"bucket": bucket.value, "series": [s.to_dict() for s in series]})


async def capacity_trends(request: web.Request) -> web.Response:
    query = Query(request.query)
    scenario = query.string("scenario", max_length=100)
    target = query.string("target", max_length=2_000)
    since = query.timestamp("since")
    query.close()
    series = await services(request).trends.capacity(scenario=scenario, target_url=target, since=since)
    return web.json_response({"series": [s.to_dict() for s in series]})
