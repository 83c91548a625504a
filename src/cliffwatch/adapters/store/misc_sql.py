"""The small stores in SQL: scenario versions, schedules, API tokens and the service-wide control switches.

Writes that may meet a concurrent twin (two instances loading the same bundled scenario at start-up, a
schedule saved twice) are upserts, never a read followed by an insert.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy import exc as sa_exc

from cliffwatch.adapters.store.database import Database
from cliffwatch.adapters.store.rows import scenario_of, schedule_of, schedule_row, token_of, token_row
from cliffwatch.adapters.store.runs_sql import abort_queued
from cliffwatch.adapters.store.tables import (
    api_tokens,
    control,
    scenario_credentials,
    scenario_latest,
    scenario_versions,
    schedules,
    store_keys,
)
from cliffwatch.domain.security.redaction import Credential
from cliffwatch.domain.service.runs import ApiToken, ScenarioSource, ScenarioVersion, Schedule
from cliffwatch.services.store_values import EMERGENCY_STOP, plain_json

FINGERPRINT_KEY = "fingerprint"


class SqlCatalog:
    _db: Database
    _fingerprint_key: bytes | None = None

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
        key = (scenario_versions.c.name == name, scenario_versions.c.content_hash == content_hash)
        version = {"name": name, "content_hash": content_hash, "document": plain_json(document),
                   "source": source.value, "created_at": at}  # fmt: skip
        async with self._db.write() as conn:
            await conn.execute(self._db.insert(scenario_versions).values(version).on_conflict_do_nothing())
            if credentials:
                kept = {"name": name, "content_hash": content_hash,
                        "credentials": plain_json([c.to_dict() for c in credentials])}  # fmt: skip
                await conn.execute(self._db.insert(scenario_credentials).values(kept).on_conflict_do_nothing())
            if source is not ScenarioSource.INLINE:
                # a version first sent inline and now shared takes the shared source: it becomes a latest
                inline = scenario_versions.c.source == ScenarioSource.INLINE.value
                await conn.execute(update(scenario_versions).where(*key, inline).values(source=source.value))
                latest = self._db.insert(scenario_latest).values(name=name, content_hash=content_hash)
                await conn.execute(latest.on_conflict_do_update(index_elements=[scenario_latest.c.name],
                                                                set_={"content_hash": content_hash}))  # fmt: skip
            row = (await conn.execute(select(scenario_versions).where(*key))).mappings().one()
        return scenario_of(row)

    async def latest_scenario(self, name: str) -> ScenarioVersion | None:
        found = await self._latest(scenario_latest.c.name == name)
        return found[0] if found else None

    async def scenario_version(self, name: str, content_hash: str) -> ScenarioVersion | None:
        version = select(scenario_versions).where(
            scenario_versions.c.name == name, scenario_versions.c.content_hash == content_hash
        )
        async with self._db.read() as conn:
            row = (await conn.execute(version)).mappings().first()
        return None if row is None else scenario_of(row)

    async def list_scenarios(self) -> list[ScenarioVersion]:
        return await self._latest(None)

    async def scenario_credentials(self, name: str, content_hash: str) -> tuple[Credential, ...]:
        kept = select(scenario_credentials.c.credentials).where(
            scenario_credentials.c.name == name, scenario_credentials.c.content_hash == content_hash
        )
        async with self._db.read() as conn:
            found = (await conn.execute(kept)).scalar()
        return () if found is None else tuple(Credential.from_dict(c) for c in found)

    async def fingerprint_key(self) -> bytes:
        if self._fingerprint_key is None:
            query = select(store_keys.c.value).where(store_keys.c.name == FINGERPRINT_KEY)
            async with self._db.write() as conn:
                # an upsert that keeps the first: instances starting together all end up with the same key
                made = {"name": FINGERPRINT_KEY, "value": secrets.token_hex(32), "created_at": self._db.now()}
                await conn.execute(self._db.insert(store_keys).values(made).on_conflict_do_nothing())
                value = (await conn.execute(query)).scalar_one()
            self._fingerprint_key = bytes.fromhex(value)
        return self._fingerprint_key

    async def _latest(self, where: Any) -> list[ScenarioVersion]:
        latest = select(scenario_versions).join(
            scenario_latest,
            (scenario_latest.c.name == scenario_versions.c.name)
            & (scenario_latest.c.content_hash == scenario_versions.c.content_hash),
        )
        if where is not None:
            latest = latest.where(where)
        async with self._db.read() as conn:
            rows = (await conn.execute(latest.order_by(scenario_versions.c.name))).mappings()
            return [scenario_of(row) for row in rows]

    # ScheduleStore

    async def save_schedule(self, schedule: Schedule) -> Schedule:
        row = schedule_row(schedule)
        upsert = self._db.insert(schedules).values(row)
        upsert = upsert.on_conflict_do_update(index_elements=[schedules.c.id],
                                              set_={k: v for k, v in row.items() if k != "id"})  # fmt: skip
        async with self._db.write() as conn:
            await conn.execute(upsert)
            stored = (await conn.execute(select(schedules).where(schedules.c.id == schedule.id))).mappings().one()
        return schedule_of(stored)

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(schedules).where(schedules.c.id == schedule_id))).mappings().first()
        return None if row is None else schedule_of(row)

    async def list_schedules(self) -> list[Schedule]:
        async with self._db.read() as conn:
            rows = (await conn.execute(select(schedules).order_by(schedules.c.name, schedules.c.id))).mappings()
            return [schedule_of(row) for row in rows]

    async def delete_schedule(self, schedule_id: str) -> bool:
        async with self._db.write() as conn:
            return (await conn.execute(delete(schedules).where(schedules.c.id == schedule_id))).rowcount == 1

    async def mark_fired(self, schedule_id: str, fire_time: datetime) -> None:
        # only forward: a fire time handled late must not make an earlier one look unhandled
        later = or_(schedules.c.last_fire_time.is_(None), schedules.c.last_fire_time < fire_time)
        async with self._db.write() as conn:
            await conn.execute(
                update(schedules).where(schedules.c.id == schedule_id, later).values(last_fire_time=fire_time)
            )

    # TokenStore

    async def add_token(self, token: ApiToken) -> None:
        try:
            async with self._db.write() as conn:
                await conn.execute(api_tokens.insert().values(token_row(token)))
        except sa_exc.IntegrityError as exc:
            raise ValueError(f"token {token.id!r} (or its hash) is already stored") from exc

    async def token_by_hash(self, token_hash: str) -> ApiToken | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(api_tokens).where(api_tokens.c.token_hash == token_hash))).mappings()
            found = row.first()
        return None if found is None else token_of(found)

    async def list_tokens(self) -> list[ApiToken]:
        async with self._db.read() as conn:
            rows = await conn.execute(select(api_tokens).order_by(api_tokens.c.created_at, api_tokens.c.id))
            return [token_of(row) for row in rows.mappings()]

    async def revoke_token(self, token_id: str, at: datetime) -> bool:
        revoke = update(api_tokens).where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
        async with self._db.write() as conn:
            return (await conn.execute(revoke.values(revoked_at=at))).rowcount == 1

    # ControlStore

    async def emergency_stop(self) -> str | None:
        async with self._db.read() as conn:
            return (await conn.execute(select(control.c.value).where(control.c.key == EMERGENCY_STOP))).scalar()

    async def set_emergency_stop(self, reason: str | None) -> None:
        async with self._db.write() as conn:
            if reason is None:
                released = delete(control).where(control.c.key == EMERGENCY_STOP).returning(control.c.value)
                stop = (await conn.execute(released)).scalar()
                if stop is not None:  # what slipped into the queue while it was on must not fire now
                    await conn.execute(abort_queued(stop, self._db.now()))
                return
            values = {"value": reason, "updated_at": self._db.now()}
            upsert = self._db.insert(control).values(key=EMERGENCY_STOP, **values)
            await conn.execute(upsert.on_conflict_do_update(index_elements=[control.c.key], set_=values))
