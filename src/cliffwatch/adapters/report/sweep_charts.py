"""What each chart of a sweep report plots: per retry variant, throughput, attainment and latency against the
offered rate (or the number of clients), with the usable capacity and the cliff marked; and, with several
variants, how each moved the cliff.

One point per measured rate: the trials of a rate are pooled as the search pooled them (attainment and its
interval, tokens/s and completions/s from ``rates``), goodput and sent rate are the trials' mean, and the
latency percentiles are the worst trial's (the decision rule judges the worst trial too). The specs are the
same plain JSON as a run's (``charts.Chart``) plus markers, for ``CliffwatchCharts.renderSweep``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cliffwatch.adapters.report.chart_spec import (
    BLACK,
    BLUE,
    DASH_DOT,
    DASHED,
    DOTTED,
    GREEN,
    LONG_DASH,
    ORANGE,
    PERCENTILES,
    PURPLE,
    SKY_BLUE,
    SLO_DASH,
    SOLID,
    VERMILLION,
    Axis,
    Chart,
    Series,
)
from cliffwatch.adapters.report.charts import latency_chart

# A colour and a dash per variant in the comparison charts (Okabe–Ito again, black kept for reference lines).
VARIANT_STYLES = ((BLUE, SOLID), (VERMILLION, DASHED), (GREEN, DOTTED), (PURPLE, DASH_DOT), (ORANGE, LONG_DASH))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else []


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _worst(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


@dataclass(frozen=True, kw_only=True)
class Marker:
    """A rate marked on every chart of a variant: a vertical line, or from ``at`` to the right edge (region)."""

    at: float
    label: str
    kind: str  # "usable", "cliff" or "invalid" (a region: the generator could not keep its schedule)
    color: str

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "label": self.label, "kind": self.kind, "color": self.color}


@dataclass(frozen=True, kw_only=True)
class RatePoint:
    """One measured rate of a variant, its trials pooled."""

    rate: float
    trials: int
    verdict: str  # good, bad, invalid (settled), or "" when the search had not settled it
    on_point_estimate: bool
    sent_rate: float | None
    goodput_rps: float | None
    completions_per_s: float | None
    tokens_per_s: float | None
    attainment: float | None
    low: float | None
    high: float | None
    amplification: float | None
    latency_ms: Mapping[str, float | None]  # "ttft_p50" … "e2e_p99": the worst trial's
    classes: Mapping[str, float | None] = field(default_factory=dict)  # each traffic class's pooled attainment


def rate_points(result: Mapping[str, Any]) -> list[RatePoint]:
    """The measured rates of one variant's ``CapacityResult.to_dict()``, lowest first."""
    by_rate: dict[float, list[Mapping[str, Any]]] = {}
    for step in map(_map, _list(result.get("steps"))):
        rate = _number(step.get("rate"))
        if rate is not None:
            by_rate.setdefault(rate, []).append(step)
    settled = {_number(r.get("rate")): r for r in map(_map, _list(result.get("rates")))}
    points = []
    for rate in sorted(by_rate):
        steps = by_rate[rate]
        rate_doc = _map(settled.get(rate))
        pooled = _map(rate_doc.get("pooled"))
        interval = _map(pooled.get("interval"))
        latency = {
            f"{key}_{name}": _worst([_number(_map(s.get(f"{key}_ms")).get(name)) for s in steps])
            for key in ("ttft", "e2e")
            for name, _, _ in PERCENTILES
        }
        on_time = sum(int(_number(s.get("on_time")) or 0) for s in steps)
        offered = sum(int(_number(s.get("offered")) or 0) for s in steps)
        attainment = _number(pooled.get("attainment"))
        points.append(
            RatePoint(
                rate=rate, trials=len(steps), verdict=str(rate_doc.get("verdict") or ""),
                on_point_estimate=rate_doc.get("on_point_estimate") is True,
                sent_rate=_mean([_number(s.get("sent_rate")) for s in steps]),
                goodput_rps=_mean([_number(s.get("goodput_rps")) for s in steps]),
                completions_per_s=_number(pooled.get("completions_per_s"))
                if pooled else _mean([_number(s.get("completions_per_s")) for s in steps]),
                tokens_per_s=_number(pooled.get("tokens_per_s"))
                if pooled else _mean([_number(s.get("tokens_per_s")) for s in steps]),
                attainment=attainment if attainment is not None else (on_time / offered if offered else None),
                low=_number(interval.get("low")), high=_number(interval.get("high")),
                amplification=_mean([_number(s.get("amplification")) for s in steps]), latency_ms=latency,
                classes=_class_attainment(steps),
            )
        )  # fmt: skip
    return points


