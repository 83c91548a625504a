"""The dashboard in process (the API's harness, with the dashboard mounted as `cliffwatch serve` mounts it):
login and its cookies, CSRF and origin checks, roles, logout and revocation, and every page rendering.

Cookies are handled by hand (no cookie jar), so each test sees exactly what the server set and sends.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from api_harness import Api, make_settings, provisional_sweep, small_scenario
from ui_harness import Ui, serve_ui

from cliffwatch.adapters.api.reports import report_headers
from cliffwatch.adapters.dashboard.auth import login_wait
from cliffwatch.adapters.report.render import sweep_parts
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import RunEnd, TokenRole
from cliffwatch.domain.traffic.rate_limit import KeyedBuckets, RateLimit
from cliffwatch.services.runs import RunRequest

DATA = re.compile(r'<script type="application/json" id="dashboard-data">(.*?)</script>', re.DOTALL)
SWEEP_FIXTURE = Path(__file__).parents[3] / "fixtures" / "reports" / "sweep-retries.json"


@pytest.fixture
async def ui() -> AsyncIterator[Ui]:
    async for served in serve_ui():
        yield served


async def test_the_login_cookies_are_httponly_strict_secure_and_scoped_to_the_dashboard(ui: Ui) -> None:
    status, headers, page, cookies = await ui.get("/ui/login")
    assert status == 200
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert 'type="password"' in page
    login = cookies["cw_login"]
    assert (login["httponly"], login["samesite"], login["path"], login["secure"]) == (True, "Strict", "/ui", True)
    cookie, _ = await ui.login(TokenRole.VIEWER)
    _, _, _, again = await ui.get("/ui/login")
    nonce = again["cw_login"].value
    status, headers, _, set_cookies = await ui.post(
        "/ui/login", {"token": ui.parts.tokens[TokenRole.VIEWER], "nonce": nonce}, cookie=f"cw_login={nonce}"
    )
    session = set_cookies["cw_session"]
    assert (session["httponly"], session["samesite"], session["path"], session["secure"]) == (True, "Strict", "/ui",
                                                                                               True)  # fmt: skip
    assert ui.parts.tokens[TokenRole.VIEWER] not in headers["Location"]
    assert session.value not in str(ui.parts.store.__dict__)  # only its hash is kept
    assert cookie != f"cw_session={session.value}"  # a new session id at every login


async def test_the_secure_attribute_follows_the_setting() -> None:
    async for ui in serve_ui(ui_cookie_secure=False):
        _, _, _, cookies = await ui.get("/ui/login")
        assert cookies["cw_login"]["secure"] == ""


async def test_a_wrong_token_or_a_forged_login_form_gets_no_session(ui: Ui) -> None:
    _, _, _, cookies = await ui.get("/ui/login")
    nonce = cookies["cw_login"].value
    status, _, page, set_cookies = await ui.post("/ui/login", {"token": "cw_wrong", "nonce": nonce},
                                                 cookie=f"cw_login={nonce}")  # fmt: skip
    assert status == 401
    assert "unknown or revoked" in page
    assert "cw_session" not in set_cookies
    forged = {"token": ui.parts.tokens[TokenRole.ADMIN], "nonce": "forged"}
    status, _, _, set_cookies = await ui.post("/ui/login", forged, cookie=f"cw_login={nonce}")
    assert status == 403
    assert "cw_session" not in set_cookies


async def test_login_attempts_beyond_the_limit_get_429_with_retry_after_and_no_session(ui: Ui) -> None:
    """By default (bursts of 10, 10 a minute) ten wrong tokens from one address spend its attempts: the next,
    even with a good token, is refused at once (429, Retry-After, the wait on the page) and gets no session."""
    _, _, _, cookies = await ui.get("/ui/login")
    nonce = cookies["cw_login"].value
    for guess in range(10):
        status, _, _, _ = await ui.post(
            "/ui/login", {"token": f"cw_{guess}", "nonce": nonce}, cookie=f"cw_login={nonce}"
        )
        assert status == 401
    status, headers, page, set_cookies = await ui.post(
        "/ui/login", {"token": ui.parts.tokens[TokenRole.ADMIN], "nonce": nonce}, cookie=f"cw_login={nonce}"
    )
    assert status == 429
    assert 1 <= int(headers["Retry-After"]) <= 6
    assert f"try again in {headers['Retry-After']} s" in page
    assert "cw_session" not in set_cookies


def test_login_attempts_are_limited_per_address_and_per_token_tried() -> None:
    """One address is held to its burst whatever tokens it tries; one token is held to its burst from whatever
    addresses it comes; an attempt an address's limit refuses does not count against the token."""
    limits = KeyedBuckets(RateLimit(rate=1 / 60, burst=2))
    at = 0
    assert [login_wait(limits, address="10.0.0.1", token=t, now_ns=at) for t in ("a", "b")] == [None, None]
    assert login_wait(limits, address="10.0.0.1", token="c", now_ns=at) == pytest.approx(60.0)
    assert login_wait(limits, address="10.0.0.2", token="c", now_ns=at) is None  # "c" was not counted above
    assert login_wait(limits, address="10.0.0.3", token="c", now_ns=at) is None
    assert login_wait(limits, address="10.0.0.4", token="c", now_ns=at) == pytest.approx(60.0)
    assert login_wait(limits, address="10.0.0.5", token=None, now_ns=at) is None  # an empty form: the address


