"""Score trends: how a scenario's resilience score and its components moved over time, per target; and
capacity trends: how a scenario's usable capacity, found by sweeps, moved over time.

Runs are compared only with runs of the same scenario, target and score version (a new formula is a new
series, never a dip). A series is flagged as a regression when its latest point falls below the median of
the points before it by more than a margin.

Sweeps are compared only with sweeps of the same scenario, target, retry variant, mode and attainment
target (another target attainment is another question). A sweep brackets the cliff between its usable rate
and its first bad rate, so the latest capacity is a regression when that whole bracket lies below the
median usable rate of the sweeps before it: it fell by more than its own uncertainty.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from cliffwatch.domain.service.runs import Run

TRAILING_POINTS = 10  # the median the latest point is judged against covers this many points before it
MIN_HISTORY = 3  # fewer earlier points than this: too little history to call anything a regression


class Bucket(StrEnum):
    RUN = "run"
    DAY = "day"
    WEEK = "week"


@dataclass(frozen=True, kw_only=True)
class TrendPoint:
    start: datetime  # the run's end (bucket "run"), or the UTC day or ISO week it covers
    run_ids: tuple[str, ...]
    score: float  # mean of the runs' scores
    components: Mapping[str, float | None]  # mean of each component over the runs where it applied
    passed: int  # runs that passed
    classes: Mapping[str, float | None] = field(default_factory=dict)  # mean of each traffic class's own score

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start.isoformat(), "runs": list(self.run_ids), "score": round(self.score, 2),
                "components": {k: None if v is None else round(v, 4) for k, v in self.components.items()},
                "classes": {k: None if v is None else round(v, 2) for k, v in self.classes.items()},
                "passed": self.passed}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class TrendSeries:
    scenario: str
    target_url: str
    score_version: str
    points: tuple[TrendPoint, ...]
    trailing_median: float | None
    regression: bool  # the score, or some traffic class's own score, fell below its trailing median
    summary: str
    regressed_classes: tuple[str, ...] = ()  # the traffic classes whose own score regressed

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "target_url": self.target_url,
            "score_version": self.score_version,
            "points": [p.to_dict() for p in self.points],
            "trailing_median": None if self.trailing_median is None else round(self.trailing_median, 2),
            "regression": self.regression,
            "regressed_classes": list(self.regressed_classes),
            "summary": self.summary,
        }


def trend_series(runs: Sequence[Run], *, bucket: Bucket, margin: float) -> list[TrendSeries]:
    """One series per (scenario, target, score version), its points in time order, each judged."""
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for run in runs:
        if run.score is None or run.score_version is None or run.finished_at is None:
            continue
        groups.setdefault((run.scenario_name, run.target_url, run.score_version), []).append(run)
    series = []
    for (scenario, target, version), members in sorted(groups.items()):
        members.sort(key=lambda r: (r.finished_at or datetime.min.replace(tzinfo=UTC), r.id))
        points = _points(members, bucket)
        median, regression, summary = _judge(points, margin)
        regressed = _regressed_classes(points, margin)
        if regressed:
            summary += "; traffic class " + ", ".join(regressed)
        series.append(TrendSeries(scenario=scenario, target_url=target, score_version=version, points=tuple(points),
                                  trailing_median=median, regression=regression or bool(regressed),
                                  summary=summary, regressed_classes=regressed))  # fmt: skip
    return series


def _bucket_start(at: datetime, bucket: Bucket) -> datetime:
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if bucket is Bucket.DAY:
        return day
    return day - timedelta(days=day.weekday())


def _points(runs: list[Run], bucket: Bucket) -> list[TrendPoint]:
    grouped: dict[datetime, list[Run]] = {}
    for run in runs:
        assert run.finished_at is not None
        key = run.finished_at if bucket is Bucket.RUN else _bucket_start(run.finished_at, bucket)
        grouped.setdefault(key, []).append(run)
    return [_point(start, members) for start, members in sorted(grouped.items())]


def _point(start: datetime, runs: list[Run]) -> TrendPoint:
    return TrendPoint(
        start=start,
        run_ids=tuple(r.id for r in runs),
        score=statistics.fmean(r.score for r in runs if r.score is not None),
        components=_means(runs, "components"),
        classes=_means(runs, "classes"),
        passed=sum(1 for r in runs if r.passed),
    )


def _means(runs: list[Run], part: str) -> dict[str, float | None]:
    """The mean value of each named entry of the runs' ``score[part]`` (components or traffic classes) over
    the runs where it had one; None where it never had."""
    values: dict[str, list[float]] = {}
    names: list[str] = []
    for run in runs:
        for entry in _score_entries(run, part):
            name, value = str(entry.get("name")), entry.get("value")
            if name not in names:
                names.append(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                values.setdefault(name, []).append(float(value))
    return {n: statistics.fmean(values[n]) if n in values else None for n in names}


def _score_entries(run: Run, part: str) -> list[Mapping[str, Any]]:
    score = (run.result or {}).get("score")
    entries = score.get(part) if isinstance(score, Mapping) else None
    return [c for c in entries if isinstance(c, Mapping)] if isinstance(entries, list) else []


def _regressed_classes(points: list[TrendPoint], margin: float) -> tuple[str, ...]:
    """The traffic classes whose own score at the latest point fell below the median of their earlier points
    by more than the margin, judged like the score (a class with too little history is not judged)."""
    if not points:
        return ()
    regressed = []
    for name, latest in points[-1].classes.items():
        earlier = [v for p in points[:-1] if (v := p.classes.get(name)) is not None][-TRAILING_POINTS:]
        if latest is not None and len(earlier) >= MIN_HISTORY and latest < statistics.median(earlier) - margin:
            regressed.append(name)
    return tuple(regressed)


def _judge(points: list[TrendPoint], margin: float) -> tuple[float | None, bool, str]:
    if not points:
        return None, False, "no scored runs"
    latest, earlier = points[-1], [p.score for p in points[:-1]][-TRAILING_POINTS:]
    if not earlier:  # a day or week bucket may already hold several runs: only one run is a "first run"
        first = "first run of this scenario" if len(latest.run_ids) == 1 else f"first {len(latest.run_ids)} runs"
        return None, False, f"{first}: score {latest.score:.1f}; too little history to judge"
    if len(earlier) < MIN_HISTORY:
        return None, False, f"latest score {latest.score:.1f}; too little history to judge ({len(earlier)} earlier)"
    median = statistics.median(earlier)
    regression = latest.score < median - margin
    verdict = "REGRESSION" if regression else "no regression"
    return (
        median,
        regression,
        (
            f"{verdict}: latest score {latest.score:.1f} against a trailing median of {median:.1f} "
            f"over {len(earlier)} earlier points (margin {margin:g})"
        ),
    )


CAPACITY_MIN_HISTORY = 2  # sweeps are long and run seldom: two earlier points are a window to judge by


@dataclass(frozen=True, kw_only=True)
class CapacityPoint:
    """One sweep's result for one variant."""

    at: datetime  # the sweep's end
    run_id: str
    usable: float | None  # None: no rate tried met the target
    first_bad: float | None  # None: no cliff found up to the sweep's highest rate
    on_point_estimate: bool  # the usable rate was settled on a point estimate (too few requests to be sure)

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "run": self.run_id, "usable": self.usable, "first_bad": self.first_bad,
                "on_point_estimate": self.on_point_estimate}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class CapacitySeries:
    scenario: str
    target_url: str
    variant: str
    mode: str  # rate or concurrency
    unit: str  # req/s or clients
    target: float  # the attainment the usable rate meets
    points: tuple[CapacityPoint, ...]
    trailing_median: float | None
    regression: bool
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "target_url": self.target_url,
            "variant": self.variant,
            "mode": self.mode,
            "unit": self.unit,
            "target": self.target,
            "points": [p.to_dict() for p in self.points],
            "trailing_median": self.trailing_median,
            "regression": self.regression,
            "summary": self.summary,
        }


