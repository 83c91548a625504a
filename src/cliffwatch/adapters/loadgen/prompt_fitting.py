"""The preflight's prompt sizing for a real OpenAI target: with its ``/tokenize``, or by calibration probes.

Both start from one slot's context as the target reports it (``engine_surface``): the probes are sized within
it, and a plan whose largest prompt with its output does not fit is said before the load (the server will
refuse those requests whatever the sizing does). Whatever the preflight finds, the prompts it makes are
corrected by the answers' own counts as the run goes (``domain.workload.sizing_loop``); when it found nothing
(the target answered too few probes, or its ``/tokenize`` could not be used) they start at one word a token
and the sizing's ``failure`` says why, so the run reports that it cannot vouch for them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import aiohttp

from cliffwatch.adapters.loadgen.calibration import calibrate
from cliffwatch.adapters.loadgen.engine_surface import context_tokens
from cliffwatch.adapters.loadgen.prompts import SIZED_WORDS
from cliffwatch.adapters.loadgen.server_tokenize import ServerFittedPrompts, fit_lengths
from cliffwatch.adapters.loadgen.token_prompts import CalibratedPrompts
from cliffwatch.domain.scenario.distributions import Distribution
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.domain.workload.prepared import PromptMaker
from cliffwatch.domain.workload.prompt_sizing import Calibration, PromptSizing

ONE_WORD_A_TOKEN = Calibration(intercept=0.0, slope=1.0, samples=(), max_error=0.0)


async def fit_prompts(
    session: aiohttp.ClientSession,
    base_url: str,
    url: str,
    headers: dict[str, str],
    scenario: Scenario,
    *,
    server_lengths: Sequence[int] | None,
    cap: TokenBucket | None,
) -> tuple[PromptSizing, PromptMaker]:
    """The sizing and the prompts: fitted with the server's ``/tokenize`` when ``server_lengths`` are given
    (``request.tokenizer: server``), calibrated by probes otherwise."""
    context = await context_tokens(session, base_url, headers, scenario.target.request.model)
    maker: PromptMaker
    if server_lengths is not None:
        sizing, fit = await fit_lengths(session, base_url, headers, scenario, server_lengths, context=context)
        maker = ServerFittedPrompts(fit) if fit is not None else CalibratedPrompts(ONE_WORD_A_TOKEN, SIZED_WORDS)
    else:
        sizing = await calibrate(session, url, headers, scenario, cap=cap, now_ns=time.perf_counter_ns(),
                                 context=context)  # fmt: skip
        maker = CalibratedPrompts(sizing.calibration or ONE_WORD_A_TOKEN, SIZED_WORDS)
    return _with_context_note(sizing, scenario), maker


def _with_context_note(sizing: PromptSizing, scenario: Scenario) -> PromptSizing:
    """The sizing, its detail saying when the plan's largest prompt and output cannot fit one slot's context."""
    context = sizing.context_tokens
    largest = max((_largest(c.request.prompt_tokens) + _largest(c.request.max_tokens)
                   for c in scenario.traffic_classes), default=0)  # fmt: skip
    if context is None or largest <= context:
        return sizing
    note = (f"the plan's largest prompt with its output ({largest:,} tokens) does not fit the target's "
            f"{context:,}-token context: the server refuses such requests or cuts their output short")  # fmt: skip
    return dataclasses.replace(sizing, detail=f"{sizing.detail}; {note}" if sizing.detail else note)


def _largest(lengths: Distribution | None) -> int:
    return 0 if lengths is None else lengths.largest
