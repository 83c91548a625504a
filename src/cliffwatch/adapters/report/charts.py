"""What each chart of a run report plots: series, axes, units, colours, and the phase and fault bands.

The specs (``chart_spec``) are plain JSON for ``static/report.js``, which only turns them into uPlot options:
the choice of what to show lives here, in typed Python, so the dashboard can send the same specs from the API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cliffwatch.adapters.report.chart_spec import (
    BLACK,
    BLUE,
    DASH_DOT,
    DASHED,
    DOTTED,
    GREEN,
    ORANGE,
    OUTCOMES,
    PERCENTILES,
    SLO_DASH,
    VERMILLION,
    Axis,
    Band,
    Chart,
    ChartSet,
    Series,
)
from cliffwatch.adapters.report.chart_spec import column as _column
from cliffwatch.adapters.report.chart_spec import number as _number
from cliffwatch.adapters.report.class_charts import class_charts
from cliffwatch.adapters.report.server_charts import server_charts


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
            *class_charts(ordered),
            *server_charts(ordered),
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
        "(log scale). A second whose requests all failed (timed out, shed or errored: none completed) is "
        "shaded and marked “no completion”; a second with nothing offered has no point.",
        slo_ms=slo_ms,
        percentile=lambda name: _column(rows, f"{key}_{name}_ms"),
        count=len(rows),
        no_completion=no_completion(rows),
    )


def no_completion(rows: Sequence[Mapping[str, Any]]) -> tuple[int, ...]:
    """The seconds (row indexes) that offered requests none of which succeeded (on time or late), counted in
    the second they were scheduled, as the latencies are. Judged by outcomes, not by a missing latency: a
    target without streams has no TTFT in any second, and that is no collapse."""

    def count(row: Mapping[str, Any], key: str) -> float:
        return _number(row.get(key)) or 0.0

    return tuple(
        i for i, row in enumerate(rows) if count(row, "offered") > 0 and count(row, "on_time") + count(row, "late") == 0
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
    no_completion: tuple[int, ...] = (),
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
        no_completion=no_completion,
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
