"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a real `cliffwatch
serve` on loopback: every page loads without console errors, charts are drawn, a run triggered from the form
appears and completes with live charts on the way, a sweep triggered from the form shows its steps while it
runs and, when it completes, draws the sweep report's charts with usable capacity marked, the runs list
notices a run started elsewhere, the trends page has a point per run and a capacity point per sweep, and
login, logout, CSRF and roles behave as the security model says (docs/dashboard.md).

Each test makes the runs it looks at (through its fixtures, or the form), so any one of them passes alone;
the runs list and trends tests use scenarios of their own, so runs of other tests never count there.

The whole walk runs against SQLite; the login, every page and a run triggered from the form run against
PostgreSQL too (the production store), which costs about half the SQLite walk's time.

Screenshots go to ``$CLIFFWATCH_TEST_ARTIFACTS`` (default ``tests/artifacts/``). Without /usr/bin/chromium
these tests fail rather than skip (``apt-get install chromium``; ``make test`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from browser_kit import REPO, artifacts_dir, chromium
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page

RUN_CHARTS = ["throughput", "latency-ttft", "latency-e2e", "outcomes", "concurrency"]
SWEEP_CHARTS = ["v0-throughput", "v0-attainment", "v0-latency-ttft", "v0-latency-e2e"]
GREEN, VERMILLION = "#009E73", "#D55E00"  # usable capacity and the cliff, as the sweep report draws them
# A short sweep of the quick target (about 14 req/s): steps of 1 s, constant arrivals, at most 6 steps (~12 s).
SWEEP_FORM = {"start": "4", "stop": "20", "step_s": "1", "warmup_s": "0.5", "cooldown_s": "0", "trials": "1",
              "max_steps": "6"}  # fmt: skip

pytestmark = pytest.mark.slow

