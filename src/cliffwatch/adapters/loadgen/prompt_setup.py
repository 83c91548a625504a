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
from typing import Any

from cliffwatch.adapters.loadgen.token_prompts import (
    TokenCounter,
    TokenExactPrompts,
    TokenizerUnavailable,
    load_counter,
)
from cliffwatch.adapters.workload.data_files import DataFileRefused, allowed_path
from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import Api
from cliffwatch.domain.traffic.plan import iter_plan
from cliffwatch.domain.workload.prompt_sizing import SERVER, PromptSizing, PromptSource

TOKENIZER_FIELD = "target.request.tokenizer"


def prompt_options(scenario: Scenario, *, builtin: bool, data_dirs: tuple[Path, ...] | None) -> dict[str, Any]:
    """``HttpExecutor`` keyword arguments for the run's prompts; raises ``ScenarioInvalid`` naming the field
    when the tokenizer cannot be used."""
    target = scenario.target
    if target.api is Api.HTTP:
        return {}
    path = target.request.tokenizer
    if path == SERVER:
        return {"server_lengths": server_lengths(scenario)}
    if path is not None:
        prompts = _tokenizer_prompts(
            path, chat=target.api is Api.OPENAI_CHAT, data_dirs=data_dirs, source=scenario.name
        )
        template = "with its chat template" if prompts.counter.applies_template else "without a chat template"
        if target.api is Api.OPENAI_COMPLETIONS:
            template = "with its special tokens"
        detail = f"{path} ({template}; {len(prompts.filler_words)} one-token filler words)"
        return {"prompts": prompts, "sizing": PromptSizing(source=PromptSource.TOKENIZER, detail=detail)}
    if builtin:
        return {"sizing": PromptSizing(source=PromptSource.WORDS, detail="the built-in target counts one token a word")}
    return {"calibrate": True}


def server_lengths(scenario: Scenario) -> list[int]:
    """The distinct prompt lengths the plan draws for prompts cliffwatch builds (not a dataset's own)."""
    return sorted({r.prompt_tokens for r in iter_plan(scenario) if r.entry < 0})


def tokenizer_problem(scenario: Scenario, *, data_dirs: tuple[Path, ...] | None) -> Problem | None:
    """Why the scenario's tokenizer cannot be used here (for ``cliffwatch validate``), or None."""
    if scenario.target.request.tokenizer == SERVER:
        return None  # the target's /tokenize is asked when the run starts
    try:
        prompt_options(scenario, builtin=False, data_dirs=data_dirs)
    except ScenarioInvalid as exc:
        return exc.problems[0]
    return None


def _tokenizer_prompts(path: str, *, chat: bool, data_dirs: tuple[Path, ...] | None, source: str) -> TokenExactPrompts:
    def refuse(reason: str) -> ScenarioInvalid:
        return ScenarioInvalid([Problem(path=TOKENIZER_FIELD, message=reason)], source=source)

    try:
        resolved = allowed_path(path, data_dirs=data_dirs)
    except DataFileRefused as exc:
        raise refuse(exc.reason) from exc
    try:
        return TokenExactPrompts(load_counter(resolved, chat=chat, data_dirs=data_dirs), path=path)
    except TokenizerUnavailable as exc:
        raise refuse(exc.reason) from exc


def counter_of(options: dict[str, Any]) -> TokenCounter | None:
    """The tokenizer's counter of ``prompt_options``' answer, when the scenario has one."""
    prompts = options.get("prompts")
    return prompts.counter if isinstance(prompts, TokenExactPrompts) else None
