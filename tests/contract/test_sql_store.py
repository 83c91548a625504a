"""What only the SQL store has to get right: the queryable rows it keeps of a run's end, SQLite's connection
set-up, errors translated at its edge, the liveness of a CLI run's process, and the PostgreSQL leader lock
passing on when its holder's connection dies."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import select, text
from store_kit import T0, Backend, make_run, scored_end, seconds, sql_only

from cliffwatch.adapters.faults.fault_ledger import Owner
from cliffwatch.adapters.store import SqlFaultLedger, SqlStore, create_engine
from cliffwatch.adapters.store.locks import LEADER_LOCK_KEY, PgLeaderLock
from cliffwatch.adapters.store.tables import ledger_runs, run_phases, run_seconds
from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.domain.outcomes import OUTCOMES
from cliffwatch.domain.results.result import RunStatus

LEASE = seconds(30)


@sql_only()
async def test_a_runs_phases_and_seconds_are_kept_as_queryable_rows(backend: Backend) -> None:
    await backend.store.create_run(make_run("r1"))
    assert await backend.store.claim_run(owner="i", now=T0, lease_until=T0 + LEASE) is not None
    end = scored_end("r1", finished_at=T0 + seconds(4))
    assert await backend.store.finish_run("r1", owner="i", end=end)
    engine = backend.engines[0]
    async with engine.connect() as conn:
        phases = (await conn.execute(select(run_phases).order_by(run_phases.c.phase))).mappings().all()
        rows = (await conn.execute(select(run_seconds).order_by(run_seconds.c.t))).mappings().all()
    assert end.result is not None
    documented = end.result["phases"]
    assert [(p["name"], p["role"], p["offered"], p["on_time"], p["late"]) for p in phases] == [
        ("calm", "baseline", 10, 10, 0),
        ("burst", "stress", 20, 10, 10),
    ]
    burst = phases[1]
    assert burst["goodput_rps"] == documented[1]["goodput_rps"] == 5.0
    assert burst["tokens_per_s"] == documented[1]["output_tokens_per_s"]
    assert burst["e2e_p99_ms"] == documented[1]["latency_ms"]["e2e"]["p99"] > 1_000
    assert burst["ttft_p50_ms"] == documented[1]["latency_ms"]["ttft"]["p50"]
    assert burst["amplification"] == 1.0
    assert [r["t"] for r in rows] == [s["t"] for s in end.timeseries] == list(range(len(end.timeseries)))
    for row, second in zip(rows, end.timeseries, strict=True):
        assert (row["offered"], row["on_time"], row["late"], row["e2e_p99_ms"]) == (
            second["offered"],
            second["on_time"],
            second["late"],
            second["e2e_p99_ms"],
        )
        assert row["row"] == second


@sql_only()
async def test_each_outcome_class_has_its_count_column_redirects_and_incompletes_included(backend: Backend) -> None:
    """Redirects (migration 0005) and incompletes (0007) are counted in run_phases and run_seconds like every
    other class."""
    await backend.store.create_run(make_run("r1"))
    assert await backend.store.claim_run(owner="i", now=T0, lease_until=T0 + LEASE) is not None
    end = scored_end("r1", finished_at=T0 + seconds(4), redirects=True, incompletes=True)
    assert await backend.store.finish_run("r1", owner="i", end=end)
    async with backend.engines[0].connect() as conn:
        phases = (await conn.execute(select(run_phases).order_by(run_phases.c.phase))).mappings().all()
        rows = (await conn.execute(select(run_seconds))).mappings().all()
    assert [(p["offered"], p["on_time"], p["late"], p["redirect"], p["incomplete"]) for p in phases] == [
        (10, 10, 0, 0, 0),
        (20, 0, 10, 5, 5),
    ]
    assert sum(row["redirect"] for row in rows) == 5
    assert sum(row["incomplete"] for row in rows) == 5
    for phase in phases:
        assert sum(phase[o.value] for o in OUTCOMES) == phase["offered"]


@sql_only("sqlite")
async def test_sqlite_connections_use_wal_a_busy_timeout_and_foreign_keys(backend: Backend) -> None:
    async with backend.engines[0].connect() as conn:
        settings = [
            (await conn.execute(text(f"PRAGMA {name}"))).scalar()
            for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
        ]
    assert settings == ["wal", 5000, 1, 1]  # synchronous 1 is NORMAL


async def test_a_relative_sqlite_path_is_fixed_against_the_working_directory_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    engine = create_engine("sqlite+aiosqlite:///./state/cliffwatch.db")
    assert engine.url.database == str(tmp_path / "state" / "cliffwatch.db")
    await engine.dispose()


@pytest.mark.parametrize(
    ("url", "shown", "reason"),
    [
        ("sqlite+aiosqlite:////nonexistent-dir/cliffwatch.db", "sqlite+aiosqlite:////nonexistent-dir/cliffwatch.db",
         "unable to open database file"),
        ("postgresql+asyncpg://cw:s3cret@127.0.0.1:{port}/cw", "postgresql+asyncpg://cw:***@127.0.0.1:{port}/cw",
         "connection refused"),
    ],
)  # fmt: skip
async def test_an_unreachable_database_is_reported_by_its_url_without_the_password(
    url: str, shown: str, reason: str
) -> None:
    port = _closed_port()
    store = SqlStore(create_engine(url.format(port=port)))
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await store.get_run("r1")
    finally:
        await store.engine.dispose()
        await _aiosqlite_threads_done()
    message = str(caught.value)
    assert message.startswith(f"the database {shown.format(port=port)} is unavailable: ")
    assert reason in message.lower()
    assert "s3cret" not in message


async def test_a_database_refusing_the_login_is_unavailable_too(postgres_database: str) -> None:
    url = postgres_database.replace("postgres@", "nobody-here:pw@")
    store = SqlStore(create_engine(url))
    try:
        with pytest.raises(StoreUnavailable, match='role "nobody-here" does not exist'):
            await store.emergency_stop()
    finally:
        await store.engine.dispose()


@sql_only()
async def test_a_cli_run_whose_process_died_is_not_running(backend: Backend) -> None:
    exited = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await exited.wait()
    ledger = SqlFaultLedger(backend.engine(), now=backend.clock)
    here = Owner.current()
    owners = {
        "dead": (exited.pid, here.start_time),
        "alive": (os.getpid(), here.start_time),
        "reused-pid": (os.getpid(), (here.start_time or 0) + 1),
    }
    async with backend.engines[0].begin() as conn:
        for run_id, (pid, start_time) in owners.items():
            row = {"host": here.host, "pid": pid, "start_time": start_time, "boot_id": here.boot_id, "started_at": T0}
            await conn.execute(ledger_runs.insert().values(run_id=run_id, **row))
    assert not await ledger.is_running("dead")
    assert await ledger.is_running("alive")
    assert not await ledger.is_running("reused-pid")  # the pid now belongs to a process started later


@sql_only("postgres")
async def test_the_leader_lock_passes_on_when_its_holders_connection_dies(backend: Backend) -> None:
    first, second = backend.leader_lock(), backend.leader_lock()
    assert isinstance(first, PgLeaderLock)
    assert await first.try_acquire()
    assert not await second.try_acquire()
    async with backend.engines[0].begin() as conn:
        holders = text(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND ((classid::bigint << 32) | objid::bigint) = :key"
        )
        holder = (await conn.execute(holders, {"key": LEADER_LOCK_KEY})).scalar_one()
        assert (await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": holder})).scalar()
    assert await second.try_acquire()
    assert not await first.try_acquire()  # it learns its connection, and the lock, are gone
    assert not first.held
    await second.release()
    assert await first.try_acquire()
    await first.release()


@sql_only("postgres")
async def test_a_run_claimed_under_a_lock_held_by_another_transaction_is_skipped_not_waited_for(
    backend: Backend,
) -> None:
    for i in range(2):
        await backend.store.create_run(make_run(f"r{i}", at=T0 + seconds(i)))
    async with backend.engine().begin() as locker:
        await locker.execute(text("SELECT id FROM runs WHERE id = 'r0' FOR UPDATE"))  # someone is claiming r0
        claimed = await backend.another_store().claim_run(owner="i", now=T0, lease_until=T0 + LEASE)
        assert claimed is not None
        assert claimed.id == "r1"
    run = await backend.store.get_run("r0")
    assert run is not None
    assert run.status is RunStatus.QUEUED


async def _aiosqlite_threads_done() -> None:
    """Waits for aiosqlite's worker threads to end. After a failed connect, aiosqlite stops its thread without
    waiting for it; the thread then reports to the test's event loop, which must still be open by then."""
    for thread in threading.enumerate():
        if "_connection_worker_thread" in thread.name:
            await asyncio.to_thread(thread.join, 5)


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends: nothing listens there
