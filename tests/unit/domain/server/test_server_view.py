"""The server's view is recorded scrape by scrape: each engine's page gives its signals, failures are counted,
and the series line up with the run's seconds."""

from __future__ import annotations

import pytest

from cliffwatch.adapters.server_metrics.scraper import parse_page
from cliffwatch.domain.scenario.metric_expr import parse_expr
from cliffwatch.domain.scenario.metrics_spec import EngineKind, MetricsSpec, SeriesSpec, Signal
from cliffwatch.domain.server.engine_profiles import PROFILES, detect_engine
from cliffwatch.domain.server.server_view import ServerRecorder, ServerView, window_stats
from engine_pages import NOT_EXPOSED, PAGES, EngineState

BEFORE = EngineState(waiting=0, running=2, kv=0.1, preempted=3, generated=1_000, prompted=5_000, queue_sum_s=1.0,
                     queue_count=10)  # fmt: skip
AFTER = EngineState(waiting=40, running=16, kv=0.9, preempted=13, generated=1_500, prompted=6_000, queue_sum_s=9.0,
                    queue_count=14)  # fmt: skip


def record(engine: str, spec: MetricsSpec | None = None) -> ServerView:
    recorder = ServerRecorder(spec or MetricsSpec(), url="http://127.0.0.1:1/metrics")
    for at, state in ((0.0, BEFORE), (2.0, AFTER)):
        recorder.scraped(at, parse_page(PAGES[engine](state), recorder.needed()))
    return recorder.view()


@pytest.mark.parametrize("engine", sorted(PAGES))
def test_each_engines_page_is_recognised_and_gives_every_signal_it_exposes(engine: str) -> None:
    view = record(engine)
    assert view.engine is EngineKind(engine)
    signals = {s.signal.value for s in view.series if s.signal is not None}
    assert signals == {s.value for s in Signal} - NOT_EXPOSED[engine]
    assert view.notes == ()
    waiting, running = view.signal(Signal.WAITING), view.signal(Signal.RUNNING)
    assert waiting is not None
    assert running is not None
    assert waiting.values == (0.0, 40.0)
    assert running.values == (2.0, 16.0)
    tokens = view.signal(Signal.GENERATION_TOKENS)
    assert tokens is not None
    assert tokens.values == (None, 250.0)  # a rate needs two scrapes: 500 tokens in 2 s


@pytest.mark.parametrize("engine", sorted(PAGES))
def test_each_engines_kv_preemptions_and_queue_time_read_as_fractions_rates_and_seconds(engine: str) -> None:
    view = record(engine)
    kv = view.signal(Signal.KV_CACHE)
    if kv is not None:
        assert kv.values == pytest.approx((0.1, 0.9))  # the fullest engine's, as a fraction
    preempted = view.signal(Signal.PREEMPTIONS)
    if preempted is not None:
        assert preempted.values == (None, 5.0)
    queue = view.signal(Signal.QUEUE_TIME)
    if queue is not None:
        assert queue.values[1] == pytest.approx(2.0)  # 8 s more waited by 4 more requests


def test_llama_cpp_counters_printed_at_six_significant_digits_are_read_as_printed() -> None:
    recorder = ServerRecorder(MetricsSpec(engine=EngineKind.LLAMACPP), url="u")
    for at, generated in ((0.0, 1_362_385), (1.0, 1_362_999)):
        recorder.scraped(at, parse_page(PAGES["llamacpp"](EngineState(generated=generated)), recorder.needed()))
    tokens = recorder.view().signal(Signal.GENERATION_TOKENS)
    assert tokens is not None
    assert tokens.values == (None, pytest.approx(1_363_000 - 1_362_380))  # what the page can say, no more


def test_a_signal_takes_its_older_name_when_the_page_has_only_that_one() -> None:
    old = PAGES["vllm"](AFTER).replace("kv_cache_usage_perc", "gpu_cache_usage_perc")
    recorder = ServerRecorder(MetricsSpec(), url="u")
    recorder.scraped(0.0, parse_page(old, recorder.needed()))
    kv = recorder.view().signal(Signal.KV_CACHE)
    assert kv is not None
    assert kv.expr == "max(vllm:gpu_cache_usage_perc)"
    assert kv.values == (0.9,)


