"""The aiohttp application: the route table (path, method, handler, role, cost) and ``create_app``.

The route table is the one place that says who may call what; the guard middleware reads it, and a test
holds it and the OpenAPI document together. The app opens nothing of its own: the services, their stores
and their connections are the bootstrap's, which closes them after the app has stopped.
"""

from __future__ import annotations

from aiohttp import web

from cliffwatch.adapters.api import admin, compare, gamedays, ops, reports, runs, scenarios, schedules
from cliffwatch.adapters.api.context import (
    EXPENSIVE,
    FAILED_AUTH,
    ROUTES,
    SERVICES,
    SETTINGS,
    TOKEN_RATES,
    ApiServices,
    ConcurrencyGate,
    Route,
)
from cliffwatch.adapters.api.middleware import guard, observe, problems
from cliffwatch.config import Settings
from cliffwatch.domain.service.runs import TokenRole
from cliffwatch.domain.traffic.rate_limit import KeyedBuckets, RateLimit

V1 = "/api/v1"
# For ``web.AppRunner(max_line_size=...)``: a query string the document allows (a 2,000-character target of
# 4-byte characters, percent-encoded) fits the request line: it gets the API's answer, not aiohttp's plain 400.
MAX_LINE_SIZE = 32_768
VIEWER, OPERATOR, ADMIN = TokenRole.VIEWER, TokenRole.OPERATOR, TokenRole.ADMIN

