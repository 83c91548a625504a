"""``request.tokenizer: server``: prompt lengths fitted with the target's own ``/tokenize``, before the run.

Two dialects are known. vLLM (and servers copying its API): ``POST /tokenize`` with ``{"model", "prompt"}``,
or for chat ``{"model", "messages", "add_generation_prompt": true}`` so the chat template is counted, answered
``{"count", "max_model_len", "tokens"}`` (``TokenizeCompletionRequest`` / ``TokenizeChatRequest`` /
``TokenizeResponse`` in vllm/entrypoints/openai/protocol.py). llama.cpp's ``llama-server``: ``POST /tokenize``
with ``{"content", "add_special", "parse_special"}``, answered ``{"tokens": [...]}``, which applies no chat
template; so for chat the prompt is first rendered by ``POST /apply-template`` (``{"messages"}`` →
``{"prompt"}``, the very template and parsing its chat completions use) and the rendering is tokenized with
special tokens added and parsed, as the server tokenizes a completion's prompt
(tools/server/server-context.cpp: ``post_apply_template``, ``post_tokenize``, ``tokenize_input_prompts(...,
add_special=true, parse_special=true)``). A llama.cpp without ``/apply-template`` is counted without the
template, which the sizing's detail then says, and the answers' own counts correct the offset during the run
(``domain.workload.sizing_loop``). The first probe decides which dialect the target speaks.

Per distinct prompt length the plan draws (up to ``MAX_FITTED_LENGTHS``), the largest word count whose prompt
the server counts as at most that length is searched from a linear first guess, one count a step; when a word
of several tokens straddles the length, the gap is filled with one-token pads (`` a``, checked to add one
token each under this tokenizer), so the length is hit exactly. Lengths beyond the bound follow the fitted
line. The prompts carry a fixed-width tag (``prompts.SIZED_WORDS``) so that every request's tag is as many
tokens as the probes' were. ``/tokenize`` generates nothing, so none of this spends the attempt cap.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from cliffwatch.adapters.loadgen.prompts import SIZED_WORDS
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import Api
from cliffwatch.domain.workload.prompt_sizing import Calibration, PromptSizing, PromptSource, fit_calibration
from cliffwatch.domain.workload.sizing_loop import SizingLoop

MAX_FITTED_LENGTHS = 4096
MAX_STEPS = 12  # per length: from a good first guess the search takes one to three
CALL_TIMEOUT_S = 10.0
PROBE_ID = 1000  # the tag the fit counts, as wide as every request's (``SIZED_WORDS``)
PAD = b" a"  # a one-token filler under most tokenizers; checked before it is used
MAX_PADS = 8


class TokenizeUnavailable(Exception):
    """The target has no usable /tokenize; ``reason`` says what it answered."""


@dataclass(frozen=True, kw_only=True)
class ServerFit:
    words: dict[int, tuple[int, int, int]]  # prompt tokens → (words, pads, the server's count of them)
    line: Calibration
    calls: int
    dialect: str


class ServerFittedPrompts:
    """Word prompts whose word counts the server's /tokenize fitted, length by length, shifted by the answers'
    own counts when they differ (``SizingLoop``)."""

    def __init__(self, fit: ServerFit) -> None:
        self.fit = fit
        self.loop = SizingLoop(fit.line, fit.words)

    def prepare(self, tokens: int) -> None:
        SIZED_WORDS.prepare(self.loop.words_for(tokens))

    def fragments(self, request_id: int, tokens: int) -> tuple[bytes | memoryview, ...]:
        words, pads = self.loop.aim(request_id, tokens)
        made = SIZED_WORDS.fragments(request_id, words)
        return (*made, PAD * pads) if pads else made

    def observe(self, request_id: int, counted: int) -> None:
        self.loop.observe(request_id, counted)


class _Tokenize:
    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, headers: dict[str, str], scenario: Scenario
    ) -> None:
        self.session, self.base_url, self.headers = session, base_url, headers
        self.model = scenario.target.request.model
        self.chat = scenario.target.api is Api.OPENAI_CHAT
        self.dialect: str | None = None
        self.calls = 0
        self.templated: bool | None = None  # llama.cpp: whether /apply-template renders the chat template

    async def count(self, words: int, pads: int = 0) -> int:
        text = (b"".join(SIZED_WORDS.fragments(PROBE_ID, words)) + PAD * pads).decode("ascii")
        if self.dialect in (None, "vllm"):
            body: dict[str, object] = {"model": self.model}
            if self.chat:
                body.update(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
            else:
                body["prompt"] = text
            answer = await self._post(body)
            if isinstance(answer, dict) and type(answer.get("count")) is int:
                self.dialect = "vllm"
                return int(answer["count"])
            if self.dialect == "vllm":
                raise TokenizeUnavailable("its /tokenize stopped answering with a count")
        content = await self._rendered(text) if self.chat else text
        answer = await self._post({"content": content, "add_special": True, "parse_special": True})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise TokenizeUnavailable("its /tokenize answers neither vLLM's count nor llama.cpp's tokens")
        self.dialect = "llama.cpp"
        return len(tokens)

    async def _rendered(self, text: str) -> str:
        """The chat prompt as llama.cpp's template renders it, or the text alone when it has no /apply-template."""
        if self.templated is False:
            return text
        body: dict[str, object] = {"messages": [{"role": "user", "content": text}]}
        answer = await self._post(body, path="/apply-template")
        prompt = answer.get("prompt") if isinstance(answer, dict) else None
        if isinstance(prompt, str):
            self.templated = True
            return prompt
        if self.templated:
            raise TokenizeUnavailable("its /apply-template stopped answering with a prompt")
        self.templated = False
        return text

    async def _post(self, body: dict[str, object], *, path: str = "/tokenize") -> object:
        self.calls += 1
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                async with self.session.post(
                    self.base_url + path, data=json.dumps(body), headers=self.headers, allow_redirects=False
                ) as response:
                    raw = await response.content.read(4 * 1024 * 1024)
                    if response.status != 200:
                        return None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TokenizeUnavailable(f"{path} failed: {type(exc).__name__}") from exc
        try:
            return json.loads(raw)
        except ValueError:
            return None


