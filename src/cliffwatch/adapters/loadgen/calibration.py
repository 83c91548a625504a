"""Calibration probes: what the target counts as the tokens of prompts of known word counts.

A few non-streamed requests (``max_tokens: 1``) with prompts of ``PROBE_WORDS`` words each read the
server's ``usage.prompt_tokens``; ``domain.workload.prompt_sizing.fit_calibration`` fits ``tokens ≈ a + b × words``
over them (the intercept is the chat template's own tokens). Each probe takes a token of the run's attempt
cap. A target that answers a probe with an error or without usage cannot be calibrated: prompts stay in
words, and the sizing says why.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from cliffwatch.adapters.loadgen.prompts import WORDS
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import Api
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.domain.workload.prompt_sizing import PROBE_WORDS, PromptSizing, PromptSource, fit_calibration

PROBE_TIMEOUT_S = 30.0
MAX_PROBE_BODY = 1024 * 1024


async def calibrate(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    scenario: Scenario,
    *,
    cap: TokenBucket | None,
    now_ns: int,
) -> PromptSizing:
    """The sizing the probes support: ``calibrated`` with the fit, or ``words`` with the reason."""
    samples: list[tuple[int, int]] = []
    for number, words in enumerate(PROBE_WORDS):
        if cap is not None and not cap.try_take(now_ns):
            return _words("the attempt cap left no room for the calibration probes", sent=number)
        counted = await _probe(session, url, headers, scenario, request_id=-1 - number, words=words)
        if isinstance(counted, str):
            return _words(counted, sent=number + 1)
        samples.append((words, counted))
    fit = fit_calibration(samples)
    if fit is None:
        return _words(f"the server's prompt counts did not grow with the prompt: {samples}", sent=len(samples))
    return PromptSizing(source=PromptSource.CALIBRATED, calibration=fit, probes=len(samples))


async def _probe(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    scenario: Scenario,
    *,
    request_id: int,
    words: int,
) -> int | str:
    """The server's usage.prompt_tokens for a prompt of ``words`` words, or why there is none."""
    template = scenario.target.request
    prompt = b"".join(WORDS.fragments(abs(request_id), words)).decode("ascii")
    body: dict[str, object] = {"model": template.model, "max_tokens": 1, "stream": False}
    if scenario.target.api is Api.OPENAI_CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if template.extra_body:
        body.update({k: v for k, v in template.extra_body.items() if k not in ("max_tokens", "stream")})
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            async with session.post(url, data=json.dumps(body), headers=headers, allow_redirects=False) as response:
                raw = await response.content.read(MAX_PROBE_BODY)
                if response.status != 200:
                    return f"a calibration probe was answered HTTP {response.status}"
    except (TimeoutError, aiohttp.ClientError) as exc:
        return f"a calibration probe failed: {type(exc).__name__}"
    try:
        usage = json.loads(raw).get("usage")
        counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    except (ValueError, AttributeError):
        counted = None
    if type(counted) is not int or counted <= 0:
        return "the target's answers carry no usage.prompt_tokens to calibrate from"
    return counted


def _words(reason: str, *, sent: int) -> PromptSizing:
    detail = f"not calibrated, prompts are sized in words: {reason}"
    return PromptSizing(source=PromptSource.WORDS, detail=detail, probes=sent)
