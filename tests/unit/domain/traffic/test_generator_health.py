"""The generator's verdict on itself: each limit crossed gives its own reason, none crossed is not limited."""

from __future__ import annotations

import json

import pytest

from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.traffic.generator_health import (
    CollectorReport,
    GeneratorLimits,
    GeneratorReport,
    judge_generator,
)

LIMITS = GeneratorLimits()  # p99 lag 10 ms, max lag 250 ms, stall 100 ms, CPU 90 %


def _lag(*values_ms: float) -> Histogram:
    hist = Histogram()
    for value in values_ms:
        hist.add(value)
    return hist


def _judge(
    lag: Histogram | None = None, *, stall_ms: float = 0.0, cpu_busy: float = 0.1, overflow: int = 0
) -> GeneratorReport:
    return judge_generator(
        lag if lag is not None else _lag(*[1.0] * 100),
        max_stall_ms=stall_ms,
        cpu_busy=cpu_busy,
        overflow=overflow,
        limits=LIMITS,
    )


def test_a_generator_within_every_limit_is_not_limited() -> None:
    """Figures under every limit give no reason and no limited flag."""
    report = _judge(_lag(*[2.0] * 99, 9.0), stall_ms=50.0, cpu_busy=0.5)
    assert report.limited is False
    assert report.reasons == ()


def test_figures_exactly_at_their_limits_are_not_limited() -> None:
    """The limits are inclusive: reaching one is allowed, only crossing it counts."""
    report = _judge(_lag(*[10.0] * 100), stall_ms=100.0, cpu_busy=0.9)
    assert report.reasons == ()


def test_a_generator_that_measured_no_lag_is_not_limited() -> None:
    """An empty lag histogram (nothing sent) is no evidence of falling behind."""
    assert _judge(_lag()).limited is False


@pytest.mark.parametrize(
    ("report", "reason"),
    [
        pytest.param(_judge(_lag(*[1.0] * 95, *[40.0] * 5)), "p99 schedule lag 40.", id="p99-lag"),
        pytest.param(_judge(_lag(*[1.0] * 999, 400.0)), "max schedule lag 400.0 ms > 250 ms", id="max-lag"),
        pytest.param(_judge(stall_ms=180.0), "event loop stalled 180 ms > 100 ms", id="stall"),
        pytest.param(_judge(cpu_busy=0.97), "generator CPU 97% of a core > 90%", id="cpu"),
        pytest.param(_judge(overflow=3), "3 request(s) not sent: max_in_flight reached", id="overflow"),
    ],
)
def test_each_limit_crossed_gives_its_own_reason(report: GeneratorReport, reason: str) -> None:
    """Crossing one limit marks the generator limited with exactly that one reason."""
    assert report.limited is True
    assert len(report.reasons) == 1
    assert report.reasons[0].startswith(reason)


def test_every_limit_crossed_is_listed() -> None:
    """Several crossings give several reasons, in a fixed order."""
    report = _judge(_lag(*[300.0] * 10), stall_ms=500.0, cpu_busy=1.5, overflow=1)
    assert [r.split()[0:2] for r in report.reasons] == [
        ["p99", "schedule"],
        ["max", "schedule"],
        ["event", "loop"],
        ["generator", "CPU"],
        ["1", "request(s)"],
    ]


def test_the_report_is_json_ready() -> None:
    """to_dict is strict JSON carrying the verdict, the reasons and the measured figures."""
    report = _judge(_lag(1.0, 2.0, 500.0), stall_ms=12.3456, cpu_busy=0.123456, overflow=0)
    document = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert document["generator_limited"] is True
    assert document["reasons"] == list(report.reasons)
    assert document["schedule_lag_ms"]["count"] == 3
    assert document["schedule_lag_ms"]["max"] == 500.0
    assert document["max_event_loop_stall_ms"] == 12.346
    assert document["cpu_busy"] == 0.1235
    assert document["overflow_not_sent"] == 0