async def fit_lengths(
    session: aiohttp.ClientSession,
    base_url: str,
    headers: dict[str, str],
    scenario: Scenario,
    lengths: Sequence[int],
    *,
    context: int | None = None,
) -> tuple[PromptSizing, ServerFit | None]:
    """The sizing for the plan's ``lengths``: ``server`` with the fit, or ``words`` saying why not."""
    tokenize = _Tokenize(session, base_url, headers, scenario)
    try:
        samples = [(words, await tokenize.count(words)) for words in (8, 64, 512)]
        line = fit_calibration(samples)
        if line is None:
            raise TokenizeUnavailable(f"its counts did not grow with the prompt: {samples}")
        base = await tokenize.count(64)
        pads_add_one = all([await tokenize.count(64, k) == base + k for k in (1, 2)])
        fitted: dict[int, tuple[int, int, int]] = {}
        for tokens in sorted(set(lengths))[:MAX_FITTED_LENGTHS]:
            words, counted = await _search(tokenize, tokens, line)
            gap = tokens - counted
            if pads_add_one and 0 < gap <= MAX_PADS and await tokenize.count(words, gap) == tokens:
                fitted[tokens] = (words, gap, tokens)
            else:
                fitted[tokens] = (words, 0, counted)
    except TokenizeUnavailable as exc:
        detail = f"tokenizer: server could not be used, prompts are sized in words: {exc}"
        return PromptSizing(source=PromptSource.WORDS, detail=detail, failure=f"tokenizer: server failed: {exc}",
                            context_tokens=context, closed_loop=True), None  # fmt: skip
    if tokenize.dialect == "vllm" or not tokenize.chat:
        template = ""
    elif tokenize.templated:
        template = ", the chat template rendered by /apply-template"
    else:
        template = ", without the chat template (no /apply-template): the answers correct the offset"
    exact = sum(1 for tokens, (_, _, counted) in fitted.items() if counted == tokens)
    detail = (f"{tokenize.dialect} /tokenize: {len(fitted):,} prompt lengths fitted ({exact:,} exactly) with "
              f"{tokenize.calls:,} calls{template}")  # fmt: skip
    if not pads_add_one:
        detail += f"; {PAD.decode()!r} is not one token here, so lengths a word straddles are not padded"
    fit = ServerFit(words=fitted, line=line, calls=tokenize.calls, dialect=tokenize.dialect or "")
    sizing = PromptSizing(source=PromptSource.SERVER, calibration=line, detail=detail, context_tokens=context,
                          closed_loop=True)  # fmt: skip
    return sizing, fit


async def _search(tokenize: _Tokenize, tokens: int, line: Calibration) -> tuple[int, int]:
    """The largest word count the server counts as at most ``tokens`` (exactly ``tokens`` when one does), and
    its count."""
    words = line.words_for(tokens)
    counted = await tokenize.count(words)
    for _ in range(MAX_STEPS):
        if counted == tokens:
            return words, counted
        if counted > tokens:
            if words == 1:
                return 1, counted
            words -= 1
            counted = await tokenize.count(words)
            if counted <= tokens:
                return words, counted
        else:
            following = await tokenize.count(words + 1)
            if following > tokens:
                return words, counted
            words, counted = words + 1, following
    return words, counted