async def test_pages_need_a_session(ui: Ui) -> None:
    status, headers, _, _ = await ui.get("/ui/runs")
    assert status == 303
    assert headers["Location"] == "/ui/login?next=/ui/runs"
    status, _, _, _ = await ui.get("/ui/api/runs")
    assert status == 401
    status, headers, _, _ = await ui.get("/")
    assert (status, headers["Location"]) == (303, "/ui/runs")
    status, headers, _, _ = await ui.get("/ui")  # not the API's 401: the dashboard's own root
    assert (status, headers["Location"]) == (303, "/ui/")
    status, headers, _, _ = await ui.get("/ui/")
    assert (status, headers["Location"]) == (303, "/ui/runs")
    assert (await ui.get("/ui/runs", "cw_session=forged"))[0] == 303


async def test_a_post_without_or_with_a_wrong_csrf_token_or_from_another_origin_is_refused(ui: Ui) -> None:
    cookie, csrf = await ui.login(TokenRole.OPERATOR)
    run = {"scenario": "burst-storm", "kind": "run", "nonce": "n" * 20}
    assert (await ui.post("/ui/new", run, cookie))[0] == 403
    assert (await ui.post("/ui/new", {**run, "csrf": "0" * 64}, cookie))[0] == 403
    status, _, page, _ = await ui.post("/ui/new", {**run, "csrf": csrf}, cookie, {"Origin": "http://evil.example"})
    assert status == 403
    assert "another site" in page
    assert (await ui.parts.store.active_runs()) == []
    status, headers, _, _ = await ui.post("/ui/new", {**run, "csrf": csrf}, cookie)
    assert status == 303
    [queued] = await ui.parts.store.active_runs()
    assert headers["Location"] == f"/ui/runs/{queued.id}"
    assert queued.triggered_by == "operator-token (dashboard)"
    # the same form sent twice (a double click) queues one run
    assert (await ui.post("/ui/new", {**run, "csrf": csrf}, cookie))[1]["Location"] == f"/ui/runs/{queued.id}"
    assert len(await ui.parts.store.active_runs()) == 1


async def test_a_viewer_can_read_but_not_trigger(ui: Ui) -> None:
    cookie, csrf = await ui.login(TokenRole.VIEWER)
    status, _, page, _ = await ui.get("/ui/runs", cookie)
    assert status == 200
    assert 'href="/ui/new"' not in page
    assert (await ui.get("/ui/new", cookie))[0] == 403
    status, _, page, _ = await ui.post("/ui/new", {"scenario": "burst-storm", "csrf": csrf}, cookie)
    assert status == 403
    assert "operator role" in page
    assert (await ui.parts.store.active_runs()) == []