def _class_attainment(steps: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each traffic class's attainment over a rate's trials pooled (its on-time requests over its offered)."""
    counts: dict[str, list[int]] = {}
    for step in steps:
        for name, own in _map(step.get("classes")).items():
            pair = counts.setdefault(str(name), [0, 0])
            pair[0] += int(_number(_map(own).get("on_time")) or 0)
            pair[1] += int(_number(_map(own).get("offered")) or 0)
    return {name: on_time / offered if offered else None for name, (on_time, offered) in counts.items()}


@dataclass(frozen=True, kw_only=True)
class SweepFrame:
    """The charts of one variant (or of the comparison) over one x axis of rates."""

    id: str
    x: list[float]
    x_label: str
    x_unit: str
    markers: list[Marker] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "x": self.x, "x_label": self.x_label, "x_unit": self.x_unit,
            "markers": [m.to_dict() for m in self.markers], "charts": [c.to_dict() for c in self.charts],
        }  # fmt: skip


def x_axis(unit: str) -> tuple[str, str]:
    """The x axis' label and unit: offered rate in rate mode, clients in concurrency mode."""
    if unit == "clients":
        return "concurrency (closed-loop clients)", "clients"
    return f"offered rate ({unit})", unit


def variant_markers(result: Mapping[str, Any], points: Sequence[RatePoint]) -> list[Marker]:
    """Usable capacity, the cliff (the first bad rate above it) and where the generator stopped keeping up."""
    unit = str(result.get("unit") or "req/s")
    markers = []
    usable, first_bad = _number(result.get("usable_rps")), _number(result.get("first_bad_rps"))
    if usable is not None:
        markers.append(Marker(at=usable, label=f"usable {usable:g} {unit}", kind="usable", color=GREEN))
    if first_bad is not None:
        markers.append(Marker(at=first_bad, label=f"cliff: first bad {first_bad:g} {unit}", kind="cliff",
                              color=VERMILLION))  # fmt: skip
    invalid = [p.rate for p in points if p.verdict == "invalid"]
    if invalid:
        markers.append(Marker(at=min(invalid), label="generator could not keep its schedule", kind="invalid",
                              color=BLACK))  # fmt: skip
    return markers


def variant_frame(index: int, result: Mapping[str, Any], *, slo: Mapping[str, Any]) -> SweepFrame:
    """The four charts of one variant: throughput, attainment, TTFT and e2e latency against the rate."""
    points = rate_points(result)
    x_label, unit = x_axis(str(result.get("unit") or "req/s"))
    target = _number(result.get("target"))
    prefix = f"v{index}"
    return SweepFrame(
        id=prefix, x=[p.rate for p in points], x_label=x_label, x_unit=unit,
        markers=variant_markers(result, points),
        charts=[
            _throughput(prefix, points),
            _attainment(prefix, points, target),
            _latency(prefix, points, "ttft", "Time to first token", _number(slo.get("ttft_ms"))),
            _latency(prefix, points, "e2e", "End-to-end latency", _number(slo.get("e2e_ms"))),
        ],
    )  # fmt: skip


def _throughput(prefix: str, points: Sequence[RatePoint]) -> Chart:
    return Chart(
        id=f"{prefix}-throughput",
        title="Goodput and output tokens against the offered rate",
        caption="Requests sent and completed within the SLO per second (left axis) against output tokens per "
        "second (right axis), one point per measured rate (trials pooled). Goodput parting from tokens/s is the "
        "hidden cliff; the green line is the usable capacity, the vermillion one the first rate that failed.",
        axes=(Axis(scale="rps", label="requests/s"), Axis(scale="tps", label="output tokens/s", side="right")),
        series=(
            Series(label="sent", unit="req/s", scale="rps", color=BLACK, dash=DASHED, width=1.5, points=True,
                   values=[p.sent_rate for p in points]),
            Series(label="goodput (on time)", unit="req/s", scale="rps", color=GREEN, width=2.5, points=True,
                   values=[p.goodput_rps for p in points]),
            Series(label="completions", unit="req/s", scale="rps", color=SKY_BLUE, dash=DOTTED, points=True,
                   values=[p.completions_per_s for p in points]),
            Series(label="output tokens", unit="tok/s", scale="tps", color=ORANGE, dash=DASH_DOT, points=True,
                   values=[p.tokens_per_s for p in points]),
        ),
    )  # fmt: skip


def _percent(value: float | None) -> float | None:
    return None if value is None else round(value * 100, 4)


_CLASS_COLOURS = (VERMILLION, GREEN, ORANGE, PURPLE)
_CLASS_DASHES = (DASHED, DASH_DOT, LONG_DASH, (12, 3, 3, 3))


def _attainment(prefix: str, points: Sequence[RatePoint], target: float | None) -> Chart:
    lows = [p.low for p in points if p.low is not None] + [p.attainment for p in points if p.attainment is not None]
    names = list(dict.fromkeys(name for p in points for name in p.classes))
    lows += [v for p in points for v in p.classes.values() if v is not None]
    floor = min([*lows, target if target is not None else 1.0], default=0.0)
    bottom = max(0.0, math.floor(floor * 10 - 0.2) * 10)  # a round 10 % below everything drawn
    series = [
        Series(label="attainment", unit="%", scale="pct", color=BLUE, width=2.5, points=True,
               values=[_percent(p.attainment) for p in points]),
        Series(label="CI low", unit="%", scale="pct", color=SKY_BLUE, dash=DOTTED, width=1,
               values=[_percent(p.low) for p in points]),
        Series(label="CI high", unit="%", scale="pct", color=SKY_BLUE, dash=DOTTED, width=1,
               values=[_percent(p.high) for p in points]),
    ]  # fmt: skip
    for i, name in enumerate(names):  # a class's own share on time against its own SLO
        series.append(Series(label=f"{name} on time", unit="%", scale="pct", color=_CLASS_COLOURS[i % 4],
                             dash=_CLASS_DASHES[i % 4], width=1.5, points=True,
                             values=[_percent(p.classes.get(name)) for p in points]))  # fmt: skip
    if target is not None:
        series.append(Series(label=f"target {target * 100:g} %", unit="%", scale="pct", color=BLACK, dash=SLO_DASH,
                             width=1.5, values=[target * 100] * len(points)))  # fmt: skip
    return Chart(
        id=f"{prefix}-attainment",
        title="Attainment with its confidence interval against the target",
        caption="Share of the requests offered at each rate that completed within the SLO, trials pooled, with "
        "its Wilson confidence interval (shaded). A rate is good when the interval clears the target, bad when "
        "it lies below; otherwise it was measured again or settled on the point estimate."
        + (
            " Each traffic class's own share on time is drawn thin: the rate is judged on all of them together, "
            "at the scenario's mix."
            if names
            else ""
        ),
        axes=(Axis(scale="pct", label="on time (%)", range=(bottom, 100.0)),),
        series=tuple(series),
        fill_between=((1, 2),),
    )


def _latency(prefix: str, points: Sequence[RatePoint], key: str, title: str, slo_ms: float | None) -> Chart:
    return latency_chart(
        f"{prefix}-latency-{key}",
        key=key,
        title=title,
        caption=f"{title} percentiles of the measured window at each rate, from each request's scheduled send "
        "time; the worst trial's where a rate was measured more than once (log scale).",
        slo_ms=slo_ms,
        percentile=lambda name: [p.latency_ms.get(f"{key}_{name}") for p in points],
        count=len(points),
    )


def comparison_frame(variants: Sequence[Mapping[str, Any]]) -> SweepFrame | None:
    """With several retry variants: goodput and attempts per request of each against the rate."""
    if len(variants) < 2:
        return None
    results = [_map(v.get("result")) for v in variants]
    per_variant = [{p.rate: p for p in rate_points(r)} for r in results]
    x = sorted({rate for points in per_variant for rate in points})
    x_label, unit = x_axis(str(results[0].get("unit") or "req/s"))
    goodput, amplification, markers = [], [], []
    for index, (variant, points) in enumerate(zip(variants, per_variant, strict=True)):
        name = str(variant.get("variant", f"variant {index + 1}"))
        color, dash = VARIANT_STYLES[index % len(VARIANT_STYLES)]
        goodput.append(Series(label=name, unit="req/s", scale="rps", color=color, dash=dash, points=True,
                              values=[p.goodput_rps if (p := points.get(r)) else None for r in x]))  # fmt: skip
        amplification.append(Series(label=name, unit="×", scale="amp", color=color, dash=dash, points=True,
                                    values=[p.amplification if (p := points.get(r)) else None for r in x]))  # fmt: skip
        usable = _number(results[index].get("usable_rps"))
        if usable is not None:
            markers.append(Marker(at=usable, label=f"{name}: usable {usable:g}", kind="usable", color=color))
    charts = [
        Chart(id="cmp-goodput", title="Goodput of each retry policy against the offered rate",
              caption="Requests completed within the SLO per second under each client retry policy; each "
              "variant's usable capacity is marked in its colour.",
              axes=(Axis(scale="rps", label="goodput (req/s)"),), series=tuple(goodput)),
        Chart(id="cmp-amplification", title="Attempts per request of each retry policy",
              caption="Attempts sent per request offered: retries multiply the load a struggling target sees.",
              axes=(Axis(scale="amp", label="attempts per request"),), series=tuple(amplification)),
    ]  # fmt: skip
    return SweepFrame(id="cmp", x=x, x_label=x_label, x_unit=unit, markers=markers, charts=charts)
