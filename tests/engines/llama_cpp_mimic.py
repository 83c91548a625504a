"""A loopback server with llama.cpp's prompt-sizing surface, for where the real ``llama-server`` is not built.

It mimics ``llama-server`` as the llama-cpp-python 0.3.36 source distribution vendors it
(vendor/llama.cpp/tools/server/server-context.cpp and server-common.cpp; checked against the real server in
tests/integration/engines/test_llama_cpp_prompt_sizing.py):

- ``GET /props``: ``default_generation_settings.n_ctx`` (one slot's context), ``total_slots``,
  ``chat_template`` (``get_res_props``);
- ``GET /v1/models``: llama.cpp's list, whose ``meta.n_ctx_train`` is not a slot's context (``get_res_models``);
- ``POST /apply-template``: ``{"messages"}`` → ``{"prompt"}``, the template rendered with the generation
  prompt and without the BOS text when the vocabulary adds BOS itself (common/chat.cpp);
- ``POST /tokenize``: ``{"content", "add_special" (false), "parse_special" (true)}`` → ``{"tokens"}``; a
  body without ``content`` gets ``{"tokens": []}``;
- chat and text completions, streamed or not, whose ``usage.prompt_tokens`` is the rendered prompt
  tokenized with special tokens added and parsed (``tokenize_input_prompts(..., true, true)``), and a prompt
  of a slot's context or more refused HTTP 400 ``exceed_context_size_error`` with ``n_prompt_tokens`` and
  ``n_ctx`` (``send_error``; ``server_task_result_error::to_json``);
- one slot: completions are served one at a time.

The tokenizer is a Hugging Face one trained by tests/tokenizer_kit.py (a small vocabulary that splits most
words into several tokens, a harder case than the real server's Phi-3 vocabulary), with BOS added as
llama.cpp adds it for ``add_special``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

BOS = "<s>"


@dataclass
class LlamaCppMimic:
    """The server's state: its tokenizer, template, one slot's context, and every prompt count it answered."""

    tokenizer: Tokenizer
    chat_template: str
    n_ctx: int = 1024
    counted: list[int] = field(default_factory=list)  # usage.prompt_tokens of every completion answered
    refused: int = 0  # completions refused as over the context
    _slot: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template = environment.from_string(self.chat_template)

    def render(self, messages: list[dict[str, Any]]) -> str:
        text = self._template.render(messages=messages, add_generation_prompt=True, bos_token=BOS)
        return text.removeprefix(BOS)  # the vocabulary adds BOS itself: the template's is dropped

    def tokens(self, text: str, *, add_special: bool) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special).ids)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            if request.path == "/props":
                settings = {"n_ctx": self.n_ctx, "params": {}}
                return web.json_response({"default_generation_settings": settings, "total_slots": 1,
                                          "chat_template": self.chat_template})  # fmt: skip
            if request.path == "/v1/models":
                meta = {"n_ctx_train": 4096, "n_vocab": self.tokenizer.get_vocab_size()}
                return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model", "meta": meta}]})
            return web.Response(text="llama.cpp mimic")
        body = json.loads(await request.read())
        if request.path == "/apply-template":
            return web.json_response({"prompt": self.render(body["messages"])})
        if request.path == "/tokenize":
            if "content" not in body:
                return web.json_response({"tokens": []})
            return web.json_response(
                {"tokens": self.tokens(body["content"], add_special=bool(body.get("add_special")))}
            )
        if request.path in ("/v1/chat/completions", "/v1/completions"):
            return await self._complete(request, body)
        return web.json_response({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}},
                                 status=404)  # fmt: skip

    async def _complete(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        prompt = self.render(body["messages"]) if "messages" in body else body["prompt"]
        n_prompt = len(self.tokens(prompt, add_special=True))
        if n_prompt >= self.n_ctx:
            self.refused += 1
            message = (f"request ({n_prompt} tokens) exceeds the available context size ({self.n_ctx} tokens), "
                       "try increasing it")  # fmt: skip
            error = {"code": 400, "message": message, "type": "exceed_context_size_error",
                     "n_prompt_tokens": n_prompt, "n_ctx": self.n_ctx}  # fmt: skip
            return web.json_response({"error": error}, status=400)
        async with self._slot:
            self.counted.append(n_prompt)
            completion = int(body.get("max_tokens") or 16)
            usage = {"completion_tokens": completion, "prompt_tokens": n_prompt,
                     "total_tokens": n_prompt + completion}  # fmt: skip
            chat = "messages" in body
            if not body.get("stream"):
                choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
                choice.update({"message": {"role": "assistant", "content": " x" * completion}} if chat
                              else {"text": " x" * completion})  # fmt: skip
                return web.json_response({"object": "chat.completion" if chat else "text_completion",
                                          "choices": [choice], "usage": usage})  # fmt: skip
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for index in range(completion):
                delta = {"delta": {"content": " x"}} if chat else {"text": " x"}
                finish = "length" if index == completion - 1 else None
                chunk = {"choices": [{"index": 0, "finish_reason": finish, **delta}],
                         "object": "chat.completion.chunk" if chat else "text_completion"}  # fmt: skip
                await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if (body.get("stream_options") or {}).get("include_usage"):
                await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
