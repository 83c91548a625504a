"""Score trends: series per scenario, target and score version; buckets; the regression flag."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import Run, Trigger
from cliffwatch.domain.service.trends import Bucket, trend_series

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)  # a Monday


def run(index: int, score: float, *, days: float = 0, version: str = "1", target: str = "builtin",
        scenario: str = "burst-storm", preservation: float | None = 0.5) -> Run:  # fmt: skip
    finished = START + timedelta(days=days, minutes=index)
    return Run(
        id=f"r{index}", scenario_name=scenario, scenario_hash="h", status=RunStatus.SUCCEEDED, trigger=Trigger.API,
        triggered_by="t", created_at=finished, target_url=target, seed=0, threshold=70.0, finished_at=finished,
        score=score, score_version=version, passed=score >= 70,
        result={"score": {"components": [{"name": "preservation", "value": preservation}]}},
    )  # fmt: skip


def test_runs_are_compared_only_within_one_scenario_target_and_score_version() -> None:
    """A new score version or another target starts a series of its own."""
    runs = [run(0, 80), run(1, 70, version="2"), run(2, 60, target="http://127.0.0.1:8000"), run(3, 75)]
    series = trend_series(runs, bucket=Bucket.RUN, margin=5)
    keys = [(s.target_url, s.score_version, [p.run_ids for p in s.points]) for s in series]
    assert keys == [
        ("builtin", "1", [("r0",), ("r3",)]),
        ("builtin", "2", [("r1",)]),
        ("http://127.0.0.1:8000", "1", [("r2",)]),
    ]


def test_the_latest_score_below_the_trailing_median_by_more_than_the_margin_is_a_regression() -> None:
    """Scores 80, 82, 78, 81 then 70: the median of the earlier points is 80.5, and 70 < 80.5 − 5."""
    runs = [run(i, s) for i, s in enumerate([80, 82, 78, 81, 70])]
    [series] = trend_series(runs, bucket=Bucket.RUN, margin=5)
    assert series.trailing_median == pytest.approx(80.5)
    assert series.regression is True
    assert "REGRESSION" in series.summary


def test_a_dip_within_the_margin_is_not_a_regression() -> None:
    runs = [run(i, s) for i, s in enumerate([80, 82, 78, 81, 77])]
    [series] = trend_series(runs, bucket=Bucket.RUN, margin=5)
    assert series.regression is False


def test_too_little_history_is_never_called_a_regression() -> None:
    """With fewer than three earlier points, even a big drop is not judged."""
    [series] = trend_series([run(0, 90), run(1, 90), run(2, 10)], bucket=Bucket.RUN, margin=5)
    assert series.regression is False
    assert series.trailing_median is None
    assert "too little history" in series.summary


def test_a_single_run_is_called_the_first_run_of_its_scenario() -> None:
    [series] = trend_series([run(0, 90)], bucket=Bucket.RUN, margin=5)
    assert series.summary == "first run of this scenario: score 90.0; too little history to judge"
    assert series.regression is False


def test_a_single_day_of_several_runs_is_not_called_a_first_run() -> None:
    [series] = trend_series([run(0, 90), run(1, 80)], bucket=Bucket.DAY, margin=5)
    assert len(series.points) == 1
    assert series.summary == "first 2 runs: score 85.0; too little history to judge"


def test_day_and_week_buckets_average_scores_and_components() -> None:
    """Two runs on one day make one point of their mean; a week bucket starts on the Monday."""
    runs = [run(0, 60, preservation=0.2), run(1, 80, preservation=0.6), run(2, 90, days=2, preservation=None)]
    [daily] = trend_series(runs, bucket=Bucket.DAY, margin=5)
    assert [(p.start.date().isoformat(), p.score, p.components["preservation"]) for p in daily.points] == [
        ("2026-11-02", 70.0, pytest.approx(0.4)),
        ("2026-11-04", 90.0, None),
    ]
    [weekly] = trend_series(runs, bucket=Bucket.WEEK, margin=5)
    assert [(p.start, len(p.run_ids)) for p in weekly.points] == [(datetime(2026, 11, 2, tzinfo=UTC), 3)]


def test_runs_without_a_score_are_left_out() -> None:
    unscored = run(9, 0)
    unscored = Run(**{**unscored.__dict__, "score": None})
    assert trend_series([unscored], bucket=Bucket.RUN, margin=5) == []


def with_class_scores(base: Run, **scores: float | None) -> Run:
    result = {"score": {"components": [], "classes": [{"name": n, "value": v} for n, v in scores.items()]}}
    return Run(**{**base.__dict__, "result": result})


def test_each_traffic_class_is_trended_and_a_victim_class_that_fell_is_a_regression() -> None:
    """The overall score holds while the interactive class's own score falls from ~90 to 40: a regression
    named by the class, with each point carrying every class's mean score."""
    runs = [with_class_scores(run(i, 80), interactive=i_score, batch=70.0)
            for i, i_score in enumerate([90.0, 92.0, 88.0, 91.0, 40.0])]  # fmt: skip
    [series] = trend_series(runs, bucket=Bucket.RUN, margin=5)
    assert series.points[-1].classes == {"interactive": 40.0, "batch": 70.0}
    assert series.regressed_classes == ("interactive",)
    assert series.regression is True
    assert "traffic class interactive" in series.summary
    assert series.to_dict()["points"][0]["classes"] == {"interactive": 90.0, "batch": 70.0}


def test_a_class_without_a_score_in_some_runs_is_judged_on_the_runs_that_scored_it() -> None:
    scores: list[float | None] = [None, 90.0, 91.0, 89.0, 88.0]
    runs = [with_class_scores(run(i, 80), interactive=v) for i, v in enumerate(scores)]
    [series] = trend_series(runs, bucket=Bucket.RUN, margin=5)
    assert series.points[0].classes == {"interactive": None}
    assert series.regressed_classes == ()
    assert series.regression is False
