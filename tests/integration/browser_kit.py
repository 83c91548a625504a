"""What the report tests in a real headless Chromium share: the browser, a watched page, the command line.

Chromium is Debian's (``/usr/bin/chromium``), driven by Playwright; without it the tests fail rather than
skip (``make test`` installs it). Screenshots go to ``$CLIFFWATCH_TEST_ARTIFACTS`` (default ``tests/artifacts/``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, sync_playwright

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
A4_CONTENT_PX = 680  # 210 mm less two 15 mm margins, at 96 CSS px per inch

# A copy of a canvas made for reading back, so the page's own stays as the report drew it (and Chromium
# does not warn about repeated readbacks).
READABLE_JS = """
function readable(canvas) {
  const copy = document.createElement("canvas");
  copy.width = canvas.width; copy.height = canvas.height;
  const ctx = copy.getContext("2d", {willReadFrequently: true});
  ctx.drawImage(canvas, 0, 0);
  return ctx;
}
"""


def artifacts_dir() -> Path:
    path = Path(os.environ.get("CLIFFWATCH_TEST_ARTIFACTS") or REPO / "tests" / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def cliffwatch(*args: str, state_dir: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m cliffwatch ARGS`` with JSON logs, its own state directory and no allowlist of targets."""
    env = {**os.environ, "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_STATE_DIR": state_dir}
    env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)
    return subprocess.run(
        [sys.executable, "-m", "cliffwatch", *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env, check=False,
    )  # fmt: skip


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, launched headless for the length of the block (a failed test without it)."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


class Watched:
    """A page that records console errors and warnings, page errors and every request off the file system
    (but to ``allowed``); ``open`` waits for the charts and adds ``script`` (the readback helpers)."""

    def __init__(self, page: Page, *, allowed: str | None = None, script: str = READABLE_JS) -> None:
        self.page = page
        self.allowed = allowed
        self.script = script
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        page.on("request", self._request)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text}")

    def _request(self, request: Request) -> None:
        if request.url != self.allowed and not request.url.startswith(("file://", "data:")):
            self.problems.append(f"network request: {request.url}")

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.wait_for_selector("body[data-charts-ready]", state="attached", timeout=10_000)
        self.page.add_script_tag(content=self.script)


def open_report(browser: Browser, report: Path, *, width: int = 1366, script: str = READABLE_JS) -> Watched:
    """A report file opened in a new watched page, its charts drawn."""
    watched = Watched(browser.new_page(viewport={"width": width, "height": 900}), script=script)
    watched.open(report.as_uri())
    return watched
