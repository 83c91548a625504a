"""Trace arrivals: a phase that replays a production trace's requests at their timestamps, scaled by ``speed``.

``arrival: {process: trace, path, format, speed, start_s, duration_s}`` names the file and the window of it
to replay, in the trace's own seconds: from ``start_s`` for ``duration_s`` (default: as much as the phase
holds at that speed). Each request of the window is sent at ``(t - start_s) / speed`` into the phase, with
the trace's input length as its ``prompt_tokens`` and its output length as its ``max_tokens``.

The file is read by an adapter (``adapters.workload.trace_files``) before the run, and the requests it holds are
attached to the arrival (``TraceArrival.loaded``); the plan is then as deterministic as any other. Before it
is loaded (when a scenario is only validated, or judged against the caps at submit), its rates are unknown
and taken as 0: the run-time attempt cap still bounds what is sent.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from cliffwatch.domain.validation import Reader

if TYPE_CHECKING:
    from cliffwatch.domain.scenario.scenario import Scenario

MAX_TRACE_REQUESTS = 1_000_000


class TraceFormat(StrEnum):
    AZURE = "azure"  # Azure LLM inference traces: CSV TIMESTAMP,ContextTokens,GeneratedTokens
    MOONCAKE = "mooncake"  # Mooncake: JSONL timestamp (ms), input_length, output_length, hash_ids
    BURSTGPT = "burstgpt"  # BurstGPT: CSV Timestamp (s), Model, Request tokens, Response tokens, ...
    JSONL = "jsonl"  # cliffwatch's own: JSONL time_s, prompt_tokens, output_tokens


# What each format calls the prompt's and the answer's length: a refusal names the file's own column.
LENGTH_FIELDS: Mapping[TraceFormat, tuple[str, str]] = {
    TraceFormat.AZURE: ("ContextTokens", "GeneratedTokens"),
    TraceFormat.MOONCAKE: ("input_length", "output_length"),
    TraceFormat.BURSTGPT: ("Request tokens", "Response tokens"),
    TraceFormat.JSONL: ("prompt_tokens", "output_tokens"),
}


@dataclass(frozen=True, slots=True)
class TraceRequest:
    time_s: float  # seconds from the trace's first request
    prompt_tokens: int
    output_tokens: int
    line: int = 0  # in the file, counting from 1 (the header included): what a refusal names


@dataclass(frozen=True, kw_only=True, eq=False)
class TraceRequests:
    """A trace's requests in time order, as read from its file; ``digest`` identifies the file's content.

    Held as four columns, not an object a request: a million-row trace is 32 MB that the garbage collector never
    walks (as objects it was 150 MB, and each full collection while they were made held every thread, the
    service's event loop included, for up to 80 ms). :meth:`request` makes one request's value when asked."""

    times: array[float]  # seconds from the trace's first request, ascending
    prompts: array[int]
    outputs: array[int]
    lines: array[int]
    digest: str

    @classmethod
    def of(cls, requests: Iterable[TraceRequest], *, digest: str) -> TraceRequests:
        """The columns of ``requests``, put in time order (a stable sort: equal times keep the file's order)."""
        times, prompts, outputs, lines = array("d"), array("q"), array("q"), array("q")
        for r in requests:
            times.append(r.time_s)
            prompts.append(r.prompt_tokens)
            outputs.append(r.output_tokens)
            lines.append(r.line)
        return cls(times=times, prompts=prompts, outputs=outputs, lines=lines, digest=digest)

    def __post_init__(self) -> None:
        if any(b < a for a, b in itertools.pairwise(self.times)):
            order = sorted(range(len(self.times)), key=self.times.__getitem__)
            for name, column in (("times", self.times), ("prompts", self.prompts), ("outputs", self.outputs),
                                 ("lines", self.lines)):  # fmt: skip
                object.__setattr__(self, name, array(column.typecode, (column[i] for i in order)))

    def __len__(self) -> int:
        return len(self.times)

    def request(self, index: int) -> TraceRequest:
        return TraceRequest(time_s=self.times[index], prompt_tokens=self.prompts[index],
                            output_tokens=self.outputs[index], line=self.lines[index])  # fmt: skip

    @property
    def requests(self) -> tuple[TraceRequest, ...]:
        """Every request as a value (a copy: for tests and small traces, not for a replay's hot path)."""
        return tuple(self.request(i) for i in range(len(self)))


@dataclass(frozen=True, kw_only=True)
class TraceArrival:
    path: str
    format: TraceFormat
    speed: float = 1.0
    start_s: float = 0.0
    window_s: float | None = None  # trace seconds to replay; None: what the phase holds at this speed
    clamp_to_caps: bool = False  # lengths over the caps are clamped to them (and counted), not refused
    loaded: TraceRequests | None = field(default=None, compare=False, repr=False)

    def bounds(self, phase_s: float) -> range:
        """The indexes of the loaded requests this phase replays (empty before the trace is loaded)."""
        if self.loaded is None:
            return range(0)
        span = phase_s * self.speed if self.window_s is None else min(self.window_s, phase_s * self.speed)
        low = bisect.bisect_left(self.loaded.times, self.start_s)
        high = bisect.bisect_left(self.loaded.times, self.start_s + span)
        return range(low, high)

    def window(self, phase_s: float) -> list[TraceRequest]:
        """The loaded requests this phase replays (none before the trace is loaded)."""
        loaded = self.loaded
        return [] if loaded is None else [loaded.request(i) for i in self.bounds(phase_s)]

    def offsets(self, phase_s: float) -> Iterator[tuple[float, TraceRequest]]:
        """Each replayed request with its send offset into the phase, ``(t - start_s) / speed``, made as it is
        asked for (a long replay's requests are not all held at once)."""
        loaded = self.loaded
        if loaded is None:
            return
        for i in self.bounds(phase_s):
            yield (loaded.times[i] - self.start_s) / self.speed, loaded.request(i)

    def mean_rate(self, duration_s: float) -> float:
        return len(self.bounds(duration_s)) / duration_s if duration_s > 0 else 0.0

    def peak_rate(self) -> float:
        """The most requests any one second of the replay sends (0 before the trace is loaded)."""
        if self.loaded is None or not len(self.loaded):
            return 0.0
        counts: dict[int, int] = {}
        first = bisect.bisect_left(self.loaded.times, self.start_s)
        for time_s in itertools.islice(self.loaded.times, first, None):
            second = math.floor((time_s - self.start_s) / self.speed)
            counts[second] = counts.get(second, 0) + 1
        return float(max(counts.values(), default=0))

    def describe(self) -> str:
        window = f" from {self.start_s:g}s" if self.start_s else ""
        return f"trace {self.format.value} {self.path}{window} at {self.speed:g}×"


def parse_trace(reader: Reader) -> TraceArrival | None:
    """The rest of an ``arrival`` mapping whose ``process`` is ``trace``."""
    path = reader.string("path")
    if isinstance(path, str) and ("\x00" in path or len(path) > 4096):
        reader.error("path", "must be a path")
        path = None
    form = reader.string("format", choices=tuple(f.value for f in TraceFormat))
    speed = reader.number("speed", 1.0, gt=0, le=1000)
    start_s = reader.number("start_s", 0.0, ge=0)
    window_s = reader.number("duration_s", None, gt=0)
    clamp = reader.boolean("clamp_to_caps", False)
    if None in (path, form, speed, start_s, clamp) or (reader.has("duration_s") and window_s is None):
        return None
    return TraceArrival(path=path, format=TraceFormat(form), speed=speed, start_s=start_s, window_s=window_s,
                        clamp_to_caps=clamp)  # fmt: skip


def with_traces(scenario: Scenario, loaded: Mapping[int, TraceRequests]) -> Scenario:
    """``scenario`` with the trace phases ``loaded`` holds (by phase index) attached to their arrivals."""
    if not loaded:
        return scenario
    phases = tuple(
        dataclasses.replace(phase, arrival=dataclasses.replace(phase.arrival, loaded=loaded[index]))
        if index in loaded and isinstance(phase.arrival, TraceArrival)
        else phase
        for index, phase in enumerate(scenario.phases)
    )
    return dataclasses.replace(scenario, phases=phases)


def traces_of(scenario: Scenario) -> dict[int, TraceRequests]:
    """The loaded trace of each trace phase, by phase index."""
    return {
        index: phase.arrival.loaded
        for index, phase in enumerate(scenario.phases)
        if isinstance(phase.arrival, TraceArrival) and phase.arrival.loaded is not None
    }


def trace_notes(scenario: Scenario) -> tuple[str, ...]:
    """What each trace phase replays, for the result's notes: the file, its digest, the window and count."""
    notes = []
    for phase in scenario.phases:
        arrival = phase.arrival
        if isinstance(arrival, TraceArrival) and arrival.loaded is not None:
            sent = len(arrival.bounds(phase.duration_s))
            notes.append(
                f"phase {phase.name} replays {sent:,} of the {len(arrival.loaded):,} requests of "
                f"{arrival.format.value} trace {arrival.path} (sha256 {arrival.loaded.digest[:16]}) from "
                f"{arrival.start_s:g}s at {arrival.speed:g}× speed"
            )
    return tuple(notes)
