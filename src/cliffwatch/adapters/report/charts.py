"""What each chart of a run report plots: series, axes, units, colours, and the phase and fault bands.

The specs are plain JSON for ``static/report.js``, which only turns them into uPlot options: the choice of
what to show lives here, in typed Python, so the dashboard can send the same specs from the API.

Colours are the Okabe–Ito palette (distinguishable with every common colour-vision deficiency), and every
line within a chart also has its own dash pattern, so a chart still reads in grey print.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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

    def to_dict(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "id": self.id, "title": self.title, "caption": self.caption, "stacked": self.stacked,
            "axes": [a.to_dict() for a in self.axes], "series": [s.to_dict() for s in self.series],
        }  # fmt: skip
        if self.fill_between:
            spec["fill_between"] = [list(pair) for pair in self.fill_between]
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


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _column(rows: Sequence[Mapping[str, Any]], key: str) -> list[float | None]:
    return [_number(row.get(key)) for row in rows]


def run_charts(
    rows: Sequence[Mapping[str, Any]], *, slo: Mapping[str, Any], phases: Sequence[Mapping[str, Any]],
    faults: Sequence[Mapping[str, Any]], duration_s: float | None,
) -> ChartSet:  # fmt: skip
    """The charts of one run from its per-second rows (``RunResult.to_dict()["timeseries"]``).

    Each row covers the second [t, t+1) and is plotted at its middle, so it lines up with the bands.
    """
    ordered = sorted(rows, key=lambda row: _number(row.get("t")) or 0.0)
    x = [(_number(row.get("t")) or 0.0) + 0.5 for row in ordered]
    end = duration_s if duration_s is not None else (x[-1] + 0.5 if x else 0.0)
    return ChartSet(
        x=x,
        x_label="time since the run started (s)",
        bands=phase_bands(phases) + fault_bands(faults, end=end),
        charts=[
            _throughput(ordered),
            _latency(ordered, "ttft", "Time to first token", _number(slo.get("ttft_ms"))),
            _latency(ordered, "e2e", "End-to-end latency", _number(slo.get("e2e_ms"))),
            _outcomes(ordered),
            _concurrency(ordered),
        ],
    )


def _throughput(rows: Sequence[Mapping[str, Any]]) -> Chart:
    return Chart(
        id="throughput",
        title="Offered load, on-time completions and output tokens",
        caption="Requests offered and completed within the SLO each second (left axis) against output tokens "
        "per second (right axis). Tokens holding up while on-time completions fall is the hidden cliff.",
        axes=(Axis(scale="rps", label="requests/s"), Axis(scale="tps", label="output tokens/s", side="right")),
        series=(
            Series(label="offered", unit="req/s", scale="rps", color=BLACK, dash=DASHED,
                   values=_column(rows, "offered")),
            Series(label="on-time completions", unit="req/s", scale="rps", color=GREEN, width=2.5,
                   values=_column(rows, "on_time_completions")),
            Series(label="output tokens", unit="tok/s", scale="tps", color=ORANGE, dash=DASH_DOT,
                   values=_column(rows, "output_tokens")),
        ),
    )  # fmt: skip


def _latency(rows: Sequence[Mapping[str, Any]], key: str, title: str, slo_ms: float | None) -> Chart:
    return latency_chart(
        f"latency-{key}",
        key=key,
        title=title,
        caption=f"{title} of the requests offered each second, measured from their scheduled send time "
        "(log scale). Seconds with no completion have no point.",
        slo_ms=slo_ms,
        percentile=lambda name: _column(rows, f"{key}_{name}_ms"),
        count=len(rows),
    )


def latency_chart(
    chart_id: str,
    *,
    key: str,
    title: str,
    caption: str,
    slo_ms: float | None,
    percentile: Callable[[str], Sequence[float | None]],
    count: int,
) -> Chart:
    """A latency chart of ``count`` points on a log scale: ``key``'s percentiles (``percentile("p50")`` gives
    the p50's values, and so on) and the SLO, when there is one, as a line at ``slo_ms``."""
    series = [
        Series(label=f"{key.upper()} {name}", unit="ms", scale="ms", color=color, dash=dash, points=True,
               values=percentile(name))
        for name, color, dash in PERCENTILES
    ]  # fmt: skip
    if slo_ms is not None:
        series.append(Series(label=f"SLO {slo_ms:g} ms", unit="ms", scale="ms", color=BLACK, dash=SLO_DASH,
                             width=1.5, values=[slo_ms] * count))  # fmt: skip
    return Chart(
        id=chart_id,
        title=f"{title} percentiles against the SLO",
        caption=caption,
        axes=(Axis(scale="ms", label=f"{key.upper()} (ms, log scale)", log=True),),
        series=tuple(series),
    )


