"""The runs pages: the filtered list (with a JSON view the page polls for live status), a run's detail (its
charts, updating while it runs; a sweep's report sections and charts, updating after every step), aborting a
run, and the form that triggers a run or a sweep."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import structlog
from aiohttp import web
from markupsafe import Markup

from cliffwatch.adapters.api.problems import from_error
from cliffwatch.adapters.api.reports import report_headers, report_page
from cliffwatch.adapters.api.views import run_view, shown_result
from cliffwatch.adapters.dashboard.charts import chart_data
from cliffwatch.adapters.dashboard.context import current_user, ui_services
from cliffwatch.adapters.dashboard.render import render
from cliffwatch.adapters.dashboard.security import Redirect
from cliffwatch.adapters.report import sections
from cliffwatch.adapters.report.render import ReportInvalid, SweepParts, sweep_parts
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec
from cliffwatch.domain.errors import CliffwatchError, ScenarioNotFound
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import Overrides, Run, RunKind, RunQuery, Trigger
from cliffwatch.services.runs import RunRequest

log = structlog.get_logger(__name__)
PAGE_SIZE = 50
ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING})
_LOCAL_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?")
_NONCE = re.compile(r"[A-Za-z0-9_-]{16,64}")


def _choice(value: str | None, enum: Any) -> Any:
    options = {e.value: e for e in enum}
    return options.get(value or "")


def _time(value: str | None) -> datetime | None:
    """A ``datetime-local`` input's value, read as UTC (the pages show UTC)."""
    if not value or not _LOCAL_TIME.fullmatch(value):
        return None
    try:
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    except ValueError:
        return None


def _filters(query: Mapping[str, str]) -> tuple[RunQuery, dict[str, str]]:
    scenario = (query.get("scenario") or "").strip()[:100] or None
    status, kind = _choice(query.get("status"), RunStatus), _choice(query.get("kind"), RunKind)
    since, until = _time(query.get("since")), _time(query.get("until"))
    cursor = (query.get("cursor") or "")[:500] or None
    shown = {
        "scenario": scenario or "",
        "status": status.value if status else "",
        "kind": kind.value if kind else "",
        "since": query.get("since", "") if since else "",
        "until": query.get("until", "") if until else "",
    }
    run_query = RunQuery(scenario=scenario, status=status, kind=kind, since=since, until=until, cursor=cursor,
                         limit=PAGE_SIZE)  # fmt: skip
    return run_query, shown


async def _page(request: web.Request) -> tuple[list[Run], str | None, dict[str, str]]:
    run_query, shown = _filters(request.query)
    try:
        page = await ui_services(request).api.runs.page(run_query)
    except ValueError:  # a cursor that is not one of ours: start again from the newest
        page = await ui_services(request).api.runs.page(RunQuery(**{**run_query.__dict__, "cursor": None}))
    return list(page.runs), page.next_cursor, shown


def row_view(run: Run) -> dict[str, Any]:
    """What a row of the runs table shows (and the polling view sends)."""
    view = run_view(run)
    row = {key: view[key] for key in ("id", "scenario", "status", "kind", "trigger", "triggered_by", "created_at",
                                       "started_at", "finished_at", "score", "passed", "usable_rps",
                                       "reason")}  # fmt: skip
    # A sweep's usable capacity is a rate, or a number of clients in concurrency mode.
    row["capacity_unit"] = "clients" if run.sweep is not None and run.sweep.mode.value == "concurrency" else "req/s"
    return row


async def runs_page(request: web.Request) -> web.Response:
    runs, next_cursor, shown = await _page(request)
    scenarios = sorted(v.name for v in await ui_services(request).api.catalog.all_latest())
    next_query = {**{k: v for k, v in shown.items() if v}, "cursor": next_cursor} if next_cursor else None
    return render("runs.html", runs=[row_view(r) for r in runs], filters=shown, scenarios=scenarios,
                  statuses=[s.value for s in RunStatus], kinds=[k.value for k in RunKind],
                  next_url=str(request.rel_url.with_query(next_query)) if next_query else None,
                  live=any(r.status in ACTIVE for r in runs))  # fmt: skip


