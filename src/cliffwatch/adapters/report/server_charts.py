"""The target's own series (``target.metrics``) as charts on the run's time axis, beside the client's."""

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
    column,
    number,
)

# The server's signals (target.metrics), each with its chart, axis and style; the scenario's own series go
# on a chart of their own.
_QUEUE_SIGNALS = (
    ("waiting", "waiting (server queue)", VERMILLION, SOLID),
    ("running", "running (batch)", BLUE, DASHED),
)
_SIGNALS = frozenset({"waiting", "running", "kv_cache_usage", "preemptions", "generation_tokens", "prompt_tokens",
                      "queue_time", "prefix_cache_hits", "prefix_cache_queries"})  # fmt: skip


def _server_column(rows: Sequence[Mapping[str, Any]], name: str, scale: float = 1.0) -> list[float | None]:
    values: list[float | None] = []
    for row in rows:
        server = row.get("server")
        value = number(server.get(name)) if isinstance(server, Mapping) else None
        values.append(None if value is None else value * scale)
    return values


def server_charts(rows: Sequence[Mapping[str, Any]]) -> list[Chart]:
    """The target's own series (rows' ``server``, from ``target.metrics``) on the run's time axis: its queue
    and batch with the mean queue time, its token rate against the client's with the KV cache and
    preemptions, and the scenario's own series; none when the run scraped nothing."""
    names: list[str] = []
    for row in rows:
        server = row.get("server")
        if isinstance(server, Mapping):
            names += [str(n) for n in server if str(n) not in names]
    if not names:
        return []
    charts = []
    queue = [
        Series(
            label=label,
            unit="requests",
            scale="n",
            color=color,
            dash=dash,
            points=True,
            values=_server_column(rows, key),
        )
        for key, label, color, dash in _QUEUE_SIGNALS
        if key in names
    ]
    if "queue_time" in names:
        queue.append(
            Series(
                label="mean queue time",
                unit="s",
                scale="s",
                color=ORANGE,
                dash=DOTTED,
                points=True,
                values=_server_column(rows, "queue_time"),
            )
        )
    if queue:
        charts.append(Chart(
            id="server-queue", title="The server's queue and batch (its own /metrics)",
            caption="Requests waiting in the server's queue and running in its batch as its Prometheus page "
            "reported them (mean of each second's scrapes; a gap is a second without a scrape), and the mean "
            "time the requests it admitted had waited (right axis). A queue that keeps growing is load the "
            "server cannot serve, whatever tokens/s shows.",
            axes=_axes(queue, Axis(scale="n", label="requests"),
                       Axis(scale="s", label="mean queue time (s)", side="right")),
            series=tuple(queue),
        ))  # fmt: skip
    work: list[Series] = []
    if "generation_tokens" in names:
        work.append(
            Series(
                label="output tokens (server)",
                unit="tok/s",
                scale="tps",
                color=ORANGE,
                points=True,
                values=_server_column(rows, "generation_tokens"),
            )
        )
        work.append(
            Series(
                label="output tokens (client)",
                unit="tok/s",
                scale="tps",
                color=BLACK,
                dash=DASHED,
                values=column(rows, "output_tokens"),
            )
        )
    if "kv_cache_usage" in names:
        work.append(
            Series(
                label="KV cache in use",
                unit="%",
                scale="pct",
                color=PURPLE,
                dash=DASH_DOT,
                points=True,
                values=_server_column(rows, "kv_cache_usage", 100.0),
            )
        )
    if "preemptions" in names:
        work.append(
            Series(
                label="preemptions",
                unit="per s",
                scale="pct",
                color=VERMILLION,
                dash=DOTTED,
                points=True,
                values=_server_column(rows, "preemptions"),
            )
        )
    if "prefix_cache_hits" in names and "prefix_cache_queries" in names:
        work.append(
            Series(
                label="prefix cache hits",
                unit="%",
                scale="pct",
                color=GREEN,
                dash=LONG_DASH,
                points=True,
                values=_hit_rate(rows),
            )
        )
    if work:
        charts.append(Chart(
            id="server-work", title="The server's token rate, KV cache and preemptions",
            caption="Output tokens per second as the server counted them against what the client received, "
            "and (right axis) the share of its KV cache in use, the requests it preempted per second and the "
            "share of prompt tokens its prefix cache served. Some "
            "engines count a request's tokens when it finishes (SGLang, TGI, llama.cpp), so their rate is lumpy.",
            axes=_axes(work, Axis(scale="tps", label="output tokens/s"),
                       Axis(scale="pct", label="% KV cache, preemptions/s", side="right")),
            series=tuple(work),
        ))  # fmt: skip
    own = [name for name in names if name not in _SIGNALS]
    if own:
        palette = (GREEN, BLUE, ORANGE, PURPLE, SKY_BLUE, VERMILLION, BLACK, YELLOW)
        dashes = (SOLID, DASHED, DOTTED, DASH_DOT, LONG_DASH, DASH_DOT_DOT, SHORT_DASH, SLO_DASH)
        charts.append(Chart(
            id="server-own", title="The scenario's own server series",
            caption="The series target.metrics.series added, each as its expression gave it (see the server "
            "section for the expressions and units).",
            axes=(Axis(scale="v", label="value"),),
            series=tuple(Series(label=name, unit="", scale="v", color=palette[i % 8], dash=dashes[i % 8], points=True,
                                values=_server_column(rows, name)) for i, name in enumerate(own)),
        ))  # fmt: skip
    return charts


def _hit_rate(rows: Sequence[Mapping[str, Any]]) -> list[float | None]:
    """The percent of the prompt tokens looked up in a second that the prefix cache had (a gap: none looked up)."""
    hits, queries = _server_column(rows, "prefix_cache_hits"), _server_column(rows, "prefix_cache_queries")
    return [None if h is None or not q else 100.0 * h / q for h, q in zip(hits, queries, strict=True)]


def _axes(series: list[Series], *axes: Axis) -> tuple[Axis, ...]:
    """The axes some series is drawn on: an axis without a series (no KV cache on this engine) is left out."""
    used = {s.scale for s in series}
    return tuple(axis for axis in axes if axis.scale in used)
