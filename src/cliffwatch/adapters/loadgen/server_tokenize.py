"""``request.tokenizer: server``: prompt lengths fitted with the target's own ``/tokenize``, before the run.

Two dialects are known. vLLM (and servers copying its API): ``POST /tokenize`` with ``{"model", "prompt"}``,
or for chat ``{"model", "messages", "add_generation_prompt": true}`` so the chat template is counted, answered
``{"count", "max_model_len", "tokens"}`` (``TokenizeCompletionRequest`` / ``TokenizeChatRequest`` /
``TokenizeResponse`` in vllm/entrypoints/openai/protocol.py). llama.cpp's server: ``POST /tokenize`` with
``{"content", "add_special": true}``, answered ``{"tokens": [...]}``; it applies no chat template, which the
sizing's detail then says. The first probe decides which one the target speaks.

Per distinct prompt length the plan draws (up to ``MAX_FITTED_LENGTHS``), the word count whose prompt the
server counts as that length is searched from a linear first guess, one ``/tokenize`` call a step, and kept;
lengths beyond the bound, or that no word count hits exactly (a word of several tokens straddles it), take
the nearest count below. ``/tokenize`` generates nothing, so none of this spends the attempt cap.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from cliffwatch.adapters.loadgen.prompts import WORDS
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import Api
from cliffwatch.domain.workload.prompt_sizing import Calibration, PromptSizing, PromptSource, fit_calibration

MAX_FITTED_LENGTHS = 4096
MAX_STEPS = 12  # per length: from a good first guess the search takes one to three
CALL_TIMEOUT_S = 10.0
PROBE_ID = 1000  # the tag the fit counts: ``req-1000``, as long as most requests' tags


class TokenizeUnavailable(Exception):
    """The target has no usable /tokenize; ``reason`` says what it answered."""


@dataclass(frozen=True, kw_only=True)
class ServerFit:
    words: dict[int, int]  # prompt tokens → words
    line: Calibration
    calls: int
    dialect: str


class ServerFittedPrompts:
    """Word prompts whose word counts the server's /tokenize fitted, length by length."""

    def __init__(self, fit: ServerFit) -> None:
        self.fit = fit

    def prepare(self, tokens: int) -> None:
        WORDS.prepare(self._words(tokens))

    def fragments(self, request_id: int, tokens: int) -> tuple[bytes | memoryview, ...]:
        return WORDS.fragments(request_id, self._words(tokens))

    def _words(self, tokens: int) -> int:
        known = self.fit.words.get(tokens)
        return known if known is not None else self.fit.line.words_for(tokens)


class _Tokenize:
    def __init__(self, session: aiohttp.ClientSession, url: str, headers: dict[str, str], scenario: Scenario) -> None:
        self.session, self.url, self.headers = session, url, headers
        self.model = scenario.target.request.model
        self.chat = scenario.target.api is Api.OPENAI_CHAT
        self.dialect: str | None = None
        self.calls = 0

    async def count(self, words: int) -> int:
        text = b"".join(WORDS.fragments(PROBE_ID, words)).decode("ascii")
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
        answer = await self._post({"content": text, "add_special": True})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise TokenizeUnavailable("its /tokenize answers neither vLLM's count nor llama.cpp's tokens")
        self.dialect = "llama.cpp"
        return len(tokens)

    async def _post(self, body: dict[str, object]) -> object:
        self.calls += 1
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                async with self.session.post(
                    self.url, data=json.dumps(body), headers=self.headers, allow_redirects=False
                ) as response:
                    raw = await response.content.read(4 * 1024 * 1024)
                    if response.status != 200:
                        return None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TokenizeUnavailable(f"/tokenize failed: {type(exc).__name__}") from exc
        try:
            return json.loads(raw)
        except ValueError:
            return None


async def fit_lengths(
    session: aiohttp.ClientSession, base_url: str, headers: dict[str, str], scenario: Scenario, lengths: Sequence[int]
) -> tuple[PromptSizing, ServerFit | None]:
    """The sizing for the plan's ``lengths``: ``server`` with the fit, or ``words`` saying why not."""
    tokenize = _Tokenize(session, base_url + "/tokenize", headers, scenario)
    try:
        samples = [(words, await tokenize.count(words)) for words in (8, 64, 512)]
        line = fit_calibration(samples)
        if line is None:
            raise TokenizeUnavailable(f"its counts did not grow with the prompt: {samples}")
        fitted: dict[int, int] = {}
        for tokens in sorted(set(lengths))[:MAX_FITTED_LENGTHS]:
            fitted[tokens] = await _search(tokenize, tokens, line)
    except TokenizeUnavailable as exc:
        detail = f"tokenizer: server could not be used, prompts are sized in words: {exc}"
        return PromptSizing(source=PromptSource.WORDS, detail=detail), None
    template = "" if tokenize.dialect == "vllm" or not tokenize.chat else ", without the chat template"
    detail = (
        f"{tokenize.dialect} /tokenize: {len(fitted):,} prompt lengths fitted with {tokenize.calls:,} calls{template}"
    )
    fit = ServerFit(words=fitted, line=line, calls=tokenize.calls, dialect=tokenize.dialect or "")
    return PromptSizing(source=PromptSource.SERVER, calibration=line, detail=detail), fit


async def _search(tokenize: _Tokenize, tokens: int, line: Calibration) -> int:
    """The largest word count the server counts as at most ``tokens`` (exactly ``tokens`` when one does)."""
    words = line.words_for(tokens)
    counted = await tokenize.count(words)
    for _ in range(MAX_STEPS):
        if counted == tokens:
            return words
        if counted > tokens:
            if words == 1:
                return 1
            words -= 1
            counted = await tokenize.count(words)
            if counted <= tokens:
                return words
        else:
            following = await tokenize.count(words + 1)
            if following > tokens:
                return words
            words, counted = words + 1, following
    return words
