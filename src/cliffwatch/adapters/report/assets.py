"""The report's static files — vendored uPlot, our chart script and stylesheet — read from the package.

Every file is inlined into the page, so each is checked once for the sequences that would end its
``<script>`` or ``<style>`` element early (or start a comment the HTML parser treats specially).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

UPLOT_VERSION = "1.6.32"
_PACKAGE = "cliffwatch.adapters.report"
_UNSAFE_IN_SCRIPT = re.compile(r"</script|<!--|<script", re.IGNORECASE)
_UNSAFE_IN_STYLE = re.compile(r"</style", re.IGNORECASE)


class AssetUnsafe(RuntimeError):
    """A packaged file cannot be inlined as it is (it would close its element early)."""

    def __init__(self, name: str, found: str) -> None:
        super().__init__(f"report asset {name} contains {found!r}, which would break out of its inline element")


@dataclass(frozen=True, kw_only=True)
class Assets:
    """The texts a report inlines."""

    uplot_js: str
    uplot_css: str
    report_js: str
    report_css: str


def read_asset(relative: str) -> str:
    """The text of a packaged file, e.g. ``"vendor/uPlot.min.css"``."""
    resource = resources.files(_PACKAGE).joinpath(relative)
    return resource.read_text(encoding="utf-8")


def _checked(relative: str, pattern: re.Pattern[str]) -> str:
    text = read_asset(relative)
    match = pattern.search(text)
    if match is not None:
        raise AssetUnsafe(relative, match.group(0))
    return text


@cache
def load_assets() -> Assets:
    """The four inlined files (read once per process); raises ``AssetUnsafe`` if one cannot be inlined."""
    return Assets(
        uplot_js=_checked("vendor/uPlot.iife.min.js", _UNSAFE_IN_SCRIPT),
        uplot_css=_checked("vendor/uPlot.min.css", _UNSAFE_IN_STYLE),
        report_js=_checked("static/report.js", _UNSAFE_IN_SCRIPT),
        report_css=_checked("static/report.css", _UNSAFE_IN_STYLE),
    )


@cache
def script_hashes() -> tuple[str, ...]:
    """The CSP sources (``'sha256-…'``) of the two scripts every report runs: uPlot and report.js, inlined
    verbatim. The data is JSON in a non-executable ``<script type="application/json">``, which CSP ignores."""
    assets = load_assets()
    return tuple(
        f"'sha256-{base64.b64encode(hashlib.sha256(text.encode('utf-8')).digest()).decode('ascii')}'"
        for text in (assets.uplot_js, assets.report_js)
    )
