"""Series expressions read like PromQL without ranges, and evaluate scrape by scrape to exact numbers."""

from __future__ import annotations

import pytest

from cliffwatch.domain.scenario.metric_expr import ExprInvalid, ExprState, group_suffix, needed_samples, parse_expr


def page(**samples: list[tuple[dict[str, str], float]]) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {name.replace("__", ":"): values for name, values in samples.items()}


@pytest.mark.parametrize(
    "text",
    [
        "vllm:num_requests_waiting",
        'sglang:num_queue_reqs{priority=""}',
        "rate(vllm:num_preemptions_total)",
        "mean(vllm:request_queue_time_seconds)",
        "max(vllm:kv_cache_usage_perc)",
        "sum by (model_name) (rate(vllm:generation_tokens_total))",
        'avg by (engine, model_name) (x{a!="b", c=~"d.*", e!~"f|g"})',
        "mean(nv_inference_queue_summary_us) / 1000000",
        "x * 100",
    ],
)
def test_an_expression_reads_back_from_its_own_canonical_text(text: str) -> None:
    expr = parse_expr(text)
    assert parse_expr(expr.text) == expr
    assert expr.text == text


def test_spacing_is_free_and_the_canonical_text_normalises_it() -> None:
    assert parse_expr('  sum  by(m)(rate( x{ a = "b" } ))').text == 'sum by (m) (rate(x{a="b"}))'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("sum(x", "ends early: expected )"),
        ("rate(x) y", "unexpected 'y' after the expression"),
        ("x{a=b}", "expected string, got 'b'"),
        ('x{a=~"("}', "a=~: not a regular expression"),
        ("x * 0", "the factor after * must be a positive number"),
        ("x % 2", "cannot read '% 2'"),
        ("sum by () (x)", "expected name, got ')'"),
        ("x" * 501, "is longer than 500 characters"),
    ],
)
def test_a_bad_expression_is_refused_saying_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ExprInvalid, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        parse_expr(text)


def test_a_selector_sums_every_matching_sample_of_a_gauge() -> None:
    state = ExprState(parse_expr("vllm:num_requests_waiting"))
    samples = page(vllm__num_requests_waiting=[({"engine": "0"}, 3.0), ({"engine": "1"}, 4.0)])
    assert state.evaluate(1.0, samples) == {(): 7.0}


@pytest.mark.parametrize(
    ("matcher", "expected"),
    [('{p=""}', 5.0), ('{p="1"}', 2.0), ('{p!=""}', 5.0), ('{p=~"[12]"}', 5.0), ('{p!~"1|2"}', 5.0)],
)
def test_label_matchers_select_as_promql_does_a_missing_label_being_empty(matcher: str, expected: float) -> None:
    samples = page(q=[({}, 5.0), ({"p": "1"}, 2.0), ({"p": "2"}, 3.0)])
    assert ExprState(parse_expr(f"q{matcher}")).evaluate(0.0, samples) == {(): expected}


def test_aggregations_group_by_labels_and_name_each_group() -> None:
    samples = page(kv=[({"m": "a", "e": "0"}, 0.2), ({"m": "a", "e": "1"}, 0.6), ({"m": "b", "e": "0"}, 0.9)])
    assert ExprState(parse_expr("max(kv)")).evaluate(0.0, samples) == {(): 0.9}
    assert ExprState(parse_expr("min(kv)")).evaluate(0.0, samples) == {(): 0.2}
    grouped = ExprState(parse_expr("avg by (m) (kv)")).evaluate(0.0, samples)
    assert grouped == {(("m", "a"),): pytest.approx(0.4), (("m", "b"),): 0.9}
    assert group_suffix((("m", "a"),)) == '{m="a"}'
    assert group_suffix(()) == ""


def test_a_rate_needs_two_scrapes_and_reads_a_fall_as_a_counter_reset() -> None:
    state = ExprState(parse_expr("rate(c_total)"))
    assert state.evaluate(10.0, page(c_total=[({}, 100.0)])) == {}
    assert state.evaluate(12.0, page(c_total=[({}, 160.0)])) == {(): 30.0}
    # the server restarted: the counter began again from 0 and now reads 8
    assert state.evaluate(14.0, page(c_total=[({}, 8.0)])) == {(): 4.0}


def test_a_rate_sums_per_series_increases_and_ignores_a_series_that_just_appeared() -> None:
    state = ExprState(parse_expr("rate(c_total)"))
    state.evaluate(0.0, page(c_total=[({"e": "0"}, 10.0)]))
    # e=1 appears with 50: what it counted before is unknown, so it adds nothing yet
    assert state.evaluate(1.0, page(c_total=[({"e": "0"}, 12.0), ({"e": "1"}, 50.0)])) == {(): 2.0}
    assert state.evaluate(2.0, page(c_total=[({"e": "0"}, 13.0), ({"e": "1"}, 54.0)])) == {(): 5.0}


def test_a_mean_divides_the_increase_of_the_sum_by_that_of_the_count() -> None:
    state = ExprState(parse_expr("mean(wait_seconds)"))
    assert state.evaluate(0.0, page(wait_seconds_sum=[({}, 1.0)], wait_seconds_count=[({}, 4.0)])) == {}
    assert state.evaluate(1.0, page(wait_seconds_sum=[({}, 4.0)], wait_seconds_count=[({}, 10.0)])) == {(): 0.5}
    # nothing was observed in this interval: no mean, rather than a made-up one
    assert state.evaluate(2.0, page(wait_seconds_sum=[({}, 4.0)], wait_seconds_count=[({}, 10.0)])) == {}


def test_a_scale_multiplies_or_divides_the_value() -> None:
    samples = page(q_us_sum=[({}, 0.0)], q_us_count=[({}, 0.0)])
    state = ExprState(parse_expr("mean(q_us) / 1000000"))
    state.evaluate(0.0, samples)
    assert state.evaluate(1.0, page(q_us_sum=[({}, 3_000_000.0)], q_us_count=[({}, 2.0)])) == {(): 1.5}
    assert ExprState(parse_expr("x * 100")).evaluate(0.0, page(x=[({}, 0.25)])) == {(): 25.0}


def test_an_absent_metric_gives_no_value_and_a_repeated_time_no_rate() -> None:
    assert ExprState(parse_expr("x")).evaluate(0.0, page(y=[({}, 1.0)])) == {}
    state = ExprState(parse_expr("rate(c)"))
    state.evaluate(5.0, page(c=[({}, 1.0)]))
    assert state.evaluate(5.0, page(c=[({}, 2.0)])) == {}


def test_an_expression_names_the_samples_a_scrape_must_keep() -> None:
    exprs = [parse_expr("rate(a_total)"), parse_expr("mean(h)"), parse_expr("max(g)")]
    assert needed_samples(exprs) == {"a_total", "h_sum", "h_count", "g"}
    assert parse_expr('x{a="1"}').present(page(x=[({"a": "1"}, 0.0)]))
    assert not parse_expr('x{a="1"}').present(page(x=[({"a": "2"}, 0.0)]))