def test_the_scenarios_series_override_a_signal_by_name_and_add_their_own() -> None:
    spec = MetricsSpec(series=(
        SeriesSpec(name="waiting", expr=parse_expr('sum(vllm:num_requests_waiting{engine="1"})'), unit="requests"),
        SeriesSpec(name="per_engine_queue", expr=parse_expr("sum by (engine) (vllm:num_requests_waiting)")),
    ))  # fmt: skip
    view = record("vllm", spec)
    waiting = view.signal(Signal.WAITING)
    assert waiting is not None
    assert waiting.values == (0.0, 20.0)
    by_engine = {s.name: s.values for s in view.series if s.name.startswith("per_engine_queue")}
    assert by_engine == {'per_engine_queue{engine="0"}': (0.0, 20.0), 'per_engine_queue{engine="1"}': (0.0, 20.0)}


def test_a_page_of_an_unknown_engine_keeps_only_the_scenarios_series_and_says_why() -> None:
    spec = MetricsSpec(series=(SeriesSpec(name="depth", expr=parse_expr("my_queue_depth")),))
    recorder = ServerRecorder(spec, url="u")
    recorder.scraped(0.0, parse_page("# TYPE my_queue_depth gauge\nmy_queue_depth 7\n", recorder.needed()))
    view = recorder.view()
    assert view.engine is EngineKind.AUTO
    assert [(s.name, s.values) for s in view.series] == [("depth", (7.0,))]
    assert "named no engine" in view.notes[0]


def test_a_signal_the_page_never_carries_is_named_in_the_notes() -> None:
    recorder = ServerRecorder(MetricsSpec(engine=EngineKind.VLLM), url="u")
    recorder.scraped(0.0, parse_page("vllm:num_requests_waiting 1\n", recorder.needed()))
    notes = recorder.view().notes
    assert "running: vllm:num_requests_running never had a value on the page" in notes


def test_failed_scrapes_are_counted_by_reason_and_leave_no_point() -> None:
    recorder = ServerRecorder(MetricsSpec(engine=EngineKind.BUILTIN), url="u")
    recorder.failed(0.0, "HTTP 503")
    recorder.failed(1.0, "HTTP 503")
    recorder.scraped(2.0, parse_page(PAGES["builtin"](AFTER), recorder.needed()))
    recorder.failed(3.0, "no page within 1000 ms")
    view = recorder.view()
    assert (view.scrapes, view.failed) == (4, 3)
    assert view.failures == {"HTTP 503": 2, "no page within 1000 ms": 1}
    assert view.times_s == (2.0,)


def test_per_second_rows_take_the_mean_of_each_seconds_scrapes() -> None:
    recorder = ServerRecorder(MetricsSpec(engine=EngineKind.BUILTIN), url="u")
    for at, waiting in ((0.2, 2), (0.7, 4), (2.5, 9)):
        recorder.scraped(at, parse_page(PAGES["builtin"](EngineState(waiting=waiting)), recorder.needed()))
    assert recorder.view().per_second(4)["waiting"] == [3.0, None, 9.0, None]


def test_a_windows_summary_has_its_range_mean_and_least_squares_slope() -> None:
    stats = window_stats([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)])
    assert stats is not None
    assert (stats.first, stats.last, stats.low, stats.high, stats.mean) == (1.0, 5.0, 1.0, 5.0, 3.0)
    assert stats.slope_per_s == pytest.approx(2.0)
    single = window_stats([(4.0, 2.0)])
    assert single is not None
    assert single.slope_per_s is None
    assert window_stats([]) is None


def test_a_view_reads_back_from_its_document() -> None:
    view = record("sglang")
    assert ServerView.from_dict(view.to_dict()) == view
    window = view.window(Signal.WAITING, 1.0, 3.0)
    assert window is not None
    assert window.points == 1


def test_every_engine_has_a_profile_whose_expressions_parse_and_its_pages_are_detected() -> None:
    assert set(PROFILES) == set(EngineKind) - {EngineKind.AUTO}
    for engine, profile in PROFILES.items():
        for definition in profile:
            for candidate in definition.candidates:
                assert parse_expr(candidate).text
        names = parse_page(PAGES[engine.value](BEFORE), None).keys()
        assert detect_engine(names) is engine
    assert detect_engine(["process_cpu_seconds_total"]) is None
