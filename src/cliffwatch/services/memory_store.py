"""In-memory twins of the service's stores: ``InMemoryStore`` (every store port, the small ones in
``memory_catalog``, game days in ``memory_gamedays``, webhook deliveries in ``memory_deliveries``), its fault
ledger and its leader lock (those two in ``memory_ledger``). Service and API tests use them; the contract suite
holds the SQL store to them.

They keep what a database keeps: JSON values as a JSON column returns them (lists for tuples, non-finite
numbers as null), times as aware UTC datetimes (naive ones are refused), NUL characters in free text as
U+FFFD (``store_values``, shared with the SQL store). The choices the ports leave open are made here and in
``adapters/store`` alike:

- ``create_run``: a run id already taken by a different request raises ``ValueError``;
- ``request_abort``: a queued run's reason is also its ``abort_requested``; a running run keeps the first
  reason asked for; a finished run is returned unchanged;
- ``claim_run`` while the emergency stop is on, and ``set_emergency_stop(None)`` releasing it, end every
  queued run as aborted ("emergency stop: <reason>", as a queued run's abort), and the claim starts none;
- ``finish_run``: an end whose status is not terminal is a ``ValueError``; a "timeseries" key left in the
  result is dropped (the rows are kept apart, from ``RunEnd.timeseries``); an end with a result clears the
  provisional one, an end without keeps it; runs with no lease never expire;
- ``save_provisional_result``: stored as a result is (JSON-plain, without "timeseries");
- ``add_outcomes``: ``RunNotFound`` for an unknown run; a request id already stored keeps its first record
  (a flush retried after a commit whose answer was lost must not fail);
- ``list_runs``: ``since`` inclusive, ``until`` exclusive (on ``created_at``); a cursor not of ours is a
  ``ValueError``, as is a ``limit`` (here or in ``list_outcomes``) below 1;
- ``finished_runs``: terminal runs with a score, ``since`` on ``finished_at``, oldest end first;
  ``finished_sweeps`` likewise for sweeps that succeeded (with a result document);
- ``save_scenario`` keeps the first document and time of a (name, hash), but an INLINE version saved again
  as BUNDLED or REGISTERED takes that source, as it becomes a name's latest;
- ``mark_fired`` only moves ``last_fire_time`` forward, and ignores an unknown schedule;
- ``add_deliveries`` and ``list_deliveries``: a ``ValueError`` unless exactly one of a run and a game day is
  named; deliveries come back in the order they were added;
- ``add_token``: ``ValueError`` for an id or hash already stored; ``token_by_hash`` finds revoked tokens
  too (``revoked_at`` says so); ``revoke_token`` is False for an unknown or already revoked token.
"""

from __future__ import annotations

import bisect
import secrets
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from cliffwatch.domain.errors import RunNotFound
from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.security.redaction import Credential
from cliffwatch.domain.service.runs import (
    ApiToken,
    CallerUsage,
    Run,
    RunEnd,
    RunKind,
    RunPage,
    RunQuery,
    ScenarioSource,
    ScenarioVersion,
    Schedule,
    StoredOutcome,
    Trigger,
)
from cliffwatch.services.memory_catalog import InMemoryCatalog
from cliffwatch.services.memory_deliveries import InMemoryDeliveries
from cliffwatch.services.memory_gamedays import InMemoryGamedays
from cliffwatch.services.memory_ledger import InMemoryLeaderLock, InMemoryStoreFaultLedger, LedgerState
from cliffwatch.services.store_values import (
    EMERGENCY_STOP,
    as_utc,
    check_limit,
    decode_cursor,
    encode_cursor,
    json_text,
    lease_reason,
    opt_text,
    opt_utc,
    plain_json,
    result_document,
    stored_outcome,
    stored_run,
    utc_now,
    without_nul,
)

__all__ = [  # the value helpers are re-exported for callers that imported them from here
    "EMERGENCY_STOP",
    "InMemoryLeaderLock",
    "InMemoryStore",
    "InMemoryStoreFaultLedger",
    "as_utc",
    "check_limit",
    "decode_cursor",
    "encode_cursor",
    "json_text",
    "lease_reason",
    "plain_json",
    "result_document",
    "stored_outcome",
    "stored_run",
    "utc_now",
    "without_nul",
]