async def runs_json(request: web.Request) -> web.Response:
    runs, next_cursor, _ = await _page(request)
    return web.json_response({"runs": [row_view(r) for r in runs], "next_cursor": next_cursor},
                             headers={"Cache-Control": "no-store"})  # fmt: skip


async def _scenario_document(request: web.Request, run: Run) -> Mapping[str, Any]:
    try:
        return (await ui_services(request).api.catalog.version(run.scenario_name, run.scenario_hash)).document
    except ScenarioNotFound:
        return {}


def _result_sections(run: Run) -> Markup:
    """The report's verdict, score components, phase table, traffic classes and the server's own view (escaped
    by the report's own code)."""
    document = run.result
    if run.kind is not RunKind.RUN or document is None or not isinstance(document.get("score"), Mapping):
        return Markup("")
    return Markup(
        sections.verdict(document)
        + sections.components(document)
        + sections.phase_results(document)
        + sections.classes(document)
        + sections.conversations(document)
        + sections.server(document)
    )


def sweep_report(run: Run) -> SweepParts | None:
    """A sweep's report content (the same sections and chart data as ``cliffwatch report`` and the report
    endpoint, from the same builders), or None before it has a result or when the result is not one. While
    the sweep runs, the content of its provisional document: the steps measured so far."""
    document = shown_result(run) if run.kind is RunKind.SWEEP else None
    if document is None:
        return None
    try:
        return sweep_parts(document)
    except ReportInvalid:
        log.warning("stored sweep result cannot be shown", run_id=run.id)
        return None


def sweep_version(run: Run) -> str | None:
    """Tells one state of a sweep's shown document from the next (the page redraws when it changes)."""
    document = shown_result(run) if run.kind is RunKind.SWEEP else None
    if document is None:
        return None
    return f"{document.get('status')}:{document.get('updated_at') or document.get('finished_at')}"


async def run_page(request: web.Request) -> web.Response:
    services = ui_services(request).api
    run = await services.runs.get(request.match_info["run_id"])
    document = await _scenario_document(request, run)
    data = await chart_data(services.run_store, run, document)
    specs = data["charts"] if data else []
    sweep = sweep_report(run)
    return render(
        "run.html",
        run=run_view(run),
        active=run.status in ACTIVE,
        charts=data,
        result_sections=_result_sections(run),
        sweep_sections=Markup(sweep.body) if sweep is not None else None,
        sweep_charts=sweep.data if sweep is not None else None,
        sweep_version=sweep_version(run) or "",
        chart_ids=[c["id"] for c in specs],
        chart_titles={c["id"]: (c["title"], c["caption"]) for c in specs},
    )


async def run_report(request: web.Request) -> web.Response:
    """The run's self-contained HTML report, as ``GET /api/v1/runs/{id}/report`` serves it (its own
    Content-Security-Policy: only its two inline scripts run), for a session rather than a bearer token."""
    services = ui_services(request).api
    run = await services.runs.get(request.match_info["run_id"])
    headers = {
        **report_headers(),
        "Content-Disposition": f'inline; filename="cliffwatch-{run.kind.value}-{run.id}.html"',
    }
    return web.Response(text=await report_page(services, run), content_type="text/html", charset="utf-8",
                        headers=headers)  # fmt: skip


async def run_json(request: web.Request) -> web.Response:
    services = ui_services(request).api
    run = await services.runs.get(request.match_info["run_id"])
    data = await chart_data(services.run_store, run, await _scenario_document(request, run))
    answer: dict[str, Any] = {"run": row_view(run), "active": run.status in ACTIVE, "charts": data}
    sweep = sweep_report(run)
    if sweep is not None:  # a running sweep's sections so far (escaped markup, as the page shows them) and charts
        answer["sweep"] = {"version": sweep_version(run), "body": sweep.body, "data": sweep.data}
    return web.json_response(answer, headers={"Cache-Control": "no-store"})


async def abort_run(request: web.Request) -> web.Response:
    user = current_user(request)
    run_id = request.match_info["run_id"]
    await ui_services(request).api.runs.abort(run_id, f"aborted from the dashboard by {user.token.name}")
    raise Redirect(f"/ui/runs/{run_id}")


