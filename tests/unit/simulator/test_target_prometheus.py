"""The /metrics page follows the Prometheus text exposition format and reports the engine's numbers."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from cliffwatch.simulator.batching import EngineStats
from cliffwatch.simulator.prometheus import render
from cliffwatch.simulator.sequences import Result

SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{[^}]*\})? (?P<value>-?[0-9.]+(?:[eE][-+]?[0-9]+)?|[-+]?Inf|NaN)$"
)

STATS = EngineStats(
    waiting=3,
    running=8,
    max_batch=16,
    results={Result.COMPLETED: 10, Result.REJECTED_429: 2},
    prompt_tokens_total=400,
    generation_tokens_total=1234,
    steps_total=99,
    queue_time_seconds_sum=1.5,
    queue_time_count=6,
)


def test_every_sample_line_is_a_name_optional_labels_and_a_value() -> None:
    text = render(STATS)
    assert text.endswith("\n")
    for line in text.splitlines():
        if not line.startswith("#"):
            assert SAMPLE.match(line), line


def test_every_metric_family_has_help_and_type_before_its_samples() -> None:
    declared: dict[str, str] = {}
    for line in render(STATS).splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            declared[name] = kind
        elif line.startswith("# HELP "):
            continue
        else:
            match = SAMPLE.match(line)
            assert match is not None
            name = match["name"]
            base = re.sub(r"_(sum|count)$", "", name)
            assert name in declared or declared.get(base) == "summary", name
    assert all(kind in {"gauge", "counter", "summary"} for kind in declared.values())
    assert all(name.endswith("_total") for name, kind in declared.items() if kind == "counter")
    assert render(STATS).count("# HELP ") == len(declared)


def test_the_samples_carry_the_engine_numbers() -> None:
    samples = {}
    for line in render(STATS).splitlines():
        match = SAMPLE.match(line)
        if match:
            samples[match["name"] + (match["labels"] or "")] = float(match["value"])
    assert samples["cliffwatch_target_waiting_requests"] == 3
    assert samples["cliffwatch_target_running_requests"] == 8
    assert samples["cliffwatch_target_max_batch"] == 16
    assert samples['cliffwatch_target_requests_total{result="completed"}'] == 10
    assert samples['cliffwatch_target_requests_total{result="rejected_429"}'] == 2
    assert samples['cliffwatch_target_requests_total{result="dropped_deadline_503"}'] == 0
    assert samples["cliffwatch_target_prompt_tokens_total"] == 400
    assert samples["cliffwatch_target_generation_tokens_total"] == 1234
    assert samples["cliffwatch_target_steps_total"] == 99
    assert samples["cliffwatch_target_queue_time_seconds_sum"] == 1.5
    assert samples["cliffwatch_target_queue_time_seconds_count"] == 6
    assert {r.value for r in Result} == {
        key.split('"')[1] for key in samples if key.startswith("cliffwatch_target_requests_total")
    }


def test_prometheus_clients_own_parser_reads_every_family_with_its_declared_type() -> None:
    families = {f.name: f for f in text_string_to_metric_families(render(STATS))}
    assert families["cliffwatch_target_waiting_requests"].type == "gauge"
    assert families["cliffwatch_target_generation_tokens"].type == "counter"  # the parser drops _total
    summary = families["cliffwatch_target_queue_time_seconds"]
    assert summary.type == "summary"
    assert {s.name: s.value for s in summary.samples} == {
        "cliffwatch_target_queue_time_seconds_sum": 1.5,
        "cliffwatch_target_queue_time_seconds_count": 6,
    }
