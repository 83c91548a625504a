"""A comparison's HTML page in a real headless Chromium: the verdict, both sides, a table per scope with each
figure's verdict, and no script error or network request."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_kit import REPO, artifacts_dir, chromium, open_report
from playwright.sync_api import Browser

from cliffwatch.adapters.report.compare_report import render_comparison_report
from cliffwatch.domain.compare.comparison import Side, compare

FIXTURE = REPO / "tests" / "fixtures" / "reports" / "slow-backend.json"  # a real run's result document


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def test_the_verdict_and_each_scopes_figures_show_with_nothing_reaching_out(browser: Browser, tmp_path: Path) -> None:
    a = json.loads(FIXTURE.read_text())
    b = json.loads(FIXTURE.read_text())
    recovery = b["phases"][2]  # all on time in the real run: here a third timed out
    recovery["outcomes"] = {**recovery["outcomes"], "on_time": 27, "timeout": 14}
    b["verdicts"] = [{"name": "generator_limited", "summary": "behind"}]
    document = compare(Side(label="before.json", document=a), Side(label="<after>.json", document=b),
                       rng=random.Random(0)).to_dict()  # fmt: skip
    report = tmp_path / "compare.html"
    report.write_text(render_comparison_report(document), encoding="utf-8")
    watched = open_report(browser, report)
    page = watched.page
    assert page.locator("#verdict h1").inner_text() == "B against A: regressed"
    assert "<after>.json" in page.locator("#compare-sides").inner_text()  # escaped, shown as text
    assert "generator could not keep its schedule" in page.locator("#compare-notes").inner_text()
    assert page.locator("section.compare-scope").count() == 4  # three phases and the run's score
    recovery_rows = page.locator("#scope-2 tbody tr")
    cells = recovery_rows.nth(0).locator("td")
    assert cells.nth(0).inner_text() == "on_time_share"
    assert cells.nth(7).inner_text() == "regressed"
    page.screenshot(path=str(artifacts_dir() / "compare-report.png"), full_page=True)
    assert watched.problems == []