def _outcomes(rows: Sequence[Mapping[str, Any]]) -> Chart:
    series: list[Series] = []
    below = [0.0] * len(rows)
    for key, label, color, dash in OUTCOMES:
        shown = _column(rows, key)
        below = [b + (v or 0.0) for b, v in zip(below, shown, strict=True)]
        series.append(Series(label=label, unit="req/s", scale="rps", color=color, dash=dash, width=1.5,
                             fill=True, values=list(below), shown=shown))  # fmt: skip
    return Chart(
        id="outcomes",
        title="How the requests offered each second ended",
        caption="Requests by outcome, stacked, counted in the second they were scheduled: every offered "
        "request is in exactly one band.",
        axes=(Axis(scale="rps", label="requests/s (stacked)"),),
        series=tuple(series),
        stacked=True,
    )


def _concurrency(rows: Sequence[Mapping[str, Any]]) -> Chart:
    return Chart(
        id="concurrency",
        title="In-flight requests, attempts and retries",
        caption="Attempts outstanding (mean over each second, left axis) and attempts and retries sent per "
        "second (right axis): attempts above the offered rate are the clients' retry amplification.",
        axes=(Axis(scale="n", label="attempts in flight"), Axis(scale="rps", label="attempts/s", side="right")),
        series=(
            Series(label="attempts in flight", unit="", scale="n", color=BLUE, values=_column(rows, "in_flight")),
            Series(label="attempts sent", unit="per s", scale="rps", color=ORANGE, dash=DASHED,
                   values=_column(rows, "attempts")),
            Series(label="retries sent", unit="per s", scale="rps", color=VERMILLION, dash=DOTTED,
                   values=_column(rows, "retries")),
        ),
    )  # fmt: skip


def phase_bands(phases: Sequence[Mapping[str, Any]]) -> list[Band]:
    """One band per phase, where it actually ran (or was planned to, for results without timings)."""
    bands = []
    for phase in phases:
        start = _number(phase.get("actual_start_s"))
        end = _number(phase.get("actual_end_s"))
        if start is None or end is None:
            start, end = _number(phase.get("planned_start_s")), _number(phase.get("planned_end_s"))
        if start is None or end is None:
            continue
        name, role = str(phase.get("name", "")), str(phase.get("role", ""))
        bands.append(Band(label=name, detail=role, start=start, end=end, kind="phase"))
    return bands


def fault_bands(faults: Sequence[Mapping[str, Any]], *, end: float) -> list[Band]:
    """From each fault's confirmed "on" to its "off" (or the run's end when it was never removed)."""
    bands = []
    open_at: dict[tuple[Any, str], float] = {}
    for event in sorted(faults, key=lambda e: _number(e.get("at_s")) or 0.0):
        key = (event.get("phase"), str(event.get("fault", "")))
        at = _number(event.get("at_s")) or 0.0
        if event.get("action") == "on" and event.get("ok", True):
            open_at[key] = at
        elif event.get("action") == "off" and key in open_at:
            left = not event.get("ok", True)
            bands.append(Band(label=key[1], start=open_at.pop(key), end=end if left else at, kind="fault",
                              detail="not removed" if left else ""))  # fmt: skip
    bands.extend(
        Band(label=k[1], start=s, end=end, kind="fault", detail="still on at the end") for k, s in open_at.items()
    )
    return bands
