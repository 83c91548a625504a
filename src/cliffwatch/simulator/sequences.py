"""One sequence inside the simulated engine: the request it serves, the stage it is in, and how it ended
(``Result``, the label ``/metrics`` counts requests by). ``BatchCore`` (``batching``) moves sequences through
their stages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum


class SeqState(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    ENDED = "ended"


class Result(StrEnum):
    """How a request ended; the ``result`` label of ``cliffwatch_target_requests_total``."""

    COMPLETED = "completed"
    REJECTED_429 = "rejected_429"
    DROPPED_DEADLINE_503 = "dropped_deadline_503"
    ABORTED_DISCONNECT = "aborted_disconnect"
    ABORTED_SHUTDOWN = "aborted_shutdown"
    INTERRUPTED = "interrupted"  # ended early for a waiting request (``interrupt_when_full``): a hollow answer
    BAD_REQUEST = "bad_request"


@dataclass(eq=False, kw_only=True)
class EngineRequest:
    """One sequence inside the engine, with the times it went through each stage (engine clock)."""

    id: int
    prompt_tokens: int
    max_tokens: int
    arrived_at: float
    rng: random.Random = field(repr=False)
    streaming: bool = True
    priority: int = 0  # the body's "priority": lower is admitted sooner under priority scheduling (as vLLM's)
    blocks: tuple[int, ...] = ()  # the prompt's chained block hashes (simulator/prefix_cache.py)
    tail: tuple[str, ...] = ()  # the prompt's words after its last full block
    cached_tokens: int = 0  # of its prompt, found in the prefix cache when it was admitted
    tenant: str = ""  # the body's "user": fair scheduling takes the tenants in turn
    preemptions: int = 0  # times it gave its slot back under fair scheduling (and was recomputed)
    state: SeqState = SeqState.WAITING
    result: Result | None = None
    admitted_at: float | None = None
    first_token_at: float | None = None
    ended_at: float | None = None
    tokens: list[str] = field(default_factory=list, repr=False)

    @property
    def text(self) -> str:
        return "".join(self.tokens)
