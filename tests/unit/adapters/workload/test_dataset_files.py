"""Reading request.dataset files (tests/fixtures/datasets), the plan's draws, and the bodies they give."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from cliffwatch.adapters.loadgen.bodies import RequestBodies
from cliffwatch.adapters.workload.dataset_files import load_dataset
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.dataset import with_dataset
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.traffic.plan import iter_plan

DATASETS = Path(__file__).parents[3] / "fixtures" / "datasets"


def scenario(dataset: dict[str, Any], *, api: str = "openai-chat", rate: float = 40, **request: Any) -> Any:
    return parse_scenario({
        "name": "users",
        "seed": 9,
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": "http://127.0.0.1:8000", "api": api,
                   "request": {"model": "m", "dataset": dataset, **request}},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1,
                    "arrival": {"process": "constant", "rate": rate}}],
    })  # fmt: skip


def bodies(doc: Any, data_dirs: tuple[Path, ...] = (DATASETS,)) -> list[dict[str, Any]]:
    loaded = load_dataset(doc, data_dirs=data_dirs, counter=None)
    assert loaded is not None
    attached = with_dataset(doc, loaded.sizes)
    render = RequestBodies(attached, dataset=loaded)
    return [json.loads(render.render(r) or b"") for r in iter_plan(attached)]


def test_sharegpt_first_human_turns_are_the_prompts_and_the_recorded_answers_give_max_tokens() -> None:
    sent = bodies(scenario({"path": str(DATASETS / "sharegpt.json"), "format": "sharegpt"}))
    assert len(sent) == 40
    prompts = {b["messages"][0]["content"].split(" ", 1)[1]: b["max_tokens"] for b in sent}
    assert prompts["What is the capital of Australia?"] == 1  # "Canberra." is one word
    assert prompts["Name three primary colours."] == 4  # the first human turn, after a system turn
    assert all(b["messages"][0]["content"].startswith(f"req-{i} ") for i, b in enumerate(sent))  # the cache buster
    assert len(prompts) == 7  # the conversation without a human turn is left out


def test_jsonl_prompts_and_messages_are_sent_as_given_with_the_tag_in_the_first_user_message() -> None:
    jsonl = {"path": str(DATASETS / "prompts.jsonl"), "format": "jsonl", "sample": "without_replacement"}
    sent = bodies(scenario(jsonl, rate=8))
    chats = [b["messages"] for b in sent if len(b["messages"]) > 1]
    terse = next(m for m in chats if m[0]["role"] == "system")
    assert terse[0] == {"role": "system", "content": "You are terse."}  # the system message as given
    assert terse[1]["content"].startswith("req-")  # the tag opens the first user message
    assert terse[1]["content"].endswith(" What is 2 + 2?")
    multi = next(m for m in chats if m[0]["role"] == "user")
    assert [t["role"] for t in multi] == ["user", "assistant", "user"]
    assert multi[2]["content"] == "And in Italian?"
    # without replacement, the first four draws are the four usable entries, each once
    firsts = {json.dumps(b["messages"][-1]["content"].split(" ", 1)[-1]) for b in sent[:4]}
    assert len(firsts) == 4


def test_cache_bust_off_sends_the_prompts_untouched_and_max_tokens_may_override() -> None:
    sent = bodies(scenario({"path": str(DATASETS / "prompts.jsonl"), "format": "jsonl", "cache_bust": False},
                           max_tokens=17))  # fmt: skip
    assert all(not b["messages"][-1]["content"].startswith("req-") for b in sent)
    assert {b["max_tokens"] for b in sent} == {17}


def test_length_filters_keep_only_prompts_within_them() -> None:
    doc = scenario({"path": str(DATASETS / "sharegpt.json"), "format": "sharegpt", "min_prompt_tokens": 6,
                    "max_prompt_tokens": 7})  # fmt: skip
    sent = bodies(doc)
    kept = {b["messages"][0]["content"].split(" ", 1)[1] for b in sent}
    assert kept == {"What is the capital of Australia?", "Write a haiku about autumn rain."}  # six words each


def test_completions_take_prompt_entries_only() -> None:
    sent = bodies(scenario({"path": str(DATASETS / "prompts.jsonl"), "format": "jsonl"}, api="openai-completions"))
    assert {b["prompt"].split(" ", 1)[1] for b in sent} == {
        "Summarise the plot of Hamlet in one line.",
        "List the planets of the solar system.",
    }


def test_a_hf_directory_is_read_for_its_json_files(tmp_path: Path) -> None:
    snapshot = tmp_path / "datasets--sharegpt" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    shutil.copy(DATASETS / "sharegpt.json", snapshot / "train.json")
    assert len(bodies(scenario({"path": str(tmp_path), "format": "hf"}), data_dirs=(tmp_path,))) == 40
    (snapshot / "train.json").unlink()
    (snapshot / "train.parquet").write_bytes(b"PAR1")
    with pytest.raises(ScenarioInvalid, match="holds only parquet files"):
        load_dataset(scenario({"path": str(tmp_path), "format": "hf"}), data_dirs=(tmp_path,), counter=None)


def test_the_plan_draws_the_same_entries_for_the_same_seed() -> None:
    doc = scenario({"path": str(DATASETS / "sharegpt.json"), "format": "sharegpt"})
    assert bodies(doc) == bodies(doc)


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ({"path": str(DATASETS / "none.json"), "format": "sharegpt"}, "none.json does not exist"),
        ({"path": str(DATASETS / "prompts.jsonl"), "format": "sharegpt"}, "is not a ShareGPT list of conversations"),
        ({"path": str(DATASETS / "sharegpt.json"), "format": "jsonl"}, "line 1 is not JSON"),
        ({"path": str(DATASETS / "sharegpt.json"), "format": "sharegpt", "min_prompt_tokens": 500},
         "no entry of the 8 read has a usable prompt within the length filters"),
    ],
)  # fmt: skip
def test_a_dataset_that_cannot_be_used_is_refused_naming_the_field(dataset: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioInvalid) as caught:
        load_dataset(scenario(dataset), data_dirs=(DATASETS,), counter=None)
    (problem,) = caught.value.problems
    assert problem.path == "target.request.dataset.path"
    assert message in problem.message


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"dataset": {"path": "d", "format": "csv"}}, "target.request.dataset.format: must be one of sharegpt"),
        ({"dataset": {"path": "d", "format": "jsonl"}, "prompt_tokens": 5},
         "target.request.prompt_tokens: comes from the dataset"),
        ({"dataset": {"path": "d", "format": "jsonl", "sample": "some"}}, "target.request.dataset.sample: must be"),
        ({"dataset": {"path": "d", "format": "jsonl", "min_prompt_tokens": 9, "max_prompt_tokens": 3}},
         "target.request.dataset.max_prompt_tokens: must be >= min_prompt_tokens (9)"),
    ],
)  # fmt: skip
def test_a_bad_dataset_key_names_the_field(request_: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioInvalid) as caught:
        parse_scenario({
            "name": "bad", "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
            "target": {"url": "http://127.0.0.1:8000", "request": {"model": "m", **request_}},
            "phases": [{"name": "p", "role": "baseline", "duration_s": 1,
                        "arrival": {"process": "constant", "rate": 1}}],
        })  # fmt: skip
    assert any(str(p).startswith(message) for p in caught.value.problems), caught.value.problems
