"""Composition root: settings and a scenario in, a ready ``RunService`` (and the URLs it uses) out.

Everything a run needs is started here and stopped in reverse order when the run's block ends: the
built-in target, Toxiproxy (an existing server, or a private one started for the run), the run's proxies,
the HTTP client, its pool within the run's share of the file descriptors (``adapters/descriptors``). The
fault ledger brackets the run, so a crash at any point leaves a record the next
start-up acts on (``clean_up_leftover_faults``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import structlog

from cliffwatch.adapters.builtin_target import BuiltinTarget
from cliffwatch.adapters.clock import MonotonicClock
from cliffwatch.adapters.descriptors import DescriptorBudget, descriptor_budget, within_budget
from cliffwatch.adapters.fault_ledger import FileFaultLedger
from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.target_access import ensure_allowed
from cliffwatch.adapters.toxiproxy import ToxiproxyClient
from cliffwatch.adapters.toxiproxy_faults import ToxiproxyFaultInjector
from cliffwatch.adapters.toxiproxy_server import ManagedToxiproxy, find_toxiproxy_server
from cliffwatch.config import Settings
from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.ports import FaultInjector, FaultLedger, ProgressObserver, RecordSink, ToxiproxyApi
from cliffwatch.domain.scenario import Scenario
from cliffwatch.services.memory import NoFaultInjector, NullSink
from cliffwatch.services.reconcile import ReconcileReport, reconcile_faults
from cliffwatch.services.runner import RunService

log = structlog.get_logger(__name__)

NO_FAULTS = "this scenario declares no proxies or faults"


@dataclass(frozen=True, kw_only=True)
class PreparedRun:
    service: RunService
    run_id: str
    target_url: str  # the target itself
    load_url: str  # where the load goes: the target, or the proxy in front of it


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


async def start_target(
    stack: AsyncExitStack, settings: Settings, scenario: Scenario, observer: ProgressObserver
) -> str:
    """The URL of the scenario's target: the built-in one started on ``stack`` (stopped when it closes), or a
    real one once the allowlist lets it be loaded (``TargetNotAllowed`` otherwise)."""
    if scenario.target.is_builtin:
        assert scenario.target.builtin is not None
        observer.note("starting the built-in simulated target")
        return await stack.enter_async_context(BuiltinTarget(scenario.target.builtin))
    await ensure_allowed(scenario.target.url, settings.allowlist)
    return scenario.target.url


@asynccontextmanager
async def prepare_run(
    settings: Settings,
    scenario: Scenario,
    *,
    observer: ProgressObserver,
    sink: RecordSink | None = None,
    run_id: str | None = None,
    ledger: FaultLedger | None = None,
    descriptors: DescriptorBudget | None = None,
) -> AsyncIterator[PreparedRun]:
    """Starts what the run needs and stops it afterwards; raises before any load when something is missing
    (a target outside the allowlist, an unreachable Toxiproxy).

    The run's connection pool is cut to its share of ``descriptors`` (the process's budget settled at start;
    by default, one run's share of the limit as it is), and the run says so."""
    run_id = run_id or new_run_id()
    budget = descriptors or descriptor_budget(runs=1, reserve=settings.fd_reserve)
    scenario, capped = pool_within(scenario, budget, observer)
    clock = MonotonicClock()
    async with AsyncExitStack() as stack:
        url = await start_target(stack, settings, scenario, observer)
        for proxy in scenario.proxies:
            if proxy.upstream is not None:  # the load reaches the upstream through the proxy
                await ensure_allowed(f"http://{proxy.upstream}", settings.allowlist)
        faults: FaultInjector = NoFaultInjector(NO_FAULTS)
        load_url = url
        if scenario.proxies or scenario.needs_faults():
            server_url, managed = await stack.enter_async_context(toxiproxy_server(settings, observer))
            api = await stack.enter_async_context(ToxiproxyClient(server_url, timeout_s=settings.toxiproxy_timeout_s))
            await api.version()  # unreachable or hanging: a clear error now, before any load
            ledger = ledger or FileFaultLedger(settings.fault_ledger_path)
            injector = ToxiproxyFaultInjector(
                api, ledger, run_id=run_id, scenario=scenario, clock=clock, managed=managed
            )
            await ledger.run_started(run_id)
            stack.push_async_callback(_finish_run, ledger, run_id)
            stack.push_async_callback(_tear_down, injector, observer)
            load_url = await injector.set_up(url)
            faults = injector
        executor = await stack.enter_async_context(HttpExecutor(scenario, load_url))
        service = RunService(
            clock=clock,
            generator=OpenLoopGenerator(scenario, executor, clock),
            faults=faults,
            sink=sink or NullSink(),
            observer=observer,
            notes=() if capped is None else (capped,),
        )
        yield PreparedRun(service=service, run_id=run_id, target_url=url, load_url=load_url)


