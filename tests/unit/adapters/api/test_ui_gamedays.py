"""The dashboard's game-day pages: the latest game days, one with each experiment's hypothesis, outcome and run,
its report and its stop for operators (not viewers); every value escaped."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from api_harness import small_scenario
from ui_harness import Ui, serve_ui

from cliffwatch.domain.service.gamedays import GamedayStatus
from cliffwatch.domain.service.runs import TokenRole, Trigger


@pytest.fixture
async def ui() -> AsyncIterator[Ui]:
    async for served in serve_ui():
        yield served


async def test_a_running_game_day_is_listed_shown_reported_and_stopped_by_an_operator(ui: Ui) -> None:
    gamedays = ui.parts.services.gamedays
    assert gamedays is not None
    await ui.parts.services.catalog.register(small_scenario("gd-page"))
    suite = {"name": "page-day", "experiments": [
        {"scenario": "gd-page", "expect": {"score_at_least": 50}},
        {"name": "<b>second</b>", "scenario": small_scenario("gd-inline")},
    ]}  # fmt: skip
    gameday, _ = await gamedays.start(suite, trigger=Trigger.API, triggered_by="<i>ci</i>")
    viewer, _ = await ui.login(TokenRole.VIEWER)
    status, _, page, _ = await ui.get("/ui/gamedays", viewer)
    assert status == 200
    assert f'href="/ui/gamedays/{gameday.id}"' in page
    assert "<i>ci</i>" not in page
    status, _, page, _ = await ui.get(f"/ui/gamedays/{gameday.id}", viewer)
    assert status == 200
    assert "score at least 50" in page
    assert "&lt;b&gt;second&lt;/b&gt;" in page
    assert "<b>second</b>" not in page
    assert "Stop this game day" not in page  # a viewer may not stop it
    status, headers, report, _ = await ui.get(f"/ui/gamedays/{gameday.id}/report", viewer)
    assert status == 200
    assert 'id="gameday-summary"' in report
    assert "Content-Security-Policy" in headers
    operator, csrf = await ui.login(TokenRole.OPERATOR)
    status, _, page, _ = await ui.get(f"/ui/gamedays/{gameday.id}", operator)
    assert "Stop this game day" in page
    status, _, _, _ = await ui.post(f"/ui/gamedays/{gameday.id}/abort", {"csrf": csrf}, operator)
    assert status == 303
    assert (await gamedays.get(gameday.id)).abort_requested == "stopped from the dashboard by operator-token"
    await gamedays.shutdown()
    assert (await gamedays.get(gameday.id)).status is not GamedayStatus.RUNNING
    assert (await ui.get("/ui/gamedays/nope", viewer))[0] == 404
