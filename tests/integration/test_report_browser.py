"""Run reports in a real headless Chromium (Debian's, driven by Playwright): they load without errors or
network requests, every chart draws its series with a legend, and the charts fit an A4 page in print.

Screenshots (and a PDF print) go to ``$CLIFFWATCH_TEST_ARTIFACTS`` (default ``tests/artifacts/``). Without
``/usr/bin/chromium`` these tests fail rather than skip: install it with ``apt-get install chromium``
(``make test`` does).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import browser_kit
import pytest
import yaml
from browser_kit import A4_CONTENT_PX, REPO, artifacts_dir, chromium, open_report
from playwright.sync_api import Browser, Page

FIXTURE = REPO / "tests" / "fixtures" / "reports" / "slow-backend.json"
CHART_IDS = ["throughput", "latency-ttft", "latency-e2e", "outcomes", "concurrency"]

# A short run on a small, fast built-in target (about six seconds), pushed past its capacity in the middle.
QUICK = {
    "name": "quick-report",
    "description": "a short run to draw a report from",
    "seed": 5,
    "target": {
        "url": "builtin",
        "builtin": {"max_batch": 4, "decode_base_ms": 10, "decode_per_seq_ms": 2},
        "request": {"model": "sim-llm", "prompt_tokens": 16, "max_tokens": 16},
    },
    "slo": {"ttft_ms": 300, "e2e_ms": 800, "timeout_ms": 2000},
    "phases": [
        {"name": "base", "role": "baseline", "duration_s": 2, "arrival": {"process": "poisson", "rate": 6}},
        {"name": "push", "role": "stress", "duration_s": 2, "arrival": {"process": "poisson", "rate": 30}},
        {"name": "calm", "role": "recovery", "duration_s": 2, "arrival": {"process": "poisson", "rate": 6}},
    ],
}

# Counts, per chart, the opaque pixels of each series' colour inside the plot area (where only bands, the
# grid and the series are drawn), and all the non-blank pixels of the canvas (read back from a copy).
PIXELS_JS = """
() => window.CliffwatchCharts.charts.map(({id, plot}) => {
  const ctx = readable(plot.ctx.canvas), b = plot.bbox;
  const img = ctx.getImageData(b.left, b.top, b.width, b.height).data;
  const whole = ctx.getImageData(0, 0, ctx.canvas.width, ctx.canvas.height).data;
  let painted = 0;
  for (let i = 3; i < whole.length; i += 4) if (whole[i] > 0) painted++;
  const colours = plot.series.slice(1).map(s => {
    const hex = s._stroke || s.stroke;
    return typeof hex === "function" ? hex(plot, 1) : hex;
  });
  const counts = colours.map(hex => {
    const n = parseInt(hex.slice(1), 16), r = n >> 16, g = (n >> 8) & 255, bl = n & 255;
    let count = 0;
    for (let i = 0; i < img.length; i += 4) {
      if (img[i + 3] > 200 && Math.abs(img[i] - r) < 40 && Math.abs(img[i + 1] - g) < 40 &&
          Math.abs(img[i + 2] - bl) < 40) count++;
    }
    return count;
  });
  return {id, painted, counts, labels: plot.series.slice(1).map(s => s.label),
          width: plot.ctx.canvas.getBoundingClientRect().width};
})
"""


def cliffwatch(*args: str, state_dir: str) -> subprocess.CompletedProcess[str]:
    return browser_kit.cliffwatch(*args, state_dir=state_dir, timeout=120)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def real_run_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a real short run against the built-in target, made with the two commands."""
    where = tmp_path_factory.mktemp("real-run")
    scenario = where / "quick-report.yaml"
    scenario.write_text(yaml.safe_dump(QUICK), encoding="utf-8")
    state = tempfile.mkdtemp(prefix="cliffwatch-report-state-")
    ran = cliffwatch("run", str(scenario), "--json", str(where / "result.json"), state_dir=state)
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr
    reported = cliffwatch("report", str(where / "result.json"), "-o", str(where / "report.html"), state_dir=state)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    return where / "report.html"


