"""Runs as the service keeps them: requested, queued, claimed by a worker under a lease, finished.

Values only; the store adapters persist them and the services move them through their states.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.errors import Problem
from cliffwatch.domain.outcomes import (
    CAP_REASON,
    NS_PER_MS,
    RequestRecord,
    TokenSource,
    time_per_output_token_ms,
)
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.security.masking import url_credentials


class Trigger(StrEnum):
    API = "api"  # a client of the REST API (triggered_by: the token's name)
    SCHEDULE = "schedule"  # a schedule's fire (triggered_by: the schedule id)
    CLI = "cli"


class RunKind(StrEnum):
    RUN = "run"  # a scenario's phases, scored
    SWEEP = "sweep"  # a capacity sweep over the scenario's target: usable capacity, not a score


class ScenarioSource(StrEnum):
    BUNDLED = "bundled"  # shipped in scenarios/, loaded at start-up
    REGISTERED = "registered"  # sent to the API by an admin
    INLINE = "inline"  # sent with one run request: kept so the run points at it, never a name's latest


@dataclass(frozen=True, kw_only=True)
class ScenarioVersion:
    """One exact version of a scenario document: runs point at it by (name, content_hash)."""

    name: str
    content_hash: str
    document: Mapping[str, Any]
    source: ScenarioSource
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """What a run changed of its scenario, as given (validated like the file's own fields)."""

    target_url: str | None = None
    seed: int | None = None
    threshold: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("target_url", self.target_url), ("seed", self.seed),
                                  ("threshold", self.threshold)) if v is not None}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Overrides:
        return cls(target_url=data.get("target_url"), seed=data.get("seed"), threshold=data.get("threshold"))

    def credential_problems(self) -> list[Problem]:
        """Why the service may not keep these overrides: a target URL with a password (they are stored and
        shown as given; credentials belong in the scenario, where they are kept apart and masked)."""
        if self.target_url is None or not url_credentials(self.target_url):
            return []
        return [Problem(path="--target", message=OVERRIDE_CREDENTIALS)]


OVERRIDE_CREDENTIALS = (
    "must not carry a user or password: overrides are stored and shown as given; put credentials in the "
    "scenario (a header with a secret reference {secret: env:NAME}, or the scenario's own target URL)"
)


@dataclass(frozen=True, kw_only=True)
class Run:
    """A run as stored: what was asked, what was resolved, who holds it, and how it ended."""

    id: str
    scenario_name: str
    scenario_hash: str
    status: RunStatus
    trigger: Trigger
    triggered_by: str
    created_at: datetime
    target_url: str  # after overrides; "builtin" for the simulated target
    seed: int
    threshold: float
    overrides: Overrides = field(default_factory=Overrides)
    schedule_id: str | None = None
    fire_time: datetime | None = None
    idempotency_key: str | None = None
    owner: str | None = None  # the instance that claimed it
    lease_until: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    abort_requested: str | None = None  # why someone asked it to stop
    reason: str | None = None  # why it ended as it did (abort, interruption, failure)
    score: float | None = None
    score_version: str | None = None
    passed: bool | None = None
    verdicts: tuple[str, ...] = ()
    result: Mapping[str, Any] | None = None  # the result document, without its time series
    kind: RunKind = RunKind.RUN
    sweep: SweepSpec | None = None  # a sweep's parameters (kind SWEEP only)
    usable_rps: float | None = None  # a finished sweep's usable capacity (of its first variant)
    # A running sweep's document so far (``SweepOutcome.to_dict()`` of the steps measured, marked provisional),
    # replaced after every step; a final ``result`` replaces it, a run that ends without one keeps it.
    provisional_result: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class RunEnd:
    """How a run ended, as the worker reports it to the store."""

    status: RunStatus
    finished_at: datetime
    reason: str | None = None
    score: float | None = None
    score_version: str | None = None
    passed: bool | None = None
    verdicts: tuple[str, ...] = ()
    result: Mapping[str, Any] | None = None  # ``RunResult.to_dict()`` without "timeseries"
    timeseries: tuple[Mapping[str, Any], ...] = ()  # its rows, one per second
    usable_rps: float | None = None  # a sweep's usable capacity (its result is the sweep document)


@dataclass(frozen=True, kw_only=True)
class CallerUsage:
    """How much of the service one API caller (runs ``triggered_by`` it) holds, for its quotas."""

    queued: int  # its runs waiting for a worker
    documents: tuple[datetime, ...]  # per inline scenario document its runs used since the window's start, the
    # first such run's creation, oldest first


@dataclass(frozen=True, kw_only=True)
class Quotas:
    """What one API token may hold at once: queued runs, and new inline scenario documents over a window."""

    max_queued_runs: int = 10
    max_documents: int = 100
    documents_window_s: float = 24 * 3_600.0


@dataclass(frozen=True, kw_only=True)
class RunQuery:
    scenario: str | None = None
    kind: RunKind | None = None
    status: RunStatus | None = None
    schedule_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    cursor: str | None = None  # opaque, from the previous page
    limit: int = 50


@dataclass(frozen=True, kw_only=True)
class RunPage:
    runs: tuple[Run, ...]
    next_cursor: str | None  # None on the last page


