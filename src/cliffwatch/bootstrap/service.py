"""Composition root of the long-running service: settings in, a serving ``cliffwatch serve`` out.

Start-up order matters: migrations (under an advisory lock on PostgreSQL), then crash recovery — runs
whose lease expired become interrupted and their faults are removed through the ledger — then the bundled
scenarios, the worker, the schedule driver (after recovery, so a dead run does not count as an overlap),
and last the API. Shutdown runs the other way, with a grace period for running runs to roll back.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from aiohttp import web
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from cliffwatch.adapters.api.app import MAX_LINE_SIZE, create_app
from cliffwatch.adapters.api.context import ApiServices
from cliffwatch.adapters.api.metrics import ServiceMetrics
from cliffwatch.adapters.dashboard import mount_dashboard
from cliffwatch.adapters.dashboard.context import DashboardServices
from cliffwatch.adapters.documents import off_loop
from cliffwatch.adapters.documents.scenario_files import BUNDLED_DIR, load_document
from cliffwatch.adapters.faults.toxiproxy import ToxiproxyClient
from cliffwatch.adapters.network.target_policies import AllowlistPolicy
from cliffwatch.adapters.notify.webhooks import WebhookNotifier
from cliffwatch.adapters.runtime.descriptors import settle_descriptors
from cliffwatch.adapters.runtime.logs import LogProgress
from cliffwatch.adapters.scheduler.cron import ApschedulerCron
from cliffwatch.adapters.scheduler.driver import ScheduleDriver
from cliffwatch.adapters.store.engine import create_engine
from cliffwatch.adapters.store.ledger_sql import SqlFaultLedger
from cliffwatch.adapters.store.locks import leader_lock
from cliffwatch.adapters.store.migrate import is_current, upgrade
from cliffwatch.adapters.store.sessions_sql import SqlSessionStore
from cliffwatch.adapters.store.sql import SqlStore
from cliffwatch.bootstrap.run import ReadyRun, prepare_run, secret_resolver
from cliffwatch.bootstrap.sweep import SweepHandle, prepare_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.ports import RecordSink, ToxiproxyApi
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.service.runs import Run, Schedule, Trigger
from cliffwatch.services.catalog import ScenarioCatalog
from cliffwatch.services.gamedays import GamedaysService
from cliffwatch.services.notifications import RunNotices
from cliffwatch.services.ports import SweepObserver
from cliffwatch.services.reconcile import reconcile_faults
from cliffwatch.services.runs import RunRequest, RunsService
from cliffwatch.services.schedules import ScheduleService
from cliffwatch.services.sessions import SessionService
from cliffwatch.services.tokens import TokenService
from cliffwatch.services.trends import TrendsService
from cliffwatch.services.worker import RunWorker, WorkerSettings

log = structlog.get_logger(__name__)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class Service:
    """The running parts of one instance, for ``serve`` and for tests that drive a real instance."""

    settings: Settings
    engine: AsyncEngine
    store: SqlStore
    ledger: SqlFaultLedger
    runs: RunsService
    tokens: TokenService
    schedules: ScheduleService
    worker: RunWorker
    gamedays: GamedaysService
    app: web.Application


@asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[SqlStore]:
    """The SQL store at ``settings.database_url``, migrated to the current schema (for CLI commands)."""
    await upgrade(settings.database_url)
    engine = create_engine(settings.database_url)
    try:
        yield SqlStore(engine, now=utc_now)
    finally:
        await engine.dispose()


@asynccontextmanager
async def open_service(settings: Settings) -> AsyncIterator[Service]:
    """Every part of the service, started; stopped (runs rolled back within the grace period) on exit."""
    revision = await upgrade(settings.database_url)
    log.info("database ready", revision=revision)
    async with AsyncExitStack() as stack:
        engine = create_engine(settings.database_url)
        stack.push_async_callback(engine.dispose)
        store = SqlStore(engine, now=utc_now)
        ledger = SqlFaultLedger(engine, now=utc_now, grace=timedelta(seconds=settings.lease_grace_s))

        catalog = ScenarioCatalog(store, now=utc_now, rules=settings.redaction, offload=off_loop)
        await catalog.load_bundled({path.name: load_document(str(path)) for path in sorted(BUNDLED_DIR.glob("*.yaml"))})
        metrics = ServiceMetrics()

        # Each of the runs at once may open its share of the descriptors, the API and the database keeping theirs.
        descriptors = settle_descriptors(runs=settings.max_concurrent_runs, reserve=settings.fd_reserve)

        def prepare(scenario: Scenario, run_id: str, sink: RecordSink) -> AbstractAsyncContextManager[ReadyRun]:
            return prepare_run(settings, scenario, observer=LogProgress(), sink=sink, run_id=run_id, ledger=ledger,
                               descriptors=descriptors)  # fmt: skip

        def prepare_a_sweep(
            scenario: Scenario, spec: SweepSpec, run_id: str, steps: SweepObserver
        ) -> AbstractAsyncContextManager[SweepHandle]:
            return prepare_sweep(settings, scenario, spec, observer=LogProgress(), sweep_id=run_id,
                                 sweep_observer=steps, descriptors=descriptors)  # fmt: skip

        notifier = WebhookNotifier(settings.allowed_webhooks, secret_resolver(settings).resolve)
        notices = RunNotices(notify=notifier, deliveries=store)
        worker = RunWorker(runs=store, scenarios=store, prepare=prepare, prepare_sweep=prepare_a_sweep, now=utc_now,
                        count_outcomes=metrics.count_outcomes, notices=notices,
                        settings=WorkerSettings(owner=settings.instance_id,
                                                max_concurrent_runs=settings.max_concurrent_runs,
                                                lease_s=settings.lease_s,
                                                outcome_buffer=settings.outcome_buffer))  # fmt: skip
        # The worker is this instance's runs: an abort or an emergency stop reaches them through it at once,
        # even while the database cannot be reached.
        policy = AllowlistPolicy(settings.allowlist, listen=settings.proxy_listen, toxiproxy_url=settings.toxiproxy_url)
        runs = RunsService(runs=store, control=store, catalog=catalog, policy=policy, caps=settings.caps,
                           quotas=settings.quotas, now=utc_now, local=worker, webhooks=notifier)  # fmt: skip
        gamedays = GamedaysService(store=store, runs=runs, run_store=store, scenarios=store, control=store,
                                   owner=settings.instance_id, lease_s=settings.lease_s, now=utc_now,
                                   notify=notifier, deliveries=store)  # fmt: skip
        await recover(store, ledger, settings, gamedays)

        async def make_run(schedule: Schedule, fire_time: datetime) -> Run:
            return await runs.build(RunRequest(scenario=schedule.scenario_name, overrides=schedule.overrides,
                                               trigger=Trigger.SCHEDULE, triggered_by=schedule.id,
                                               schedule_id=schedule.id, fire_time=fire_time,
                                               sweep=schedule.sweep))  # fmt: skip

        async def check_suite(suite: Mapping[str, Any]) -> None:
            await gamedays.check(suite, trigger=Trigger.SCHEDULE, triggered_by="schedule")

        async def start_gameday(schedule: Schedule, fire_time: datetime) -> tuple[str, bool]:
            assert schedule.suite is not None  # the schedule service asks only for a suite's schedule
            gameday, created = await gamedays.start(schedule.suite, trigger=Trigger.SCHEDULE, triggered_by=schedule.id,
                                                    schedule_id=schedule.id, fire_time=fire_time)  # fmt: skip
            return gameday.id, created

        schedules = ScheduleService(schedules=store, runs=store, scenarios=store, calendar=ApschedulerCron(),
                                    make_run=make_run, now=utc_now, start_gameday=start_gameday,
                                    check_suite=check_suite)  # fmt: skip
        tokens = TokenService(store, now=utc_now)

        async def readiness() -> list[str]:
            problems = []
            try:
                async with engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
                if not await is_current(engine):
                    problems.append("the database schema is not at the current migration")
            except Exception as exc:
                problems.append(f"the database is unreachable: {type(exc).__name__}")
            return problems

        services = ApiServices(runs=runs, catalog=catalog, tokens=tokens, schedules=schedules,
                               trends=TrendsService(store, margin=settings.trend_regression_margin), run_store=store,
                               readiness=readiness, metrics=metrics, gamedays=gamedays,
                               deliveries=store)  # fmt: skip
        app = create_app(services, settings=settings)
        sessions = SessionService(SqlSessionStore(engine, now=utc_now), tokens, ttl_s=settings.ui_session_ttl_s,
                                  now=utc_now)  # fmt: skip
        mount_dashboard(app, DashboardServices(api=services, sessions=sessions), settings=settings)

        metrics.watch_active_runs(lambda: worker.active)
        worker_task = asyncio.create_task(worker.run_forever(), name="worker")
        reaper_task = asyncio.create_task(_reap(store, ledger, settings, gamedays), name="reaper")
        driver = ScheduleDriver(schedules, leader_lock(engine))
        await stack.enter_async_context(driver)

        async def stop_background() -> None:
            await gamedays.shutdown()  # first: no experiment is queued while the runs wind down
            await worker.shutdown(settings.shutdown_grace_s)
            await notices.drain(settings.shutdown_grace_s)  # the webhooks of the runs that just ended
            for task in (worker_task, reaper_task):
                task.cancel()
            await asyncio.gather(worker_task, reaper_task, return_exceptions=True)

        stack.push_async_callback(stop_background)
        yield Service(settings=settings, engine=engine, store=store, ledger=ledger, runs=runs, tokens=tokens,
                      schedules=schedules, worker=worker, gamedays=gamedays, app=app)  # fmt: skip


async def recover(store: SqlStore, ledger: SqlFaultLedger, settings: Settings, gamedays: GamedaysService) -> None:
    """Crash recovery: runs and game days of instances that stopped renewing their leases become interrupted
    (their outcomes so far stay; a game day's run in progress is aborted), and every fault left by a run that
    is not running is removed."""
    grace = timedelta(seconds=settings.lease_grace_s)
    for run in await store.expire_leases(utc_now(), grace=grace):
        log.warning("run interrupted: its instance stopped renewing the lease", run_id=run.id, owner=run.owner)
    await gamedays.recover(grace=grace)

    def connect(url: str) -> AbstractAsyncContextManager[ToxiproxyApi]:
        return ToxiproxyClient(url, timeout_s=settings.toxiproxy_timeout_s)

    try:
        report = await reconcile_faults(ledger, connect)
    except CliffwatchError as exc:
        log.error("could not reconcile leftover faults", error=str(exc))
        return
    if not report.is_empty():
        log.warning("leftover faults", summary=report.summary())


async def _reap(store: SqlStore, ledger: SqlFaultLedger, settings: Settings, gamedays: GamedaysService) -> None:
    """Recovery, periodically: another instance's crash is noticed within about half a lease."""
    while True:
        await asyncio.sleep(max(1.0, settings.lease_s / 2))
        with contextlib.suppress(CliffwatchError):
            await recover(store, ledger, settings, gamedays)


async def serve(settings: Settings, *, on_ready: Callable[[str], None] | None = None,
                stop: asyncio.Event | None = None) -> None:  # fmt: skip
    """Runs the service until ``stop`` is set (the CLI sets it on SIGTERM/SIGINT), then shuts down."""
    stop = stop or asyncio.Event()
    async with open_service(settings) as service:
        runner = web.AppRunner(service.app, handle_signals=False, access_log=None, max_line_size=MAX_LINE_SIZE)
        await runner.setup()
        try:
            site = web.TCPSite(runner, settings.listen_host, settings.listen_port)
            await site.start()
            url = _bound_url(runner, settings)
            # What start-up built lives as long as the process: frozen out of the garbage collector's sight,
            # a full collection (which a large request may set off, in the event loop's thread or the
            # documents thread alike) walks only what came since, not every module, table and template.
            gc.freeze()
            log.info("serving", url=url, instance=settings.instance_id)
            if on_ready is not None:
                on_ready(url)
            await stop.wait()
            log.info("shutting down", grace_s=settings.shutdown_grace_s)
        finally:
            # The API goes first: no new runs are accepted while the running ones roll back.
            await runner.cleanup()


def _bound_url(runner: web.AppRunner, settings: Settings) -> str:
    addresses: list[Any] = runner.addresses
    host, port = addresses[0][:2] if addresses else (settings.listen_host, settings.listen_port)
    shown = f"[{host}]" if ":" in str(host) else host
    return f"http://{shown}:{port}"
