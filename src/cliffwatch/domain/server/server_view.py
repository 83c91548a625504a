"""The server's own view of a run: the series scraped from its Prometheus endpoint, on the run's time axis.

``ServerRecorder`` is fed each scrape (already parsed into samples) or its failure, with the time it was
taken in seconds from the run's start, and evaluates every series on it: the engine profile's signals
(each the first of its candidate expressions the page carries) and the scenario's own series. ``view()``
gives the frozen ``ServerView`` a result keeps, with the failures counted: a scrape that failed never fails
the run, it is shown. Windows of it (a phase, a sweep step) are summarised by ``ServerView.window``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cliffwatch.domain.scenario.metric_expr import Expr, ExprState, Samples, group_suffix, parse_expr
from cliffwatch.domain.scenario.metrics_spec import EngineKind, MetricsSpec, SeriesSpec, Signal
from cliffwatch.domain.server.engine_profiles import PROFILES, SignalDef, detect_engine

MAX_FAILURE_REASONS = 20  # distinct reasons kept; the rest count under "other"


@dataclass(frozen=True, kw_only=True)
class ServerSeries:
    """One series: ``values`` line up with ``ServerView.times_s`` (None where a scrape had no value)."""

    name: str  # the signal's or the scenario's name; a ``by`` group adds its labels: queue{model="m"}
    signal: Signal | None
    expr: str
    unit: str
    values: tuple[float | None, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "signal": None if self.signal is None else self.signal.value, "expr": self.expr,
                "unit": self.unit, "values": [None if v is None else round(v, 6) for v in self.values]}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerSeries:
        signal = data.get("signal")
        return cls(
            name=str(data["name"]),
            signal=None if signal is None else Signal(signal),
            expr=str(data["expr"]),
            unit=str(data.get("unit", "")),
            values=tuple(None if v is None else float(v) for v in data["values"]),
        )


@dataclass(frozen=True, kw_only=True)
class WindowStats:
    """A series over a window of the run: its first and last values, range, mean and least-squares slope."""

    first: float
    last: float
    low: float
    high: float
    mean: float
    slope_per_s: float | None  # None with fewer than two points
    points: int

    def to_dict(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last, "min": self.low, "max": self.high, "mean": self.mean,
                "slope_per_s": self.slope_per_s, "points": self.points}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ServerView:
    url: str  # as shown: no password
    engine: EngineKind  # the profile used (``auto`` when the page named no engine cliffwatch knows)
    interval_ms: float
    times_s: tuple[float, ...]  # when each successful scrape was taken, from the run's start
    series: tuple[ServerSeries, ...]
    scrapes: int  # attempted
    failures: Mapping[str, int] = field(default_factory=dict)  # reason → count
    notes: tuple[str, ...] = ()  # what the profile could not find, the engine not recognised, …

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def signal(self, signal: Signal) -> ServerSeries | None:
        """The series of ``signal`` (its ungrouped one), or None when the page did not carry it."""
        return next((s for s in self.series if s.signal is signal), None)

    def window(self, name_or_signal: str | Signal, start_s: float, end_s: float) -> WindowStats | None:
        """The series' values scraped in ``[start_s, end_s)``, summarised; None without any."""
        series = (
            self.signal(name_or_signal)
            if isinstance(name_or_signal, Signal)
            else next((s for s in self.series if s.name == name_or_signal), None)
        )
        if series is None:
            return None
        points = [(t, v) for t, v in zip(self.times_s, series.values, strict=True)
                  if v is not None and start_s <= t < end_s]  # fmt: skip
        return window_stats(points)

    def per_second(self, seconds: int) -> dict[str, list[float | None]]:
        """Each series on the run's per-second axis: the mean of the scrapes taken in each second [t, t+1)
        for ``seconds`` seconds, None where none was taken (so charts line up with the client's rows)."""
        out: dict[str, list[float | None]] = {}
        for series in self.series:
            sums = [0.0] * seconds
            counts = [0] * seconds
            for t, value in zip(self.times_s, series.values, strict=True):
                second = math.floor(t)
                if value is not None and 0 <= second < seconds:
                    sums[second] += value
                    counts[second] += 1
            out[series.name] = [s / c if c else None for s, c in zip(sums, counts, strict=True)]
        return out

    def summary_dict(self) -> dict[str, Any]:
        """What was scraped and how it went, without the values (``to_dict`` has those)."""
        document = self.to_dict()
        del document["times_s"]
        document["series"] = [{k: v for k, v in s.items() if k != "values"} for s in document["series"]]
        return document

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "engine": self.engine.value,
            "interval_ms": self.interval_ms,
            "scrapes": self.scrapes,
            "failed": self.failed,
            "failures": dict(self.failures),
            "notes": list(self.notes),
            "times_s": [round(t, 3) for t in self.times_s],
            "series": [s.to_dict() for s in self.series],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerView:
        return cls(
            url=str(data["url"]),
            engine=EngineKind(data["engine"]),
            interval_ms=float(data["interval_ms"]),
            times_s=tuple(float(t) for t in data["times_s"]),
            series=tuple(ServerSeries.from_dict(s) for s in data["series"]),
            scrapes=int(data["scrapes"]),
            failures={str(k): int(v) for k, v in (data.get("failures") or {}).items()},
            notes=tuple(str(n) for n in data.get("notes") or ()),
        )