def capacity_series(runs: Sequence[Run]) -> list[CapacitySeries]:
    """One series per (scenario, target, variant, mode, attainment target) from finished sweeps, judged.

    Reads each sweep's stored document defensively (it is read back across versions): a variant without a
    readable result is left out, never a reason to lose the others.
    """
    groups: dict[tuple[str, str, str, str, float], list[CapacityPoint]] = {}
    units: dict[tuple[str, str, str, str, float], str] = {}
    for run in runs:
        if run.finished_at is None or run.sweep is None or run.result is None:
            continue
        variants = run.result.get("variants")
        for entry in variants if isinstance(variants, list) else []:
            result = entry.get("result") if isinstance(entry, Mapping) else None
            if not isinstance(result, Mapping) or not isinstance(entry.get("variant"), str):
                continue
            key = (run.scenario_name, run.target_url, entry["variant"], run.sweep.mode.value, run.sweep.target)
            units[key] = str(result.get("unit") or ("clients" if run.sweep.mode.value == "concurrency" else "req/s"))
            groups.setdefault(key, []).append(
                CapacityPoint(
                    at=run.finished_at,
                    run_id=run.id,
                    usable=_rate(result.get("usable_rps")),
                    first_bad=_rate(result.get("first_bad_rps")),
                    on_point_estimate=result.get("usable_on_point_estimate") is True,
                )
            )
    series = []
    for key, points in sorted(groups.items()):
        points.sort(key=lambda p: (p.at, p.run_id))
        median, regression, summary = _judge_capacity(points, units[key])
        scenario, target_url, variant, mode, target = key
        series.append(CapacitySeries(scenario=scenario, target_url=target_url, variant=variant, mode=mode,
                                     unit=units[key], target=target, points=tuple(points), trailing_median=median,
                                     regression=regression, summary=summary))  # fmt: skip
    return series


def _rate(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _judge_capacity(points: list[CapacityPoint], unit: str) -> tuple[float | None, bool, str]:
    latest, earlier = points[-1], points[:-1][-TRAILING_POINTS:]
    shown = "none" if latest.usable is None else f"{latest.usable:.3g} {unit}"
    if not earlier:
        return None, False, f"first sweep of this scenario: usable capacity {shown}; too little history to judge"
    if len(earlier) < CAPACITY_MIN_HISTORY:
        return None, False, f"latest usable capacity {shown}; too little history to judge ({len(earlier)} earlier)"
    median = statistics.median(p.usable or 0.0 for p in earlier)
    # The cliff lies between usable and first_bad: only when all of that is below the median did it move.
    ceiling = latest.first_bad if latest.first_bad is not None else (latest.usable or 0.0)
    regression = ceiling < median
    bracket = f"the cliff now lies below {ceiling:.3g} {unit}" if latest.first_bad is not None else "no cliff seen"
    verdict = "REGRESSION" if regression else "no regression"
    return (
        median,
        regression,
        f"{verdict}: latest usable capacity {shown} ({bracket}) against a trailing median of {median:.3g} {unit} "
        f"over {len(earlier)} earlier sweeps",
    )