async def test_an_invalid_request_is_shown_on_the_form_with_every_problem(ui: Ui) -> None:
    cookie, csrf = await ui.login(TokenRole.OPERATOR)
    status, _, page, _ = await ui.post("/ui/new", {"scenario": "burst-storm", "kind": "sweep", "csrf": csrf,
                                                   "start": "5", "stop": "2"}, cookie)  # fmt: skip
    assert status == 422
    assert "sweep.stop" in page
    status, _, page, _ = await ui.post("/ui/new", {"scenario": "burst-storm", "seed": "x", "csrf": csrf}, cookie)
    assert status == 422
    assert "seed: must be a whole number" in page


async def test_logout_and_revocation_end_the_session(ui: Ui) -> None:
    cookie, csrf = await ui.login(TokenRole.ADMIN)
    assert (await ui.post("/ui/logout", {}, cookie))[0] == 403  # CSRF here too
    status, headers, _, cleared = await ui.post("/ui/logout", {"csrf": csrf}, cookie)
    assert (status, headers["Location"]) == (303, "/ui/login")
    assert cleared["cw_session"]["max-age"] == "0"
    assert (await ui.get("/ui/runs", cookie))[0] == 303
    cookie, _ = await ui.login(TokenRole.OPERATOR)
    operator = next(t for t in await ui.parts.services.tokens.all() if t.role is TokenRole.OPERATOR)
    await ui.parts.services.tokens.revoke(operator.id)
    assert (await ui.get("/ui/runs", cookie))[0] == 303


async def test_every_page_renders_and_escapes_what_it_shows(ui: Ui) -> None:
    document = {**small_scenario("xss-check"), "description": "<script>alert(1)</script>"}
    await ui.parts.services.catalog.register(document)
    run = await ui.parts.store.get_run((await ui.parts.services.runs.submit(_request("xss-check")))[0].id)
    assert run is not None
    finished = {**small_scenario("xss-check")}
    api = Api(client=ui.client, store=ui.parts.store, services=ui.parts.services, settings=make_settings(),
              tokens=ui.parts.tokens, clock=ui.parts.clock)  # fmt: skip
    await api.finish(run.id, document=finished)
    cookie, _ = await ui.login(TokenRole.ADMIN)
    pages = ("/ui/runs", f"/ui/runs/{run.id}", "/ui/trends", "/ui/schedules", "/ui/scenarios",
             "/ui/scenarios/xss-check", "/ui/new", "/ui/runs?status=succeeded&kind=run&scenario=xss-check")  # fmt: skip
    for path in pages:
        status, headers, page, _ = await ui.get(path, cookie)
        assert status == 200, (path, page)
        assert headers["Cache-Control"] == "no-store"
        assert "<script>alert(1)</script>" not in page, path
    _, _, page, _ = await ui.get(f"/ui/runs/{run.id}", cookie)
    assert 'data-chart="throughput"' in page
    status, _, body, _ = await ui.get(f"/ui/api/runs/{run.id}", cookie)
    assert status == 200
    assert '"provisional": false' in body
    assert (await ui.get("/ui/static/report.js"))[0] == 200
    assert (await ui.get("/ui/static/secrets.txt"))[0] == 404
    assert (await ui.get("/ui/no-such-page", cookie))[0] == 404


async def test_a_pasted_scenario_is_validated(ui: Ui) -> None:
    cookie, csrf = await ui.login(TokenRole.VIEWER)
    status, _, page, _ = await ui.post("/ui/scenarios/validate", {"csrf": csrf, "document": "name: x\nphases: 3\n"},
                                       cookie)  # fmt: skip
    assert status == 200
    assert "problem(s)" in page
    assert "<code>phases</code>" in page
    text = yaml.safe_dump(small_scenario("pasted"))
    _, _, page, _ = await ui.post("/ui/scenarios/validate", {"csrf": csrf, "document": text}, cookie)
    assert "Valid: this document" in page


