"""What an inference engine says of itself before the load: one slot's context, read from its own endpoints.

Prompt sizing needs it twice: the calibration probes must fit inside a slot (a probe over it is refused, and a
refused probe teaches nothing), and a plan whose largest prompt does not fit will be refused by the server
whatever the sizing does, which the run then says before it starts.

- llama.cpp's ``llama-server``: ``GET /props`` → ``default_generation_settings.n_ctx`` is one slot's context
  (the whole ``-c`` divided among ``total_slots``; tools/server/server-context.cpp, ``get_res_props``);
- vLLM (and servers copying its API): ``GET /v1/models`` → ``data[].max_model_len``
  (vllm/entrypoints/openai/protocol.py, ``ModelCard``).

A target answering neither is simply of unknown context: nothing fails for it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

CALL_TIMEOUT_S = 5.0
MAX_BODY = 1024 * 1024


async def context_tokens(
    session: aiohttp.ClientSession, base_url: str, headers: dict[str, str], model: str | None
) -> int | None:
    """One slot's context in tokens as the target reports it, or None when it reports none."""
    props = await _get_json(session, base_url + "/props", headers)
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        if type(n_ctx) is int and n_ctx > 0:
            return n_ctx
    models = await _get_json(session, base_url + "/v1/models", headers)
    cards = models.get("data") if isinstance(models, dict) else None
    if not isinstance(cards, list):
        return None
    lengths = {card.get("id"): card.get("max_model_len") for card in cards if isinstance(card, dict)}
    # the model asked for, or the one model served; a gateway's list of several says nothing of this one's
    chosen = lengths.get(model) if model in lengths else (next(iter(lengths.values())) if len(lengths) == 1 else None)
    return chosen if type(chosen) is int and chosen > 0 else None


def refused_for_context(status: int, raw: bytes) -> tuple[int, int] | None:
    """``(prompt tokens, context)`` from llama.cpp's refusal of a prompt over a slot's context (HTTP 400,
    ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``; server-task.cpp,
    ``server_task_result_error::to_json``): the refusal still says how the server counted the prompt."""
    if status != 400:
        return None
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    error: Any = document.get("error", document) if isinstance(document, dict) else None
    if not isinstance(error, dict) or error.get("type") != "exceed_context_size_error":
        return None
    counted, n_ctx = error.get("n_prompt_tokens"), error.get("n_ctx")
    if type(counted) is int and type(n_ctx) is int and counted > 0 and n_ctx > 0:
        return counted, n_ctx
    return None


async def _get_json(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> object:
    try:
        async with asyncio.timeout(CALL_TIMEOUT_S):
            async with session.get(url, headers=headers, allow_redirects=False) as response:
                raw = await response.content.read(MAX_BODY)
                if response.status != 200:
                    return None
    except (TimeoutError, aiohttp.ClientError):
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None
