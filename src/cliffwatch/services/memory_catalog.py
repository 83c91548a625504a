"""The small stores in memory: scenario versions, schedules, API tokens and the service-wide control switches
(the twin of ``adapters/store/misc_sql``). ``InMemoryStore`` holds their state; the choices they make are
listed in ``memory_store``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.security.redaction import Credential
from cliffwatch.domain.service.runs import ApiToken, Overrides, Run, ScenarioSource, ScenarioVersion, Schedule
from cliffwatch.services.store_values import EMERGENCY_STOP, as_utc, opt_utc, plain_json, stop_reason, without_nul


class InMemoryCatalog:
    """``ScenarioStore``, ``ScheduleStore``, ``TokenStore`` and ``ControlStore``, on ``InMemoryStore``'s dicts."""

    now: Callable[[], datetime]
    _versions: dict[tuple[str, str], ScenarioVersion]
    _latest: dict[str, str]
    _credentials: dict[tuple[str, str], tuple[Credential, ...]]
    _fingerprint_key: bytes
    _runs: dict[str, Run]
    _schedules: dict[str, Schedule]
    _tokens: dict[str, ApiToken]
    _control: dict[str, str]

    # ScenarioStore

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
        key = (name, content_hash)
        version = self._versions.get(key)
        if version is None:
            version = ScenarioVersion(name=name, content_hash=content_hash, document=plain_json(document),
                                      source=source, created_at=as_utc(at))  # fmt: skip
            if credentials:
                self._credentials[key] = tuple(Credential.from_dict(plain_json(c.to_dict())) for c in credentials)
        elif version.source is ScenarioSource.INLINE and source is not ScenarioSource.INLINE:
            version = replace(version, source=source)
        self._versions[key] = version
        if source is not ScenarioSource.INLINE:
            self._latest[name] = content_hash
        return version

    async def latest_scenario(self, name: str) -> ScenarioVersion | None:
        content_hash = self._latest.get(name)
        return None if content_hash is None else self._versions[(name, content_hash)]

    async def scenario_version(self, name: str, content_hash: str) -> ScenarioVersion | None:
        return self._versions.get((name, content_hash))

    async def list_scenarios(self) -> list[ScenarioVersion]:
        return [self._versions[(name, self._latest[name])] for name in sorted(self._latest)]

    async def scenario_credentials(self, name: str, content_hash: str) -> tuple[Credential, ...]:
        return self._credentials.get((name, content_hash), ())

    async def fingerprint_key(self) -> bytes:
        return self._fingerprint_key

    # ScheduleStore

    async def save_schedule(self, schedule: Schedule) -> Schedule:
        schedule = replace(
            schedule,
            created_at=as_utc(schedule.created_at),
            last_fire_time=opt_utc(schedule.last_fire_time),
            overrides=Overrides.from_dict(plain_json(schedule.overrides.to_dict())),
            suite=None if schedule.suite is None else plain_json(schedule.suite),
        )
        self._schedules[schedule.id] = schedule
        return schedule

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        return self._schedules.get(schedule_id)

    async def list_schedules(self) -> list[Schedule]:
        return sorted(self._schedules.values(), key=lambda s: (s.name, s.id))

    async def delete_schedule(self, schedule_id: str) -> bool:
        return self._schedules.pop(schedule_id, None) is not None

    async def mark_fired(self, schedule_id: str, fire_time: datetime) -> None:
        schedule = self._schedules.get(schedule_id)
        fire_time = as_utc(fire_time)
        if schedule is not None and (schedule.last_fire_time is None or schedule.last_fire_time < fire_time):
            self._schedules[schedule_id] = replace(schedule, last_fire_time=fire_time)

    # TokenStore

    async def add_token(self, token: ApiToken) -> None:
        if token.id in self._tokens or any(t.token_hash == token.token_hash for t in self._tokens.values()):
            raise ValueError(f"token {token.id!r} (or its hash) is already stored")
        self._tokens[token.id] = replace(token, created_at=as_utc(token.created_at),
                                         revoked_at=opt_utc(token.revoked_at))  # fmt: skip

    async def token_by_hash(self, token_hash: str) -> ApiToken | None:
        return next((t for t in self._tokens.values() if t.token_hash == token_hash), None)

    async def list_tokens(self) -> list[ApiToken]:
        return sorted(self._tokens.values(), key=lambda t: (t.created_at, t.id))

    async def revoke_token(self, token_id: str, at: datetime) -> bool:
        token = self._tokens.get(token_id)
        if token is None or token.revoked_at is not None:
            return False
        self._tokens[token_id] = replace(token, revoked_at=as_utc(at))
        return True

    # ControlStore

    async def emergency_stop(self) -> str | None:
        return self._control.get(EMERGENCY_STOP)

    async def set_emergency_stop(self, reason: str | None) -> None:
        if reason is None:
            stop = self._control.pop(EMERGENCY_STOP, None)
            if stop is not None:
                self._abort_queued(stop, self.now())
        else:
            self._control[EMERGENCY_STOP] = without_nul(reason)

    def _abort_queued(self, stop: str, now: datetime) -> None:
        reason = stop_reason(stop)
        for run in list(self._runs.values()):
            if run.status is RunStatus.QUEUED:
                self._runs[run.id] = replace(run, status=RunStatus.ABORTED, reason=reason, abort_requested=reason,
                                             finished_at=as_utc(now))  # fmt: skip
