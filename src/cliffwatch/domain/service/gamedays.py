"""Game days as the service keeps them: a suite started, its experiments' runs as they go, how it ended.

Values only, beside ``runs``: the suite is kept as it was sent (the document; ``domain.gameday`` parses it), and
each experiment as a record the API shows while the suite runs. A game day is held by the instance that drives
it under a lease, as a run is: an instance that dies leaves it to be found expired and recorded as
interrupted (``GamedayStore.expire_gameday_leases``), its experiment's run with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from cliffwatch.domain.service.runs import Trigger


class GamedayStatus(StrEnum):
    RUNNING = "running"  # its experiments are being run, one after another
    FINISHED = "finished"  # it ended with a verdict (held, broken, failed, stopped)
    INTERRUPTED = "interrupted"  # the instance driving it stopped (shut down, crashed) before its end

    @property
    def terminal(self) -> bool:
        return self is not GamedayStatus.RUNNING


class ExperimentState(StrEnum):
    PENDING = "pending"  # not started yet
    RUNNING = "running"  # its run is queued or running
    HELD = "held"
    BROKEN = "broken"
    FAILED = "failed"  # its run could not run (or ended without a result)
    STOPPED = "stopped"  # the suite was stopped while its run was queued or running: no verdict on it
    NOT_RUN = "not run"  # the suite ended before it


@dataclass(frozen=True, kw_only=True)
class ExperimentRecord:
    """One experiment of a stored game day: what it expects and where its run stands."""

    name: str
    scenario: str  # the scenario's name, or "(inline)"
    hypothesis: str  # as ``Hypothesis.describe`` says it
    state: ExperimentState = ExperimentState.PENDING
    run_id: str | None = None
    broken_because: tuple[str, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "scenario": self.scenario, "hypothesis": self.hypothesis,
                "state": self.state.value, "run_id": self.run_id, "broken_because": list(self.broken_because),
                "error": self.error}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExperimentRecord:
        return cls(name=str(data["name"]), scenario=str(data["scenario"]), hypothesis=str(data["hypothesis"]),
                   state=ExperimentState(data["state"]), run_id=data.get("run_id"),
                   broken_because=tuple(str(b) for b in data.get("broken_because") or ()),
                   error=data.get("error"))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Gameday:
    """A game day as stored, from its start to its end."""

    id: str
    name: str
    suite: Mapping[str, Any]  # the suite document as sent (or as its schedule holds it)
    status: GamedayStatus
    trigger: Trigger
    triggered_by: str  # the API token's name, or the schedule's id
    created_at: datetime
    experiments: tuple[ExperimentRecord, ...] = ()
    schedule_id: str | None = None
    fire_time: datetime | None = None
    owner: str | None = None  # the instance driving it
    lease_until: datetime | None = None
    finished_at: datetime | None = None
    abort_requested: str | None = None  # why someone asked it to stop
    reason: str | None = None  # why it ended as it did (a stop, an interruption)
    verdict: str | None = None  # held, broken, failed or stopped once finished (``SuiteVerdict``)
    summary: str | None = None  # the suite's one line ("weekly: held (2 held)")
    notifications: tuple[Mapping[str, Any], ...] = ()  # each webhook delivery, as ``Delivery.to_dict``
    idempotency_key: str | None = None  # the caller's Idempotency-Key (prefixed by its token's id), if it gave one


@dataclass(frozen=True, kw_only=True)
class GamedayEnd:
    """How a game day ended, as its driver reports it."""

    status: GamedayStatus
    finished_at: datetime
    experiments: tuple[ExperimentRecord, ...]
    verdict: str | None = None
    summary: str | None = None
    reason: str | None = None
    notifications: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
