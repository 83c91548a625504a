"""A game day's HTML page in a real headless Chromium: the summary table on top, and each experiment's report
below drawing its own charts inside its frame, with no error and no network request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_kit import REPO, artifacts_dir, chromium, open_report
from playwright.sync_api import Browser

from cliffwatch.adapters.report.gameday_report import render_gameday_report

FIXTURE = REPO / "tests" / "fixtures" / "reports" / "slow-backend.json"  # a real run's result document


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def test_the_summary_is_on_top_and_each_experiments_report_draws_its_charts(browser: Browser, tmp_path: Path) -> None:
    result = json.loads(FIXTURE.read_text())
    document = {
        "kind": "gameday", "name": "weekly", "verdict": "failed", "summary": "weekly: failed (1 held, 1 failed)",
        "experiments": [
            {"name": "slow-backend", "hypothesis": "score at least 40", "state": "held", "broken_because": [],
             "error": None, "result": result},
            {"name": "burst", "hypothesis": "score at least 60", "state": "failed", "broken_because": [],
             "error": "target http://127.0.0.1:9 unreachable: connection refused", "result": None},
        ],
    }  # fmt: skip
    report = tmp_path / "gameday.html"
    report.write_text(render_gameday_report(document), encoding="utf-8")
    watched = open_report(browser, report)
    page = watched.page
    rows = page.locator("#gameday-summary tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).inner_text().split("\t")[:3] == ["slow-backend", "score at least 40", "held"]
    assert "connection refused" in rows.nth(1).inner_text()
    assert "connection refused" in page.locator("#experiment-1").inner_text()

    frame = page.frame_locator("#experiment-0 iframe")
    frame.locator("body[data-charts-ready]").wait_for(state="attached", timeout=10_000)
    drawn = int(frame.locator("body").get_attribute("data-charts-ready") or 0)
    assert drawn >= 4, drawn  # the run's own charts, drawn by its own script inside its frame
    assert "slow-backend" in frame.locator("h1").first.inner_text()
    page.screenshot(path=str(artifacts_dir() / "gameday-report.png"), full_page=True)
    assert watched.problems == []
