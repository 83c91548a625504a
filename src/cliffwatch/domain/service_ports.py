"""The ports of the long-running service: its stores, the schedule leader's lock, and cron maths.

One SQL adapter implements every store (on SQLite or PostgreSQL); ``services/memory_store.py`` holds the
in-memory twins, and one contract test suite runs against all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.security.redaction import Credential
from cliffwatch.domain.service.runs import (
    ApiToken,
    CallerUsage,
    Run,
    RunEnd,
    RunPage,
    RunQuery,
    ScenarioSource,
    ScenarioVersion,
    Schedule,
    StoredOutcome,
)


class ScenarioStore(Protocol):
    async def save_scenario(
        self,
        *,
        name: str,
        document: Mapping[str, Any],
        content_hash: str,
        source: ScenarioSource,
        at: datetime,
        credentials: Sequence[Credential] = (),
    ) -> ScenarioVersion:
        """Stores this version (idempotent on name and hash) and, unless its source is INLINE, makes it the
        name's latest (an inline document sent with one run must not replace a shared scenario).

        ``document`` is masked (``domain.security.redaction``); ``credentials`` are what was masked out of it, kept in
        the same transaction apart from it, and read back only by ``scenario_credentials``."""

    async def scenario_credentials(self, name: str, content_hash: str) -> tuple[Credential, ...]:
        """The credentials masked out of a version's document, for the run to put back; () when it has none.
        Never shown: no view reads them."""

    async def fingerprint_key(self) -> bytes:
        """The key credentials are fingerprinted with in content hashes (``Redaction.content_hash``): made
        once, at the first call on a new store, and the same for every instance on it ever after."""

    async def latest_scenario(self, name: str) -> ScenarioVersion | None: ...

    async def scenario_version(self, name: str, content_hash: str) -> ScenarioVersion | None: ...

    async def list_scenarios(self) -> list[ScenarioVersion]:
        """The latest version of every scenario, by name."""


class RunStore(Protocol):
    async def create_run(self, run: Run) -> tuple[Run, bool]:
        """Inserts a queued run; True when created. When a run with the same idempotency key, or the same
        schedule and fire time, already exists, returns that one and False: a request is never doubled."""

    async def get_run(self, run_id: str) -> Run | None: ...

    async def run_with_key(self, idempotency_key: str) -> Run | None:
        """The run a request with this idempotency key queued, if any."""

    async def list_runs(self, query: RunQuery) -> RunPage:
        """Newest first, filtered, one page at a time (``next_cursor`` for the next)."""

    async def claim_run(self, *, owner: str, now: datetime, lease_until: datetime) -> Run | None:
        """Moves the oldest queued run to running for ``owner`` under a lease; never the same run twice,
        even with several instances claiming at once (``FOR UPDATE SKIP LOCKED`` on PostgreSQL). While the
        emergency stop is on it starts none, ends every queued run as aborted ("emergency stop: <reason>")
        and returns None."""

    async def renew_lease(self, run_id: str, *, owner: str, lease_until: datetime) -> bool:
        """Extends the lease; False when ``owner`` no longer holds the run (it was expired or taken)."""

    async def save_provisional_result(self, run_id: str, *, owner: str, result: Mapping[str, Any]) -> bool:
        """Replaces a running run's provisional result (a sweep's document so far, ``Run.provisional_result``);
        False, and nothing stored, when ``owner`` no longer holds the run (as ``renew_lease``). ``finish_run``
        with a result clears it; a run that ends without one (or whose lease expires) keeps it."""

    async def request_abort(self, run_id: str, reason: str) -> Run | None:
        """Asks a queued or running run to stop: a queued one ends at once as aborted; a running one is
        flagged for its worker. Returns the run as it now is (None when there is no such run)."""

    async def finish_run(self, run_id: str, *, owner: str, end: RunEnd) -> bool:
        """Records how the run ended, with its phases and time series; False when ``owner`` does not hold it.
        A run ``expire_leases`` interrupted while ``owner`` could not reach the store (interrupted, no result
        yet) takes ``owner``'s end once: the owner fenced itself in time, and its end is what happened."""

    async def expire_leases(self, now: datetime, *, grace: timedelta = ...) -> list[Run]:
        """Runs still running whose lease ended more than ``grace`` (default none) before ``now`` become
        interrupted; returns them. The grace is the time a fenced owner has to stop before it is presumed dead."""

    async def active_runs(self) -> list[Run]:
        """Queued and running runs, oldest first."""

    async def count_runs(self) -> Mapping[str, int]:
        """How many runs are in each status (every status present, zeros included), for /metrics."""

    async def caller_usage(self, triggered_by: str, *, since: datetime) -> CallerUsage:
        """What the API caller ``triggered_by`` holds: its queued runs (trigger api), and the distinct inline
        scenario versions its runs created at or after ``since`` point at, each with its first such run's
        creation time, oldest first."""

    async def add_outcomes(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        """Appends finished requests in one batch (called every second or so during a run)."""

    async def list_outcomes(self, run_id: str, *, after: int | None, limit: int) -> list[StoredOutcome]:
        """Outcomes by request id, the page after request id ``after``."""

    async def timeseries(self, run_id: str) -> list[Mapping[str, Any]]:
        """The per-second rows recorded when the run ended (empty before, or for an interrupted run)."""

    async def finished_runs(self, *, scenario: str | None, target_url: str | None, since: datetime | None) -> list[Run]:
        """Runs that ended with a score, oldest first: what trends are made of."""

    async def finished_sweeps(
        self, *, scenario: str | None, target_url: str | None, since: datetime | None
    ) -> list[Run]:
        """Sweeps that succeeded, oldest end first (``since`` on the end): what capacity trends are made of."""


class ScheduleStore(Protocol):
    async def save_schedule(self, schedule: Schedule) -> Schedule:
        """Inserts or replaces the schedule with this id."""

    async def get_schedule(self, schedule_id: str) -> Schedule | None: ...

    async def list_schedules(self) -> list[Schedule]: ...

    async def delete_schedule(self, schedule_id: str) -> bool: ...

    async def mark_fired(self, schedule_id: str, fire_time: datetime) -> None:
        """Records that ``fire_time`` was handled, so it is not handled again after a restart."""


class TokenStore(Protocol):
    async def add_token(self, token: ApiToken) -> None: ...

    async def token_by_hash(self, token_hash: str) -> ApiToken | None: ...

    async def list_tokens(self) -> list[ApiToken]: ...

    async def revoke_token(self, token_id: str, at: datetime) -> bool: ...


class ControlStore(Protocol):
    """Service-wide switches, shared by every instance on the database."""

    async def emergency_stop(self) -> str | None:
        """The reason the emergency stop is on, or None when runs may be accepted."""

    async def set_emergency_stop(self, reason: str | None) -> None:
        """Turns the stop on with ``reason``, or off (None); turning it off ends every run still queued as
        aborted by it, in the same transaction: a run caught in the queue must not fire on release."""


class LeaderLock(Protocol):
    """Held by at most one instance at a time (a PostgreSQL advisory lock; always held on SQLite)."""

    async def try_acquire(self) -> bool: ...

    async def release(self) -> None: ...


class CronCalendar(Protocol):
    """Cron maths (APScheduler's CronTrigger in production): pure, with the times passed in."""

    def validate(self, cron: str, timezone: str) -> str | None:
        """Why the expression or the time zone is not usable, or None."""

    def fire_times(self, cron: str, timezone: str, *, after: datetime, until: datetime) -> list[datetime]:
        """Fire times in ``(after, until]``, in order."""

    def next_fire_times(self, cron: str, timezone: str, *, after: datetime, count: int) -> list[datetime]: ...
