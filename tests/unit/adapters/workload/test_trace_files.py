"""Reading traces in the public formats (tests/fixtures/traces), and refusing bad ones with field and line."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from cliffwatch.adapters.workload.data_files import DataFileRefused
from cliffwatch.adapters.workload.trace_files import TraceUnreadable, load_traces, read_trace
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.scenario.trace import TraceArrival, TraceFormat
from cliffwatch.domain.traffic.plan import iter_plan

TRACES = Path(__file__).parents[3] / "fixtures" / "traces"
FILES = {"azure": "azure.csv", "mooncake": "mooncake.jsonl", "burstgpt": "burstgpt.csv", "jsonl": "steady.jsonl"}


def arrival(form: str, path: Path, **extra: Any) -> TraceArrival:
    return TraceArrival(path=str(path), format=TraceFormat(form), **extra)


@pytest.mark.parametrize("form", sorted(FILES))
def test_every_format_reads_into_requests_from_time_zero(form: str) -> None:
    trace = read_trace(arrival(form, TRACES / FILES[form]), data_dirs=(TRACES,))
    requests = trace.requests
    assert len(requests) == (100 if form == "jsonl" else 60)
    assert requests[0].time_s == 0
    assert all(b.time_s >= a.time_s for a, b in itertools.pairwise(requests))
    assert all(r.prompt_tokens >= 0 and r.output_tokens >= 0 for r in requests)
    assert len(trace.digest) == 64


def test_azure_timestamps_keep_their_sub_second_part() -> None:
    """2023-11-16 18:15:46.6897624 then .7944018: 0.104639 s apart (seven digits, six kept)."""
    requests = read_trace(arrival("azure", TRACES / "azure.csv"), data_dirs=(TRACES,)).requests
    assert requests[1].time_s == pytest.approx(0.1046394, abs=2e-6)
    assert (requests[0].prompt_tokens, requests[0].output_tokens) == (25, 51)


def test_mooncake_milliseconds_become_seconds() -> None:
    requests = read_trace(arrival("mooncake", TRACES / "mooncake.jsonl"), data_dirs=(TRACES,)).requests
    assert requests[1].time_s == pytest.approx(0.015)
    assert (requests[0].prompt_tokens, requests[0].output_tokens) == (122, 41)


def scenario_with(trace: dict[str, Any], duration_s: float = 5) -> Any:
    return parse_scenario({
        "name": "replay",
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m"}},
        "phases": [{"name": "peak", "role": "stress", "duration_s": duration_s,
                    "arrival": {"process": "trace", **trace}}],
    })  # fmt: skip


def test_a_replay_is_the_traces_times_over_speed_with_its_lengths() -> None:
    """steady.jsonl: 100 requests 50 ms apart. At speed 2 from 1 s, a 2 s phase holds the trace's 1–5 s."""
    scenario = scenario_with({"path": str(TRACES / "steady.jsonl"), "format": "jsonl", "speed": 2, "start_s": 1},
                             duration_s=2)  # fmt: skip
    plan = list(iter_plan(load_traces(scenario, data_dirs=(TRACES,))))
    assert len(plan) == 80
    assert [r.scheduled_ns for r in plan[:3]] == [0, 25_000_000, 50_000_000]
    assert (plan[0].prompt_tokens, plan[0].max_tokens) == (16 + 20 % 7, 4 + 20 % 3)  # the trace's 21st request
    assert list(iter_plan(load_traces(scenario, data_dirs=(TRACES,)))) == plan  # deterministic


def test_a_trace_window_in_trace_seconds_is_cut_by_duration_s() -> None:
    scenario = scenario_with({"path": str(TRACES / "steady.jsonl"), "format": "jsonl", "duration_s": 1})
    assert len(list(iter_plan(load_traces(scenario, data_dirs=(TRACES,))))) == 20


