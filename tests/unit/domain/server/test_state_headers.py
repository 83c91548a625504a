"""Server-state response headers read as numbers, in the formats real servers and gateways send them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cliffwatch.domain.server.state_headers import go_duration_s, readings, unit_of, watched

DATE = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def read(*headers: tuple[str, str], date: datetime | None = DATE) -> dict[str, float]:
    return dict(readings([(n, v) for n, v in headers if watched(n)], date=date))


def test_tgi_timings_are_milliseconds_and_its_compute_time_seconds() -> None:
    found = read(("x-queue-time", "12"), ("x-inference-time", "110"), ("x-total-time", "123"),
                 ("x-compute-time", "0.111191439"), ("x-compute-type", "1-nvidia-a10g"),
                 ("x-generated-tokens", "3"))  # fmt: skip
    assert found == {"x-queue-time": 12.0, "x-inference-time": 110.0, "x-total-time": 123.0,
                     "x-compute-time": pytest.approx(111.191439), "x-generated-tokens": 3.0}  # fmt: skip
    assert unit_of("x-compute-time") == unit_of("x-queue-time") == "ms"


def test_openai_rate_limits_read_counts_and_go_duration_resets() -> None:
    found = read(("x-ratelimit-limit-requests", "60"), ("x-ratelimit-remaining-requests", "59"),
                 ("x-ratelimit-reset-requests", "1s"), ("x-ratelimit-reset-tokens", "6m0s"),
                 ("openai-processing-ms", "431"))  # fmt: skip
    assert found == {"x-ratelimit-limit-requests": 60.0, "x-ratelimit-remaining-requests": 59.0,
                     "x-ratelimit-reset-requests": 1.0, "x-ratelimit-reset-tokens": 360.0,
                     "openai-processing-ms": 431.0}  # fmt: skip
    assert unit_of("x-ratelimit-reset-tokens") == "s"
    assert unit_of("x-ratelimit-remaining-tokens") == "count"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("7.66s", 7.66), ("23h47m36.648s", 85656.648),
     ("2m59.56s", 179.56), ("30", 30.0), ("6 minutes", None), ("1s2x", None), ("", None)],
)  # fmt: skip
def test_go_durations_and_plain_seconds_read_as_seconds(text: str, seconds: float | None) -> None:
    assert go_duration_s(text) == (None if seconds is None else pytest.approx(seconds))


def test_back_off_is_read_in_seconds_or_milliseconds_and_an_http_date_against_the_responses_date() -> None:
    assert read(("retry-after", "2")) == {"retry-after": 2.0}
    assert read(("retry-after-ms", "1500.5"), ("x-ms-retry-after-ms", "20")) == {
        "retry-after-ms": 1500.5,
        "x-ms-retry-after-ms": 20.0,
    }
    assert read(("retry-after", "Tue, 01 Dec 2026 12:00:30 GMT")) == {"retry-after": 30.0}
    assert read(("retry-after", "Tue, 01 Dec 2026 12:00:30 GMT"), date=None) == {}  # no Date to count from


def test_anthropic_resets_are_absolute_times_made_relative_to_the_date() -> None:
    found = read(("anthropic-ratelimit-requests-remaining", "49"),
                 ("anthropic-ratelimit-tokens-reset", "2026-12-01T12:01:00Z"))  # fmt: skip
    assert found == {"anthropic-ratelimit-requests-remaining": 49.0, "anthropic-ratelimit-tokens-reset": 60.0}


def test_envoy_draft_headers_take_the_first_limit_and_a_unix_reset_becomes_relative() -> None:
    found = read(("x-ratelimit-limit", "10, 10;w=60"), ("x-ratelimit-remaining", "3"),
                 ("x-ratelimit-reset", str(DATE.timestamp() + 42)))  # fmt: skip
    assert found == {"x-ratelimit-limit": 10.0, "x-ratelimit-remaining": 3.0, "x-ratelimit-reset": 42.0}


def test_the_ietf_ratelimit_field_gives_remaining_quota_and_reset() -> None:
    assert read(("ratelimit", '"default";r=50;t=30, "daily";r=900;t=7200')) == {
        "ratelimit remaining": 50.0,
        "ratelimit reset": 30.0,
    }
    assert unit_of("ratelimit reset") == "s"


def test_the_orca_load_report_of_vllm_and_triton_reads_in_both_formats() -> None:
    text = read(("endpoint-load-metrics", "TEXT named_metrics.kv_cache_usage_perc=0.42, "
                                          "named_metrics.num_requests_waiting=3.0"))  # fmt: skip
    json_ = read(("endpoint-load-metrics", 'JSON {"named_metrics": {"kv_cache_usage_perc": 0.42, '
                                           '"num_requests_waiting": 3.0}}'))  # fmt: skip
    assert text == json_ == {"endpoint-load-metrics kv_cache_usage_perc": 0.42,
                             "endpoint-load-metrics num_requests_waiting": 3.0}  # fmt: skip
    assert read(("endpoint-load-metrics", "JSON {not json")) == {}


def test_azure_utilisation_is_a_percentage() -> None:
    assert read(("azure-openai-deployment-utilization", "87.5%")) == {"azure-openai-deployment-utilization": 87.5}
    assert unit_of("azure-openai-deployment-utilization") == "%"


def test_missing_negative_and_unreadable_values_are_left_out() -> None:
    assert read(("x-ratelimit-remaining-tokens", "-1"), ("x-queue-time", "soon"), ("x-total-time", "nan"),
                ("x-ratelimit-reset-tokens", "0")) == {"x-ratelimit-reset-tokens": 0.0}  # fmt: skip


def test_only_server_state_is_watched_and_one_response_gives_a_bounded_number_of_readings() -> None:
    assert not watched("content-type")
    assert not watched("x-request-id")
    assert watched("x-ratelimit-remaining-tokens_usage_based")
    many = [(f"x-ratelimit-remaining-k{i}", "1") for i in range(40)]
    assert len(readings(many)) == 16