@pytest.fixture(scope="module")
def fault_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the committed slow-backend result, which has a fault band."""
    output = tmp_path_factory.mktemp("fault-run") / "slow-backend.html"
    reported = cliffwatch("report", str(FIXTURE), "-o", str(output), state_dir=tempfile.mkdtemp())
    assert reported.returncode == 0, reported.stdout + reported.stderr
    return output


def chart_pixels(page: Page) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = page.evaluate(PIXELS_JS)
    return result


@pytest.mark.slow
@pytest.mark.parametrize("which", ["real_run_report", "fault_report"])
def test_a_report_loads_cleanly_and_draws_every_chart_with_its_legend(
    browser: Browser, which: str, request: pytest.FixtureRequest
) -> None:
    report: Path = request.getfixturevalue(which)
    watched = open_report(browser, report)
    page = watched.page
    try:
        assert page.get_attribute("body", "data-charts-ready") == str(len(CHART_IDS))
        charts = chart_pixels(page)
        assert [c["id"] for c in charts] == CHART_IDS
        for chart in charts:
            assert chart["painted"] > 5000, chart  # axes, bands, grid and series, not an empty canvas
            assert max(chart["counts"]) >= 20, chart  # the series themselves are drawn
        throughput = charts[0]
        assert all(count >= 20 for count in throughput["counts"]), throughput  # offered, on time, tokens
        for chart_id, chart in zip(CHART_IDS, charts, strict=True):
            legend = page.locator(f"#chart-{chart_id} .u-legend").inner_text()
            for label in chart["labels"]:
                assert label in legend, (chart_id, label)
            assert page.locator(f"#chart-{chart_id} .u-legend canvas.line-marker").count() == len(chart["labels"])
        assert page.locator("#verdict .badge").inner_text() in ("PASS", "FAIL")
        page.screenshot(path=str(artifacts_dir() / f"report-{report.stem}-{which}.png"), full_page=True)
        assert watched.problems == []
    finally:
        page.close()


@pytest.mark.slow
def test_the_fault_band_and_phase_names_are_drawn_on_the_charts(browser: Browser, fault_report: Path) -> None:
    watched = open_report(browser, fault_report)
    page = watched.page
    try:
        document = json.loads(FIXTURE.read_text(encoding="utf-8"))
        on = next(e for e in document["faults"] if e["action"] == "on")
        off = next(e for e in document["faults"] if e["action"] == "off")
        # Inside the fault's span the plot area carries the hatch's vermillion; before it, it does not.
        share = page.evaluate(
            """([start, end]) => {
              const {plot} = window.CliffwatchCharts.charts[0], ctx = readable(plot.ctx.canvas), b = plot.bbox;
              const count = (x0, x1) => {
                const a = Math.round(plot.valToPos(x0, "x", true)), z = Math.round(plot.valToPos(x1, "x", true));
                const img = ctx.getImageData(a, b.top, z - a, b.height).data;
                let n = 0;
                for (let i = 0; i < img.length; i += 4) if (img[i] > img[i + 2] + 60 && img[i + 3] > 20) n++;
                return n / (img.length / 4);
              };
              return [count(start + 1, end - 1), count(1, start - 1)];
            }""",
            [on["at_s"], off["at_s"]],
        )
        inside, before = share
        assert inside > 0.05 > before, share
        page.locator("#chart-throughput").screenshot(path=str(artifacts_dir() / "report-fault-band.png"))
        assert watched.problems == []
    finally:
        page.close()


@pytest.mark.slow
def test_in_print_every_chart_fits_an_a4_page(browser: Browser, real_run_report: Path) -> None:
    watched = open_report(browser, real_run_report, width=1366)
    page = watched.page
    try:
        page.emulate_media(media="print")
        page.evaluate("() => window.dispatchEvent(new Event('beforeprint'))")
        widths = [c["width"] for c in chart_pixels(page)]
        assert all(0 < width <= A4_CONTENT_PX for width in widths), widths
        background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert background in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)"), background
        page.pdf(path=str(artifacts_dir() / "report-print.pdf"), format="A4")
        assert watched.problems == []
    finally:
        page.close()


@pytest.fixture(scope="module")
def collapsed_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slow-backend result with three seconds of its stress phase collapsed: requests offered, none completed
    (every one timed out), as a real collapse records them."""
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    for row in document["timeseries"][14:17]:
        timed_out = row["offered"]
        row.update({key: None for key in row if key.endswith("_ms")})
        row.update({"on_time": 0, "late": 0, "timeout": timed_out, "completions": 0, "on_time_completions": 0})
    where = tmp_path_factory.mktemp("collapsed")
    (where / "collapsed.json").write_text(json.dumps(document), encoding="utf-8")
    output = where / "collapsed.html"
    reported = cliffwatch("report", str(where / "collapsed.json"), "-o", str(output), state_dir=tempfile.mkdtemp())
    assert reported.returncode == 0, reported.stdout + reported.stderr
    return output


@pytest.mark.slow
def test_seconds_with_no_completion_are_marked_not_left_as_gaps(browser: Browser, collapsed_report: Path) -> None:
    """The latency charts shade the collapsed seconds and name them; the legend says "no completion" there, and
    the header's times read as people read them."""
    watched = open_report(browser, collapsed_report)
    page = watched.page
    try:
        said = page.evaluate(
            "window.CliffwatchCharts.charts.filter(c => c.id.startsWith('latency-'))"
            ".map(({plot}) => [14, 15, 16, 2].map(i => plot.series[1].value(plot, plot.data[1][i], 1, i)))"
        )
        assert [values[:3] for values in said] == [["no completion"] * 3] * 2
        assert all(values[3] != "no completion" for values in said)
        # Inside the same phase and fault bands, the collapsed seconds are painted more densely than the seconds
        # before them (mean alpha of a row of pixels low in the plot, under the latency lines).
        alpha = page.evaluate(
            "(() => { const {plot} = window.CliffwatchCharts.charts.find(c => c.id === 'latency-e2e');"
            " const ctx = readable(plot.ctx.canvas), b = plot.bbox;"
            " const at = x => Math.round(plot.valToPos(x, 'x', true));"
            " const mean = (x0, x1) => { const d = ctx.getImageData(x0, b.top + b.height * 0.6, x1 - x0, 1).data;"
            "   let sum = 0; for (let i = 3; i < d.length; i += 4) sum += d[i]; return sum / (d.length / 4); };"
            " return [mean(at(14.2), at(16.8)), mean(at(11.2), at(13.8))]; })()"
        )
        assert alpha[0] > alpha[1] + 20, alpha
        header = page.locator("header dl.facts").inner_text()
        assert re.search(r"started\s+2026-11-30 11:04:41 UTC", header), header
        assert re.search(r"duration\s+33\.3 s", header), header
        assert not re.search(r"\d{2}T\d{2}:", header), header  # not the raw ISO text
        page.locator("#chart-latency-e2e").screenshot(path=str(artifacts_dir() / "report-no-completion.png"))
        page.screenshot(path=str(artifacts_dir() / "report-collapsed.png"), full_page=True)
        assert watched.problems == []
    finally:
        page.close()
