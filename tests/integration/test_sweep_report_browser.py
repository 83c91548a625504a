"""Sweep reports in a real headless Chromium (Debian's, driven by Playwright): the report of a real short
sweep (``cliffwatch sweep --report``) and of the committed two-variant sweep load without errors or
network requests, every chart draws its series with a legend, usable capacity and the cliff are drawn as
lines at their rates, and the page works under the API's Content-Security-Policy.

Screenshots go to ``$CLIFFWATCH_TEST_ARTIFACTS`` (default ``tests/artifacts/``). Without
``/usr/bin/chromium`` these tests fail rather than skip (``make test`` installs it).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import browser_kit
import pytest
import yaml
from browser_kit import A4_CONTENT_PX, REPO, Watched, artifacts_dir, chromium
from playwright.sync_api import Browser, Route

from cliffwatch.adapters.api.reports import report_headers
from cliffwatch.adapters.report.render import render_sweep_report

pytestmark = pytest.mark.heavy  # sweeps: each step must keep its schedule, two at most at once

FIXTURE = REPO / "tests" / "fixtures" / "reports" / "sweep-retries.json"
VARIANT_CHARTS = ("throughput", "attainment", "latency-ttft", "latency-e2e")
GREEN, VERMILLION = "#009E73", "#D55E00"

# The small, sharp built-in target of the fixture (about 13 req/s), swept quickly: about 20 s.
SMALL = {
    "name": "sweep-report-small",
    "description": "a small built-in target with a sharp cliff, swept for a report",
    "seed": 7,
    "target": {
        "url": "builtin",
        "builtin": {"max_batch": 4, "decode_base_ms": 10, "decode_per_seq_ms": 2},
        "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 16},
    },
    "slo": {"ttft_ms": 250, "e2e_ms": 600, "timeout_ms": 1500},
    "phases": [{"name": "p", "role": "baseline", "duration_s": 2, "arrival": {"process": "poisson", "rate": 2}}],
}
QUICK = ("--from", "4", "--to", "24", "--arrival", "constant", "--step-seconds", "1.5", "--warmup-seconds", "1",
         "--cooldown-seconds", "0.2", "--trials", "1")  # fmt: skip

# Whether a pixel is near a colour; with readable (a canvas' copy to read back), the page's helpers.
NEAR_JS = """function near(img, i, hex, tolerance) {
  const n = parseInt(hex.slice(1), 16);
  return img[i + 3] > 150 && Math.abs(img[i] - (n >> 16)) < tolerance &&
    Math.abs(img[i + 1] - ((n >> 8) & 255)) < tolerance && Math.abs(img[i + 2] - (n & 255)) < tolerance;
}
"""
READABLE_JS = browser_kit.READABLE_JS + NEAR_JS
# Per chart: the canvas' non-blank pixels, and the opaque pixels of each series' colour in the plot area.
PIXELS_JS = """
() => window.CliffwatchCharts.charts.map(({id, plot}) => {
  const ctx = readable(plot.ctx.canvas), b = plot.bbox;
  const img = ctx.getImageData(b.left, b.top, b.width, b.height).data;
  const whole = ctx.getImageData(0, 0, ctx.canvas.width, ctx.canvas.height).data;
  let painted = 0;
  for (let i = 3; i < whole.length; i += 4) if (whole[i] > 0) painted++;
  const counts = plot.series.slice(1).map(s => {
    let count = 0;
    for (let i = 0; i < img.length; i += 4) if (near(img, i, s._stroke || s.stroke, 40)) count++;
    return count;
  });
  return {id, painted, counts, labels: plot.series.slice(1).map(s => s.label),
          width: plot.ctx.canvas.getBoundingClientRect().width};
})
"""
# The share of the plot's height where a marker's colour is found within two pixels of its rate.
MARKER_JS = """
([id, rate, hex]) => {
  const {plot} = window.CliffwatchCharts.charts.find(c => c.id === id), b = plot.bbox;
  const ctx = readable(plot.ctx.canvas), x = Math.round(plot.valToPos(rate, "x", true));
  const img = ctx.getImageData(x - 2, b.top, 5, b.height).data;
  let rows = 0;
  for (let row = 0; row < b.height; row++) {
    let hit = false;
    for (let col = 0; col < 5; col++) if (near(img, (row * 5 + col) * 4, hex, 30)) hit = true;
    if (hit) rows++;
  }
  return rows / b.height;
}
"""


def cliffwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return browser_kit.cliffwatch(*args, state_dir=tempfile.mkdtemp(prefix="cliffwatch-sweep-report-"), timeout=180)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A real short sweep of the built-in target, its report written by ``cliffwatch sweep --report``."""
    where = tmp_path_factory.mktemp("real-sweep")
    scenario = where / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL), encoding="utf-8")
    swept = cliffwatch("sweep", str(scenario), *QUICK, "--json", str(where / "sweep.json"),
                       "--report", str(where / "sweep-real.html"))  # fmt: skip
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert f"sweep report written to {where / 'sweep-real.html'}" in swept.stdout
    document: dict[str, Any] = json.loads((where / "sweep.json").read_text(encoding="utf-8"))
    return where / "sweep-real.html", document