@dataclass(frozen=True, kw_only=True)
class StoredOutcome:
    """One logical request as the store keeps it (its attempts summarised in ``attempt_log``)."""

    run_id: str
    request_id: int
    phase: int
    scheduled_ms: float
    outcome: str
    attempts: int
    status: int | None  # of the final attempt
    error: str | None  # of the final attempt
    e2e_ms: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    output_tokens: int  # over every attempt
    token_source: str
    schedule_lag_ms: float | None
    attempt_log: tuple[Mapping[str, Any], ...] = ()  # number, sent_ms, end_ms, status, failure, error
    traffic_class: int = 0  # its class: an index into the scenario's classes (0 for one without)
    conversation: int | None = None  # the request id of its conversation's first turn (sessions), else None
    turn: int | None = None  # its turn in that conversation, from 1

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (the store's row and the API's view are made from it)."""
        fields = {name: getattr(self, name) for name in _OUTCOME_FIELDS}
        fields["attempt_log"] = [dict(a) for a in self.attempt_log]
        return fields

    @classmethod
    def of(cls, run_id: str, record: RequestRecord) -> StoredOutcome:
        fields = outcome_fields(run_id, record)
        fields["attempt_log"] = tuple(fields["attempt_log"])
        return cls(**fields)


def outcome_fields(run_id: str, record: RequestRecord) -> dict[str, Any]:
    """``StoredOutcome.of(run_id, record).to_dict()`` without the object in between."""
    return dict(zip(_OUTCOME_FIELDS, outcome_values(run_id, record), strict=True))


def outcome_values(run_id: str, record: RequestRecord) -> tuple[Any, ...]:
    """The values of ``outcome_fields`` in ``StoredOutcome``'s field order (``OUTCOME_FIELDS``). The service's
    worker stores a row per request while its generator runs on the same event loop, so each field is read
    once here: no record properties, no dataclass built and taken apart again."""
    attempts = record.attempts
    scheduled_ns = record.scheduled_ns
    final = attempts[-1] if attempts else None
    e2e_ms = ttft_ms = tpot_ms = lag_ms = None
    if final is not None:
        e2e_ms = (final.end_ns - scheduled_ns) / NS_PER_MS
        lag_ms = (attempts[0].sent_ns - scheduled_ns) / NS_PER_MS
        if final.failure is None:  # as ``RequestRecord.ttft_ms`` and ``tpot_ms`` read a success
            if final.first_token_ns is not None:
                ttft_ms = (final.first_token_ns - scheduled_ns) / NS_PER_MS
            tpot_ms = time_per_output_token_ms(final)
    log: list[Mapping[str, Any]] = [
        {
            "number": a.number,
            "sent_ms": a.sent_ns / NS_PER_MS,
            "end_ms": a.end_ns / NS_PER_MS,
            "status": a.status,
            "failure": None if a.failure is None else a.failure.value,
            "error": a.error,
        }
        for a in attempts
    ]
    log += _refused_retry(record)
    return (
        run_id,
        record.id,
        record.phase,
        scheduled_ns / NS_PER_MS,
        record.outcome.value,
        len(attempts),
        None if final is None else final.status,
        record.not_sent_reason if final is None else final.error,
        e2e_ms,
        ttft_ms,
        tpot_ms,
        sum(a.output_tokens for a in attempts),
        TokenSource.NONE.value if final is None else final.token_source.value,
        lag_ms,
        log,
        record.klass,
        None if record.conversation < 0 else record.conversation,
        record.turn or None,
    )


# The field names, once: ``dataclasses.fields`` on every outcome was a tenth of the cost of storing one.
_OUTCOME_FIELDS = tuple(f.name for f in dataclasses.fields(StoredOutcome))
OUTCOME_FIELDS = _OUTCOME_FIELDS  # the order of ``outcome_values``


def _refused_retry(record: RequestRecord) -> tuple[Mapping[str, Any], ...]:
    """A retry the attempt cap refused, logged as the attempt that was not sent, and why (none otherwise)."""
    if not (record.capped and record.attempts):
        return ()
    return ({"number": len(record.attempts) + 1, "not_sent": CAP_REASON},)


class TokenRole(StrEnum):
    VIEWER = "viewer"  # reads everything
    OPERATOR = "operator"  # also triggers and aborts runs
    ADMIN = "admin"  # also schedules, scenarios, tokens, the emergency stop

    def allows(self, needed: TokenRole) -> bool:
        order = (TokenRole.VIEWER, TokenRole.OPERATOR, TokenRole.ADMIN)
        return order.index(self) >= order.index(needed)


@dataclass(frozen=True, kw_only=True)
class ApiToken:
    """A bearer token's record; the token itself is never stored, only its SHA-256."""

    id: str
    name: str
    role: TokenRole
    token_hash: str
    created_at: datetime
    revoked_at: datetime | None = None


class CatchUp(StrEnum):
    SKIP = "skip"  # fire times missed while the service was down are dropped
    RUN_ONCE = "run_once"  # the latest missed fire time runs once at start-up


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A scenario (or a game day's suite) run on a cron schedule in a time zone."""

    id: str
    name: str
    cron: str  # five fields, minute first (crontab)
    timezone: str  # IANA name, e.g. Europe/Berlin
    scenario_name: str
    overrides: Overrides = field(default_factory=Overrides)
    enabled: bool = True
    catch_up: CatchUp = CatchUp.SKIP
    created_at: datetime
    created_by: str = ""
    last_fire_time: datetime | None = None  # the latest fire time handled (run queued, or skipped)
    kind: RunKind = RunKind.RUN  # what each fire queues
    sweep: SweepSpec | None = None  # its parameters when kind is SWEEP
    # Given: each fire starts this game day's suite (the document; scenario_name is then the suite's name)
    suite: Mapping[str, Any] | None = None
