"""Overrides a scenario is run with: the command line's ``--target``, ``--seed``, ``--threshold`` and ``--workers``,
and the API's and schedules' same fields, applied outside the domain and validated like the file's own fields.
A problem names the flag (the API's problem mapping names its body field instead: ``adapters.api.problems``)."""

from __future__ import annotations

from dataclasses import replace

from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.client_spec import AUTO_WORKERS, MAX_WORKERS
from cliffwatch.domain.scenario.scenario import MAX_SEED, Scenario
from cliffwatch.domain.scenario.target_model import TargetModel
from cliffwatch.domain.scenario.target_spec import (
    BUILTIN,
    BUILTIN_SPEAKS_OPENAI,
    URL_AND_AUTHORIZATION,
    Api,
    check_url,
    credentials_clash,
)
from cliffwatch.domain.validation import Problems, check_number, short_repr


def with_overrides(
    scenario: Scenario,
    *,
    target_url: str | None = None,
    seed: int | None = None,
    threshold: float | None = None,
    workers: str | None = None,
) -> Scenario:
    """The scenario with command-line overrides applied, each validated like the file's own fields
    (``workers``: a count or ``auto``, as ``--workers`` gives it)."""
    problems = Problems()
    target = scenario.target
    if target_url is not None:
        url = check_url(target_url, "--target", problems)
        if url == BUILTIN and target.api is Api.HTTP:
            problems.add("--target", BUILTIN_SPEAKS_OPENAI)
        elif url is not None and credentials_clash(url, target.request.headers):
            problems.add("--target", URL_AND_AUTHORIZATION)
        elif url is not None:
            # a real target has no simulator settings; the simulator needs them (the file's, or the defaults)
            builtin = (target.builtin or TargetModel()) if url == BUILTIN else None
            target = replace(target, url=url, builtin=builtin)
    new_seed = (
        scenario.seed if seed is None else check_number(seed, "--seed", problems, ge=0, le=MAX_SEED, integer=True)
    )
    new_threshold = None if threshold is None else check_number(threshold, "--threshold", problems, ge=0, le=100)
    client = scenario.client
    if workers is not None:
        count: int | None = AUTO_WORKERS
        if workers != "auto":
            try:
                count = check_number(int(workers), "--workers", problems, ge=1, le=MAX_WORKERS, integer=True)
            except ValueError:
                problems.add("--workers", f"must be a whole number of processes or auto, got {short_repr(workers)}")
        client = replace(client, workers=count)
    if problems:
        raise ScenarioInvalid(problems.items)
    return replace(
        scenario,
        target=target,
        client=client,
        seed=new_seed,
        score=scenario.score if new_threshold is None else replace(scenario.score, threshold=new_threshold),
    )
