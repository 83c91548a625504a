"""Trace replay and datasets on the wire: the server sees the trace's requests at the trace's times over ``speed``.

The server records when each request arrives (its own monotonic clock) and the prompt it carried, and
answers a short stream. The traces are the small committed fixtures of tests/fixtures/traces.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from loadgen_testkit import Serve, chat_chunk, send_events

from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.services.memory import CollectingObserver

TRACES = Path(__file__).parents[3] / "fixtures" / "traces"
DONE = b"data: [DONE]\n\n"


class Recorder:
    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.max_tokens: list[int] = []

    async def handler(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=404)
        body = json.loads(await request.read())
        if body.get("stream"):  # not the calibration probes
            self.arrivals.append(time.perf_counter())
            self.max_tokens.append(body["max_tokens"])
        return await send_events(request, [chat_chunk("ok"), chat_chunk(finish="stop"), DONE])


def replay(url: str, trace: dict[str, Any], duration_s: float) -> Any:
    return parse_scenario({
        "name": "replay",
        "seed": 1,
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": url, "request": {"model": "m"}},
        "client": {"pool_size": 64},
        "phases": [{"name": "peak", "role": "baseline", "duration_s": duration_s,
                    "arrival": {"process": "trace", **trace}}],
    })  # fmt: skip


async def run(scenario: Any) -> dict[str, Any]:
    settings = dataclasses.replace(Settings.from_env({}), data_dirs=(TRACES,))
    async with prepare_run(settings, scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id="replay", target_url=prepared.target_url)
    return result.to_dict()


async def test_a_replay_at_speed_2_sends_at_twice_the_traces_rate_within_1_percent(serve: Serve) -> None:
    """steady.jsonl is 20 requests/s for 5 s; at speed 2 the server sees 40/s for 2.5 s."""
    recorder = Recorder()
    served = await serve(recorder.handler)
    document = await run(replay(served.url, {"path": str(TRACES / "steady.jsonl"), "format": "jsonl", "speed": 2}, 2.5))

    arrivals = recorder.arrivals
    assert len(arrivals) == 100
    seen_rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    print(f"speed 2: the server saw {seen_rate:.3f} req/s against 40 (trace 20 req/s)")
    assert seen_rate == pytest.approx(40.0, rel=0.01)
    assert recorder.max_tokens[:3] == [4, 5, 6]  # the trace's output lengths
    assert document["phases"][0]["offered"] == 100
    assert any("replays 100 of the 100 requests of jsonl trace" in note for note in document["notes"])


@pytest.mark.parametrize(
    ("form", "file"), [("azure", "azure.csv"), ("mooncake", "mooncake.jsonl"), ("burstgpt", "burstgpt.csv")]
)
async def test_each_public_format_replays_end_to_end(serve: Serve, form: str, file: str) -> None:
    """About 3 s of each trace at speed 3: every request of it reaches the server, with its output length."""
    recorder = Recorder()
    served = await serve(recorder.handler)
    document = await run(replay(served.url, {"path": str(TRACES / file), "format": form, "speed": 3}, 2))

    offered = document["phases"][0]["offered"]
    assert offered >= 55  # the whole trace is about 3 s: within 2 s at speed 3
    assert len(recorder.arrivals) == offered
    assert document["phases"][0]["outcomes"]["on_time"] == offered
    assert all(n >= 1 for n in recorder.max_tokens)


@pytest.mark.parametrize(
    ("file", "form", "kept"), [("sharegpt.json", "sharegpt", "7 of 8"), ("prompts.jsonl", "jsonl", "4 of 5")]
)
async def test_a_run_from_a_dataset_sends_its_prompts_and_notes_what_it_drew(
    serve: Serve, file: str, form: str, kept: str
) -> None:
    """The users' own prompts through the whole path: every body carries one of the dataset's prompts, the
    recorded answer's length as max_tokens, and the result's notes name the file and the drawn lengths."""
    prompts: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=404)
        body = json.loads(await request.read())
        if body.get("stream"):
            prompts.append(body["messages"][-1]["content"])
        return await send_events(request, [chat_chunk("ok"), chat_chunk(finish="stop"), DONE])

    served = await serve(handler)
    datasets = TRACES.parent / "datasets"
    dataset = {"path": str(datasets / file), "format": form}
    scenario = parse_scenario({
        "name": "users", "seed": 4,
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": served.url, "request": {"model": "m", "dataset": dataset}},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 20}}],
    })  # fmt: skip
    settings = dataclasses.replace(Settings.from_env({}), data_dirs=(datasets,))
    async with prepare_run(settings, scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id="users", target_url=prepared.target_url)

    text = (datasets / file).read_text()
    entries = json.loads(text) if form == "sharegpt" else [json.loads(line) for line in text.splitlines()]
    turns = [t for e in entries for t in e.get("conversations", e.get("messages", []))]
    known = {t.get("value", t.get("content")) for t in turns} | {e.get("prompt") for e in entries}
    assert len(prompts) == 20
    untagged = [p.split(" ", 1)[1] if p.startswith("req-") else p for p in prompts]  # the tag opens the first
    assert all(p in known for p in untagged), prompts  # user message, not a later one of a chat
    (note,) = [n for n in result.notes if n.startswith("dataset ")]
    assert f"{kept} entries kept" in note
    assert "drawn prompt tokens p50" in note


async def test_a_sweep_of_a_dataset_scenario_is_refused_before_any_load(serve: Serve) -> None:
    """Sweeps do not draw from datasets yet: refused with the field, rather than swept with synthetic prompts."""
    from cliffwatch.bootstrap.sweep import prepare_sweep
    from cliffwatch.domain.capacity.sweep_spec import SweepSpec
    from cliffwatch.domain.errors import ScenarioInvalid

    received: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        received.append(request.method)
        return web.Response(status=404)

    served = await serve(handler)
    dataset = {"path": str(TRACES.parent / "datasets" / "sharegpt.json"), "format": "sharegpt"}
    scenario = parse_scenario({
        "name": "users", "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": served.url, "request": {"model": "m", "dataset": dataset}},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 2}}],
    })  # fmt: skip
    with pytest.raises(ScenarioInvalid) as caught:
        async with prepare_sweep(Settings.from_env({}), scenario, SweepSpec(), observer=CollectingObserver()):
            pass
    assert caught.value.problems[0].path == "target.request.dataset"
    assert received == []
