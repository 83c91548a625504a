"""Conversations and shared prefixes: what real chat traffic looks like to a server with a prefix cache.

``sessions`` turns each arrival into the start of a conversation: its first turn is sent at the arrival,
and each next turn after the previous answer came back plus a think time, with the whole history so far
(the real replies included). Open loop across conversations, closed loop within one, as users behave:

    sessions:
      turns: {dist: uniform, min: 2, max: 6}          # turns per conversation
      think_time_ms: {dist: lognormal, median: 4000, sigma: 0.6}
      history: true                                   # each turn resends the conversation so far (default)

A turn that fails (after the retries its policy allows) ends its conversation; a late one does not (the
user got an answer, late). A turn whose time would fall after the run's last phase is not sent: the
conversation is *cut* by the run's end, and counted apart from the ones that ended on their own.

``prefix`` puts one of ``groups`` shared system prompts of ``tokens`` tokens in front of every prompt, chosen
per request or per conversation, evenly or by a Zipf law (a few prompts are most of the traffic), so a server
with prefix caching sees a realistic hit rate; the request's own cache buster comes after the prefix:

    prefix: {groups: 8, tokens: 1024, per: conversation, zipf: 1.1}
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cliffwatch.domain.scenario.distributions import Distribution, parse_distribution
from cliffwatch.domain.validation import Problems, Reader

MAX_TURNS = 100
MAX_THINK_MS = 600_000
MAX_PREFIX_GROUPS = 10_000
MAX_PREFIX_TOKENS = 65_536
# A turn's request id: its conversation's first request's id (the plan's) times this, plus the turn, above
# every id the plan itself hands out. Deterministic whatever order conversations progress in.
TURN_ID_BASE = 1 << 40
TURN_ID_STRIDE = 128
# The ids whose prompts are the shared prefixes (a prompt source sizes them like any other prompt).
PREFIX_ID_BASE = 1 << 39


class PrefixPer(StrEnum):
    REQUEST = "request"
    CONVERSATION = "conversation"


@dataclass(frozen=True, kw_only=True)
class SessionSpec:
    turns: Distribution
    think_time_ms: Distribution
    history: bool = True

    def describe(self) -> dict[str, Any]:
        return {"turns": self.turns.describe(), "think_time_ms": self.think_time_ms.describe(),
                "history": self.history}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class PrefixSpec:
    groups: int
    tokens: int
    per: PrefixPer = PrefixPer.REQUEST
    zipf: float | None = None  # None: every group equally likely

    def describe(self) -> dict[str, Any]:
        return {"groups": self.groups, "tokens": self.tokens, "per": self.per.value, "zipf": self.zipf}

    def weights(self) -> list[float]:
        """Each group's chance (unnormalised): 1/(rank^s) under Zipf, else equal."""
        if self.zipf is None:
            return [1.0] * self.groups
        return [1.0 / (rank**self.zipf) for rank in range(1, self.groups + 1)]


def parse_sessions(value: object, path: str, problems: Problems) -> SessionSpec | None:
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    turns = parse_distribution(reader.raw("turns"), reader.child("turns"), problems, minimum=1, maximum=MAX_TURNS)
    think = parse_distribution(reader.raw("think_time_ms", 0), reader.child("think_time_ms"), problems, minimum=0,
                               maximum=MAX_THINK_MS)  # fmt: skip
    history = reader.boolean("history", True)
    reader.done()
    if turns is None or think is None or history is None:
        return None
    return SessionSpec(turns=turns, think_time_ms=think, history=history)


def parse_prefix(value: object, path: str, problems: Problems, *, sessions: bool) -> PrefixSpec | None:
    """``prefix``; ``per`` defaults to ``conversation`` when the traffic is conversations, else ``request``."""
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    groups = reader.number("groups", ge=1, le=MAX_PREFIX_GROUPS, integer=True)
    tokens = reader.number("tokens", ge=1, le=MAX_PREFIX_TOKENS, integer=True)
    default = PrefixPer.CONVERSATION if sessions else PrefixPer.REQUEST
    per = reader.string("per", default.value, choices=tuple(p.value for p in PrefixPer))
    zipf = reader.number("zipf", None, gt=0, le=10)
    reader.done()
    if per == PrefixPer.CONVERSATION and not sessions:
        reader.error("per", "a prefix per conversation needs sessions")
        return None
    if groups is None or tokens is None or per is None or (reader.has("zipf") and zipf is None):
        return None
    return PrefixSpec(groups=int(groups), tokens=int(tokens), per=PrefixPer(per), zipf=zipf)