# About six seconds against a small built-in target, pushed past its capacity in the middle.
QUICK = {
    "name": "quick-ui",
    "description": "a short run for the dashboard's browser test",
    "seed": 3,
    "target": {"url": "builtin", "builtin": {"max_batch": 4, "decode_base_ms": 10, "decode_per_seq_ms": 2},
               "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 16}},
    "slo": {"ttft_ms": 300, "e2e_ms": 800, "timeout_ms": 2000},
    "phases": [
        {"name": "base", "role": "baseline", "duration_s": 2, "arrival": {"process": "poisson", "rate": 6}},
        {"name": "push", "role": "stress", "duration_s": 2, "arrival": {"process": "poisson", "rate": 30}},
        {"name": "calm", "role": "recovery", "duration_s": 2, "arrival": {"process": "poisson", "rate": 6}},
    ],
}  # fmt: skip
# About three seconds, well within the target's capacity: the runs and sweeps the trends and runs list tests make.
SHORT_PHASES = [{**phase, "duration_s": 1, "arrival": {"process": "poisson", "rate": 6}} for phase in QUICK["phases"]]
# Two steps of one second, both far below the target's capacity: a usable rate, in a few seconds.
TINY_SWEEP = {"start": 4, "stop": 8, "step_s": 1, "warmup_s": 0, "cooldown_s": 0, "trials": 1, "max_steps": 2,
              "arrival": "constant"}  # fmt: skip


def short_scenario(name: str) -> dict[str, Any]:
    return {**QUICK, "name": name, "description": f"a short run for the dashboard's browser test ({name})",
            "phases": SHORT_PHASES}  # fmt: skip


# Non-blank pixels of each run chart's canvas (read from a copy, so the page's own stays untouched).
PAINTED_JS = """
() => window.CliffwatchCharts.charts.map(({id, plot}) => {
  const copy = document.createElement("canvas");
  copy.width = plot.ctx.canvas.width; copy.height = plot.ctx.canvas.height;
  const ctx = copy.getContext("2d", {willReadFrequently: true});
  ctx.drawImage(plot.ctx.canvas, 0, 0);
  const data = ctx.getImageData(0, 0, copy.width, copy.height).data;
  let painted = 0;
  for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted++;
  const values = plot.data.slice(1).flat().filter(v => v != null).length;
  return {id, painted, values};
})
"""
# The share of a chart's plot height where a marker's colour is found within two pixels of ``rate``.
MARKER_JS = """
([id, rate, hex]) => {
  const {plot} = window.CliffwatchCharts.charts.find(c => c.id === id), b = plot.bbox;
  const copy = document.createElement("canvas");
  copy.width = plot.ctx.canvas.width; copy.height = plot.ctx.canvas.height;
  const ctx = copy.getContext("2d", {willReadFrequently: true});
  ctx.drawImage(plot.ctx.canvas, 0, 0);
  const x = Math.round(plot.valToPos(rate, "x", true)), n = parseInt(hex.slice(1), 16);
  const img = ctx.getImageData(x - 2, b.top, 5, b.height).data;
  const near = i => img[i + 3] > 150 && Math.abs(img[i] - (n >> 16)) < 30 &&
    Math.abs(img[i + 1] - ((n >> 8) & 255)) < 30 && Math.abs(img[i + 2] - (n & 255)) < 30;
  let rows = 0;
  for (let row = 0; row < b.height; row++) {
    let hit = false;
    for (let col = 0; col < 5; col++) if (near((row * 5 + col) * 4)) hit = true;
    if (hit) rows++;
  }
  return rows / b.height;
}
"""
# A running sweep's page once it shows a step: the steps, the provisional note and the painted charts (one
# evaluation, so the reload at the sweep's end cannot come between them); false until then.
LIVE_SWEEP_JS = """
(charts) => {
  const status = document.getElementById("run-status"), note = document.getElementById("provisional-note");
  const steps = document.querySelectorAll("#variant-0 table.steps tbody tr").length;
  if (status.textContent !== "running" || !note || steps < 1) return false;
  if (document.body.getAttribute("data-charts-ready") !== String(charts)) return false;
  return {steps, note: note.textContent, charts: (PAINTED)()};
}
""".replace("PAINTED", PAINTED_JS.strip())
# The trends page's capacity charts: the points each draws.
CAPACITY_POINTS_JS = """
() => window.CliffwatchTrends.filter(p => p.root.parentElement.hasAttribute("data-capacity-plot"))
  .map(p => p.data[1].filter(v => v != null).length)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class Served:
    base: str
    tokens: dict[str, str]  # role → token
    database: str  # "sqlite" or "postgresql"

    def api(self, method: str, path: str, body: object | None = None, role: str = "admin") -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.tokens[role]}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=15) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def scenario(self, document: dict[str, Any]) -> str:
        """Registers ``document`` (again: idempotent); its name."""
        self.api("PUT", f"/api/v1/scenarios/{document['name']}", document)
        return str(document["name"])

    def wait_finished(self, run_id: str, timeout_s: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            run: dict[str, Any] = self.api("GET", f"/api/v1/runs/{run_id}")
            if run["status"] not in ("queued", "running"):
                return run
            assert time.monotonic() < deadline, run
            time.sleep(0.3)


@contextlib.contextmanager
def serving(where: Path, database_url: str, roles: tuple[str, ...]) -> Iterator[Served]:
    """`cliffwatch serve` on a free loopback port and ``database_url``, with a token per role, the quick
    scenario registered and one schedule."""
    port = free_port()
    env = {**os.environ, "CLIFFWATCH_DATABASE_URL": database_url,
           "CLIFFWATCH_STATE_DIR": str(where / "state"), "CLIFFWATCH_LISTEN_PORT": str(port),
           "CLIFFWATCH_LOG_FORMAT": "json"}  # fmt: skip
    env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)
    env.pop("CLIFFWATCH_UI_COOKIE_SECURE", None)  # the default, Secure, is what is tested
    tokens = {}
    for role in roles:
        command = [sys.executable, "-m", "cliffwatch", "token", "create", "--role", role, "--name", f"{role}-ui"]
        made = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert made.returncode == 0, made.stderr
        tokens[role] = made.stdout.strip()
    log = (where / "serve.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "cliffwatch", "serve"], cwd=REPO, env=env, stdout=log,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "listening on" not in (where / "serve.log").read_text():
            assert process.poll() is None, (where / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.1)
        database = "postgresql" if database_url.startswith("postgresql") else "sqlite"
        served = Served(base=f"http://127.0.0.1:{port}", tokens=tokens, database=database)
        served.api("PUT", "/api/v1/scenarios/quick-ui", QUICK)
        served.api("POST", "/api/v1/schedules", {"name": "nightly quick", "cron": "0 3 * * *",
                                                 "timezone": "Europe/Berlin", "scenario": "quick-ui"})  # fmt: skip
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        finally:
            log.close()


@dataclass(frozen=True, kw_only=True)
class History:
    scenario: str
    runs: list[str]  # scored runs, oldest first
    sweeps: list[str]  # short sweeps, oldest first


def queue_history(served: Served) -> History:
    """A scenario of its own with two runs and two short sweeps, queued (the instance runs two at a time)."""
    name = served.scenario(short_scenario("trend-ui"))
    runs = [served.api("POST", "/api/v1/runs", {"scenario": name, "overrides": {"seed": seed}}, "operator")["id"]
            for seed in (1, 2)]  # fmt: skip
    sweeps = [served.api("POST", "/api/v1/sweeps", {"scenario": name, "sweep": TINY_SWEEP}, "operator")["id"]
              for _ in range(2)]  # fmt: skip
    return History(scenario=name, runs=runs, sweeps=sweeps)


@pytest.fixture(scope="module")
def served_with_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, History]]:
    """The SQLite instance, with a token per role and one run already finished, so a run page has charts; and
    the trends' history, queued at once so that it runs while other tests do (``trend_history`` waits for it)."""
    where = tmp_path_factory.mktemp("dashboard")
    with serving(where, f"sqlite+aiosqlite:///{where / 'cw.db'}", ("viewer", "operator", "admin")) as served:
        first = served.api("POST", "/api/v1/runs", {"scenario": "quick-ui", "overrides": {"seed": 11}}, "operator")
        history = queue_history(served)
        assert served.wait_finished(first["id"])["status"] == "succeeded"
        yield served, history


@pytest.fixture(scope="module")
def served(served_with_history: tuple[Served, History]) -> Served:
    return served_with_history[0]


@pytest.fixture(scope="module")
def trend_history(served_with_history: tuple[Served, History]) -> History:
    """A scenario of its own with two scored runs and two short sweeps, all finished: what its trends are made
    of, whatever else the instance has run."""
    served, history = served_with_history
    for run_id in history.runs + history.sweeps:
        assert served.wait_finished(run_id)["status"] == "succeeded"
    return history


@pytest.fixture(scope="module")
def served_pg(postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The same on a PostgreSQL database of its own, with one finished run (no sweep: the sweep walk is
    SQLite's; the store's sweep documents are covered on PostgreSQL by the service API's walk)."""
    where = tmp_path_factory.mktemp("dashboard-pg")
    name = f"ui_{uuid.uuid4().hex[:8]}"
    # In a thread of its own: Playwright's sync API keeps an event loop running in this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        url: str = pool.submit(lambda: asyncio.run(postgres.create_database(name))).result(timeout=60)
    with serving(where, url, ("viewer", "operator", "admin")) as served:
        first = served.api("POST", "/api/v1/runs", {"scenario": "quick-ui", "overrides": {"seed": 11}}, "operator")
        assert served.wait_finished(first["id"])["status"] == "succeeded"
        yield served


@pytest.fixture(params=["sqlite", "postgresql"])
def instance(request: pytest.FixtureRequest) -> Served:
    """The walks that run on both databases: the SQLite instance, then the PostgreSQL one."""
    found: Served = request.getfixturevalue("served" if request.param == "sqlite" else "served_pg")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


class Watched:
    """A page that records every console error or warning and every uncaught page error."""

    def __init__(self, context: BrowserContext) -> None:
        self.page: Page = context.new_page()
        self.problems: list[str] = []
        self.suffix = ""  # added to screenshot names (the PostgreSQL walk's)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text} ({message.location.get('url')})")

    def clean(self) -> None:
        assert self.problems == [], self.problems

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(artifacts_dir() / f"dashboard-{name}{self.suffix}.png"), full_page=True)


def log_in(browser: Browser, served: Served, role: str) -> tuple[BrowserContext, Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watched = Watched(context)
    watched.suffix = "" if served.database == "sqlite" else f"-{served.database}"
    page = watched.page
    page.goto(f"{served.base}/ui/runs")
    assert page.url.startswith(f"{served.base}/ui/login?next=/ui/runs")  # sent to log in first
    page.fill("#token", served.tokens[role])
    page.click("form.login button")
    page.wait_for_url(f"{served.base}/ui/runs")
    assert served.tokens[role] not in page.url
    return context, watched


def test_the_session_cookie_is_kept_by_chromium_on_loopback_http_with_its_attributes(
    browser: Browser, instance: Served
) -> None:
    """Chromium keeps a Secure cookie from http://127.0.0.1 (a potentially trustworthy origin) and sends it."""
    context, watched = log_in(browser, instance, "viewer")
    try:
        [cookie] = [c for c in context.cookies() if c["name"] == "cw_session"]
        assert (cookie["secure"], cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, True, "Strict",
                                                                                              "/ui")  # fmt: skip
        assert watched.page.evaluate("document.cookie") == ""  # HttpOnly: no script can read it
        assert watched.page.locator("header .who").inner_text().startswith("viewer-ui")
        watched.clean()
    finally:
        context.close()


def test_every_page_loads_without_console_errors_and_the_run_charts_are_drawn(
    browser: Browser, instance: Served
) -> None:
    served = instance
    context, watched = log_in(browser, served, "admin")
    page = watched.page
    try:
        watched.shot("runs")
        # the instance's first run (its fixture's): the oldest of its scenario's, newest first
        first = served.api("GET", "/api/v1/runs?scenario=quick-ui&kind=run&status=succeeded")["runs"][-1]["id"]
        assert page.locator(f"#runs-table tr[data-run='{first}']").count() == 1
        page.goto(f"{served.base}/ui/runs/{first}")
        page.wait_for_selector("body[data-charts-ready='5']")
        drawn = page.evaluate(PAINTED_JS)
        assert [c["id"] for c in drawn] == RUN_CHARTS
        assert all(c["painted"] > 1_000 and c["values"] > 0 for c in drawn), drawn
        assert page.locator(".verdict").count() == 1  # the report's verdict section
        watched.shot("run")
        pages = (("/ui/schedules", "schedules"), ("/ui/scenarios", "scenarios"), ("/ui/scenarios/quick-ui", "scenario"),
                 ("/ui/new", "new"), ("/ui/trends", "trends"))  # fmt: skip
        for path, name in pages:
            response = page.goto(served.base + path)
            assert response is not None
            assert response.status == 200, path
            watched.shot(name)
        page.goto(f"{served.base}/ui/schedules")
        assert page.locator("tr[data-schedule] td.next").inner_text().count("UTC") == 3
        watched.clean()
    finally:
        context.close()


def test_a_run_triggered_from_the_form_appears_updates_live_and_completes(browser: Browser, instance: Served) -> None:
    served = instance
    context, watched = log_in(browser, served, "operator")
    page = watched.page
    try:
        page.goto(f"{served.base}/ui/new")
        page.select_option("select[name=scenario]", "quick-ui")
        page.fill("input[name=seed]", "21")
        page.click("#trigger-form button[type=submit]")
        page.wait_for_url(re.compile(r".*/ui/runs/[0-9a-f]{12}$"))
        run_id = page.url.rsplit("/", 1)[1]
        assert page.locator("#run-status").inner_text() in ("queued", "running")
        # While it runs the page polls and redraws provisional charts from the outcomes so far.
        page.wait_for_selector("body[data-live-updates]", timeout=20_000)
        page.wait_for_function("document.getElementById('run-started').textContent.endsWith(' UTC')")
        watched.shot("run-live")
        page.wait_for_selector("#run-status.succeeded", timeout=90_000)  # the page reloads when it ends
        page.wait_for_selector("body[data-charts-ready='5']")
        assert page.locator(".verdict").count() == 1
        watched.shot("run-finished")
        page.goto(f"{served.base}/ui/runs?scenario=quick-ui")
        row = page.locator(f"tr[data-run='{run_id}']")
        assert row.locator("td.status").inner_text() == "succeeded"
        assert "(dashboard)" in row.inner_text()
        watched.clean()
    finally:
        context.close()


def test_the_runs_page_notices_a_run_started_elsewhere_and_follows_its_status(browser: Browser,
                                                                             served: Served) -> None:  # fmt: skip
    """Loaded with nothing in progress (a scenario of its own, filtered), the page still polls: a run queued
    through the API appears and ends there, without a reload."""
    name = served.scenario(short_scenario("live-ui"))
    context, watched = log_in(browser, served, "viewer")
    page = watched.page
    try:
        page.goto(f"{served.base}/ui/runs?scenario={name}")
        assert page.locator("#runs-table").get_attribute("data-live") == "false"
        assert page.locator("#runs-table tr.empty").count() == 1
        page.evaluate("window.loadedOnce = true")  # gone if the page reloaded
        queued = served.api("POST", "/api/v1/runs", {"scenario": name, "overrides": {"seed": 31}}, "operator")
        row = page.locator(f"tr[data-run='{queued['id']}']")
        row.wait_for(timeout=15_000)  # within the idle interval (5 s)
        assert page.locator("#runs-table tr.empty").count() == 0
        row.locator("td.status .pill.succeeded").wait_for(timeout=60_000)
        assert row.locator("td.score").inner_text() != "–"
        assert page.evaluate("window.loadedOnce") is True
        assert page.url == f"{served.base}/ui/runs?scenario={name}"
        watched.shot("runs-live")
        watched.clean()
    finally:
        context.close()


def test_a_sweep_triggered_from_the_form_completes_and_its_page_draws_the_sweep_report(
    browser: Browser, served: Served
) -> None:
    context, watched = log_in(browser, served, "operator")
    page = watched.page
    try:
        page.goto(f"{served.base}/ui/new")
        page.select_option("select[name=scenario]", "quick-ui")
        page.check("input[name=kind][value=sweep]")
        page.select_option("select[name=arrival]", "constant")
        for name, value in SWEEP_FORM.items():
            page.fill(f"input[name={name}]", value)
        page.click("#trigger-form button[type=submit]")
        page.wait_for_url(re.compile(r".*/ui/runs/[0-9a-f]{12}$"))
        run_id = page.url.rsplit("/", 1)[1]
        assert page.locator("#run-status").inner_text() in ("queued", "running")
        assert "Updating every 2 s while the sweep is in progress" in page.locator("#sweep-note").inner_text()
        # While it runs, the page draws the steps measured so far (provisional), redrawn after each step.
        live = page.wait_for_function(LIVE_SWEEP_JS, arg=len(SWEEP_CHARTS), timeout=30_000).json_value()
        assert live["steps"] >= 1, live
        assert "Provisional: the sweep is still running" in live["note"], live
        assert all(c["painted"] > 5_000 and c["values"] > 0 for c in live["charts"]), live
        watched.shot("sweep-live")
        page.wait_for_selector("#run-status.succeeded", timeout=90_000)  # the page reloads when it ends
        assert page.locator("#provisional-note").count() == 0
        page.wait_for_selector(f"body[data-charts-ready='{len(SWEEP_CHARTS)}']")
        run = served.api("GET", f"/api/v1/runs/{run_id}")
        assert run["sweep"]["arrival"] == "constant"
        assert (run["sweep"]["step_s"], run["sweep"]["max_steps"]) == (1, 6)
        result = run["result"]["variants"][0]["result"]
        drawn = page.evaluate(PAINTED_JS)
        assert [c["id"] for c in drawn] == SWEEP_CHARTS
        assert all(c["painted"] > 5_000 and c["values"] > 0 for c in drawn), drawn
        for chart in SWEEP_CHARTS:  # every series in the legend, with its own line marker
            labels = page.evaluate(f"window.CliffwatchCharts.charts.find(c => c.id === '{chart}')"
                                   ".plot.series.slice(1).map(s => s.label)")  # fmt: skip
            legend = page.locator(f"#chart-{chart} .u-legend").inner_text()
            assert all(label in legend for label in labels), (chart, labels, legend)
            assert page.locator(f"#chart-{chart} .u-legend canvas.line-marker").count() == len(labels)
        # usable capacity: a solid green line over the plot's height at its rate, and nowhere else
        assert result["usable_rps"] is not None, result["verdict"]
        assert page.evaluate(MARKER_JS, ["v0-throughput", result["usable_rps"], GREEN]) > 0.8
        assert page.evaluate(MARKER_JS, ["v0-throughput", result["usable_rps"] / 2, GREEN]) < 0.2
        if result["first_bad_rps"] is not None:  # the cliff: dashed vermillion
            assert page.evaluate(MARKER_JS, ["v0-attainment", result["first_bad_rps"], VERMILLION]) > 0.4
        # the report's sections: the verdict, the variant's facts, its rates and every step
        assert f"usable {result['usable_rps']:g} req/s" in page.locator("#verdict").inner_text()
        assert result["verdict"] in page.locator("#verdict").inner_text()
        assert page.locator("#variant-0 table.steps tbody tr").count() == len(result["steps"])
        assert page.locator("#variant-0 table.rates tbody tr").count() == len(result["rates"])
        watched.shot("sweep")
        page.locator("#chart-v0-throughput").screenshot(path=str(artifacts_dir() / "dashboard-sweep-markers.png"))
        # its self-contained HTML report, as the API serves it (under the report's own policy), for the session
        page.click("#report-link")
        page.wait_for_url(f"{served.base}/ui/runs/{run_id}/report")
        page.wait_for_selector(f"body[data-charts-ready='{len(SWEEP_CHARTS)}']", state="attached")
        assert f"usable {result['usable_rps']:g} req/s" in page.locator("#verdict").inner_text()
        page.goto(f"{served.base}/ui/runs?kind=sweep")
        row = page.locator(f"tr[data-run='{run_id}']")
        assert row.locator("td.status").inner_text() == "succeeded"
        assert row.locator("td.score").inner_text() == f"{result['usable_rps']:.1f} req/s usable"
        watched.clean()
    finally:
        context.close()


def test_the_trends_page_shows_a_point_for_each_run_and_a_capacity_point_for_each_sweep(
    browser: Browser, served: Served, trend_history: History
) -> None:
    context, watched = log_in(browser, served, "viewer")
    page = watched.page
    try:
        runs, sweeps = trend_history.runs, trend_history.sweeps
        page.goto(f"{served.base}/ui/trends?scenario={trend_history.scenario}")
        page.wait_for_selector("body[data-charts-ready='2']")  # the score's chart and the capacity's
        points = page.evaluate("window.CliffwatchTrends[0].data[0].length")
        assert points == len(runs)
        assert page.locator("table.trend-points tbody tr").count() == len(runs)
        assert page.evaluate(CAPACITY_POINTS_JS) == [len(sweeps)]
        # times in UTC on a 24-hour clock: the axis' ticks ("14:40", not "2:40pm") and the legend's value
        ticks = page.evaluate("window.CliffwatchTrends.flatMap(p => p.axes[0]._values.filter(v => v))")
        assert ticks
        assert not any(re.search(r"am|pm", t, re.IGNORECASE) for t in ticks), ticks
        assert any(re.search(r"\b\d{2}:\d{2}\b", t) for t in ticks), ticks
        shown, utc = page.evaluate("(p => [p.series[0].value(p, p.data[0][0], 0, 0), "
                                   "new Date(p.data[0][0] * 1000).toISOString().slice(0, 16).replace('T', ' ')])"
                                   "(window.CliffwatchTrends[0])")  # fmt: skip
        assert shown == utc, (shown, utc)
        assert page.locator("table.capacity-points tbody tr").count() == len(sweeps)
        # every line's legend entry drawn with its own dash, as in the reports (not colour alone)
        assert page.locator("[data-trend='0'] .u-legend canvas.line-marker").count() >= 3
        assert page.locator("[data-capacity-plot='0'] .u-legend canvas.line-marker").count() == 2
        for run_id in runs + sweeps:  # each point's row links its run
            assert page.locator(f"table a[href='/ui/runs/{run_id}']").count() == 1, run_id
        watched.shot("trends-scenario")
        watched.clean()
    finally:
        context.close()


def test_a_scenario_with_one_run_says_first_run_and_times_read_as_people_read_them(
    browser: Browser, served: Served
) -> None:
    """One run is no trend: the page says "first run of this scenario" with its time and score, and draws no
    lone point on an empty axis. The run's page shows its times in UTC to the second."""
    name = served.scenario(short_scenario("first-ui"))
    run = served.api("POST", "/api/v1/runs", {"scenario": name}, "operator")
    assert served.wait_finished(run["id"])["status"] == "succeeded"
    context, watched = log_in(browser, served, "viewer")
    page = watched.page
    try:
        page.goto(f"{served.base}/ui/trends?scenario={name}")
        page.wait_for_selector("body[data-charts-ready='0']", state="attached")
        text = page.locator("#score-trends").inner_text()
        first = r"First run of this scenario \(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC\): score \d"
        assert re.search(first, text), text
        assert page.locator("#score-trends [data-trend]").count() == 0
        watched.shot("trends-first-run")
        page.goto(f"{served.base}/ui/runs/{run['id']}")
        page.wait_for_selector("body[data-charts-ready='5']")
        for label in ("Created", "Started", "Finished"):
            shown = page.locator(f"dt:text-is('{label}') + dd").inner_text()
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", shown), (label, shown)
        watched.shot("run-times")
        watched.clean()
    finally:
        context.close()


# A single-slot target (about 3 req/s) sent 20 req/s for two seconds with a 700-ms timeout: once its queue holds
# more than two requests every one of them times out, so whole seconds offer requests and complete none.
COLLAPSE = {
    **QUICK, "name": "collapse-ui", "description": "a stress phase in which whole seconds complete nothing",
    "target": {"url": "builtin", "builtin": {"max_batch": 1, "decode_base_ms": 40, "decode_per_seq_ms": 0},
               "request": {"model": "sim-llm", "prompt_tokens": 8, "max_tokens": 8}},
    "slo": {"ttft_ms": 500, "e2e_ms": 700, "timeout_ms": 700},
    "phases": [
        {"name": "base", "role": "baseline", "duration_s": 2, "arrival": {"process": "constant", "rate": 1}},
        {"name": "push", "role": "stress", "duration_s": 2, "arrival": {"process": "constant", "rate": 20}},
        {"name": "calm", "role": "recovery", "duration_s": 2, "arrival": {"process": "constant", "rate": 1}},
    ],
}  # fmt: skip


def test_a_run_page_marks_the_seconds_that_completed_nothing(browser: Browser, served: Served) -> None:
    """The run page draws the report's latency charts: a second that offered requests and completed none is
    shaded and named "no completion" (its legend says so), not left as a gap."""
    name = served.scenario(COLLAPSE)
    run = served.api("POST", "/api/v1/runs", {"scenario": name}, "operator")
    assert served.wait_finished(run["id"])["status"] == "succeeded"
    context, watched = log_in(browser, served, "viewer")
    page = watched.page
    try:
        page.goto(f"{served.base}/ui/runs/{run['id']}")
        page.wait_for_selector("body[data-charts-ready='5']")
        marked = page.evaluate(
            "window.CliffwatchCharts.charts.filter(c => c.id.startsWith('latency-')).map(({plot}) =>"
            " plot.data[0].map((_, i) => plot.series[1].value(plot, plot.data[1][i], 1, i))"
            "   .filter(v => v === 'no completion').length)"
        )
        assert len(marked) == 2
        assert all(count >= 1 for count in marked), marked
        page.locator("[data-chart='latency-e2e']").scroll_into_view_if_needed()
        watched.shot("run-collapsed")
        watched.clean()
    finally:
        context.close()


def test_a_post_without_or_with_a_wrong_csrf_token_is_refused(browser: Browser, served: Served) -> None:
    context, watched = log_in(browser, served, "operator")
    page = watched.page
    try:
        before = len(served.api("GET", "/api/v1/runs?limit=200")["runs"])
        reply = page.request.post(f"{served.base}/ui/new", form={"scenario": "quick-ui", "kind": "run"})
        assert reply.status == 403
        reply = page.request.post(f"{served.base}/ui/new", form={"scenario": "quick-ui", "csrf": "0" * 64})
        assert reply.status == 403
        # the real form, its token tampered with in the page
        page.goto(f"{served.base}/ui/new")
        page.select_option("select[name=scenario]", "quick-ui")
        page.eval_on_selector("#trigger-form input[name=csrf]", "el => { el.value = 'f'.repeat(64); }")
        with page.expect_response(f"{served.base}/ui/new") as answer:
            page.click("#trigger-form button[type=submit]")
        assert answer.value.status == 403
        assert "CSRF" in page.locator(".error-detail").inner_text()
        watched.shot("csrf-refused")
        assert len(served.api("GET", "/api/v1/runs?limit=200")["runs"]) == before
    finally:
        context.close()


def test_a_viewer_cannot_trigger(browser: Browser, served: Served) -> None:
    context, watched = log_in(browser, served, "viewer")
    page = watched.page
    try:
        assert page.locator("header nav a[href='/ui/new']").count() == 0
        response = page.goto(f"{served.base}/ui/new")
        assert response is not None
        assert response.status == 403
        watched.shot("viewer-forbidden")
        page.goto(f"{served.base}/ui/runs")
        csrf = page.locator("form.logout input[name=csrf]").get_attribute("value")
        reply = page.request.post(f"{served.base}/ui/new", form={"scenario": "quick-ui", "csrf": csrf or ""})
        assert reply.status == 403
    finally:
        context.close()


def test_logout_ends_the_session(browser: Browser, served: Served) -> None:
    context, watched = log_in(browser, served, "viewer")
    page = watched.page
    try:
        [before] = [c["value"] for c in context.cookies() if c["name"] == "cw_session"]
        page.click("form.logout button")
        page.wait_for_url(f"{served.base}/ui/login")
        assert [c for c in context.cookies() if c["name"] == "cw_session"] == []
        page.goto(f"{served.base}/ui/runs")
        assert "/ui/login" in page.url
        # the old cookie is worthless: the session is gone from the server
        context.add_cookies([{"name": "cw_session", "value": before, "url": f"{served.base}/ui/"}])
        page.goto(f"{served.base}/ui/runs")
        assert "/ui/login" in page.url
        watched.shot("logged-out")
        watched.clean()
    finally:
        context.close()