@pytest.fixture(scope="module")
def fixture_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The committed two-variant sweep, its report written by ``cliffwatch report``."""
    output = tmp_path_factory.mktemp("fixture-sweep") / "sweep-retries.html"
    reported = cliffwatch("report", str(FIXTURE), "-o", str(output))
    assert reported.returncode == 0, reported.stdout + reported.stderr
    document: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return output, document


def open_report(browser: Browser, report: Path) -> Watched:
    return browser_kit.open_report(browser, report, script=READABLE_JS)


def expected_charts(document: dict[str, Any]) -> list[str]:
    ids = [f"v{i}-{name}" for i in range(len(document["variants"])) for name in VARIANT_CHARTS]
    return ids + (["cmp-goodput", "cmp-amplification"] if len(document["variants"]) > 1 else [])


@pytest.mark.slow
@pytest.mark.parametrize("which", ["real_sweep", "fixture_sweep"])
def test_a_sweep_report_loads_cleanly_and_draws_every_chart_with_its_legend(
    browser: Browser, which: str, request: pytest.FixtureRequest
) -> None:
    report, document = request.getfixturevalue(which)
    watched = open_report(browser, report)
    page = watched.page
    try:
        ids = expected_charts(document)
        assert page.get_attribute("body", "data-charts-ready") == str(len(ids))
        charts = page.evaluate(PIXELS_JS)
        assert sorted(c["id"] for c in charts) == sorted(ids)
        for chart in charts:
            assert chart["painted"] > 5000, chart  # axes, grid, markers and series: not an empty canvas
            assert max(chart["counts"]) >= 20, chart
            legend = page.locator(f"#chart-{chart['id']} .u-legend").inner_text()
            for label in chart["labels"]:
                assert label in legend, (chart["id"], label)
            assert page.locator(f"#chart-{chart['id']} .u-legend canvas.line-marker").count() == len(chart["labels"])
        for chart in (c for c in charts if c["id"].endswith("-throughput")):
            assert all(count >= 20 for count in chart["counts"]), chart  # sent, goodput, completions, tokens
        # the sweep's warnings (steps too short for the SLO, say) under the headline, as the document has them
        shown = page.locator("#verdict .sweep-warning").all_inner_texts()
        assert shown == [f"Warning: {w}" for w in document.get("warnings", [])]
        page.screenshot(path=str(artifacts_dir() / f"sweep-report-{which}.png"), full_page=True)
        assert watched.problems == []
    finally:
        page.close()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["real_sweep", "fixture_sweep"])
def test_usable_capacity_and_the_cliff_are_drawn_at_their_rates(
    browser: Browser, which: str, request: pytest.FixtureRequest
) -> None:
    report, document = request.getfixturevalue(which)
    watched = open_report(browser, report)
    page = watched.page
    try:
        for index, variant in enumerate(document["variants"]):
            result = variant["result"]
            assert result["usable_rps"] is not None, result["verdict"]
            usable = page.evaluate(MARKER_JS, [f"v{index}-throughput", result["usable_rps"], GREEN])
            assert usable > 0.8, usable  # a solid line over the plot's height
            elsewhere = page.evaluate(MARKER_JS, [f"v{index}-throughput", result["usable_rps"] / 2, GREEN])
            assert elsewhere < 0.2, elsewhere
            if result["first_bad_rps"] is not None:
                cliff = page.evaluate(MARKER_JS, [f"v{index}-attainment", result["first_bad_rps"], VERMILLION])
                assert cliff > 0.4, cliff  # dashed
            assert f"usable {result['usable_rps']:g} req/s" in page.locator("#verdict").inner_text()
        page.locator("#chart-v0-throughput").screenshot(path=str(artifacts_dir() / f"sweep-markers-{which}.png"))
        assert watched.problems == []
    finally:
        page.close()


def served(browser: Browser, body: str) -> Watched:
    """A page that loads ``body`` as the API serves a report (its headers), from an address Playwright fakes."""
    url = "http://cliffwatch.test/api/v1/runs/fixture/report"

    def serve(route: Route) -> None:
        route.fulfill(status=200, body=body, headers={**report_headers(), "Content-Type": "text/html; charset=utf-8"})

    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.route(url, serve)
    watched = Watched(page, allowed=url, script=READABLE_JS)
    watched.page.goto(url)
    return watched


@pytest.mark.slow
def test_the_report_works_under_the_apis_content_security_policy_and_prints_on_a4(browser: Browser) -> None:
    """Served as the API serves it (its headers), the page draws everything with no CSP violation."""
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    watched = served(browser, render_sweep_report(document))
    page = watched.page
    try:
        page.wait_for_selector("body[data-charts-ready]", state="attached", timeout=10_000)
        # Not add_script_tag: the policy would block that script too (as it should). Evaluation is DevTools'.
        page.evaluate("() => {" + READABLE_JS + "window.readable = readable; window.near = near; }")
        assert page.get_attribute("body", "data-charts-ready") == str(len(expected_charts(document)))
        assert all(c["painted"] > 5000 for c in page.evaluate(PIXELS_JS))
        page.emulate_media(media="print")
        page.evaluate("() => window.dispatchEvent(new Event('beforeprint'))")
        widths = [c["width"] for c in page.evaluate(PIXELS_JS)]
        assert all(0 < width <= A4_CONTENT_PX for width in widths), widths
        page.pdf(path=str(artifacts_dir() / "sweep-report-print.pdf"), format="A4")
        assert watched.problems == []
    finally:
        page.close()


@pytest.mark.slow
def test_under_the_apis_policy_a_script_that_slipped_into_the_page_would_not_run(browser: Browser) -> None:
    """The second line behind the escaping: only the report's own scripts run, by their hashes."""
    body = render_sweep_report(json.loads(FIXTURE.read_text(encoding="utf-8")))
    injected = body.replace("<main", '<script>document.title = "owned"</script><main', 1)
    watched = served(browser, injected)
    page = watched.page
    try:
        page.wait_for_selector("body[data-charts-ready]", state="attached", timeout=10_000)
        assert page.title() != "owned"
        assert any("Content Security Policy" in problem for problem in watched.problems), watched.problems
        assert page.get_attribute("body", "data-charts-ready") == "10"  # the report's own scripts still ran
    finally:
        page.close()
