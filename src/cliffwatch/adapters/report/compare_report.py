"""A comparison's HTML: the verdict, what A and B are, what neither test vouches for, both sides' cost, and per
scope a table of figures (A and B with their intervals, B − A with its interval, the corrected p-value, the
smallest difference that could have been detected, the change).

``comparison_body`` is the markup alone, which the dashboard's compare view shows inside its own page;
``render_comparison_report`` wraps it in the self-contained report page. Every value is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from cliffwatch.adapters.report.render import page

_CHANGE_CLASS = {"regressed": "warn", "improved": "ok", "within margin": "muted", "not tested": "muted"}
_HEAD = ("figure", "A", "B", "B − A (95 % CI)", "p (corrected)", "detectable", "margin", "change")


def render_comparison_report(document: Mapping[str, Any]) -> str:
    """The page of a ``cliffwatch compare --json`` document (``kind: comparison``)."""
    title = f"{_label(document, 'a')} against {_label(document, 'b')} — cliffwatch compare"
    return page(title=title, body=comparison_body(document), data={"kind": "comparison", "x": [], "charts": []})


def comparison_body(document: Mapping[str, Any]) -> str:
    verdict = str(document.get("verdict", ""))
    head = (f'<section class="verdict" id="verdict"><h1>B against A: <span class="{_CHANGE_CLASS.get(verdict, "")}">'
            f"{_e(verdict)}</span></h1><p>{_e(document.get('summary'))}</p>{_sides(document)}"
            f"{_notes(document)}{_cost(document)}<p class=\"muted\">{_e(document.get('method'))} "
            f"(α {_e(document.get('alpha'))}, margins {_margins(document)}).</p></section>")  # fmt: skip
    figures = [f for f in document.get("figures") or [] if isinstance(f, Mapping)]
    scopes = list(dict.fromkeys(str(f.get("scope")) for f in figures))
    tables = "".join(_scope(index, scope, [f for f in figures if f.get("scope") == scope])
                     for index, scope in enumerate(scopes))  # fmt: skip
    return head + tables


def _sides(document: Mapping[str, Any]) -> str:
    rows = ""
    for name in ("a", "b"):
        side = document.get(name) or {}
        rows += (f"<tr><th>{name.upper()}</th><td>{_e(side.get('label'))}</td><td>{_e(side.get('scenario'))}</td>"
                 f"<td>{_e(side.get('seed'))}</td><td>{_e(side.get('target'))}</td><td>{_e(side.get('status'))}</td>"
                 f"<td>{_e(side.get('started_at'))}</td></tr>")  # fmt: skip
    like = document.get("like") or {}
    alike = "the same workload and score version" if like.get("alike") else "unlike (compared as asked)"
    return ('<table id="compare-sides"><thead><tr><th></th><th>source</th><th>scenario</th><th>seed</th>'
            f"<th>target</th><th>status</th><th>started</th></tr></thead><tbody>{rows}</tbody></table>"
            f"<p>{_e(alike)}</p>")  # fmt: skip


def _notes(document: Mapping[str, Any]) -> str:
    notes = [str(n) for n in document.get("notes") or []]
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<ul class="warn" id="compare-notes">{items}</ul>'


def _cost(document: Mapping[str, Any]) -> str:
    cost = document.get("cost") or {}
    if not cost:
        return ""
    lines = []
    for name in ("a", "b"):
        side = cost.get(name)
        if isinstance(side, Mapping) and "sentence" in side:
            lines.append(f"{name.upper()}: {side['sentence']}")
        elif isinstance(side, Mapping):  # a sweep's: per variant, at its usable rate
            lines += [f"{name.upper()} {variant}: {c.get('sentence') if isinstance(c, Mapping) else 'no cost'}"
                      for variant, c in side.items()]  # fmt: skip
        else:
            lines.append(f"{name.upper()}: no cost given")
    items = "".join(f"<li>{_e(line)}</li>" for line in lines)
    return f'<h2>Cost</h2><ul id="compare-cost">{items}</ul>'


def _scope(index: int, scope: str, figures: list[Mapping[str, Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in _HEAD)
    rows = "".join(_row(f) for f in figures)
    return (f'<section class="compare-scope" id="scope-{index}"><h2>{_e(scope)}</h2>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>")  # fmt: skip


def _row(figure: Mapping[str, Any]) -> str:
    unit = str(figure.get("unit"))
    change = str(figure.get("change"))
    note = figure.get("note")
    title = f' title="{_e(note)}"' if note else ""
    difference = shown_value(figure.get("difference"), unit, signed=True)
    interval = figure.get("difference_interval")
    if isinstance(interval, Mapping):
        low, high = (shown_value(interval.get(end), unit, signed=True) for end in ("low", "high"))
        difference += f" ({low} … {high})"
    cells = (
        _e(figure.get("figure")),
        _with_interval(figure.get("a"), figure.get("a_interval"), unit),
        _with_interval(figure.get("b"), figure.get("b_interval"), unit),
        _e(difference),
        _e(shown_p(figure.get("p_adjusted"))),
        _e(shown_value(figure.get("detectable"), unit, points=True)),
        _e(shown_value(figure.get("margin"), unit, points=True)),
        f'<span class="{_CHANGE_CLASS.get(change, "")}"{title}>{_e(change)}</span>',
    )
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _with_interval(value: Any, interval: Any, unit: str) -> str:
    shown = shown_value(value, unit)
    if isinstance(interval, Mapping):
        shown += f" [{shown_value(interval.get('low'), unit)} – {shown_value(interval.get('high'), unit)}]"
    return _e(shown)


def shown_value(value: Any, unit: str, *, signed: bool = False, points: bool = False) -> str:
    if not isinstance(value, int | float):
        return "–"
    sign = "+" if signed else ""
    points = points or signed
    if unit == "share":  # a difference, an interval of one or a margin is in points, a share in percent
        return f"{value * 100:{sign}.2f} {'pp' if points else '%'}"
    if unit == "ms":
        return f"{value:{sign}.1f} ms"
    return f"{value:{sign}.3g} {unit}"


def shown_p(value: Any) -> str:
    """A p-value to four places, the smallest as a bound."""
    if not isinstance(value, int | float):
        return "–"
    return "< 0.0001" if value < 1e-4 else f"{value:.4f}"


def _margins(document: Mapping[str, Any]) -> str:
    margins = document.get("margins") or {}
    share, latency = margins.get("share"), margins.get("latency")
    if not isinstance(share, int | float) or not isinstance(latency, int | float):
        return "–"
    return f"{share * 100:g} pp of a share, {latency * 100:g} % of A's latency"


def _label(document: Mapping[str, Any], name: str) -> str:
    side = document.get(name)
    return str(side.get("label")) if isinstance(side, Mapping) else name.upper()


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))
