"""The users' own prompts: ``request.dataset``, and how the plan draws from a dataset once it is read.

A dataset replaces synthetic prompts. Its file is read by an adapter (``adapters.workload.dataset_files``) before the
run; what the plan needs of it, each kept entry's prompt and output lengths, is attached here
(:class:`DatasetSizes`), so the plan stays a pure function of the scenario, its seed and those sizes:
request ``i`` of phase ``p`` takes the entry a generator seeded by ``(seed, "dataset", p)`` draws, with or
without replacement (without: a seeded shuffle, walked in order and reshuffled when it runs out).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from cliffwatch.domain.validation import Reader

if TYPE_CHECKING:
    from cliffwatch.domain.scenario.scenario import Scenario


class DatasetFormat(StrEnum):
    SHAREGPT = "sharegpt"  # JSON: [{"conversations": [{"from": "human"|"gpt", "value": ...}, ...]}, ...]
    JSONL = "jsonl"  # one object a line: prompt or messages, optional max_tokens, class
    HF = "hf"  # a local directory of an already downloaded Hugging Face dataset (its JSON / JSONL files)


@dataclass(frozen=True, kw_only=True)
class DatasetSizes:
    """Each kept entry's prompt tokens and output tokens (None: the entry gives none), and the file's digest."""

    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int | None, ...]
    digest: str
    lines: tuple[int, ...] = ()  # each kept entry's line in its file (a refusal names it, never the entry)
    prompt_fields: tuple[str, ...] = ()  # the field each kept entry's prompt came from


@dataclass(frozen=True, kw_only=True)
class LoadedDataset:
    """A dataset as read before its run: the kept entries' sizes and their prompts, ready to be copied into bodies."""

    sizes: DatasetSizes
    # per entry: the JSON-escaped prompt (inside a string), or a messages array split where the tag goes
    prompts: tuple[bytes | tuple[bytes, bytes], ...]
    read: int  # entries in the file, before the filters
    path: str


@dataclass(frozen=True, kw_only=True)
class DatasetSpec:
    path: str
    format: DatasetFormat
    min_prompt_tokens: int = 1
    max_prompt_tokens: int | None = None
    replacement: bool = True
    cache_bust: bool = True  # open each prompt with the request's tag, as synthetic prompts do
    recorded_output: bool = True  # max_tokens from the entry's recorded answer (False: request.max_tokens)
    clamp_to_caps: bool = False  # entries over the caps: left out (prompt) or clamped (max_tokens), not refused
    loaded: DatasetSizes | None = field(default=None, compare=False, repr=False)

    def draws(self, phase: int, seed: int, suffix: str = "") -> DatasetDraws:
        """The entries a phase's requests (of one traffic class: ``suffix``) draw, from a generator of their own."""
        return DatasetDraws(self, random.Random(f"{seed}:dataset:{phase}{suffix}"))


class DatasetDraws:
    """The entries one phase's requests take, in order."""

    def __init__(self, spec: DatasetSpec, rng: random.Random) -> None:
        self._rng = rng
        self._count = 0 if spec.loaded is None else len(spec.loaded.prompt_tokens)
        self._replacement = spec.replacement
        self._order: list[int] = []

    def next(self) -> int:
        if self._count == 0:
            return -1
        if self._replacement:
            return self._rng.randrange(self._count)
        if not self._order:
            self._order = list(range(self._count))
            self._rng.shuffle(self._order)
            self._order.reverse()  # popped from the end: the shuffle's order
        return self._order.pop()


def parse_dataset(reader: Reader, *, max_tokens_given: bool) -> DatasetSpec | None:
    """``request.dataset``; ``max_tokens_given``: the request sets max_tokens, which then overrides the
    recorded answers' lengths."""
    path = reader.string("path")
    if isinstance(path, str) and ("\x00" in path or len(path) > 4096):
        reader.error("path", "must be a path")
        path = None
    form = reader.string("format", choices=tuple(f.value for f in DatasetFormat))
    least = reader.number("min_prompt_tokens", 1, ge=1, integer=True)
    most = reader.number("max_prompt_tokens", None, ge=1, integer=True)
    sample = reader.string("sample", "with_replacement", choices=("with_replacement", "without_replacement"))
    bust = reader.boolean("cache_bust", True)
    clamp = reader.boolean("clamp_to_caps", False)
    reader.done()
    if None in (path, form, least, sample, bust, clamp) or (reader.has("max_prompt_tokens") and most is None):
        return None
    if most is not None and most < least:
        reader.error("max_prompt_tokens", f"must be >= min_prompt_tokens ({least})")
        return None
    return DatasetSpec(
        path=path,
        format=DatasetFormat(form),
        min_prompt_tokens=least,
        max_prompt_tokens=most,
        replacement=sample == "with_replacement",
        cache_bust=bust,
        recorded_output=not max_tokens_given,
        clamp_to_caps=clamp,
    )


def with_dataset(scenario: Scenario, sizes: DatasetSizes | None) -> Scenario:
    """``scenario`` with its dataset's sizes attached (as read before the run), to the target's request and to
    every traffic class that draws from it; unchanged without a dataset."""
    template = scenario.target.request
    if sizes is None or template.dataset is None:
        return scenario
    request = dataclasses.replace(template, dataset=dataclasses.replace(template.dataset, loaded=sizes))
    classes = tuple(
        c if c.request.dataset is None
        else dataclasses.replace(c, request=dataclasses.replace(
            c.request, dataset=dataclasses.replace(c.request.dataset, loaded=sizes)))
        for c in scenario.classes
    )  # fmt: skip
    return dataclasses.replace(scenario, target=dataclasses.replace(scenario.target, request=request), classes=classes)
