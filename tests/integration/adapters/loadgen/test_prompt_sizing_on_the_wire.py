"""Prompt sizes as a server counts them: token-exact with the scenario's tokenizer, calibrated without one.

The servers here count each prompt themselves, with ``tokenizers`` and Jinja directly (not cliffwatch's
counter): through the chat template, as vLLM does (``apply_chat_template``, then tokenize without special
tokens), and answer with that count in ``usage.prompt_tokens``. The tokenizer is trained in the test
(tests/tokenizer_kit.py). A whole run goes through ``prepare_run``, so the result's ``prompt_tokens`` is
what a user reads.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from jinja2.sandbox import ImmutableSandboxedEnvironment
from loadgen_testkit import Serve, chat_chunk, scenario_for, send_events, sse
from rich.console import Console
from tokenizers import Tokenizer

from cliffwatch.adapters.report.render import render_report
from cliffwatch.adapters.terminal.console import scorecard
from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.services.memory import CollectingObserver
from engines.unsized_server import refuses_probes
from tokenizer_kit import CHAT_TEMPLATE, train_tokenizer

pytestmark = pytest.mark.usefixtures("over_each_transport")  # aiohttp and the lean client alike

DONE = b"data: [DONE]\n\n"
PHASES = [{"name": "only", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 40}}]


def counting_server(tokenizer: Tokenizer, *, template: bool = True) -> Any:
    """Answers chat requests, streamed or not, with ``usage.prompt_tokens`` as counted by ``tokenizer``."""
    compiled = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(CHAT_TEMPLATE)

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.method != "POST":  # the preflight's look at the root
            return web.Response(status=404)
        body = json.loads(await request.read())
        if template:
            text = compiled.render(messages=body["messages"], add_generation_prompt=True, bos_token="<s>")
        else:
            text = body["messages"][0]["content"]
        usage = {"prompt_tokens": len(tokenizer.encode(text, add_special_tokens=False).ids), "completion_tokens": 1}
        if not body.get("stream"):
            choice = {"message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}
            return web.json_response({"choices": [choice], "usage": usage})
        return await send_events(request, [chat_chunk("ok"), chat_chunk(finish="length"),
                                           sse({"choices": [], "usage": usage}), DONE])  # fmt: skip

    return handler


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok"))


async def run(scenario: Any, data_dirs: tuple[Path, ...] | None = None) -> dict[str, Any]:
    settings = dataclasses.replace(Settings.from_env({}), data_dirs=data_dirs)
    async with prepare_run(settings, scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id="sizing", target_url=prepared.target_url)
    return result.to_dict()


def chat_scenario(url: str, workers: int | None = None, **request: Any) -> Any:
    lengths = {"dist": "uniform", "min": 40, "max": 900}
    return scenario_for(url, request={"prompt_tokens": lengths, "include_usage": True, **request}, phases=PHASES,
                        client={} if workers is None else {"workers": workers})  # fmt: skip


# With worker processes the prompts must be the same to the token: the coordinator settles them (a calibration)
# or each worker loads the same tokenizer (it does not travel between processes).
WORKERS = [pytest.param(None, id="one-process"), pytest.param(2, id="workers", marks=pytest.mark.slow)]


@pytest.mark.parametrize("workers", WORKERS)
async def test_with_the_tokenizer_every_prompt_is_the_size_the_server_counts(
    serve: Serve, tokenizer_dir: Path, workers: int | None
) -> None:
    served = await serve(counting_server(Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))))
    scenario = chat_scenario(served.url, workers, tokenizer=str(tokenizer_dir))
    document = await run(scenario, data_dirs=(tokenizer_dir,))
    assert len(document["generator"]["workers"] or ()) == (workers or 0)

    sizing = document["prompt_tokens"]
    assert sizing["source"] == "tokenizer"
    assert "with its chat template" in sizing["detail"]
    print(f"tokenizer: {sizing}")
    assert sizing["error"]["answers"] == 40
    assert sizing["error"]["mean_abs_pct"] <= 2.0, sizing
    assert sizing["error"]["p99_abs_pct"] <= 2.0, sizing
    assert document["phases"][0]["prompt_tokens_error"] == sizing["error"]


@pytest.mark.parametrize("workers", WORKERS)
async def test_without_a_tokenizer_the_probes_calibrate_to_within_ten_percent(
    serve: Serve, tmp_path: Path, workers: int | None
) -> None:
    """This server's tokenizer (a smaller vocabulary, which splits most words into several tokens: about 3.7
    tokens a word) is not the client's, and its template adds seven tokens: the fit finds both, and the
    prompts it sizes land within 10 % of what was asked on average. A single short prompt can miss by more
    (a 40-token prompt is ten words, and words differ in length): the p99 is reported, not hidden."""
    server_tokenizer = train_tokenizer(tmp_path / "server", vocab_size=300, chat_template=False)
    served = await serve(counting_server(Tokenizer.from_file(str(server_tokenizer / "tokenizer.json"))))
    document = await run(chat_scenario(served.url, workers))

    assert len(document["generator"]["workers"] or ()) == (workers or 0)
    sizing = document["prompt_tokens"]
    assert sizing["source"] == "calibrated", sizing
    assert sizing["calibration"]["slope"] == pytest.approx(3.7, abs=0.5)
    assert 0 < sizing["calibration"]["intercept"] < 15  # the template's tokens, and the fit's own offset
    print(f"calibrated: {sizing}")
    assert [words for words, _ in sizing["calibration"]["samples"]] == [8, 32, 128, 512]
    assert abs(sizing["error"]["mean_pct"]) <= 10.0, sizing
    assert sizing["error"]["mean_abs_pct"] <= 10.0, sizing
    assert sizing["error"]["p99_abs_pct"] is not None
    probes = [r for r in served.requests if r.method == "POST" and not json.loads(r.body).get("stream")]
    assert len(probes) == sizing["probes"] == 4


async def test_a_target_without_usage_is_sized_in_words_and_says_why(serve: Serve) -> None:
    async def no_usage(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.json_response({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})

    served = await serve(no_usage)
    scenario = scenario_for(served.url, request={"stream": False}, phases=PHASES)
    sizing = (await run(scenario))["prompt_tokens"]
    assert sizing["source"] == "words"
    assert "carry no usage.prompt_tokens" in sizing["detail"]
    assert sizing["error"] is None


async def test_a_tokenizer_outside_the_data_directories_is_refused_before_any_load(
    serve: Serve, tokenizer_dir: Path, tmp_path: Path
) -> None:
    served = await serve(counting_server(Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))))
    with pytest.raises(ScenarioInvalid) as caught:
        await run(chat_scenario(served.url, tokenizer=str(tokenizer_dir)), data_dirs=(tmp_path,))
    (problem,) = caught.value.problems
    assert problem.path == "target.request.tokenizer"
    assert "outside the directories data files may be read from" in problem.message
    assert served.requests == []


def tokenizing_server(tokenizer: Tokenizer, *, dialect: str) -> Any:
    """The chat endpoint of ``counting_server`` (which counts the chat template) plus a ``/tokenize``: vLLM's
    (``{"model", "messages", "add_generation_prompt"}`` → ``{"count", "max_model_len", "tokens"}``,
    vllm/entrypoints/openai/protocol.py) or llama.cpp's (``{"content"}`` → ``{"tokens"}``, no chat template)
    from a build without ``/apply-template`` (older llama-server builds): its fit misses the template's tokens,
    which the answers' own counts correct during the run. tests/engines/llama_cpp_mimic.py has the whole
    llama.cpp surface."""
    chat = counting_server(tokenizer)
    compiled = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(CHAT_TEMPLATE)

    async def handler(request: web.Request) -> web.StreamResponse:
        if dialect == "vllm" and request.method == "GET" and request.path == "/v1/models":  # ModelCard
            return web.json_response({"object": "list", "data": [{"id": "tiny-llama", "max_model_len": 4096}]})
        if request.path == "/apply-template":
            return web.json_response({"error": {"code": 404, "type": "not_found_error"}}, status=404)
        if request.path != "/tokenize":
            return await chat(request)
        body = json.loads(await request.read())
        if dialect == "vllm" and "messages" in body:
            text = compiled.render(messages=body["messages"], add_generation_prompt=True, bos_token="<s>")
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            return web.json_response({"count": len(ids), "max_model_len": 4096, "tokens": ids})
        if dialect == "llama.cpp" and "content" in body:
            return web.json_response({"tokens": tokenizer.encode(body["content"], add_special_tokens=False).ids})
        return web.json_response({"error": "bad request"}, status=400)

    return handler


@pytest.mark.parametrize("dialect", ["vllm", "llama.cpp"])
async def test_with_the_servers_tokenize_prompts_are_within_two_percent(
    serve: Serve, tmp_path: Path, dialect: str
) -> None:
    """tokenizer: server fits each length the plan draws with the target's own /tokenize; the server then
    counts every prompt within 2 % of what was asked (the tag's digits differ from the fit's by a token)."""
    server_tokenizer = train_tokenizer(tmp_path / "server", vocab_size=300, chat_template=False)
    tokenizer = Tokenizer.from_file(str(server_tokenizer / "tokenizer.json"))
    served = await serve(tokenizing_server(tokenizer, dialect=dialect))
    document = await run(chat_scenario(served.url, tokenizer="server"))

    sizing = document["prompt_tokens"]
    print(f"server ({dialect}): {sizing}")
    assert sizing["source"] == "server", sizing
    assert sizing["detail"].startswith(f"{dialect} /tokenize: ")
    assert sizing["context_tokens"] == (4096 if dialect == "vllm" else None)
    assert sizing["error"]["answers"] == 40
    assert abs(sizing["error"]["mean_pct"]) <= 2.0, sizing
    assert sizing["error"]["mean_abs_pct"] <= 2.0, sizing


async def test_a_failed_calibration_is_a_workload_mismatch_the_run_says_out_loud(serve: Serve) -> None:
    """The probes are refused (HTTP 503) but the load is answered, with a server that counts three tokens a
    word: the prompts go out unmeasured, so the run cannot pass and says why in its result, its scorecard and
    its report, beside each phase's server-counted error."""

    served = await serve(refuses_probes)
    scenario = chat_scenario(served.url)
    settings = Settings.from_env({})
    async with prepare_run(settings, scenario, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(scenario, run_id="mismatch", target_url=prepared.target_url)
    document = result.to_dict()

    sizing = document["prompt_tokens"]
    assert sizing["source"] == "words"
    assert sizing["failure"].startswith("calibration failed: 0 of 4 probes answered")
    assert document["workload_mismatch"] is True
    assert document["workload_mismatch_reason"].startswith("calibration failed")
    assert document["passed"] is False
    assert "workload_mismatch" in [v["name"] for v in document["verdicts"]]
    # the answers' counts corrected the one-word-a-token start: the later prompts are near the sizes asked
    assert sizing["error"]["answers"] == 40

    console = Console(record=True, width=250)
    console.print(scorecard(result))
    text = console.export_text()
    assert "⚠ workload_mismatch: the prompts sent are not the sizes the scenario asks for" in text
    assert "prompt off" in text
    html = render_report(document)
    assert 'class="warn" id="prompt-sizing"' in html
    assert "Workload mismatch: calibration failed" in html