def _form_values(form: Mapping[str, Any]) -> dict[str, str]:
    fields = ("scenario", "kind", "seed", "threshold", "target_url", "mode", "arrival", "auto", "start", "stop",
              "target", "step_s", "trials", "max_steps", "warmup_s", "cooldown_s", "variants", "nonce")  # fmt: skip
    return {key: str(form.get(key, "")).strip()[:2_000] for key in fields}


async def new_form(request: web.Request, *, values: dict[str, str] | None = None, problems: list[str] | None = None,
                   status: int = 200) -> web.Response:  # fmt: skip
    scenarios = sorted(v.name for v in await ui_services(request).api.catalog.all_latest())
    defaults = {"kind": "run", "mode": "rate", "step_s": "2", "trials": "1", "max_steps": "6", "warmup_s": "0",
                "cooldown_s": "0"}  # fmt: skip
    values = values or {**_form_values({}), **defaults}
    values.setdefault("scenario", request.query.get("scenario", ""))
    values["nonce"] = secrets.token_urlsafe(16)  # a new idempotency key for each form shown
    return render("new.html", status=status, scenarios=scenarios, values=values, problems=problems or [])


async def new_page(request: web.Request) -> web.Response:
    return await new_form(request)


def _number(values: dict[str, str], key: str, problems: list[str], *, integer: bool = False) -> float | int | None:
    text = values.get(key, "")
    if not text:
        return None
    try:
        return int(text) if integer else float(text)
    except ValueError:
        problems.append(f"{key}: must be {'a whole number' if integer else 'a number'}, got {text!r}")
        return None


def _sweep_document(values: dict[str, str], problems: list[str]) -> dict[str, Any]:
    sweep: dict[str, Any] = {"mode": values.get("mode") or "rate"}
    if values.get("arrival"):  # else the API's default (Poisson for a rate sweep)
        sweep["arrival"] = values["arrival"]
    if values.get("auto"):
        sweep["auto"] = True
    for key, integer in (("start", False), ("stop", False), ("target", False), ("step_s", False), ("trials", True),
                         ("max_steps", True), ("warmup_s", False), ("cooldown_s", False)):  # fmt: skip
        number = _number(values, key, problems, integer=integer)
        if number is not None:
            sweep[key] = number / 100 if key == "target" else number  # the form asks for a percentage
    variants = [v.strip() for v in values.get("variants", "").split(",") if v.strip()]
    if variants:
        sweep["variants"] = variants
    return sweep


async def new_submit(request: web.Request) -> web.Response:
    user = current_user(request)
    values = _form_values(await request.post())
    problems: list[str] = []
    seed = _number(values, "seed", problems, integer=True)
    threshold = _number(values, "threshold", problems)
    kind = RunKind.SWEEP if values["kind"] == "sweep" else RunKind.RUN
    sweep_document = _sweep_document(values, problems) if kind is RunKind.SWEEP else None
    if not values["scenario"]:
        problems.append("scenario: choose one")
    nonce = values["nonce"] if _NONCE.fullmatch(values["nonce"]) else None
    if problems:
        return await new_form(request, values=values, problems=problems, status=422)
    try:
        spec = None if sweep_document is None else parse_sweep_spec(sweep_document, "sweep")
        run, _ = await ui_services(request).api.runs.submit(RunRequest(
            scenario=values["scenario"],
            overrides=Overrides(target_url=values["target_url"] or None, seed=int(seed) if seed is not None else None,
                                threshold=float(threshold) if threshold is not None else None),
            # the form's nonce: a double-clicked submit queues one run, not two
            idempotency_key=None if nonce is None else f"{user.token.id}:ui:{nonce}",
            trigger=Trigger.API, triggered_by=f"{user.token.name} (dashboard)", sweep=spec,
        ))  # fmt: skip
    except CliffwatchError as exc:
        mapped = from_error(exc)
        if mapped is None:
            raise
        listed = mapped.extensions.get("problems") or mapped.extensions.get("errors") or []
        details = [f"{p.get('path') or 'scenario'}: {p.get('message')}" if isinstance(p, Mapping) else str(p)
                   for p in listed]  # fmt: skip
        return await new_form(request, values=values, problems=details or [mapped.detail], status=mapped.status)
    raise Redirect(f"/ui/runs/{run.id}")
