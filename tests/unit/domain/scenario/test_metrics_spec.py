"""``target.metrics`` in a scenario: its defaults, the series it adds or overrides, and every bad field named."""

from __future__ import annotations

from typing import Any

import pytest

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.metrics_spec import EngineKind, MetricsSpec
from cliffwatch.domain.scenario.scenario import parse_scenario


def document(target: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "watched",
        "slo": {"e2e_ms": 2000, "timeout_ms": 5000},
        "target": {"request": {"model": "m"}, **target},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 5, "arrival": {"process": "constant", "rate": 1}}],
    }


def problems(target: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario(document(target))
    return [str(p) for p in caught.value.problems]


def test_without_metrics_nothing_is_scraped() -> None:
    target = parse_scenario(document({"url": "http://127.0.0.1:8000"})).target
    assert target.metrics is None
    assert target.metrics_url is None


def test_a_real_targets_page_is_its_hosts_metrics_and_its_engine_is_told_by_the_page() -> None:
    target = parse_scenario(document({"url": "http://127.0.0.1:8000/api/v1", "metrics": {}})).target
    assert target.metrics == MetricsSpec(engine=EngineKind.AUTO, interval_ms=1000.0, timeout_ms=1000.0)
    assert target.metrics_url == "http://127.0.0.1:8000/metrics"


def test_the_builtin_targets_profile_is_the_default_for_it() -> None:
    target = parse_scenario(document({"url": "builtin", "metrics": {"interval_ms": 250}})).target
    assert target.metrics == MetricsSpec(engine=EngineKind.BUILTIN, interval_ms=250.0, timeout_ms=250.0)
    assert target.metrics_url is None  # known once the built-in target is started


def test_a_page_elsewhere_an_engine_and_series_are_taken_as_written() -> None:
    metrics = {
        "url": "http://127.0.0.1:9000/metrics",
        "engine": "tgi",
        "interval_ms": 2000,
        "timeout_ms": 1500,
        "series": {"waiting": "tgi_queue_size * 1", "errors": {"expr": "rate(tgi_request_failure)", "unit": "per s"}},
    }
    target = parse_scenario(document({"url": "http://127.0.0.1:8000", "metrics": metrics})).target
    spec = target.metrics
    assert spec is not None
    assert (spec.url, spec.engine, spec.interval_ms, spec.timeout_ms) == ("http://127.0.0.1:9000/metrics",
                                                                          EngineKind.TGI, 2000.0, 1500.0)  # fmt: skip
    assert [(s.name, s.expr.text, s.unit) for s in spec.series] == [
        ("waiting", "tgi_queue_size", "requests"),
        ("errors", "rate(tgi_request_failure)", "per s"),
    ]
    assert target.metrics_url == "http://127.0.0.1:9000/metrics"
    assert spec.to_dict()["series"]["errors"] == {"expr": "rate(tgi_request_failure)", "unit": "per s"}


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({"interval_ms": 50}, "target.metrics.interval_ms: must be >= 100"),
        ({"interval_ms": 500, "timeout_ms": 800}, "target.metrics.timeout_ms: must be <= interval_ms (500)"),
        (
            {"engine": "ollama"},
            "target.metrics.engine: must be one of auto, vllm, sglang, tgi, llamacpp, triton, builtin; got 'ollama'",
        ),
        ({"url": "builtin"}, "target.metrics.url: must be an http(s) URL; leave it out"),
        ({"url": "ftp://x/metrics"}, "target.metrics.url: must be 'builtin' or an http(s) URL with a host"),
        ({"series": {"Queue": "q"}}, "target.metrics.series.Queue: a series name is lowercase letters"),
        ({"series": {"q": "sum(q"}}, "target.metrics.series.q: ends early: expected ) in 'sum(q'"),
        ({"series": {"q": 5}}, "target.metrics.series.q: must be an expression or a mapping with expr, got 5"),
        ({"series": {"q": {"unit": "s"}}}, "target.metrics.series.q.expr: is required"),
        ({"series": {f"s{i}": "q" for i in range(33)}}, "target.metrics.series: at most 32 series"),
        ({"scrape": True}, "target.metrics.scrape: unknown key"),
    ],
)
def test_a_bad_metrics_field_is_named_with_its_reason(metrics: dict[str, Any], expected: str) -> None:
    found = problems({"url": "http://127.0.0.1:8000", "metrics": metrics})
    assert any(p.startswith(expected) for p in found), found


def test_metrics_that_are_not_a_mapping_are_refused() -> None:
    assert problems({"url": "builtin", "metrics": True}) == ["target.metrics: must be a mapping, got a boolean"]