class InMemoryStore(InMemoryCatalog, InMemoryGamedays, InMemoryDeliveries):
    """Every store port in dicts. Each method runs without awaiting in between, so on one event loop it is
    atomic, as a transaction is: a run is claimed once, however many tasks claim at the same time."""

    def __init__(self, *, now: Callable[[], datetime] = utc_now) -> None:
        self.now = now  # for what the ports do not stamp themselves: an abort's end
        self._versions: dict[tuple[str, str], ScenarioVersion] = {}
        self._latest: dict[str, str] = {}
        self._credentials: dict[tuple[str, str], tuple[Credential, ...]] = {}
        self._fingerprint_key = secrets.token_bytes(32)
        self._runs: dict[str, Run] = {}
        self._outcomes: dict[str, dict[int, StoredOutcome]] = {}
        self._outcome_ids: dict[str, list[int]] = {}  # sorted, for keyset pages
        self._seconds: dict[str, list[Mapping[str, Any]]] = {}
        self._schedules: dict[str, Schedule] = {}
        self._gamedays = {}
        self._deliveries = []
        self._tokens: dict[str, ApiToken] = {}
        self._control: dict[str, str] = {}
        self._leader: InMemoryLeaderLock | None = None
        self._ledger = LedgerState()

    # RunStore

    async def create_run(self, run: Run) -> tuple[Run, bool]:
        run = stored_run(run)
        key, fire = run.idempotency_key, (run.schedule_id, run.fire_time)
        same_key = next((r for r in self._runs.values() if key is not None and r.idempotency_key == key), None)
        same_fire = next((r for r in self._runs.values() if None not in fire and (r.schedule_id, r.fire_time) == fire),
                         None)  # fmt: skip
        existing = same_key or same_fire  # the same key first, then the same fire
        if existing is not None:
            return existing, False
        if run.id in self._runs:
            raise ValueError(f"run id {run.id!r} is already taken")
        self._runs[run.id] = run
        return run, True

    async def get_run(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    async def run_with_key(self, idempotency_key: str) -> Run | None:
        return next((r for r in self._runs.values() if r.idempotency_key == idempotency_key), None)

    async def list_runs(self, query: RunQuery) -> RunPage:
        check_limit(query.limit)
        after = None if query.cursor is None else decode_cursor(query.cursor)
        since, until = opt_utc(query.since), opt_utc(query.until)
        found = [r for r in self._runs.values()
                 if (query.scenario is None or r.scenario_name == query.scenario)
                 and (query.status is None or r.status is query.status)
                 and (query.kind is None or r.kind is query.kind)
                 and (query.schedule_id is None or r.schedule_id == query.schedule_id)
                 and (since is None or r.created_at >= since) and (until is None or r.created_at < until)
                 and (after is None or (r.created_at, r.id) < after)]  # fmt: skip
        found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        page = found[: query.limit]
        more = len(found) > query.limit
        return RunPage(runs=tuple(page), next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None)

    async def claim_run(self, *, owner: str, now: datetime, lease_until: datetime) -> Run | None:
        stop = self._control.get(EMERGENCY_STOP)
        if stop is not None:
            self._abort_queued(stop, now)
            return None
        queued = [r for r in self._runs.values() if r.status is RunStatus.QUEUED]
        if not queued:
            return None
        oldest = min(queued, key=lambda r: (r.created_at, r.id))
        claimed = replace(oldest, status=RunStatus.RUNNING, owner=owner, lease_until=as_utc(lease_until),
                          started_at=as_utc(now))  # fmt: skip
        self._runs[claimed.id] = claimed
        return claimed

    async def renew_lease(self, run_id: str, *, owner: str, lease_until: datetime) -> bool:
        run = self._runs.get(run_id)
        if run is None or run.status is not RunStatus.RUNNING or run.owner != owner:
            return False
        self._runs[run_id] = replace(run, lease_until=as_utc(lease_until))
        return True

    async def save_provisional_result(self, run_id: str, *, owner: str, result: Mapping[str, Any]) -> bool:
        run = self._runs.get(run_id)
        if run is None or run.status is not RunStatus.RUNNING or run.owner != owner:
            return False
        self._runs[run_id] = replace(run, provisional_result=result_document(result))
        return True

    async def request_abort(self, run_id: str, reason: str) -> Run | None:
        reason = without_nul(reason)
        run = self._runs.get(run_id)
        if run is None:
            return None
        if run.status is RunStatus.QUEUED:
            run = replace(run, status=RunStatus.ABORTED, reason=reason, abort_requested=reason,
                          finished_at=as_utc(self.now()))  # fmt: skip
        elif run.status is RunStatus.RUNNING and run.abort_requested is None:
            run = replace(run, abort_requested=reason)
        self._runs[run_id] = run
        return run

    async def finish_run(self, run_id: str, *, owner: str, end: RunEnd) -> bool:
        if not end.status.terminal:
            raise ValueError(f"a run ends as succeeded, aborted, interrupted or failed, not {end.status.value}")
        run = self._runs.get(run_id)
        if run is None or run.owner != owner:
            return False
        # A run reaped while its owner could not reach the store (interrupted, no result) takes its owner's end.
        reaped = run.status is RunStatus.INTERRUPTED and run.result is None
        if run.status is not RunStatus.RUNNING and not reaped:
            return False
        self._runs[run_id] = replace(
            run,
            status=end.status,
            finished_at=as_utc(end.finished_at),
            reason=opt_text(end.reason),
            score=end.score,
            score_version=end.score_version,
            passed=end.passed,
            verdicts=tuple(end.verdicts),
            result=result_document(end.result),
            usable_rps=end.usable_rps,
            provisional_result=None if end.result is not None else run.provisional_result,
        )
        self._seconds[run_id] = sorted(plain_json(list(end.timeseries)), key=lambda row: row["t"])
        return True

    async def expire_leases(self, now: datetime, *, grace: timedelta = timedelta(0)) -> list[Run]:
        now = as_utc(now)
        expired = []
        for run in sorted(self._runs.values(), key=lambda r: (r.created_at, r.id)):
            if run.status is RunStatus.RUNNING and run.lease_until is not None and run.lease_until < now - grace:
                run = replace(run, status=RunStatus.INTERRUPTED, finished_at=as_utc(now),
                              reason=lease_reason(run.owner, run.lease_until))  # fmt: skip
                self._runs[run.id] = run
                expired.append(run)
        return expired

    async def active_runs(self) -> list[Run]:
        active = [r for r in self._runs.values() if not r.status.terminal]
        return sorted(active, key=lambda r: (r.created_at, r.id))

    async def count_runs(self) -> Mapping[str, int]:
        counts = Counter(r.status.value for r in self._runs.values())
        return {status.value: counts[status.value] for status in RunStatus}

    async def caller_usage(self, triggered_by: str, *, since: datetime) -> CallerUsage:
        mine = [r for r in self._runs.values() if r.trigger is Trigger.API and r.triggered_by == triggered_by]
        queued = sum(1 for r in mine if r.status is RunStatus.QUEUED)
        first: dict[tuple[str, str], datetime] = {}
        for run in mine:
            version = self._versions.get((run.scenario_name, run.scenario_hash))
            if run.created_at >= as_utc(since) and version is not None and version.source is ScenarioSource.INLINE:
                key = (run.scenario_name, run.scenario_hash)
                first[key] = min(first.get(key, run.created_at), run.created_at)
        return CallerUsage(queued=queued, documents=tuple(sorted(first.values())))

    async def add_outcomes(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        if run_id not in self._runs:
            raise RunNotFound(run_id)
        kept = self._outcomes.setdefault(run_id, {})
        ids = self._outcome_ids.setdefault(run_id, [])
        for record in records:
            if record.id not in kept:
                kept[record.id] = stored_outcome(run_id, record)
                bisect.insort(ids, record.id)

    async def list_outcomes(self, run_id: str, *, after: int | None, limit: int) -> list[StoredOutcome]:
        check_limit(limit)
        ids = self._outcome_ids.get(run_id, [])
        start = 0 if after is None else bisect.bisect_right(ids, after)
        return [self._outcomes[run_id][i] for i in ids[start : start + limit]]

    async def timeseries(self, run_id: str) -> list[Mapping[str, Any]]:
        return list(self._seconds.get(run_id, []))

    async def finished_runs(self, *, scenario: str | None, target_url: str | None, since: datetime | None) -> list[Run]:
        since = opt_utc(since)
        found = [r for r in self._runs.values()
                 if r.status.terminal and r.score is not None and r.finished_at is not None
                 and (scenario is None or r.scenario_name == scenario)
                 and (target_url is None or r.target_url == target_url)
                 and (since is None or r.finished_at >= since)]  # fmt: skip
        return sorted(found, key=lambda r: (r.finished_at, r.id))

    async def finished_sweeps(
        self, *, scenario: str | None, target_url: str | None, since: datetime | None
    ) -> list[Run]:
        since = opt_utc(since)
        found = [r for r in self._runs.values()
                 if r.kind is RunKind.SWEEP and r.status is RunStatus.SUCCEEDED and r.result is not None
                 and r.finished_at is not None
                 and (scenario is None or r.scenario_name == scenario)
                 and (target_url is None or r.target_url == target_url)
                 and (since is None or r.finished_at >= since)]  # fmt: skip
        return sorted(found, key=lambda r: (r.finished_at, r.id))

    # Companions sharing this store's state (a database's other users)

    def leader_lock(self) -> InMemoryLeaderLock:
        """A lock for one instance; of all the locks of this store, at most one is held at a time."""
        return InMemoryLeaderLock(self)

    def fault_ledger(
        self, *, now: Callable[[], datetime] | None = None, grace: timedelta = timedelta(0)
    ) -> InMemoryStoreFaultLedger:
        return InMemoryStoreFaultLedger(self, now=now or self.now, grace=grace)
