"""The dashboard's static files, served by us (no CDN): the vendored uPlot and the report's chart script
and stylesheet (shared with the HTML reports), and the dashboard's own script and stylesheet."""

from __future__ import annotations

from functools import cache
from importlib import resources

from aiohttp import web

from cliffwatch.adapters.report.assets import read_asset

_JS, _CSS = "text/javascript", "text/css"
FILES: dict[str, tuple[str, str, str]] = {
    # name in the URL: (package, path in it, media type)
    "uPlot.iife.min.js": ("report", "vendor/uPlot.iife.min.js", _JS),
    "uPlot.min.css": ("report", "vendor/uPlot.min.css", _CSS),
    "report.js": ("report", "static/report.js", _JS),
    "report.css": ("report", "static/report.css", _CSS),
    "dashboard.js": ("dashboard", "static/dashboard.js", _JS),
    "dashboard.css": ("dashboard", "static/dashboard.css", _CSS),
}


@cache
def _read(name: str) -> str:
    package, path, _ = FILES[name]
    if package == "report":
        return read_asset(path)
    return resources.files("cliffwatch.adapters.dashboard").joinpath(path).read_text(encoding="utf-8")


async def static_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in FILES:
        raise web.HTTPNotFound()
    # Short caching: a new version of cliffwatch may change them, and the URLs carry no version.
    return web.Response(text=_read(name), content_type=FILES[name][2], charset="utf-8",
                        headers={"Cache-Control": "max-age=300"})  # fmt: skip