def window_stats(points: Sequence[tuple[float, float]]) -> WindowStats | None:
    """``points`` (time, value), summarised; None when there are none."""
    if not points:
        return None
    values = [v for _, v in points]
    slope: float | None = None
    if len(points) >= 2:
        mean_t = math.fsum(t for t, _ in points) / len(points)
        mean_v = math.fsum(values) / len(values)
        spread = math.fsum((t - mean_t) ** 2 for t, _ in points)
        if spread > 0:
            slope = math.fsum((t - mean_t) * (v - mean_v) for t, v in points) / spread
    return WindowStats(first=values[0], last=values[-1], low=min(values), high=max(values),
                       mean=math.fsum(values) / len(values), slope_per_s=slope, points=len(points))  # fmt: skip


@dataclass(kw_only=True)
class _Tracked:
    """A series being recorded: a signal's candidates (the first one the page carries is kept) or one
    expression; its values by output name (a ``by`` group adds names as they appear)."""

    name: str
    signal: Signal | None
    unit: str
    candidates: tuple[Expr, ...]
    state: ExprState | None = None
    values: dict[str, list[float | None]] = field(default_factory=dict)

    def expr(self, samples: Samples) -> ExprState | None:
        if self.state is None:
            chosen = next((c for c in self.candidates if c.present(samples)), None)
            if chosen is not None:
                self.state = ExprState(chosen)
        return self.state


class ServerRecorder:
    """Evaluates every series of ``spec`` scrape by scrape (see the module's docstring)."""

    def __init__(self, spec: MetricsSpec, *, url: str) -> None:
        self.spec = spec
        self.url = url
        self.engine = spec.engine
        self._times: list[float] = []
        self._scrapes = 0
        self._failures: Counter[str] = Counter()
        self._tracked: list[_Tracked] = []
        self._notes: list[str] = []
        if self.engine is not EngineKind.AUTO:
            self._track_profile()
        else:
            self._track_own()

    def needed(self) -> frozenset[str] | None:
        """The sample names a scrape must keep; None (keep every one) until the engine is known."""
        if self.engine is EngineKind.AUTO and not self._times:
            return None
        return frozenset(name for t in self._tracked for c in t.candidates for name in c.sample_names)

    def failed(self, at_s: float, reason: str) -> None:
        del at_s  # failures are counted, not placed: the chart shows the gap where a scrape is missing
        self._scrapes += 1
        if reason in self._failures or len(self._failures) < MAX_FAILURE_REASONS:
            self._failures[reason] += 1
        else:
            self._failures["other"] += 1

    def scraped(self, at_s: float, samples: Samples) -> None:
        """Records one successful scrape taken at ``at_s`` seconds from the run's start."""
        if self.engine is EngineKind.AUTO and not self._times:
            detected = detect_engine(samples.keys())
            if detected is not None:
                self.engine = detected
                self._tracked = []
                self._track_profile()
            else:
                self._notes.append("the page named no engine cliffwatch knows (target.metrics.engine): "
                                   "only the scenario's own series are kept")  # fmt: skip
        self._scrapes += 1
        index = len(self._times)
        self._times.append(at_s)
        for tracked in self._tracked:
            state = tracked.expr(samples)
            groups = {} if state is None else state.evaluate(at_s, samples)
            for group, value in groups.items():
                name = tracked.name + group_suffix(group)
                column = tracked.values.setdefault(name, [None] * index)
                column.append(value)
            for column in tracked.values.values():
                if len(column) <= index:
                    column.append(None)

    def view(self) -> ServerView:
        series: list[ServerSeries] = []
        notes = list(self._notes)
        for tracked in self._tracked:
            expr = tracked.state.expr.text if tracked.state is not None else tracked.candidates[0].text
            if not tracked.values:
                wanted = " or ".join(sorted({n for c in tracked.candidates for n in c.sample_names}))
                if self._times:
                    notes.append(f"{tracked.name}: {wanted} never had a value on the page")
                continue
            for name, values in tracked.values.items():
                series.append(ServerSeries(name=name, signal=tracked.signal if name == tracked.name else None,
                                           expr=expr, unit=tracked.unit, values=tuple(values)))  # fmt: skip
        return ServerView(url=self.url, engine=self.engine, interval_ms=self.spec.interval_ms,
                          times_s=tuple(self._times), series=tuple(series), scrapes=self._scrapes,
                          failures=dict(self._failures), notes=tuple(notes))  # fmt: skip

    def _track_profile(self) -> None:
        own = {s.name: s for s in self.spec.series}
        profile = PROFILES[self.engine]
        for definition in profile:
            self._tracked.append(_signal(definition, own.get(definition.signal.value)))
        self._track_own(skip=frozenset(d.signal.value for d in profile))

    def _track_own(self, skip: frozenset[str] = frozenset()) -> None:
        for spec in self.spec.series:
            if spec.name not in skip:
                signal = Signal(spec.name) if spec.name in {s.value for s in Signal} else None
                self._tracked.append(_Tracked(name=spec.name, signal=signal, unit=spec.unit, candidates=(spec.expr,)))


def _signal(definition: SignalDef, override: SeriesSpec | None) -> _Tracked:
    """A profile's signal, or the scenario's expression for it when the scenario overrides it by name."""
    if override is not None:
        return _Tracked(name=definition.signal.value, signal=definition.signal,
                        unit=override.unit or definition.unit, candidates=(override.expr,))  # fmt: skip
    return _Tracked(name=definition.signal.value, signal=definition.signal, unit=definition.unit,
                    candidates=tuple(parse_expr(c) for c in definition.candidates))  # fmt: skip
