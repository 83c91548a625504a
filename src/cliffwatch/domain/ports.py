"""The small interfaces the services are written against; adapters and in-memory twins implement them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.scenario.faults import FaultEvent, FaultSpec, ProxyState, ToxicState
from cliffwatch.domain.security.redaction import Credential
from cliffwatch.domain.security.secrets import SecretRef
from cliffwatch.domain.server.server_view import ServerView
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
from cliffwatch.domain.service.sessions import UiSession
from cliffwatch.domain.traffic.generator_health import GeneratorReport
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.workload.prompt_sizing import PromptSizing


class Clock(Protocol):
    def now_ns(self) -> int:
        """Monotonic nanoseconds (``time.perf_counter_ns`` in production)."""

    async def sleep(self, seconds: float) -> None: ...

    def wall(self) -> datetime:
        """The current UTC wall-clock time, for timestamps people read; never for measuring."""


class SecretResolver(Protocol):
    def resolve(self, reference: SecretRef) -> str:
        """The secret ``reference`` names, as read now; raises ``SecretUnavailable`` naming the reference and
        why (unset, not allowed, unreadable), never a value."""


class GeneratorListener(Protocol):
    def dispatched(self, request: PlannedRequest, at_ns: int) -> None: ...

    def finished(self, record: RequestRecord) -> None: ...


@dataclass(frozen=True, kw_only=True)
class LiveCounters:
    dispatched: int  # logical requests started so far
    in_flight: int  # attempts outstanding now
    tokens: float  # output tokens received so far, from every attempt


class LoadGenerator(Protocol):
    async def preflight(self) -> PromptSizing:
        """Checks the target answers at all; raises ``TargetUnreachable`` before any load is sent."""

    async def run(
        self, plan: Iterable[PlannedRequest], *, start_ns: int, listener: GeneratorListener
    ) -> GeneratorReport:
        """Sends the plan open-loop from ``start_ns``; returns when every request has finished."""

    def stop(self, reason: str, *, cancel_in_flight: bool = False) -> None:
        """Sends nothing more (the rest of the plan finishes as not_sent); in-flight requests finish,
        or are cut short when ``cancel_in_flight``."""

    def live(self) -> LiveCounters: ...


class ServerWatcher(Protocol):
    """Watches the server's own view (its Prometheus page) during a run; never fails the run."""

    async def check(self) -> str | None:
        """One look before any load: None when it worked, else why not (a note: the run goes on)."""

    def start(self, origin_ns: int) -> None:
        """Starts watching; times are counted from ``origin_ns`` on the run's clock (the run's start)."""

    async def stop(self) -> ServerView | None:
        """Stops watching; what was seen since ``start`` (None: nothing is watched)."""

    async def backlog(self) -> float | None:
        """One look now: the requests the server holds, waiting and running (its own gauges), or None when it
        does not say (nothing watched, a failed scrape, an engine without those signals)."""


class RecordSink(Protocol):
    def add(self, record: RequestRecord) -> None:
        """Buffers one finished request; must not block (it is called on the generator's hot path)."""

    async def flush(self) -> None:
        """Persists what was buffered."""


class FaultInjector(Protocol):
    async def check(self) -> None:
        """Raises ``FaultInjectionFailed`` when faults cannot be applied (before any load is sent)."""

    async def apply(self, phase: int, faults: Sequence[FaultSpec]) -> list[FaultEvent]:
        """Switches the phase's faults on, one event each; a fault that could not be applied gives an event
        with ``ok`` False (and the rest are not attempted), so the runner can abort and roll back."""

    async def remove(self, phase: int) -> list[FaultEvent]:
        """Removes the faults of ``phase``; must be safe to call when none are active."""

    async def remove_all(self) -> list[FaultEvent]:
        """Removes every fault this injector applied; called in ``finally``, shielded from cancellation."""


@dataclass(frozen=True, kw_only=True)
class Progress:
    """One live progress line."""

    elapsed_s: float
    total_s: float
    phase: str
    role: str
    offered_per_s: float
    on_time_ratio: float | None  # over the last few seconds of finished requests
    tokens_per_s: float
    in_flight: int


class ProgressObserver(Protocol):
    def progress(self, progress: Progress) -> None: ...

    def note(self, message: str) -> None: ...


class ToxiproxyApi(Protocol):
    """The part of Toxiproxy's HTTP API cliffwatch uses. Every call raises ``FaultInjectionFailed`` naming
    the proxy, the toxic and the status when it cannot be done (after a bounded number of retries)."""

    url: str

    async def version(self) -> str: ...

    async def get_proxy(self, name: str) -> ProxyState | None:
        """The proxy with its toxics, or None when there is no such proxy."""

    async def create_proxy(self, *, name: str, listen: str, upstream: str) -> ProxyState: ...

    async def delete_proxy(self, name: str) -> bool:
        """Deletes the proxy (and its toxics); False when it was already gone."""

    async def add_toxic(self, proxy: str, toxic: ToxicState) -> ToxicState: ...

    async def remove_toxic(self, proxy: str, name: str) -> bool:
        """Removes the toxic; False when it was already gone (which is as good as removed)."""

    async def toxics(self, proxy: str) -> list[ToxicState]: ...


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """Something cliffwatch created on a Toxiproxy server: a toxic, or (``toxic`` None) a proxy."""

    run_id: str
    server: str  # the Toxiproxy API URL
    proxy: str
    toxic: str | None = None
    managed: bool = False  # the server was started by the run itself, so it does not outlive the run

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.server, self.proxy, self.toxic)


class FaultLedger(Protocol):
    """A durable record of every fault cliffwatch creates, so none outlives a crash unnoticed.

    An entry is recorded *before* the toxic (or proxy) is created and marked removed only once its removal
    is confirmed; a crash between the two leaves it outstanding for the reconciler.
    """

    async def run_started(self, run_id: str) -> None:
        """Marks ``run_id`` as running in this process (its owner)."""

    async def run_finished(self, run_id: str) -> None: ...

    async def planned(self, entry: LedgerEntry) -> None: ...

    async def removed(self, entry: LedgerEntry) -> None: ...

    async def outstanding(self) -> list[LedgerEntry]:
        """Entries planned and not yet confirmed removed, oldest first."""

    async def is_running(self, run_id: str) -> bool:
        """Whether the run's owner is still alive and the run has not finished."""

    async def compact(self) -> None:
        """Forgets the runs that are settled (finished, or their owner dead, with nothing outstanding);
        what ``outstanding`` and ``is_running`` answer is unchanged. The reconciler calls it after a pass."""


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


class SessionStore(Protocol):
    async def add_session(self, session: UiSession) -> None:
        """Stores a new session (its hash is new: ids are random)."""

    async def session_by_hash(self, id_hash: str, *, now: datetime) -> tuple[UiSession, ApiToken] | None:
        """The session and its token; None when there is no such session, it expired before ``now``, or its
        token is revoked (or gone)."""

    async def delete_session(self, id_hash: str) -> bool:
        """Removes the session (logout); True when there was one."""

    async def delete_expired_sessions(self, now: datetime) -> int:
        """Removes every session expired before ``now``, and those of revoked tokens; returns how many."""
