"""Markup helpers shared by the report sections: escaping, number formats, tables.

Every value from a document goes through ``esc`` (or a formatter that escapes); markup is built only from
our own strings. Missing values show as "–".
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cliffwatch.adapters.report.readable import DASH as DASH  # the report's sections take it from here


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def num(value: Any, digits: int = 3) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:,.0f}"
    return esc(value)


def pct(value: Any) -> str:
    return DASH if not isinstance(value, int | float) or isinstance(value, bool) else f"{value * 100:.0f} %"


def ms(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return DASH
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else []


def table(head: Iterable[str], rows: Iterable[Iterable[str]], *, cls: str = "") -> str:
    """A table whose cells are already escaped markup."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
