"""Each traffic class's own series (the rows' ``classes``) on the run's time axis: who lost, and when."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cliffwatch.adapters.report.chart_spec import (
    BLACK,
    BLUE,
    DASH_DOT,
    DASH_DOT_DOT,
    DASHED,
    DOTTED,
    GREEN,
    LONG_DASH,
    ORANGE,
    PURPLE,
    SHORT_DASH,
    SKY_BLUE,
    SLO_DASH,
    SOLID,
    VERMILLION,
    YELLOW,
    Axis,
    Chart,
    Series,
    number,
)

# One colour and dash per class, the same on every class chart, so a class reads alike throughout.
_PALETTE = (BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY_BLUE, BLACK, YELLOW)
_DASHES = (SOLID, DASHED, DASH_DOT, LONG_DASH)
_OFFERED_DASHES = (DOTTED, SHORT_DASH, DASH_DOT_DOT, SLO_DASH)


def class_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The classes the rows carry, in the order they first appear."""
    names: list[str] = []
    for row in rows:
        classes = row.get("classes")
        if isinstance(classes, Mapping):
            names += [str(n) for n in classes if str(n) not in names]
    return names


def _own(row: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    classes = row.get("classes")
    own = classes.get(name) if isinstance(classes, Mapping) else None
    return own if isinstance(own, Mapping) else None


def _on_time_share(rows: Sequence[Mapping[str, Any]], name: str) -> list[float | None]:
    """The percent of the class's requests offered in each second that ended on time; None in a second that
    offered none of them (nothing to be late)."""
    values: list[float | None] = []
    for row in rows:
        own = _own(row, name)
        offered = number(own.get("offered")) if own else None
        on_time = number(own.get("on_time_completions")) if own else None
        values.append(None if not offered or on_time is None else 100.0 * on_time / offered)
    return values


def _field(rows: Sequence[Mapping[str, Any]], name: str, key: str) -> list[float | None]:
    return [number(own.get(key)) if (own := _own(row, name)) else None for row in rows]


def class_charts(rows: Sequence[Mapping[str, Any]]) -> list[Chart]:
    """Per class: the share of each second's requests that ended on time, and their p99 time to first token;
    none for a run without traffic classes."""
    names = class_names(rows)
    if not names:
        return []
    styles = {name: (_PALETTE[i % len(_PALETTE)], _DASHES[i % len(_DASHES)]) for i, name in enumerate(names)}
    on_time = tuple(
        Series(label=f"{name} on time", unit="%", scale="pct", color=styles[name][0], dash=styles[name][1],
               points=True, values=_on_time_share(rows, name))
        for name in names
    )  # fmt: skip
    # Thin lines, each with a dash no on-time line of the chart uses, so the chart still reads in grey print.
    offered = tuple(
        Series(label=f"{name} offered", unit="req/s", scale="rps", color=styles[name][0], width=1.0,
               dash=_OFFERED_DASHES[i % len(_OFFERED_DASHES)], values=_field(rows, name, "offered"))
        for i, name in enumerate(names)
    )  # fmt: skip
    ttft = tuple(
        Series(label=f"{name} p99 TTFT", unit="ms", scale="ms", color=styles[name][0], dash=styles[name][1],
               points=True, values=_field(rows, name, "ttft_p99_ms"))
        for name in names
    )  # fmt: skip
    return [
        Chart(
            id="classes-on-time", title="On time, by traffic class",
            caption="Of the requests each class offered in a second, the percent that ended on time against the "
            "class's own SLO (left axis; a gap is a second the class offered nothing), and the requests it "
            "offered (right axis, thin). A class whose rate never rose but whose share falls is a victim of "
            "another class's load.",
            axes=(Axis(scale="pct", label="% on time"), Axis(scale="rps", label="offered req/s", side="right")),
            series=on_time + offered,
        ),
        Chart(
            id="classes-ttft", title="p99 time to first token, by traffic class",
            caption="The 99th percentile time to first token of each class's requests that began answering in "
            "each second: the queue each class waited in.",
            axes=(Axis(scale="ms", label="p99 TTFT (ms)"),),
            series=ttft,
        ),
    ]  # fmt: skip