def pool_within(
    scenario: Scenario, budget: DescriptorBudget, observer: ProgressObserver
) -> tuple[Scenario, str | None]:
    """The scenario with its pool within the budget, and the note (told and logged) when it was cut."""
    within, note = within_budget(scenario, budget)
    if note is not None:
        observer.note(note)
        log.warning("connection pool capped", asked=scenario.client.pool_size, pool_size=within.client.pool_size,
                    limit=budget.soft, runs=budget.runs)  # fmt: skip
    return within, note


@asynccontextmanager
async def toxiproxy_server(settings: Settings, observer: ProgressObserver) -> AsyncIterator[tuple[str, bool]]:
    """The Toxiproxy API to use and whether cliffwatch manages it: the configured server, or a private
    one started for the run (which dies with this process, taking its toxics with it)."""
    if settings.toxiproxy_url is not None:
        yield settings.toxiproxy_url, False
        return
    if find_toxiproxy_server(settings.toxiproxy_bin) is None:
        raise FaultInjectionFailed(proxy="-", toxic=None, reason=toxiproxy_missing())
    async with ManagedToxiproxy(settings.toxiproxy_bin) as server:
        observer.note(f"started a private Toxiproxy at {server.url}")
        yield server.url, True


def toxiproxy_missing() -> str:
    return (
        "Toxiproxy is not available: set CLIFFWATCH_TOXIPROXY_URL to a running server, or install "
        "toxiproxy-server (`make toxiproxy` builds it into .tools/bin)"
    )


async def toxiproxy_unavailable(settings: Settings) -> str | None:
    """Why fault scenarios cannot run here, or None when they can (a quick look, no server started)."""
    if settings.toxiproxy_url is None:
        return None if find_toxiproxy_server(settings.toxiproxy_bin) is not None else toxiproxy_missing()
    try:
        async with ToxiproxyClient(settings.toxiproxy_url, timeout_s=settings.toxiproxy_timeout_s, retries=0) as api:
            await api.version()
    except FaultInjectionFailed as exc:
        return str(exc)
    return None


async def clean_up_leftover_faults(settings: Settings) -> ReconcileReport:
    """Removes the toxics and proxies of runs that died without removing them (the start-up reconciler)."""

    def connect(url: str) -> AbstractAsyncContextManager[ToxiproxyApi]:
        return ToxiproxyClient(url, timeout_s=settings.toxiproxy_timeout_s)

    return await reconcile_faults(FileFaultLedger(settings.fault_ledger_path), connect)


async def _tear_down(injector: ToxiproxyFaultInjector, observer: ProgressObserver) -> None:
    # Faults were removed by the runner; what is left is the run's proxies.
    for problem in await asyncio.shield(injector.tear_down()):
        observer.note(f"could not delete a proxy (the next start-up will): {problem}")


async def _finish_run(ledger: FaultLedger, run_id: str) -> None:
    await asyncio.shield(ledger.run_finished(run_id))
