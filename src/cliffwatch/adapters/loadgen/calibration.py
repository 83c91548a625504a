"""Calibration probes: what the target counts as the tokens of prompts of known word counts.

A few non-streamed requests (``max_tokens: 1``) with prompts of ``PROBE_WORDS`` words each read the
server's ``usage.prompt_tokens``; ``domain.workload.prompt_sizing.fit_calibration`` fits ``tokens ≈ a + b × words``
over them (the intercept is the chat template's own tokens). Each probe takes a token of the run's attempt
cap.

The probes are sized inside one slot's context when the target reports it (``engine_surface``): once two
probes have answered, a larger one the fit says would not fit is not sent. A probe that fails does not discard
the others: the fit takes every probe that answered, and needs two. A probe llama.cpp refuses as over the
context still counts, since the refusal says how many tokens the server made of it. A target that answers
too few probes cannot be calibrated: prompts stay in words, the sizing's ``failure`` says why, and the run
says it cannot vouch for its prompt sizes (``workload_mismatch``).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from cliffwatch.adapters.loadgen.engine_surface import refused_for_context
from cliffwatch.adapters.loadgen.prompts import SIZED_WORDS
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import Api
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.domain.workload.prompt_sizing import PROBE_WORDS, PromptSizing, PromptSource, fit_calibration

PROBE_TIMEOUT_S = 30.0
MAX_PROBE_BODY = 1024 * 1024
CONTEXT_MARGIN = 0.9  # a probe is sent when the fit puts it within this share of the context (the fit may be off)


async def calibrate(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    scenario: Scenario,
    *,
    cap: TokenBucket | None,
    now_ns: int,
    context: int | None = None,
) -> PromptSizing:
    """The sizing the probes support: ``calibrated`` with the fit, or ``words`` with the reason."""
    samples: list[tuple[int, int]] = []
    misses: list[str] = []
    sent = 0
    for number, words in enumerate(PROBE_WORDS):
        line = fit_calibration(samples)
        if context is not None and line is not None and line.intercept + line.slope * words > CONTEXT_MARGIN * context:
            misses.append(f"{words}-word probe not sent: about {line.intercept + line.slope * words:.0f} tokens, "
                          f"over the {context:,}-token context")  # fmt: skip
            continue
        if cap is not None and not cap.try_take(now_ns):
            misses.append("the attempt cap left no room for the calibration probes")
            break
        sent += 1
        counted = await _probe(session, url, headers, scenario, request_id=-1 - number, words=words)
        if isinstance(counted, str):
            misses.append(counted)
            continue
        count, n_ctx = counted
        context = n_ctx or context
        samples.append((words, count))
    if len(samples) < 2:
        reason = "; ".join(dict.fromkeys(misses)) or "no probe answered"
        return _failed(f"{len(samples)} of {len(PROBE_WORDS)} probes answered: {reason}", sent=sent, context=context)
    fit = fit_calibration(samples)
    if fit is None:
        return _failed(
            f"the server's prompt counts did not grow with the prompt: {samples}", sent=sent, context=context
        )
    detail = None
    if misses:
        detail = f"fitted on {len(samples)} of {len(PROBE_WORDS)} probes ({'; '.join(dict.fromkeys(misses))})"
    return PromptSizing(source=PromptSource.CALIBRATED, calibration=fit, probes=sent, detail=detail,
                        context_tokens=context, closed_loop=True)  # fmt: skip


async def _probe(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    scenario: Scenario,
    *,
    request_id: int,
    words: int,
) -> tuple[int, int | None] | str:
    """The server's count of a prompt of ``words`` words, and the context when a refusal named it; or why
    there is none."""
    template = scenario.target.request
    prompt = b"".join(SIZED_WORDS.fragments(abs(request_id), words)).decode("ascii")
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
                status = response.status
    except (TimeoutError, aiohttp.ClientError) as exc:
        return f"a {words}-word probe failed: {type(exc).__name__}"
    if status != 200:
        refused = refused_for_context(status, raw)
        if refused is not None:
            return refused[0], refused[1]
        return f"a {words}-word probe was answered HTTP {status}"
    try:
        usage = json.loads(raw).get("usage")
        counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    except (ValueError, AttributeError):
        counted = None
    if type(counted) is not int or counted <= 0:
        return "the target's answers carry no usage.prompt_tokens to calibrate from"
    return counted, None


def _failed(reason: str, *, sent: int, context: int | None) -> PromptSizing:
    detail = f"not calibrated, prompts are sized in words: {reason}"
    return PromptSizing(source=PromptSource.WORDS, detail=detail, probes=sent, failure=f"calibration failed: {reason}",
                        context_tokens=context, closed_loop=True)  # fmt: skip
