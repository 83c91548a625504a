"""The caps on what a scenario's files make it send: each trace request's and dataset entry's lengths.

A trace record or a dataset entry is the operator's file, not the scenario's fields, so the caps on a request's
prompt and output (``CLIFFWATCH_MAX_PROMPT_TOKENS``, ``CLIFFWATCH_MAX_OUTPUT_TOKENS``) are judged on them once
they are read, before any load: an entry over a cap refuses the run, naming the file's line, the field and the
cap, never the value (a refusal is shown to viewers). Where the scenario asks for it (``clamp_to_caps: true`` on
a trace arrival or a dataset), lengths are clamped instead, and counted: a trace request's lengths to the caps;
a dataset entry's recorded ``max_tokens`` to the output cap, and an entry whose prompt is over the prompt cap
left out (its text is not cut: a cut prompt is not the user's prompt).
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import TypeVar

from cliffwatch.domain.errors import Problem
from cliffwatch.domain.scenario.dataset import DatasetSizes, DatasetSpec, LoadedDataset
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.trace import LENGTH_FIELDS, TraceArrival

PROMPT_SETTING = "CLIFFWATCH_MAX_PROMPT_TOKENS"
OUTPUT_SETTING = "CLIFFWATCH_MAX_OUTPUT_TOKENS"
DATASET_FIELD = "target.request.dataset.path"
_T = TypeVar("_T")


def file_size_violations(scenario: Scenario, *, max_prompt: int, max_output: int) -> list[Problem]:
    """Why the requests ``scenario``'s loaded files make are over the caps (empty: within them, or not loaded)."""
    return trace_size_violations(scenario, max_prompt=max_prompt, max_output=max_output) + dataset_size_violations(
        scenario, max_prompt=max_prompt, max_output=max_output
    )


def trace_size_violations(scenario: Scenario, *, max_prompt: int, max_output: int) -> list[Problem]:
    """For each phase replaying a loaded trace (its window of it) and each length over its cap, the largest such
    request, named by its file's line; nothing for a trace that clamps to the caps, or before it is loaded."""
    problems = []
    for index, phase in enumerate(scenario.phases):
        arrival = phase.arrival
        if not isinstance(arrival, TraceArrival) or arrival.loaded is None or arrival.clamp_to_caps:
            continue
        loaded, replayed = arrival.loaded, arrival.bounds(phase.duration_s)
        names = LENGTH_FIELDS[arrival.format]
        for name, column, cap, setting in (
            (names[0], loaded.prompts, max_prompt, PROMPT_SETTING),
            (names[1], loaded.outputs, max_output, OUTPUT_SETTING),
        ):
            over = [i for i in replayed if column[i] > cap]
            if over:  # the largest; of equals, the first in the file
                worst = max(over, key=lambda i: (column[i], -loaded.lines[i]))
                more = f" (and {len(over) - 1:,} more requests of the replay)" if len(over) > 1 else ""
                message = (f"{arrival.path} line {loaded.lines[worst]}: {name} is over the cap of {cap:,} tokens a "
                           f"request ({setting}){more}")  # fmt: skip
                problems.append(Problem(path=f"phases[{index}].arrival.path", message=message))
    return problems


def dataset_size_violations(scenario: Scenario, *, max_prompt: int, max_output: int) -> list[Problem]:
    """For the loaded dataset (unless it clamps to the caps), the first entry whose prompt is over the prompt cap
    and the first whose recorded ``max_tokens`` (when used) is over the output cap, named by line and field."""
    spec = scenario.target.request.dataset
    if spec is None or spec.loaded is None or spec.clamp_to_caps:
        return []
    sizes = spec.loaded
    problems = []
    prompts = [i for i, tokens in enumerate(sizes.prompt_tokens) if tokens > max_prompt]
    if prompts:
        problems.append(_entry_problem(spec, sizes, prompts, "prompt", max_prompt, PROMPT_SETTING))
    if spec.recorded_output:
        outputs = [i for i, tokens in enumerate(sizes.output_tokens) if tokens is not None and tokens > max_output]
        if outputs:
            problems.append(_entry_problem(spec, sizes, outputs, "max_tokens", max_output, OUTPUT_SETTING))
    return problems


