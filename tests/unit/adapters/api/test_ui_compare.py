"""The dashboard's compare page: the pickers, two finished runs judged figure by figure, and a refusal with its
reasons; every value escaped."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from api_harness import Api, make_settings, small_scenario
from ui_harness import Ui, serve_ui

from cliffwatch.domain.service.runs import TokenRole
from cliffwatch.services.runs import RunRequest


@pytest.fixture
async def ui() -> AsyncIterator[Ui]:
    async for served in serve_ui():
        yield served


async def finished_run(ui: Ui, name: str) -> str:
    request = RunRequest(scenario=name)
    run = (await ui.parts.services.runs.submit(request))[0]
    api = Api(client=ui.client, store=ui.parts.store, services=ui.parts.services, settings=make_settings(),
              tokens=ui.parts.tokens, clock=ui.parts.clock)  # fmt: skip
    await api.finish(run.id, document=small_scenario(name))
    return run.id


async def test_two_finished_runs_are_compared_on_the_page(ui: Ui) -> None:
    document = {**small_scenario("compare-page"), "description": "<script>alert(1)</script>"}
    await ui.parts.services.catalog.register(document)
    first, second = await finished_run(ui, "compare-page"), await finished_run(ui, "compare-page")
    cookie, _ = await ui.login(TokenRole.VIEWER)
    status, _, page, _ = await ui.get("/ui/compare", cookie)
    assert status == 200
    assert f'<option value="{first}"' in page
    assert f'<option value="{second}"' in page
    status, _, page, _ = await ui.get(f"/ui/compare?a={first}&b={second}", cookie)
    assert status == 200, page
    assert "B against A: <span" in page
    assert "no detectable difference" in page
    assert "on_time_share" in page
    assert "<script>alert(1)</script>" not in page


async def test_a_run_without_a_result_is_refused_with_its_reason(ui: Ui) -> None:
    await ui.parts.services.catalog.register(small_scenario("compare-page"))
    finished = await finished_run(ui, "compare-page")
    queued = (await ui.parts.services.runs.submit(RunRequest(scenario="compare-page")))[0]
    cookie, _ = await ui.login(TokenRole.VIEWER)
    status, _, page, _ = await ui.get(f"/ui/compare?a={finished}&b={queued.id}", cookie)
    assert status == 422
    assert "Cannot compare" in page
    assert f"{queued.id} has no result yet (it is queued)" in page
    status, _, page, _ = await ui.get(f"/ui/compare?a={finished}&b=nope", cookie)
    assert status == 404
