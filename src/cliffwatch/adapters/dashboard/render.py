"""Pages from Jinja2 templates, autoescaped: every value a template prints is HTML-escaped unless it is
markup made (and escaped) by our own code, which arrives as ``markupsafe.Markup``.

Data for the pages' scripts travels as JSON in ``<script type="application/json">`` (escaped like the
reports', so no string can close the element); the Content-Security-Policy allows no inline script, and a
data block is not a script.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2
from aiohttp import web
from markupsafe import Markup

from cliffwatch import __version__
from cliffwatch.adapters.dashboard.context import maybe_user
from cliffwatch.adapters.report.readable import when
from cliffwatch.adapters.report.render import script_json

PAGE_HEADERS = {"Cache-Control": "no-store"}


def _number(value: Any, digits: int = 1) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "–"
    return f"{value:.{digits}f}"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("cliffwatch.adapters.dashboard", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,  # a misspelt variable is an error, not an empty string
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["num"] = _number
    env.filters["data_json"] = lambda value: Markup(script_json(value))
    return env


def render(template: str, *, status: int = 200, headers: dict[str, str] | None = None, **context: Any) -> web.Response:
    """The page ``template`` with ``context`` (the logged-in user, if any, and the version are added)."""
    text = environment().get_template(template).render(user=maybe_user(), version=__version__, **context)
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8",
                        headers={**PAGE_HEADERS, **(headers or {})})  # fmt: skip


def error_page(status: int, title: str, detail: str) -> web.Response:
    return render("error.html", status=status, title=title, detail=detail, code=status)