def _entry_problem(spec: DatasetSpec, sizes: DatasetSizes, over: list[int], what: str, cap: int,
                   setting: str) -> Problem:  # fmt: skip
    first = over[0]
    line = f" line {sizes.lines[first]}" if first < len(sizes.lines) else f" entry {first + 1}"
    field = sizes.prompt_fields[first] if what == "prompt" and first < len(sizes.prompt_fields) else what
    if what != "prompt" and "conversations" in sizes.prompt_fields[first : first + 1]:
        field = "conversations (the recorded answer)"
    more = f" (and {len(over) - 1:,} more entries)" if len(over) > 1 else ""
    message = (f"{spec.path}{line}: {field} is over the cap of {cap:,} tokens a request ({setting}){more}; "
               "clamp_to_caps: true leaves such entries out (prompts) or clamps them (max_tokens)")  # fmt: skip
    return Problem(path=DATASET_FIELD, message=message)


def clamp_traces(scenario: Scenario, *, max_prompt: int, max_output: int) -> tuple[Scenario, int, int]:
    """``scenario`` with the lengths of every trace that clamps to the caps clamped to them, and how many replayed
    requests had their prompt and their output clamped."""
    phases = list(scenario.phases)
    prompts = outputs = 0
    for index, phase in enumerate(phases):
        arrival = phase.arrival
        if not isinstance(arrival, TraceArrival) or arrival.loaded is None or not arrival.clamp_to_caps:
            continue
        loaded, replayed = arrival.loaded, arrival.bounds(phase.duration_s)
        prompts += sum(loaded.prompts[i] > max_prompt for i in replayed)
        outputs += sum(loaded.outputs[i] > max_output for i in replayed)
        within = dataclasses.replace(
            loaded,
            prompts=array("q", (min(p, max_prompt) for p in loaded.prompts)),
            outputs=array("q", (min(o, max_output) for o in loaded.outputs)),
        )
        phases[index] = dataclasses.replace(phase, arrival=dataclasses.replace(arrival, loaded=within))
    return dataclasses.replace(scenario, phases=tuple(phases)), prompts, outputs


def clamp_dataset(dataset: LoadedDataset, spec: DatasetSpec, *, max_prompt: int,
                  max_output: int) -> tuple[LoadedDataset | None, int, int]:  # fmt: skip
    """``dataset`` within the caps when ``spec`` clamps to them: entries whose prompt is over the prompt cap left
    out, recorded outputs over the output cap clamped; with how many of each (None: every entry was left out)."""
    sizes = dataset.sizes
    if not spec.clamp_to_caps:
        return dataset, 0, 0
    keep = [i for i, tokens in enumerate(sizes.prompt_tokens) if tokens <= max_prompt]
    left_out = len(sizes.prompt_tokens) - len(keep)
    outputs = [sizes.output_tokens[i] for i in keep]
    clamped = sum(1 for t in outputs if t is not None and t > max_output) if spec.recorded_output else 0
    if not keep:
        return None, left_out, clamped
    if not left_out and not clamped:
        return dataset, 0, 0

    def kept(values: tuple[_T, ...]) -> tuple[_T, ...]:
        return tuple(values[i] for i in keep) if values else values

    within = DatasetSizes(
        prompt_tokens=kept(sizes.prompt_tokens),
        output_tokens=tuple(t if t is None or t <= max_output else max_output for t in outputs),
        digest=sizes.digest,
        lines=kept(sizes.lines),
        prompt_fields=kept(sizes.prompt_fields),
    )
    return dataclasses.replace(dataset, sizes=within, prompts=kept(dataset.prompts)), left_out, clamped
