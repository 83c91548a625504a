"""The vocabulary of every chart a report or the dashboard draws: series, axes, charts, bands, and the palette.

Plain JSON for ``static/report.js``, which only turns them into uPlot options. Colours are the Okabe–Ito
palette (distinguishable with every common colour-vision deficiency), and every line within a chart also has
its own dash pattern, so a chart still reads in grey print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cliffwatch.domain.outcomes import OUTCOMES as ALL_OUTCOMES
from cliffwatch.domain.outcomes import Outcome

# Okabe & Ito (2008), "Color Universal Design".
BLACK, ORANGE, SKY_BLUE, GREEN, YELLOW, BLUE, VERMILLION, PURPLE = (
    "#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
)  # fmt: skip
SOLID: tuple[int, ...] = ()
DASHED = (8, 4)
DOTTED = (2, 3)
DASH_DOT = (10, 3, 2, 3)
LONG_DASH = (14, 5)
DASH_DOT_DOT = (10, 3, 2, 3, 2, 3)
SLO_DASH = (4, 4)
SHORT_DASH = (4, 2)
# Each outcome class's band in the stacked outcome chart: label, colour, dash. Every class needs one (the
# table below is built at import, so a class without a style fails every report test at once).
_OUTCOME_STYLE: dict[Outcome, tuple[str, str, tuple[int, ...]]] = {
    Outcome.ON_TIME: ("on time", GREEN, SOLID),
    Outcome.LATE: ("late", ORANGE, DASHED),
    Outcome.SHED: ("shed (429/503)", SKY_BLUE, DOTTED),
    Outcome.TIMEOUT: ("timeout", VERMILLION, DASH_DOT),
    Outcome.INCOMPLETE: ("incomplete (hollow 2xx)", YELLOW, SHORT_DASH),
    Outcome.ERROR: ("error", PURPLE, LONG_DASH),
    Outcome.REDIRECT: ("redirect (3xx)", BLUE, DASH_DOT_DOT),
    Outcome.NOT_SENT: ("not sent", BLACK, SLO_DASH),
}
OUTCOMES: tuple[tuple[str, str, str, tuple[int, ...]], ...] = tuple(
    # key, label, colour, dash — stacked bottom to top, in the classes' own order
    (outcome.value, *_OUTCOME_STYLE[outcome])
    for outcome in ALL_OUTCOMES
)
PERCENTILES = (("p50", BLUE, SOLID), ("p90", ORANGE, DASHED), ("p99", VERMILLION, DOTTED))


@dataclass(frozen=True, kw_only=True)
class Series:
    label: str
    unit: str
    scale: str
    color: str
    values: Sequence[float | None]
    dash: tuple[int, ...] = SOLID
    width: float = 2.0
    fill: bool = False  # stacked: filled down to the series below (or to zero for the first)
    points: bool = False  # mark every second, so an isolated value between gaps still shows
    shown: Sequence[float | None] | None = None  # the legend's values when ``values`` are cumulative

    def to_dict(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "label": self.label, "unit": self.unit, "scale": self.scale, "color": self.color,
            "dash": list(self.dash), "width": self.width, "fill": self.fill, "points": self.points,
            "values": list(self.values),
        }  # fmt: skip
        if self.shown is not None:
            spec["shown"] = list(self.shown)
        return spec


@dataclass(frozen=True, kw_only=True)
class Axis:
    scale: str
    label: str
    side: str = "left"  # or "right"
    log: bool = False
    range: tuple[float, float] | None = None  # fixed bounds (else from zero to the data's maximum)

    def to_dict(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"scale": self.scale, "label": self.label, "side": self.side, "log": self.log}
        if self.range is not None:
            spec["range"] = list(self.range)
        return spec


@dataclass(frozen=True, kw_only=True)
class Chart:
    id: str
    title: str
    caption: str
    axes: tuple[Axis, ...]
    series: tuple[Series, ...]
    stacked: bool = False
    fill_between: tuple[tuple[int, int], ...] = ()  # pairs of series (indexes in ``series``) shaded between
    # Points (indexes of the shared x) where requests were offered and none completed: marked as such on the
    # chart, so a collapsed second does not look like missing data.
    no_completion: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "id": self.id, "title": self.title, "caption": self.caption, "stacked": self.stacked,
            "axes": [a.to_dict() for a in self.axes], "series": [s.to_dict() for s in self.series],
        }  # fmt: skip
        if self.fill_between:
            spec["fill_between"] = [list(pair) for pair in self.fill_between]
        if self.no_completion:
            spec["no_completion"] = list(self.no_completion)
        return spec


@dataclass(frozen=True, kw_only=True)
class Band:
    """A span of the x axis (seconds since the run started) shaded behind every chart."""

    label: str
    start: float
    end: float
    kind: str  # "phase" or "fault"
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "start": self.start, "end": self.end, "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True, kw_only=True)
class ChartSet:
    """Everything the page's script needs: a shared x axis, the bands and the charts."""

    x: list[float]
    x_label: str
    bands: list[Band] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "x": self.x, "x_label": self.x_label, "bands": [b.to_dict() for b in self.bands],
            "charts": [c.to_dict() for c in self.charts],
        }  # fmt: skip


def number(value: Any) -> float | None:
    """A JSON number as a float; None for anything else (booleans included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def column(rows: Sequence[Mapping[str, Any]], key: str) -> list[float | None]:
    return [number(row.get(key)) for row in rows]
