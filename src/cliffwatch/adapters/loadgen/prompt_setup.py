"""Which prompt source a run's requests use, decided before the run from its scenario and where it goes.

- ``api: http``: no prompts;
- the built-in target: words (it counts one token a word);
- ``request.tokenizer: PATH``: token-exact prompts under that tokenizer (``token_prompts``), read only below
  ``CLIFFWATCH_DATA_DIRS`` (a scenario is written by whoever may submit one: the path must not reach any
  file the process can read);
- any other OpenAI target: calibrated by the preflight's probes (``calibration``).
"""

from __future__ import annotations

from pathlib import Path

from cliffwatch.adapters.loadgen.token_prompts import (
    TokenCounter,
    TokenExactPrompts,
    TokenizerUnavailable,
    load_counter,
)
from cliffwatch.adapters.workload.bounds import Watchdog
from cliffwatch.adapters.workload.data_files import DataFileRefused, allowed_path
from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import SERVER, Api
from cliffwatch.domain.traffic.plan import iter_plan
from cliffwatch.domain.workload.prepared import DEFAULT_LIMITS, PreparationLimits, PromptPlan
from cliffwatch.domain.workload.prompt_sizing import PromptSizing, PromptSource

TOKENIZER_FIELD = "target.request.tokenizer"


def prompt_plan(
    scenario: Scenario,
    *,
    builtin: bool,
    data_dirs: tuple[Path, ...] | None,
    limits: PreparationLimits = DEFAULT_LIMITS,
    watchdog: Watchdog | None = None,
) -> tuple[PromptPlan, TokenCounter | None]:
    """How the run's prompts are made, and the tokenizer's counter when the scenario names one (a dataset's
    lengths are counted with it); raises ``ScenarioInvalid`` naming the field when the tokenizer cannot be used."""
    target = scenario.target
    if target.api is Api.HTTP:
        return PromptPlan(), None
    path = target.request.tokenizer
    if path == SERVER:
        return PromptPlan(server_lengths=tuple(server_lengths(scenario))), None
    if path is not None:
        prompts = _tokenizer_prompts(path, chat=target.api is Api.OPENAI_CHAT, data_dirs=data_dirs,
                                     source=scenario.name, limits=limits, watchdog=watchdog)  # fmt: skip
        template = "with its chat template" if prompts.counter.applies_template else "without a chat template"
        if target.api is Api.OPENAI_COMPLETIONS:
            template = "with its special tokens"
        detail = f"{path} ({template}; {len(prompts.filler_words)} one-token filler words)"
        return PromptPlan(
            maker=prompts, sizing=PromptSizing(source=PromptSource.TOKENIZER, detail=detail)
        ), prompts.counter
    if builtin:
        words = PromptSizing(source=PromptSource.WORDS, detail="the built-in target counts one token a word")
        return PromptPlan(sizing=words), None
    return PromptPlan(calibrate=True), None


def server_lengths(scenario: Scenario) -> list[int]:
    """The distinct prompt lengths the plan draws for prompts cliffwatch builds (not a dataset's own)."""
    return sorted({r.prompt_tokens for r in iter_plan(scenario) if r.entry < 0})


def _tokenizer_prompts(path: str, *, chat: bool, data_dirs: tuple[Path, ...] | None, source: str,
                       limits: PreparationLimits, watchdog: Watchdog | None) -> TokenExactPrompts:  # fmt: skip
    def refuse(reason: str) -> ScenarioInvalid:
        return ScenarioInvalid([Problem(path=TOKENIZER_FIELD, message=reason)], source=source)

    try:
        resolved = allowed_path(path, data_dirs=data_dirs)
    except DataFileRefused as exc:
        raise refuse(exc.reason) from exc
    try:
        counter = load_counter(resolved, chat=chat, data_dirs=data_dirs, limits=limits, watchdog=watchdog)
        return TokenExactPrompts(counter, path=path)
    except TokenizerUnavailable as exc:
        raise refuse(exc.reason) from exc