def test_an_empty_report_is_json_ready() -> None:
    """With no lag measured the summary holds nulls, not NaN or infinities."""
    document = _judge(_lag()).to_dict()
    json.dumps(document, allow_nan=False)
    assert document["schedule_lag_ms"]["count"] == 0
    assert document["schedule_lag_ms"]["max"] is None


def test_one_late_send_among_fewer_than_a_hundred_is_allowed() -> None:
    """Below 100 sends a 99th percentile cannot be shown, so one late send (under the max-lag bound) is not
    a verdict on the generator: a short sweep step would otherwise be voided by one event-loop hiccup."""
    assert _judge(_lag(*[1.0] * 34, 40.0)).limited is False
    two_late = _judge(_lag(*[1.0] * 33, 40.0, 40.0))
    assert two_late.limited is True
    assert two_late.reasons[0].startswith("p99 schedule lag 40.")


def test_one_late_send_in_a_hundred_is_allowed_and_two_are_not() -> None:
    assert _judge(_lag(*[1.0] * 199, 40.0)).limited is False
    assert _judge(_lag(*[1.0] * 198, 40.0, 40.0)).limited is False  # 1 % of 200
    assert _judge(_lag(*[1.0] * 197, 40.0, 40.0, 40.0)).limited is True


def test_a_single_send_later_than_the_max_lag_is_never_allowed() -> None:
    report = _judge(_lag(*[1.0] * 20, 400.0))
    assert report.limited is True
    assert report.reasons == ("max schedule lag 400.0 ms > 250 ms",)


def test_attempts_that_could_not_be_written_in_time_make_the_generator_limited() -> None:
    """Three attempts ran out of time before leaving the client, one of them waiting for a pooled connection:
    the two that had a connection in hand are the generator's, and the report counts all three."""
    report = judge_generator(_lag(*[1.0] * 100), max_stall_ms=0.0, cpu_busy=0.1, overflow=0, limits=LIMITS,
                             unsent=3, unsent_waiting=1)  # fmt: skip
    assert report.limited
    assert report.reasons == ("2 attempt(s) ran out of time before the client could send them",)
    assert (report.to_dict()["attempts_not_sent"], report.to_dict()["attempts_not_sent_pool_full"]) == (3, 1)


def test_attempts_that_ran_out_waiting_for_a_pooled_connection_do_not_make_it_limited() -> None:
    """A target holding every pooled connection fills the pool as it would a real client's: not the generator."""
    report = judge_generator(_lag(*[1.0] * 100), max_stall_ms=0.0, cpu_busy=0.1, overflow=0, limits=LIMITS,
                             unsent=4, unsent_waiting=4)  # fmt: skip
    assert not report.limited
    assert report.to_dict()["attempts_not_sent"] == 4


def test_a_stall_the_garbage_collector_caused_says_so_and_the_report_carries_the_pauses() -> None:
    collector = CollectorReport(collections=(40, 3, 1), total_ms=310.0, max_pause_ms=220.0, frozen=115_000)
    report = judge_generator(_lag(*[1.0] * 100), max_stall_ms=230.0, cpu_busy=0.5, overflow=0, limits=LIMITS,
                             collector=collector)  # fmt: skip

    assert report.reasons == ("event loop stalled 230 ms > 100 ms (the longest garbage collection took 220 ms)",)
    assert report.to_dict()["gc"] == {"collections": [40, 3, 1], "total_ms": 310.0, "max_pause_ms": 220.0,
                                      "frozen_objects": 115_000}  # fmt: skip


def test_a_stall_with_short_collections_blames_nothing_on_the_collector() -> None:
    collector = CollectorReport(collections=(5, 0, 0), total_ms=12.0, max_pause_ms=4.0)
    report = judge_generator(_lag(*[1.0] * 100), max_stall_ms=230.0, cpu_busy=0.5, overflow=0, limits=LIMITS,
                             collector=collector)  # fmt: skip

    assert report.reasons == ("event loop stalled 230 ms > 100 ms",)