ROUTE_TABLE: tuple[Route, ...] = (
    Route(method="POST", path=f"{V1}/runs", handler=runs.create_run, role=OPERATOR),
    Route(method="GET", path=f"{V1}/runs", handler=runs.list_runs, role=VIEWER),
    Route(method="GET", path=f"{V1}/runs/{{run_id}}", handler=runs.get_run, role=VIEWER),
    Route(method="GET", path=f"{V1}/runs/{{run_id}}/timeseries", handler=runs.run_timeseries, role=VIEWER,
          expensive=True),
    Route(method="GET", path=f"{V1}/runs/{{run_id}}/outcomes", handler=runs.run_outcomes, role=VIEWER,
          expensive=True),
    Route(method="GET", path=f"{V1}/runs/{{run_id}}/server-metrics", handler=runs.run_server_metrics, role=VIEWER,
          expensive=True),
    Route(method="GET", path=f"{V1}/runs/{{run_id}}/report", handler=reports.run_report, role=VIEWER,
          expensive=True),
    Route(method="GET", path=f"{V1}/runs/{{run_id}}/notifications", handler=runs.run_notifications, role=VIEWER),
    Route(method="POST", path=f"{V1}/runs/{{run_id}}/abort", handler=runs.abort_run, role=OPERATOR),
    Route(method="GET", path=f"{V1}/compare", handler=compare.compare_runs, role=VIEWER, expensive=True),
    Route(method="GET", path=f"{V1}/trends", handler=runs.trends, role=VIEWER, expensive=True),
    Route(method="GET", path=f"{V1}/trends/capacity", handler=runs.capacity_trends, role=VIEWER, expensive=True),
    Route(method="POST", path=f"{V1}/sweeps", handler=runs.create_sweep, role=OPERATOR),
    Route(method="POST", path=f"{V1}/gamedays", handler=gamedays.create_gameday, role=OPERATOR),
    Route(method="GET", path=f"{V1}/gamedays", handler=gamedays.list_gamedays, role=VIEWER),
    Route(method="GET", path=f"{V1}/gamedays/{{gameday_id}}", handler=gamedays.get_gameday, role=VIEWER),
    Route(method="GET", path=f"{V1}/gamedays/{{gameday_id}}/report", handler=gamedays.gameday_report, role=VIEWER,
          expensive=True),
    Route(method="POST", path=f"{V1}/gamedays/{{gameday_id}}/abort", handler=gamedays.abort_gameday, role=OPERATOR),
    Route(method="GET", path=f"{V1}/gamedays/{{gameday_id}}/notifications", handler=gamedays.gameday_notifications,
          role=VIEWER),
    Route(method="GET", path=f"{V1}/scenarios", handler=scenarios.list_scenarios, role=VIEWER),
    Route(method="POST", path=f"{V1}/scenarios/validate", handler=scenarios.validate_scenario, role=VIEWER),
    Route(method="GET", path=f"{V1}/scenarios/{{name}}", handler=scenarios.get_scenario, role=VIEWER),
    Route(method="PUT", path=f"{V1}/scenarios/{{name}}", handler=scenarios.register_scenario, role=ADMIN),
    Route(method="POST", path=f"{V1}/schedules", handler=schedules.create_schedule, role=ADMIN),
    Route(method="GET", path=f"{V1}/schedules", handler=schedules.list_schedules, role=VIEWER),
    Route(method="GET", path=f"{V1}/schedules/{{schedule_id}}", handler=schedules.get_schedule, role=VIEWER),
    Route(method="PUT", path=f"{V1}/schedules/{{schedule_id}}", handler=schedules.replace_schedule, role=ADMIN),
    Route(method="DELETE", path=f"{V1}/schedules/{{schedule_id}}", handler=schedules.delete_schedule, role=ADMIN),
    Route(method="POST", path=f"{V1}/schedules/{{schedule_id}}/pause", handler=schedules.pause_schedule, role=ADMIN),
    Route(method="POST", path=f"{V1}/schedules/{{schedule_id}}/resume", handler=schedules.resume_schedule,
          role=ADMIN),
    Route(method="GET", path=f"{V1}/schedules/{{schedule_id}}/next", handler=schedules.next_fire_times,
          role=VIEWER),
    Route(method="POST", path=f"{V1}/tokens", handler=admin.create_token, role=ADMIN),
    Route(method="GET", path=f"{V1}/tokens", handler=admin.list_tokens, role=ADMIN),
    Route(method="DELETE", path=f"{V1}/tokens/{{token_id}}", handler=admin.revoke_token, role=ADMIN),
    Route(method="GET", path=f"{V1}/stop-all", handler=admin.stop_state, role=VIEWER),
    Route(method="POST", path=f"{V1}/stop-all", handler=admin.stop_all, role=ADMIN),
    Route(method="DELETE", path=f"{V1}/stop-all", handler=admin.release_stop, role=ADMIN),
    Route(method="GET", path=f"{V1}/openapi.json", handler=ops.openapi, role=VIEWER),
    Route(method="GET", path="/healthz", handler=ops.healthz, role=None),
    Route(method="GET", path="/readyz", handler=ops.readyz, role=None),
    # Viewer, not public: run counts and the emergency stop say what this service is doing to whom.
    Route(method="GET", path="/metrics", handler=ops.metrics, role=VIEWER),
)  # fmt: skip


def create_app(services: ApiServices, *, settings: Settings) -> web.Application:
    """The API as an aiohttp application, ready for ``web.AppRunner``: routes, middlewares (request id and
    metrics, problem responses, authentication and limits) and the body size limit from ``settings``."""
    app = web.Application(
        middlewares=[observe, problems, guard],
        # aiohttp refuses a bigger body while reading it (413), whatever Content-Length claimed.
        client_max_size=settings.api_max_body_bytes,
    )
    app[SERVICES] = services
    app[SETTINGS] = settings
    app[EXPENSIVE] = ConcurrencyGate(settings.api_max_expensive)
    app[TOKEN_RATES] = KeyedBuckets(RateLimit(rate=settings.api_rate_per_token, burst=settings.api_burst_per_token))
    failures = settings.api_failed_auth_per_minute
    app[FAILED_AUTH] = KeyedBuckets(RateLimit(rate=failures / 60, burst=max(1.0, failures)))
    table: dict[web.AbstractRoute, Route] = {}
    for route in ROUTE_TABLE:
        # "validate" is the validation endpoint, never a scenario name: without this, GET and PUT on
        # /scenarios/validate would reach the scenario handlers as a scenario called "validate".
        path = route.path.replace("{name}", "{name:(?!validate$)[^/]+}")
        table[app.router.add_route(route.method, path, route.handler)] = route
    app[ROUTES] = table
    return app