def test_before_loading_a_trace_phase_plans_nothing_and_its_rates_are_unknown() -> None:
    scenario = scenario_with({"path": "t.jsonl", "format": "jsonl"})
    assert list(iter_plan(scenario)) == []
    assert scenario.phases[0].arrival.peak_rate() == 0.0


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        ({"format": "jsonl"}, "phases[0].arrival.path: is required"),
        (
            {"path": "t", "format": "parquet"},
            "phases[0].arrival.format: must be one of azure, mooncake, burstgpt, jsonl",
        ),
        ({"path": "t", "format": "jsonl", "speed": 0}, "phases[0].arrival.speed: must be > 0"),
        ({"path": "t", "format": "jsonl", "start_s": -1}, "phases[0].arrival.start_s: must be >= 0"),
        ({"path": "t", "format": "jsonl", "rate": 3}, "phases[0].arrival.rate: unknown key"),
    ],
)
def test_a_bad_trace_arrival_names_the_field(trace: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioInvalid) as caught:
        scenario_with(trace)
    assert any(str(p).startswith(message) for p in caught.value.problems), caught.value.problems


@pytest.mark.parametrize(
    ("form", "content", "reason"),
    [
        ("jsonl", '{"time_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n{"time_s": 1}\n',
         "line 2: must be an object with time_s, prompt_tokens, output_tokens"),
        ("jsonl", "not json\n", "line 1: is not JSON (Expecting value: line 1 column 1"),
        ("jsonl", '{"time_s": -1, "prompt_tokens": 5, "output_tokens": 1}\n',
         "line 1: time_s must be a finite time >= 0"),
        ("azure", "TIMESTAMP,ContextTokens\n", "line 1: the header lacks GeneratedTokens"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,1\n",
         "line 2: TIMESTAMP must be a finite time >= 0"),
        ("burstgpt", "Timestamp,Model,Request tokens,Response tokens\n1.0,x,many,3\n",
         "line 2: Request tokens must be a whole number of tokens from 0 to 10,000,000"),
        ("mooncake", "", "line 1: holds no request"),
    ],
)  # fmt: skip
def test_a_bad_record_is_refused_with_its_line(tmp_path: Path, form: str, content: str, reason: str) -> None:
    path = tmp_path / "trace"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TraceUnreadable) as caught:
        read_trace(arrival(form, path), data_dirs=(tmp_path,))
    assert str(caught.value).startswith(reason), str(caught.value)


def test_load_traces_names_the_phase_field_and_the_file(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text("{}\n", encoding="utf-8")
    scenario = scenario_with({"path": str(tmp_path / "t.jsonl"), "format": "jsonl"})
    with pytest.raises(ScenarioInvalid) as caught:
        load_traces(scenario, data_dirs=(tmp_path,))
    (problem,) = caught.value.problems
    assert problem.path == "phases[0].arrival.path"
    assert problem.message.startswith(f"{tmp_path / 't.jsonl'}, line 1: must be an object")


def test_a_trace_outside_the_data_directories_or_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataFileRefused, match="outside the directories data files may be read from"):
        read_trace(arrival("jsonl", TRACES / "steady.jsonl"), data_dirs=(tmp_path,))
    with pytest.raises(DataFileRefused, match="does not exist"):
        read_trace(arrival("jsonl", tmp_path / "none.jsonl"), data_dirs=(tmp_path,))


def test_a_file_of_the_wrong_kind_is_refused_without_quoting_what_it_holds(tmp_path: Path) -> None:
    """An operator names a file that is no trace (an .env): the refusal says what the format needs and where, and
    never what the file holds, since a run's reason is shown to every viewer."""
    path = tmp_path / "service.env"
    path.write_text("DATABASE_PASSWORD=hunter2-TOPSECRET,other\nTOKEN=sk-live-1234,5\n", encoding="utf-8")
    for form in ("azure", "burstgpt", "jsonl"):
        with pytest.raises(TraceUnreadable) as caught:
            read_trace(arrival(form, path), data_dirs=(tmp_path,))
        assert "hunter2" not in str(caught.value), form
        assert "sk-live" not in str(caught.value), form
        assert str(caught.value).startswith("line 1: "), form
