"""What a run's preparation hands to its execution: one value, made before any load, never re-assembled later.

The preparation stage (``adapters.workload.preparation``) reads every file the scenario names (traces, a
dataset, a tokenizer and its chat template), plans how prompts are made, and judges the caps on the workload
as it will be sent. Its answer is a :class:`PreparedRun`: ``validate``, ``run``, ``sweep``, the service's worker
and the generator workers all take it, so nothing reads a file twice or re-attaches what was read.

The bounds it works within are :class:`PreparationLimits` (the settings' ``CLIFFWATCH_PREPARE_*`` and
``CLIFFWATCH_TEMPLATE_*``): a bound that is hit is a validation problem naming the file and the bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from cliffwatch.domain.scenario.dataset import LoadedDataset
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.workload.prompt_sizing import PromptSizing


class PromptMaker(Protocol):
    """A prepared run's prompts as the load path sees them: a request's prompt of N tokens, made of fragments
    prepared ahead (the load path copies, never builds)."""

    def prepare(self, tokens: int) -> None: ...

    def fragments(self, request_id: int, tokens: int) -> tuple[bytes | memoryview, ...]: ...

    def observe(self, request_id: int, counted: int) -> None:
        """The server counted the prompt made for ``request_id`` as ``counted`` tokens (``usage.prompt_tokens``):
        a maker that sizes by a fit corrects it (domain.workload.sizing_loop)."""


@dataclass(frozen=True, kw_only=True)
class PreparationLimits:
    """How much a preparation may take: its wall time and the memory it may grow the process by, as a whole; each
    data file's bytes and rows; a chat template's render time and output size (each render)."""

    timeout_s: float = 300.0
    max_memory_bytes: int = 4 << 30
    max_file_bytes: int = 1 << 30
    max_rows: int = 2_000_000
    template_render_s: float = 1.0
    template_max_chars: int = 1_000_000


DEFAULT_LIMITS = PreparationLimits()


@dataclass(frozen=True, kw_only=True)
class PromptPlan:
    """How the run's prompts are made, as settled before any load: a tokenizer's token-exact prompts (``maker``),
    the built-in target's words, lengths the target's ``/tokenize`` fits at the preflight (``server_lengths``), or
    a calibration the preflight runs (``calibrate``); ``api: http``: none of them."""

    sizing: PromptSizing | None = None  # None: the executor's default until its preflight says
    maker: PromptMaker | None = None
    server_lengths: tuple[int, ...] | None = None
    calibrate: bool = False

    def executor_options(self) -> dict[str, Any]:
        """The HTTP executor's keyword arguments for these prompts."""
        options: dict[str, Any] = {}
        if self.sizing is not None:
            options["sizing"] = self.sizing
        if self.maker is not None:
            options["prompts"] = self.maker
        if self.server_lengths is not None:
            options["server_lengths"] = list(self.server_lengths)
        if self.calibrate:
            options["calibrate"] = True
        return options


@dataclass(frozen=True, kw_only=True)
class Clamped:
    """What ``clamp_to_caps: true`` changed of the files' requests: counts by what was clamped (never values)."""

    trace_prompts: int = 0
    trace_outputs: int = 0
    dataset_left_out: int = 0  # entries whose prompt is over the cap: a prompt is not cut, it is not drawn
    dataset_outputs: int = 0

    @property
    def any(self) -> bool:
        return bool(self.trace_prompts or self.trace_outputs or self.dataset_left_out or self.dataset_outputs)

    def note(self, max_prompt: int, max_output: int) -> str:
        parts = []
        if self.trace_prompts:
            parts.append(f"{self.trace_prompts:,} trace requests' prompt_tokens to {max_prompt:,}")
        if self.trace_outputs:
            parts.append(f"{self.trace_outputs:,} trace requests' output tokens to {max_output:,}")
        if self.dataset_left_out:
            parts.append(f"{self.dataset_left_out:,} dataset entries left out (prompt over {max_prompt:,} tokens)")
        if self.dataset_outputs:
            parts.append(f"{self.dataset_outputs:,} dataset entries' max_tokens to {max_output:,}")
        return "clamped to the caps (clamp_to_caps: true): " + "; ".join(parts)


@dataclass(frozen=True, kw_only=True)
class PreparedRun:
    """A scenario ready to run: ``scenario`` as asked (overrides applied; what its result shows and stores) and
    ``workload``, the same with its traces' requests and its dataset's sizes attached (what the plan walks)."""

    scenario: Scenario
    workload: Scenario
    prompts: PromptPlan
    dataset: LoadedDataset | None = None
    notes: tuple[str, ...] = ()  # what preparing changed or found (a dataset's digest and draws, clamping)
    clamped: Clamped = Clamped()

    def executor_options(self) -> dict[str, Any]:
        """The HTTP executor's keyword arguments: the prompts, and the dataset's prepared prompts."""
        options = self.prompts.executor_options()
        if self.dataset is not None:
            options["dataset"] = self.dataset
        return options
