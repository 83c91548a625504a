"""The preparation stage: every file a scenario names read once, within the bounds, the caps judged on what its
files make it send; a problem names the field, the file, the line and the bound, never what the file holds."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from pathlib import Path
from typing import Any

import pytest

from cliffwatch.adapters.loadgen.token_prompts import TokenExactPrompts
from cliffwatch.adapters.workload.preparation import Preparation, prepare, prepare_off_loop
from cliffwatch.domain.errors import RunRefused, ScenarioInvalid
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.scenario.trace import TraceArrival
from cliffwatch.domain.service.caps import Caps
from cliffwatch.domain.workload.prepared import PreparationLimits
from tokenizer_kit import train_tokenizer

CAPS = Caps()  # the service's defaults: prompts up to 131,072 tokens, answers up to 32,768


def scenario(request: dict[str, Any], arrival: dict[str, Any] | None = None, *, api: str = "openai-chat") -> Scenario:
    return parse_scenario({
        "name": "prepared", "seed": 3, "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": "http://127.0.0.1:8000", "api": api, "request": {"model": "m", **request}},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 2,
                    "arrival": arrival or {"process": "constant", "rate": 5}}],
    })  # fmt: skip


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_a_dataset_entry_asking_for_fifty_million_tokens_is_refused_naming_its_line(tmp_path: Path) -> None:
    users = jsonl(tmp_path / "users.jsonl", [{"prompt": "hello there"}, {"prompt": "what is two and two"},
                                             {"prompt": "and now", "max_tokens": 50_000_000}])  # fmt: skip
    doc = scenario({"dataset": {"path": str(users), "format": "jsonl"}})
    with pytest.raises(RunRefused) as caught:
        prepare(doc, caps=CAPS, limits=PreparationLimits(), data_dirs=(tmp_path,))
    (problem,) = caught.value.problems
    assert problem.path == "target.request.dataset.path"
    assert problem.message.startswith(f"{users} line 3: max_tokens is over the cap of 32,768 tokens a request "
                                      "(CLIFFWATCH_MAX_OUTPUT_TOKENS)")  # fmt: skip
    assert "50,000,000" not in problem.message


def test_a_prompt_of_300000_words_is_refused_and_with_clamp_to_caps_left_out_and_counted(tmp_path: Path) -> None:
    users = jsonl(tmp_path / "users.jsonl", [{"prompt": "hello there", "max_tokens": 50_000},
                                             {"prompt": "word " * 300_000}, {"prompt": "short one"}])  # fmt: skip
    dataset = {"path": str(users), "format": "jsonl"}
    with pytest.raises(RunRefused) as caught:
        prepare(scenario({"dataset": dataset}), caps=CAPS, limits=PreparationLimits(), data_dirs=(tmp_path,))
    assert [p.message.split(";")[0] for p in caught.value.problems] == [
        f"{users} line 2: prompt is over the cap of 131,072 tokens a request (CLIFFWATCH_MAX_PROMPT_TOKENS)",
        f"{users} line 1: max_tokens is over the cap of 32,768 tokens a request (CLIFFWATCH_MAX_OUTPUT_TOKENS)",
    ]

    clamping = scenario({"dataset": {**dataset, "clamp_to_caps": True}})
    prepared = prepare(clamping, caps=CAPS, limits=PreparationLimits(), data_dirs=(tmp_path,))
    assert prepared.dataset is not None
    assert len(prepared.dataset.prompts) == 2
    assert (prepared.clamped.dataset_left_out, prepared.clamped.dataset_outputs) == (1, 1)
    assert prepared.notes[-1] == ("clamped to the caps (clamp_to_caps: true): 1 dataset entries left out (prompt "
                                  "over 131,072 tokens); 1 dataset entries' max_tokens to 32,768")  # fmt: skip
    sizes = prepared.workload.target.request.dataset.loaded  # type: ignore[union-attr]
    assert sizes is not None
    assert max(t or 0 for t in sizes.output_tokens) == 32_768


def test_the_prepared_run_keeps_the_scenario_as_asked_and_plans_from_the_workload(tmp_path: Path) -> None:
    trace = jsonl(tmp_path / "steady.jsonl", [{"time_s": i / 10, "prompt_tokens": 20, "output_tokens": 8}
                                              for i in range(15)])  # fmt: skip
    doc = scenario({}, {"process": "trace", "path": str(trace), "format": "jsonl"})
    prepared = prepare(doc, caps=CAPS, limits=PreparationLimits(), data_dirs=(tmp_path,))
    assert prepared.scenario is doc
    asked, planned = doc.phases[0].arrival, prepared.workload.phases[0].arrival
    assert isinstance(asked, TraceArrival)
    assert asked.loaded is None
    assert isinstance(planned, TraceArrival)
    assert planned.loaded is not None
    assert len(planned.loaded.requests) == 15
    assert prepared.notes[0].startswith("phase p replays 15 of the 15 requests of jsonl trace")


def test_a_trace_over_the_row_bound_is_refused_naming_the_line_and_the_setting(tmp_path: Path) -> None:
    trace = jsonl(tmp_path / "big.jsonl", [{"time_s": i, "prompt_tokens": 1, "output_tokens": 1} for i in range(50)])
    doc = scenario({}, {"process": "trace", "path": str(trace), "format": "jsonl"})
    with pytest.raises(ScenarioInvalid) as caught:
        prepare(doc, caps=CAPS, limits=PreparationLimits(max_rows=40), data_dirs=(tmp_path,))
    (problem,) = caught.value.problems
    assert problem.path == "phases[0].arrival.path"
    assert "line 41: more than 40 requests (CLIFFWATCH_PREPARE_MAX_ROWS)" in problem.message


def test_a_preparation_past_its_time_bound_names_the_file_it_was_reading(tmp_path: Path) -> None:
    trace = jsonl(tmp_path / "long.jsonl", [{"time_s": i / 1000, "prompt_tokens": 1, "output_tokens": 1}
                                            for i in range(300_000)])  # fmt: skip
    doc = scenario({}, {"process": "trace", "path": str(trace), "format": "jsonl"})
    started = time.monotonic()
    with pytest.raises(ScenarioInvalid) as caught:
        prepare(doc, caps=CAPS, limits=PreparationLimits(timeout_s=0.1), data_dirs=(tmp_path,))
    assert time.monotonic() - started < 1.5
    (problem,) = caught.value.problems
    assert str(problem) == (f"phases[0].arrival.path: {trace}: preparing took longer than 0.1 s "
                            "(CLIFFWATCH_PREPARE_TIMEOUT_S)")  # fmt: skip


def test_a_chat_template_that_loops_for_ever_is_a_problem_of_the_tokenizer_field(tmp_path: Path) -> None:
    directory = train_tokenizer(tmp_path / "tok")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ScenarioInvalid) as caught:
        prepare(scenario({"tokenizer": str(directory)}), caps=CAPS,
                limits=PreparationLimits(template_render_s=0.2), data_dirs=(tmp_path,))  # fmt: skip
    (problem,) = caught.value.problems
    assert problem.path == "target.request.tokenizer"
    assert problem.message == ("tokenizer_config.json: its chat_template took longer than 0.2 s to render "
                               "(CLIFFWATCH_TEMPLATE_RENDER_S)")  # fmt: skip


def test_token_exact_prompts_travel_to_a_worker_without_their_files_or_template(tmp_path: Path) -> None:
    directory = train_tokenizer(tmp_path / "tok")
    prepared = prepare(scenario({"tokenizer": str(directory)}), caps=CAPS, limits=PreparationLimits(),
                       data_dirs=(tmp_path,))  # fmt: skip
    maker = prepared.prompts.maker
    assert isinstance(maker, TokenExactPrompts)
    (directory / "tokenizer.json").unlink()  # a worker reads nothing: what it needs travels
    travelled = pickle.loads(pickle.dumps(maker))
    assert travelled.fragments(77, 40) == maker.fragments(77, 40)


def test_a_preparation_off_the_loop_leaves_the_loop_free_and_ends_when_cancelled(tmp_path: Path) -> None:
    trace = jsonl(tmp_path / "long.jsonl", [{"time_s": i / 1000, "prompt_tokens": 1, "output_tokens": 1}
                                            for i in range(200_000)])  # fmt: skip
    doc = scenario({}, {"process": "trace", "path": str(trace), "format": "jsonl"})

    async def main() -> tuple[float, float]:
        task = asyncio.create_task(prepare_off_loop(doc, caps=CAPS, limits=PreparationLimits(),
                                                    data_dirs=(tmp_path,)))  # fmt: skip
        worst = 0.0
        for _ in range(20):  # the loop's own ticks while the thread reads
            started = time.monotonic()
            await asyncio.sleep(0.01)
            worst = max(worst, time.monotonic() - started - 0.01)
        cancelled = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return worst, time.monotonic() - cancelled

    worst_lag, stop_s = asyncio.run(main())
    assert worst_lag < 0.1
    assert stop_s < 0.5  # the thread was ended where it was, not left to finish


def test_a_stop_before_the_preparation_starts_still_ends_it(tmp_path: Path) -> None:
    trace = jsonl(tmp_path / "t.jsonl", [{"time_s": 0, "prompt_tokens": 1, "output_tokens": 1}])
    preparation = Preparation(scenario({}, {"process": "trace", "path": str(trace), "format": "jsonl"}), caps=CAPS,
                              limits=PreparationLimits(), data_dirs=(tmp_path,))  # fmt: skip
    preparation.stop("the run was stopped")
    with pytest.raises(ScenarioInvalid, match="the run was stopped"):
        preparation.run()
