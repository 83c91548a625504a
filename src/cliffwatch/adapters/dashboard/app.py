"""The dashboard's route table and its aiohttp sub-application under ``/ui``.

As in the API, the table says who may call what (``UiRoute.role``); the guard middleware (security.py)
reads it. ``mount_dashboard`` adds the sub-app to the API's app (the API's request ids, logs and metrics
cover it too; its bearer-token guard lets the dashboard's paths through to the dashboard's own guard) and
makes ``/`` and ``/ui`` redirect to it.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from cliffwatch.adapters.api.context import ROUTES, SELF_GUARDED, Route
from cliffwatch.adapters.dashboard import auth, gamedays, pages, runs
from cliffwatch.adapters.dashboard.compare_page import compare_page
from cliffwatch.adapters.dashboard.context import (
    LOGIN_LIMITS,
    UI_ROUTES,
    UI_SERVICES,
    UI_SETTINGS,
    DashboardServices,
    UiRoute,
)
from cliffwatch.adapters.dashboard.security import see_other, ui_guard
from cliffwatch.adapters.dashboard.static_files import static_file
from cliffwatch.config import Settings
from cliffwatch.domain.service.runs import TokenRole
from cliffwatch.domain.traffic.rate_limit import KeyedBuckets, RateLimit

PREFIX = "/ui"
VIEWER, OPERATOR, ADMIN = TokenRole.VIEWER, TokenRole.OPERATOR, TokenRole.ADMIN


async def home(request: web.Request) -> web.Response:
    return see_other(f"{PREFIX}/runs")


UI_ROUTE_TABLE: tuple[UiRoute, ...] = (
    UiRoute(method="GET", path="/", handler=home, role=None),
    UiRoute(method="GET", path="/login", handler=auth.login_form, role=None),
    UiRoute(method="POST", path="/login", handler=auth.login, role=None),
    UiRoute(method="POST", path="/logout", handler=auth.logout, role=VIEWER),
    UiRoute(method="GET", path="/static/{name}", handler=static_file, role=None),
    UiRoute(method="GET", path="/runs", handler=runs.runs_page, role=VIEWER),
    UiRoute(method="GET", path="/api/runs", handler=runs.runs_json, role=VIEWER, json=True),
    UiRoute(method="GET", path="/runs/{run_id}", handler=runs.run_page, role=VIEWER),
    UiRoute(method="GET", path="/api/runs/{run_id}", handler=runs.run_json, role=VIEWER, json=True),
    UiRoute(method="GET", path="/runs/{run_id}/report", handler=runs.run_report, role=VIEWER),
    UiRoute(method="POST", path="/runs/{run_id}/abort", handler=runs.abort_run, role=OPERATOR),
    UiRoute(method="GET", path="/new", handler=runs.new_page, role=OPERATOR),
    UiRoute(method="POST", path="/new", handler=runs.new_submit, role=OPERATOR),
    UiRoute(method="GET", path="/gamedays", handler=gamedays.gamedays_page, role=VIEWER),
    UiRoute(method="GET", path="/gamedays/{gameday_id}", handler=gamedays.gameday_page, role=VIEWER),
    UiRoute(method="GET", path="/gamedays/{gameday_id}/report", handler=gamedays.gameday_report, role=VIEWER),
    UiRoute(method="POST", path="/gamedays/{gameday_id}/abort", handler=gamedays.abort_gameday, role=OPERATOR),
    UiRoute(method="GET", path="/trends", handler=pages.trends_page, role=VIEWER),
    UiRoute(method="GET", path="/compare", handler=compare_page, role=VIEWER),
    UiRoute(method="GET", path="/schedules", handler=pages.schedules_page, role=VIEWER),
    UiRoute(method="POST", path="/schedules/{schedule_id}/pause", handler=pages.pause_schedule, role=ADMIN),
    UiRoute(method="POST", path="/schedules/{schedule_id}/resume", handler=pages.resume_schedule, role=ADMIN),
    UiRoute(method="GET", path="/scenarios", handler=pages.scenarios_page, role=VIEWER),
    UiRoute(method="POST", path="/scenarios/validate", handler=pages.validate_scenario, role=VIEWER),
    UiRoute(method="GET", path="/scenarios/{name}", handler=pages.scenario_page, role=VIEWER),
)


def create_dashboard(services: DashboardServices, *, settings: Settings) -> web.Application:
    """The dashboard as an aiohttp application, to be mounted at ``PREFIX``."""
    app = web.Application(middlewares=[ui_guard])
    app[UI_SERVICES] = services
    app[UI_SETTINGS] = settings
    app[LOGIN_LIMITS] = KeyedBuckets(RateLimit(rate=settings.ui_login_per_minute / 60, burst=settings.ui_login_burst))
    app[SELF_GUARDED] = True
    table: dict[web.AbstractRoute, UiRoute] = {}
    for route in UI_ROUTE_TABLE:
        table[app.router.add_route(route.method, route.path, route.handler)] = route
    app[UI_ROUTES] = table
    return app


async def dashboard_root(request: web.Request) -> web.Response:
    return see_other(f"{PREFIX}/")


def mount_dashboard(api_app: web.Application, services: DashboardServices, *, settings: Settings) -> None:
    """Adds the dashboard under ``/ui`` to the API's app, with ``/`` → ``/ui/runs`` and ``/ui`` → ``/ui/`` (the
    sub-app answers only below its prefix; without these the API's guard would answer them with a 401)."""
    current: Mapping[web.AbstractRoute, Route] = api_app[ROUTES]
    table = dict(current)
    for path, handler in (("/", home), (PREFIX, dashboard_root)):
        for method in ("GET", "HEAD"):
            added = api_app.router.add_route(method, path, handler)
            table[added] = Route(method=method, path=path, handler=handler, role=None)
    api_app[ROUTES] = table
    # After ``/ui``: the router tries resources in order, and the sub-app would claim ``/ui`` (as a 404).
    api_app.add_subapp(PREFIX, create_dashboard(services, settings=settings))
