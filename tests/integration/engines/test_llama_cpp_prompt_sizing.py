"""Prompts the size llama.cpp counts: against a real ``llama-server`` and against its mimic.

The real one (tests/engines/llama_server.py: built from the llama.cpp sources the llama-cpp-python sdist
vendors, a tiny random-weight model around Phi-3's real tokenizer and chat template, one slot of 2,048
tokens) is marked ``llama_server``. The mimic (tests/engines/llama_cpp_mimic.py: llama.cpp's sizing
surface over a small trained tokenizer that splits most words into several tokens, one slot of 1,024
tokens) runs everywhere. The same checks hold against both, read from what the server itself counted
(``usage.prompt_tokens``, as the result reports it, and the mimic's own record):

- ``tokenizer: server``, ``prompt_tokens: 64``: every prompt is 64 ± 1 tokens;
- ``tokenizer: server``, ``{dist: uniform, min: 40, max: 600}``: within 2 % on average (mean absolute);
- the default calibration, ``prompt_tokens: 64``: within 10 % on average, its probes inside the slot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tokenizers import Tokenizer

from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.services.memory import CollectingObserver
from engines.llama_cpp_mimic import LlamaCppMimic
from engines.llama_server import running_llama_server
from tokenizer_kit import CHAT_TEMPLATE, train_tokenizer

UNIFORM = {"dist": "uniform", "min": 40, "max": 600}


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_llama_server(tmp_path_factory.mktemp("llama"), context=2048) as url:
        yield url


@pytest.fixture(scope="module")
def mimic_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    directory = train_tokenizer(tmp_path_factory.mktemp("mimic"), vocab_size=300, chat_template=False)
    return Tokenizer.from_file(str(directory / "tokenizer.json"))


@dataclasses.dataclass
class Engine:
    url: str
    mimic: LlamaCppMimic | None  # None: the real server (its counts are read from the result)
    context: int


@pytest.fixture(params=[pytest.param("mimic", id="mimic-1024"),
                        pytest.param("real", id="llama-server-2048", marks=pytest.mark.llama_server)])  # fmt: skip
async def engine(request: pytest.FixtureRequest, mimic_tokenizer: Tokenizer) -> AsyncIterator[Engine]:
    if request.param == "real":
        yield Engine(url=request.getfixturevalue("real_server"), mimic=None, context=2048)
        return
    mimic = LlamaCppMimic(tokenizer=mimic_tokenizer, chat_template=CHAT_TEMPLATE, n_ctx=1024)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", mimic.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield Engine(url=str(server.make_url("")).rstrip("/"), mimic=mimic, context=1024)
    finally:
        await server.close()


def scenario(url: str, prompt_tokens: Any, **request: Any) -> Scenario:
    return parse_scenario({
        "name": "llama-cpp-sizing",
        "seed": 5,
        "slo": {"e2e_ms": 5000, "timeout_ms": 60000},
        "target": {"url": url, "api": "openai-chat",
                   "request": {"model": "tiny", "prompt_tokens": prompt_tokens, "max_tokens": 2,
                               "include_usage": True, **request}},
        "phases": [{"name": "only", "role": "baseline", "duration_s": 3,
                    "arrival": {"process": "constant", "rate": 8}}],
    })  # fmt: skip


async def run(document: Scenario) -> dict[str, Any]:
    async with prepare_run(Settings.from_env({}), document, observer=CollectingObserver()) as prepared:
        result = await prepared.service.execute(document, run_id="llama-cpp-sizing", target_url=prepared.target_url)
    return result.to_dict()


def answered(document: dict[str, Any]) -> dict[str, Any]:
    error = document["prompt_tokens"]["error"]
    assert error is not None, document["prompt_tokens"]
    assert error["answers"] >= 12, error
    return dict(error)


async def test_with_the_servers_tokenizer_a_64_token_prompt_is_64_tokens(engine: Engine) -> None:
    document = await run(scenario(engine.url, 64, tokenizer="server"))
    sizing = document["prompt_tokens"]
    print(f"tokenizer: server, 64: {sizing}")
    assert sizing["source"] == "server", sizing
    assert "the chat template rendered by /apply-template" in sizing["detail"]
    assert sizing["context_tokens"] == engine.context
    assert answered(document)["max_abs_pct"] <= 100 / 64 + 0.01  # every answer within one token
    if engine.mimic is not None:
        assert engine.mimic.counted
        assert all(abs(n - 64) <= 1 for n in engine.mimic.counted), engine.mimic.counted
    assert document["workload_mismatch"] is False


async def test_with_the_servers_tokenizer_spread_lengths_are_within_two_percent(engine: Engine) -> None:
    document = await run(scenario(engine.url, UNIFORM, tokenizer="server"))
    error = answered(document)
    print(f"tokenizer: server, uniform 40-600: {document['prompt_tokens']}")
    assert error["mean_abs_pct"] <= 2.0, error
    assert document["workload_mismatch"] is False


async def test_the_default_calibration_sizes_within_ten_percent_inside_the_slot(engine: Engine) -> None:
    document = await run(scenario(engine.url, 64))
    sizing = document["prompt_tokens"]
    print(f"calibrated, 64: {sizing}")
    assert sizing["source"] == "calibrated", sizing
    assert sizing["failure"] is None
    assert sizing["context_tokens"] == engine.context
    # every probe sent fitted the slot: none refused, and the fit has two or more of them
    assert len(sizing["calibration"]["samples"]) >= 2
    assert all(tokens < engine.context for _, tokens in sizing["calibration"]["samples"])
    if engine.mimic is not None:
        assert engine.mimic.refused == 0
    assert answered(document)["mean_abs_pct"] <= 10.0, sizing
    assert document["workload_mismatch"] is False


async def test_a_probe_over_the_context_is_counted_from_the_refusal(engine: Engine, tmp_path: Path) -> None:
    """Without the slot's context known (its /props hidden), the 512-word probe goes and is refused: the
    refusal still says how many tokens the server made of it, so the fit keeps all four probes."""
    if engine.mimic is None:
        pytest.skip("the real server's /props cannot be hidden; the mimic's refusal is llama.cpp's own body")
    hidden = web.Application()

    async def without_props(request: web.Request) -> web.StreamResponse:
        if request.path == "/props":
            return web.json_response({"error": {"code": 404, "type": "not_found_error"}}, status=404)
        return await engine.mimic.handle(request)  # type: ignore[union-attr]

    hidden.router.add_route("*", "/{tail:.*}", without_props)
    server = TestServer(hidden, host="127.0.0.1")
    await server.start_server()
    try:
        document = await run(scenario(str(server.make_url("")).rstrip("/"), 64))
    finally:
        await server.close()
    sizing = document["prompt_tokens"]
    assert engine.mimic.refused == 1  # the 512-word probe, about 1,900 tokens
    assert sizing["source"] == "calibrated", sizing
    assert sizing["context_tokens"] == 1024
    assert [words for words, _ in sizing["calibration"]["samples"]] == [8, 32, 128, 512]
    assert answered(document)["mean_abs_pct"] <= 10.0, sizing
