"""The run plan: every logical request a scenario will send, with its scheduled time and shape.

Produced lazily (a long run is never materialised) and deterministically: arrivals and request shapes
come from random generators seeded by the scenario seed and the phase index, so the same scenario and
seed always give the same plan, whatever the order the caller consumes it in.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from cliffwatch.domain.outcomes import NS_PER_S, Attempt, Outcome, RequestRecord, Slo, classify
from cliffwatch.domain.quick_init import quick_init
from cliffwatch.domain.scenario.arrivals import Mix, mix_offsets, plan_offsets
from cliffwatch.domain.scenario.conversations import PrefixChooser, Turn, later_turns
from cliffwatch.domain.scenario.scenario import PhaseRole, Scenario
from cliffwatch.domain.scenario.trace import TraceArrival


@dataclass(frozen=True, kw_only=True)
class PhaseWindow:
    """One phase's span on the run's monotonic clock, as the plan lays the phases out end to end."""

    index: int
    name: str
    role: PhaseRole
    start_ns: int
    end_ns: int

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / NS_PER_S


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedRequest:
    id: int
    phase: int
    scheduled_ns: int  # from the run's start
    prompt_tokens: int
    max_tokens: int
    entry: int = -1  # the dataset entry whose prompt it sends (request.dataset); -1: a synthetic prompt
    klass: int = 0  # its traffic class: an index into ``Scenario.traffic_classes``
    prefix: int = -1  # the shared prefix group its prompt opens with (``conversations``); -1: none
    conversation: int = -1  # the id of its conversation's first turn; -1: a single request
    turn: int = 0  # 1-based turn in its conversation (0: a single request)
    turns: int = 0  # the turns its conversation asks for

    def record(
        self, attempts: tuple[Attempt, ...], *, slo: Slo, not_sent_reason: str | None = None, capped: bool = False
    ) -> RequestRecord:
        """This request's record after ``attempts``, its outcome classified against ``slo``; ``capped``: the
        attempt cap refused its next attempt (``RequestRecord.capped``)."""
        return RequestRecord(
            id=self.id,
            phase=self.phase,
            scheduled_ns=self.scheduled_ns,
            prompt_tokens=self.prompt_tokens,
            max_tokens=self.max_tokens,
            attempts=attempts,
            outcome=classify(attempts, scheduled_ns=self.scheduled_ns, slo=slo),
            not_sent_reason=not_sent_reason if not attempts else None,
            capped=capped,
            klass=self.klass,
            conversation=self.conversation,
            turn=self.turn,
            turns=self.turns,
            prefixed=self.prefix >= 0,
        )

    def not_sent(self, reason: str) -> RequestRecord:
        """The record of this request when it was never attempted, and why."""
        return RequestRecord(
            id=self.id,
            phase=self.phase,
            scheduled_ns=self.scheduled_ns,
            prompt_tokens=self.prompt_tokens,
            max_tokens=self.max_tokens,
            attempts=(),
            outcome=Outcome.NOT_SENT,
            not_sent_reason=reason,
            klass=self.klass,
            conversation=self.conversation,
            turn=self.turn,
            turns=self.turns,
            prefixed=self.prefix >= 0,
        )


def phase_windows(scenario: Scenario) -> tuple[PhaseWindow, ...]:
    """Each phase's planned time window, in nanoseconds from the run's start."""
    windows = []
    for index, (phase, start) in enumerate(zip(scenario.phases, scenario.phase_starts(), strict=True)):
        windows.append(
            PhaseWindow(
                index=index,
                name=phase.name,
                role=phase.role,
                start_ns=round(start * NS_PER_S),
                end_ns=round((start + phase.duration_s) * NS_PER_S),
            )
        )
    return tuple(windows)


def iter_plan(scenario: Scenario) -> Iterator[PlannedRequest]:
    """Every planned request in scheduled order, numbered from 0.

    Each traffic class draws its shapes (and dataset entries) from generators of its own, seeded by the
    scenario's seed, the phase and the class: the first class's are those of a scenario without classes, so
    declaring classes does not change what its first class sends."""
    request_id = 0
    classes = scenario.traffic_classes
    index_of = {traffic_class.name: index for index, traffic_class in enumerate(classes)}
    for index, (phase, window) in enumerate(zip(scenario.phases, phase_windows(scenario), strict=True)):
        arrivals = random.Random(f"{scenario.seed}:arrivals:{index}")
        if isinstance(phase.arrival, TraceArrival):  # the trace's own times and lengths (a shared prefix before them)
            prefixes = PrefixChooser(scenario.prefix_for(0), random.Random(f"{scenario.seed}:prefix:{index}"))
            for offset, traced in phase.arrival.offsets(phase.duration_s):
                yield PlannedRequest(
                    id=request_id,
                    phase=index,
                    scheduled_ns=window.start_ns + round(offset * NS_PER_S),
                    prompt_tokens=max(1, traced.prompt_tokens),
                    max_tokens=max(1, traced.output_tokens),
                    prefix=prefixes.next(),
                )
                request_id += 1
            continue
        shapes = [_Shapes(scenario, klass, index) for klass in range(len(classes))]
        stream: Iterator[tuple[float, int]]
        if isinstance(phase.arrival, Mix):
            stream = ((offset, index_of[name]) for offset, name in mix_offsets(phase.arrival, phase.duration_s,
                                                                                arrivals))  # fmt: skip
        else:
            stream = ((offset, 0) for offset in plan_offsets(phase.arrival, phase.duration_s, arrivals))
        for offset, klass in stream:
            prompt, max_tokens, entry = shapes[klass].next()
            prefix = shapes[klass].prefixes.next()
            sessions = scenario.sessions_for(klass)
            turns = 0 if sessions is None else 1 + len(later_turns_of(scenario, klass, request_id, prefix))
            yield PlannedRequest(
                id=request_id,
                phase=index,
                scheduled_ns=window.start_ns + round(offset * NS_PER_S),
                prompt_tokens=prompt,
                max_tokens=max_tokens,
                entry=entry,
                klass=klass,
                prefix=prefix,
                conversation=-1 if sessions is None else request_id,
                turn=0 if sessions is None else 1,
                turns=turns,
            )
            request_id += 1


def later_turns_of(scenario: Scenario, klass: int, conversation: int, first_prefix: int) -> tuple[Turn, ...]:
    """Turns 2… of the conversation class ``klass`` starts with request ``conversation`` (none without
    sessions): the plan counts them, the generator sends them."""
    sessions = scenario.sessions_for(klass)
    if sessions is None:
        return ()
    template = scenario.request_for(klass)
    return later_turns(sessions, seed=scenario.seed, conversation=conversation, prompt_tokens=template.prompt_tokens,
                       max_tokens=template.max_tokens, prefix=scenario.prefix_for(klass),
                       first_prefix=first_prefix)  # fmt: skip


class _Shapes:
    """One class's request shapes in one phase: prompt and output lengths, or dataset entries."""

    def __init__(self, scenario: Scenario, klass: int, phase: int) -> None:
        self.template = scenario.request_for(klass)
        suffix = "" if klass == 0 else f":{scenario.traffic_classes[klass].name}"
        self.rng = random.Random(f"{scenario.seed}:shapes:{phase}{suffix}")
        dataset = self.template.dataset
        self.dataset = dataset if dataset is not None and dataset.loaded is not None else None
        self.draws = None if self.dataset is None else self.dataset.draws(phase, scenario.seed, suffix)
        self.prefixes = PrefixChooser(
            scenario.prefix_for(klass), random.Random(f"{scenario.seed}:prefix:{phase}{suffix}")
        )

    def next(self) -> tuple[int, int, int]:
        """(prompt tokens, max tokens, dataset entry or -1) of the class's next request."""
        template = self.template
        prompt = template.prompt_tokens.sample(self.rng) if template.prompt_tokens else 0
        max_tokens = template.max_tokens.sample(self.rng) if template.max_tokens else 0
        if self.draws is None or self.dataset is None or self.dataset.loaded is None:
            return prompt, max_tokens, -1
        entry = self.draws.next()
        prompt = self.dataset.loaded.prompt_tokens[entry]
        recorded = self.dataset.loaded.output_tokens[entry]
        if self.dataset.recorded_output and recorded is not None:
            max_tokens = max(1, recorded)
        return prompt, max_tokens, entry


def planned_count(scenario: Scenario) -> int:
    """How many requests the plan holds (walks the plan; cheap next to running it)."""
    return sum(1 for _ in iter_plan(scenario))