async def test_a_sweeps_page_shows_its_report_sections_and_chart_data(ui: Ui) -> None:
    """The run page of a sweep shows what its report shows (verdict, variants, rates, every step, the
    comparison), from the same builders, with the data renderSweep draws; before a result, a note."""
    document = json.loads(SWEEP_FIXTURE.read_text(encoding="utf-8"))
    spec = parse_sweep_spec({"start": 4, "stop": 24, "arrival": "constant", "variants": ["none", "immediate:3"]})
    run, _ = await ui.parts.services.runs.submit(RunRequest(scenario="burst-storm", sweep=spec))
    cookie, _ = await ui.login(TokenRole.VIEWER)
    status, _, page, _ = await ui.get(f"/ui/runs/{run.id}", cookie)
    assert status == 200
    assert 'id="sweep-note"' in page
    assert "appear here after its first step" in page
    clock = ui.parts.clock
    assert await ui.parts.store.claim_run(owner="t", now=clock(), lease_until=clock() + timedelta(minutes=5))
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=clock(), result=document, usable_rps=document["usable_rps"])
    assert await ui.parts.store.finish_run(run.id, owner="t", end=end)
    status, _, page, _ = await ui.get(f"/ui/runs/{run.id}", cookie)
    assert status == 200
    expected = sweep_parts(document)
    assert expected.body in page  # the report's own sections, verbatim
    for section in ('id="verdict"', 'id="comparison"', 'id="variant-0"', 'id="variant-1"', 'class="numbers steps"',
                    'data-chart="v0-throughput"', 'data-chart="cmp-goodput"'):  # fmt: skip
        assert section in page, section
    found = DATA.search(page)
    assert found is not None
    data = json.loads(found.group(1))
    assert data["charts"] is None
    assert data["sweep"] == json.loads(json.dumps(expected.data))
    usable = [m for m in data["sweep"]["frames"][0]["markers"] if m["kind"] == "usable"]
    assert [m["at"] for m in usable] == [document["variants"][0]["result"]["usable_rps"]]
    _, _, listed, _ = await ui.get("/ui/runs?kind=sweep", cookie)
    assert "13.5 req/s usable" in listed
    # the trends page: a capacity point per variant of the sweep, with its time in UTC and a link to the sweep
    status, _, page, _ = await ui.get("/ui/trends", cookie)
    assert status == 200
    assert page.count(f'<a href="/ui/runs/{run.id}">') == len(document["variants"])
    assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td><td>13\.5 ", page)