class PrefixChooser:
    """Draws prefix groups for one stream of requests (seeded by the caller): -1 without a prefix."""

    def __init__(self, spec: PrefixSpec | None, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        self._cumulative = list(itertools.accumulate(spec.weights())) if spec is not None else []

    def next(self) -> int:
        if self.spec is None:
            return -1
        return self.rng.choices(range(self.spec.groups), cum_weights=self._cumulative)[0]


@dataclass(frozen=True, kw_only=True)
class Turn:
    """A later turn of a conversation, drawn before it is sent: its shape and the pause before it."""

    prompt_tokens: int
    max_tokens: int
    think_ms: int
    prefix: int  # the group (per request), or the conversation's


def turn_id(conversation: int, turn: int) -> int:
    """The request id of turn ``turn`` (1-based) of the conversation whose first request has id ``conversation``;
    the first turn keeps the plan's id."""
    if turn == 1:
        return conversation
    return TURN_ID_BASE + conversation * TURN_ID_STRIDE + turn


def later_turns(
    spec: SessionSpec,
    *,
    seed: int,
    conversation: int,
    prompt_tokens: Distribution | None,
    max_tokens: Distribution | None,
    prefix: PrefixSpec | None,
    first_prefix: int,
) -> tuple[Turn, ...]:
    """Turns 2… of a conversation, drawn from its own generator (the same whatever else the run does)."""
    rng = random.Random(f"{seed}:conversation:{conversation}")
    count = spec.turns.sample(rng)
    chooser = PrefixChooser(prefix if prefix is not None and prefix.per is PrefixPer.REQUEST else None, rng)
    turns = []
    for _ in range(count - 1):
        turns.append(Turn(
            prompt_tokens=prompt_tokens.sample(rng) if prompt_tokens else 0,
            max_tokens=max_tokens.sample(rng) if max_tokens else 0,
            think_ms=spec.think_time_ms.sample(rng),
            prefix=chooser.next() if chooser.spec is not None else first_prefix,
        ))  # fmt: skip
    return tuple(turns)


@dataclass(frozen=True, kw_only=True)
class ConversationStats:
    """The conversations that started in one phase, and how they ended."""

    started: int = 0
    completed: int = 0  # every turn answered
    completed_on_time: int = 0  # every turn on time
    failed: int = 0  # a turn failed, which ended the conversation
    cut: int = 0  # the run ended (or was stopped) before its next turn
    turns: int = 0  # turns offered
    turns_on_time: int = 0

    @property
    def ended(self) -> int:
        """The conversations that ended on their own: completed or failed (not cut by the run's end)."""
        return self.completed + self.failed

    @property
    def on_time_ratio(self) -> float | None:
        """Conversations with every turn on time, of those that ended on their own; None when none did."""
        return None if self.ended == 0 else self.completed_on_time / self.ended

    def to_dict(self) -> dict[str, Any]:
        ratio = self.on_time_ratio
        per = None if not self.started else round(self.turns / self.started, 3)
        return {"started": self.started, "completed": self.completed, "completed_on_time": self.completed_on_time,
                "failed": self.failed, "cut": self.cut, "turns": self.turns, "turns_on_time": self.turns_on_time,
                "on_time_ratio": None if ratio is None else round(ratio, 4), "turns_per_conversation": per}  # fmt: skip


@dataclass
class _OpenConversation:
    phase: int
    planned: int
    seen: int = 0
    on_time: bool = True
    failed: bool = False
    turns_on_time: int = 0


class ConversationBook:
    """Follows every conversation through its turns' records and sums them up by the phase it started in."""

    def __init__(self, phases: int) -> None:
        self._phases = phases
        self._open: dict[int, _OpenConversation] = {}

    def add(self, *, conversation: int, turn: int, turns: int, phase: int, on_time: bool, succeeded: bool,
            attempted: bool = True) -> None:  # fmt: skip
        """One turn's record. A first turn never attempted (the run stopped, or the generator had no room) did
        not start a conversation: its request is counted as not sent, and nothing here."""
        if conversation < 0 or (turn == 1 and not attempted):
            return
        entry = self._open.get(conversation)
        if entry is None:
            entry = self._open[conversation] = _OpenConversation(phase=phase, planned=turns)  # turn 1 comes first
        entry.seen += 1
        entry.turns_on_time += 1 if on_time else 0
        entry.on_time = entry.on_time and on_time
        entry.failed = entry.failed or not succeeded

    def result(self) -> tuple[ConversationStats, ...]:
        counts = [dict.fromkeys(("started", "completed", "completed_on_time", "failed", "cut", "turns",
                                 "turns_on_time"), 0) for _ in range(self._phases)]  # fmt: skip
        for entry in self._open.values():
            row = counts[min(entry.phase, self._phases - 1)]
            row["started"] += 1
            row["turns"] += entry.seen
            row["turns_on_time"] += entry.turns_on_time
            if entry.failed:
                row["failed"] += 1
            elif entry.seen >= entry.planned:
                row["completed"] += 1
                row["completed_on_time"] += 1 if entry.on_time else 0
            else:
                row["cut"] += 1
        return tuple(ConversationStats(**row) for row in counts)


def pooled(stats: tuple[ConversationStats, ...] | list[ConversationStats]) -> ConversationStats:
    """Several phases' conversations added up."""
    fields: Mapping[str, int] = {
        name: sum(getattr(s, name) for s in stats)
        for name in ("started", "completed", "completed_on_time", "failed", "cut", "turns", "turns_on_time")
    }
    return ConversationStats(**fields)
