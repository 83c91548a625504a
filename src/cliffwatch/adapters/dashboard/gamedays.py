"""The game-day pages: the latest game days, and one game day with each experiment's hypothesis, outcome and run
(linked to the run's own page), its webhook deliveries, its one HTML report, and a stop for operators."""

from __future__ import annotations

from aiohttp import web

from cliffwatch.adapters.api.gamedays import report_page
from cliffwatch.adapters.api.problems import not_found
from cliffwatch.adapters.api.reports import report_headers
from cliffwatch.adapters.api.views import gameday_view
from cliffwatch.adapters.dashboard.context import current_user, ui_services
from cliffwatch.adapters.dashboard.render import render
from cliffwatch.adapters.dashboard.security import Redirect
from cliffwatch.services.gamedays import GamedaysService

PAGE_SIZE = 50


def _gamedays(request: web.Request) -> GamedaysService:
    found = ui_services(request).api.gamedays
    if found is None:
        raise not_found("this instance runs no game days")
    return found


async def gamedays_page(request: web.Request) -> web.Response:
    found = await _gamedays(request).latest(PAGE_SIZE)
    return render("gamedays.html", gamedays=[gameday_view(g) for g in found])


async def gameday_page(request: web.Request) -> web.Response:
    gameday = await _gamedays(request).get(request.match_info["gameday_id"])
    return render("gameday.html", gameday=gameday_view(gameday), active=not gameday.status.terminal)


async def gameday_report(request: web.Request) -> web.Response:
    """The game day's page as ``GET /api/v1/gamedays/{id}/report`` serves it, for a session."""
    gameday_id = request.match_info["gameday_id"]
    headers = {**report_headers(), "Content-Disposition": f'inline; filename="cliffwatch-gameday-{gameday_id}.html"'}
    text = await report_page(_gamedays(request), gameday_id)
    return web.Response(text=text, content_type="text/html", charset="utf-8", headers=headers)


async def abort_gameday(request: web.Request) -> web.Response:
    gameday_id = request.match_info["gameday_id"]
    await _gamedays(request).abort(gameday_id, f"stopped from the dashboard by {current_user(request).token.name}")
    raise Redirect(f"/ui/gamedays/{gameday_id}")