async def test_a_running_sweeps_page_and_its_polling_view_show_the_steps_so_far(ui: Ui) -> None:
    """While a sweep runs, its page shows the report's sections of its provisional document (the steps so far),
    and the view the page polls sends them again, with a version that changes at every step."""
    spec = parse_sweep_spec({"start": 2, "stop": 12, "arrival": "constant"})
    run, _ = await ui.parts.services.runs.submit(RunRequest(scenario="burst-storm", sweep=spec))
    clock = ui.parts.clock
    assert await ui.parts.store.claim_run(owner="t", now=clock(), lease_until=clock() + timedelta(minutes=5))
    cookie, _ = await ui.login(TokenRole.VIEWER)
    _, _, page, _ = await ui.get(f"/ui/runs/{run.id}", cookie)
    assert "appear here after its first step" in page
    status, _, body, _ = await ui.get(f"/ui/api/runs/{run.id}", cookie)
    assert (status, "sweep" in json.loads(body)) == (200, False)

    first = provisional_sweep(run.id, spec, [2.0, 4.0])
    assert await ui.parts.store.save_provisional_result(run.id, owner="t", result=first)
    _, _, page, _ = await ui.get(f"/ui/runs/{run.id}", cookie)
    expected = sweep_parts(first)
    assert expected.body in page
    assert "Provisional: the sweep is still running. 2 step(s) measured so far" in page
    assert "Updating every 2 s while the sweep is in progress" in page
    found = DATA.search(page)
    assert found is not None
    assert json.loads(found.group(1))["sweep"] == json.loads(json.dumps(expected.data))
    _, _, body, _ = await ui.get(f"/ui/api/runs/{run.id}", cookie)
    polled = json.loads(body)
    assert (polled["active"], polled["sweep"]["body"]) == (True, expected.body)
    assert polled["sweep"]["data"] == json.loads(json.dumps(expected.data))
    assert f'data-version="{polled["sweep"]["version"]}"' in page

    later = provisional_sweep(run.id, spec, [2.0, 4.0, 8.0])
    assert await ui.parts.store.save_provisional_result(run.id, owner="t", result=later)
    _, _, body, _ = await ui.get(f"/ui/api/runs/{run.id}", cookie)
    again = json.loads(body)["sweep"]
    assert again["version"] != polled["sweep"]["version"]
    assert again["body"].count("<tr>") > polled["sweep"]["body"].count("<tr>")  # one more step


async def test_a_runs_html_report_is_served_to_a_session_under_the_reports_own_policy(ui: Ui) -> None:
    """The report ``GET /api/v1/runs/{id}/report`` serves, for a dashboard session (no bearer token)."""
    run, _ = await ui.parts.services.runs.submit(_request("burst-storm"))
    cookie, _ = await ui.login(TokenRole.VIEWER)
    _, _, page, _ = await ui.get(f"/ui/runs/{run.id}", cookie)
    assert f'href="/ui/runs/{run.id}/report"' in page
    status, headers, report, _ = await ui.get(f"/ui/runs/{run.id}/report", cookie)
    assert status == 200
    assert headers["Content-Security-Policy"] == report_headers()["Content-Security-Policy"]  # not the pages'
    assert headers["Content-Disposition"] == f'inline; filename="cliffwatch-run-{run.id}.html"'
    assert 'id="report-data"' in report
    assert "no result yet" in report  # queued: the status page
    assert (await ui.get(f"/ui/runs/{run.id}/report"))[0] == 303  # a session is needed
    assert (await ui.get("/ui/runs/000000000000/report", cookie))[0] == 404


async def test_the_form_sends_every_sweep_parameter(ui: Ui) -> None:
    cookie, csrf = await ui.login(TokenRole.OPERATOR)
    form = {"scenario": "burst-storm", "kind": "sweep", "csrf": csrf, "mode": "rate", "arrival": "constant",
            "start": "2", "stop": "6", "target": "95", "step_s": "1.5", "trials": "1", "max_steps": "4",
            "warmup_s": "0.5", "cooldown_s": "0", "variants": "none, immediate:2", "nonce": "s" * 20}  # fmt: skip
    status, headers, _, _ = await ui.post("/ui/new", form, cookie)
    assert status == 303, headers
    [queued] = await ui.parts.store.active_runs()
    assert queued.sweep is not None
    sent = {"mode": "rate", "arrival": "constant", "start": 2.0, "stop": 6.0, "target": 0.95, "step_s": 1.5,
            "trials": 1, "max_steps": 4, "warmup_s": 0.5, "cooldown_s": 0.0,
            "variants": ["none", "immediate:2"]}  # fmt: skip
    assert {key: queued.sweep.to_dict()[key] for key in sent} == sent
    # a concurrency sweep with constant arrivals is the API's refusal, shown on the form
    status, _, page, _ = await ui.post("/ui/new", {**form, "mode": "concurrency", "nonce": "t" * 20}, cookie)
    assert status == 422
    assert "sweep.arrival" in page


def _request(name: str) -> RunRequest:
    return RunRequest(scenario=name)
