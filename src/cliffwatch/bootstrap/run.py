"""Composition root: settings and a scenario in, a ready ``RunService`` (and the URLs it uses) out.

Everything a run needs is started here and stopped in reverse order when the run's block ends: the
built-in target, Toxiproxy (an existing server, or a private one started for the run), the run's proxies,
the HTTP client, its pool within the run's share of the file descriptors (``adapters/descriptors``). The
fault ledger brackets the run, so a crash at any point leaves a record the next start-up acts on
(``clean_up_leftover_faults``). Before any of it, the scenario is prepared (``adapters.workload.preparation``:
its files read, its prompts planned, its worst case judged against the caps, off the event loop), here for
``cliffwatch run`` and the service's worker alike, and the generator gets the run's attempt cap.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import structlog

from cliffwatch.adapters.distributed.coordinator import ShardedGenerator
from cliffwatch.adapters.distributed.setup import placement, worker_pool
from cliffwatch.adapters.faults.fault_ledger import FileFaultLedger
from cliffwatch.adapters.faults.toxiproxy import ToxiproxyClient
from cliffwatch.adapters.faults.toxiproxy_faults import ToxiproxyFaultInjector
from cliffwatch.adapters.faults.toxiproxy_server import ManagedToxiproxy, find_toxiproxy_server
from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.network.target_access import Destinations, Place, first_reachable
from cliffwatch.adapters.network.target_policies import upstream_problem
from cliffwatch.adapters.notify.webhooks import WebhookNotifier
from cliffwatch.adapters.runtime.builtin_target import BuiltinTarget
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.adapters.runtime.descriptors import DescriptorBudget, descriptor_budget, within_budget
from cliffwatch.adapters.runtime.logs import remember_secrets
from cliffwatch.adapters.runtime.secret_sources import LocalSecrets
from cliffwatch.adapters.server_metrics.scraper import PrometheusWatcher
from cliffwatch.adapters.workload.preparation import prepare_off_loop
from cliffwatch.config import Settings
from cliffwatch.domain.errors import CliffwatchError, FaultInjectionFailed, ScenarioInvalid, TargetNotAllowed
from cliffwatch.domain.ports import (
    Clock,
    FaultInjector,
    FaultLedger,
    LoadGenerator,
    ProgressObserver,
    RecordSink,
    SecretResolver,
    ServerWatcher,
    ToxiproxyApi,
)
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.security.allowlist import Allowlist
from cliffwatch.domain.security.masking import mask_url
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.domain.workload.prepared import PreparedRun
from cliffwatch.services.memory import NoFaultInjector, NoServerWatcher, NullSink
from cliffwatch.services.reconcile import ReconcileReport, reconcile_faults
from cliffwatch.services.runner import RunService
from cliffwatch.services.secrets import resolve_secrets, secret_values

log = structlog.get_logger(__name__)

NO_FAULTS = "this scenario declares no proxies or faults"


@dataclass(frozen=True, kw_only=True)
class ReadyRun:
    """A run prepared and its parts started: execute it with ``service``, planning from ``prepared.workload``."""

    service: RunService
    run_id: str
    target_url: str  # the target itself, as shown (its password masked)
    load_url: str  # where the load goes: the target, or the proxy in front of it (as shown)
    prepared: PreparedRun


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def attempt_cap(settings: Settings, clock: Clock) -> TokenBucket:
    """The run's attempt cap: a full bucket at the settings' attempt limit, on the run's clock."""
    return TokenBucket(settings.caps.attempt_limit, clock.now_ns())


def secret_resolver(settings: Settings) -> SecretResolver:
    """Reads secret references from what config handed over: the allowed variables, the allowed directories."""
    return LocalSecrets(
        environment=settings.secret_environment, env_names=settings.secret_env, directories=settings.secret_dirs
    )


def with_secrets(settings: Settings, scenario: Scenario, secrets: SecretResolver | None = None) -> Scenario:
    """The scenario as its run sends it, every secret reference read now (``SecretsUnavailable`` before any
    load when one cannot be); the secrets it sends are masked in log lines from now on."""
    resolved = resolve_secrets(scenario, secrets or secret_resolver(settings))
    remember_secrets(secret_values(scenario, resolved, settings.redaction))
    return resolved


async def start_target(
    stack: AsyncExitStack, scenario: Scenario, observer: ProgressObserver, destinations: Destinations
) -> str:
    """The URL of the scenario's target: the built-in one started on ``stack`` (stopped when it closes), or a
    real one once the allowlist lets it be loaded; either way admitted to ``destinations``, a real target's
    host resolved here, once, and pinned for the run. Raises ``TargetNotAllowed`` (or ``TargetUnreachable``
    for an allowed name that does not resolve)."""
    if scenario.target.is_builtin:
        assert scenario.target.builtin is not None
        observer.note("starting the built-in simulated target")
        url = await stack.enter_async_context(BuiltinTarget(scenario.target.builtin))
        destinations.own(url)
        return url
    await destinations.admit(scenario.target.url, field="target.url")
    return scenario.target.url


async def server_watcher(
    stack: AsyncExitStack, scenario: Scenario, target_url: str, destinations: Destinations, clock: Clock
) -> ServerWatcher:
    """The run's watcher of the target's own metrics (``target.metrics``), its session open on ``stack``; the
    metrics URL is admitted like the target (``TargetNotAllowed`` before any load when the allowlist refuses
    it). Without ``target.metrics``, a watcher that watches nothing."""
    metrics = scenario.target.metrics
    if metrics is None:
        return NoServerWatcher()
    url = scenario.target.metrics_url or f"{target_url.rstrip('/')}/metrics"  # the built-in target's own page
    await destinations.admit(url, field="target.metrics.url")
    watcher = PrometheusWatcher(metrics, url, destinations=destinations, shown_url=mask_url(url), clock=clock)
    return await stack.enter_async_context(watcher)


@dataclass(frozen=True, kw_only=True)
class CheckedProxies:
    upstreams: dict[str, str]  # by proxy name: the upstream's checked address, ip:port
    listens: dict[str, str]  # by proxy name: the checked address it listens on, ip:port (Toxiproxy's to bind)
    listen: Allowlist  # the proxy listen allowlist, with the addresses the listen hosts were checked on


async def check_proxies(settings: Settings, scenario: Scenario, url: str, destinations: Destinations) -> CheckedProxies:
    """The scenario's proxies checked before any is created: each listens only where
    ``CLIFFWATCH_ALLOWED_PROXY_LISTEN`` allows (loopback by default), on the address its host was checked as
    (Toxiproxy is given that IP, never the name as written), and its upstream (the target's unless it names
    another) passes the target allowlist and is pinned like the target. Raises ``TargetNotAllowed``.
    """
    upstreams: dict[str, str] = {}
    listens: dict[str, str] = {}
    bound: list[str] = []
    for index, proxy in enumerate(scenario.proxies):
        listen = f"http://{proxy.listen}"
        try:
            addresses = await Destinations(settings.proxy_listen).admit(listen)
        except TargetNotAllowed as exc:
            raise TargetNotAllowed(listen, f"proxy {proxy.name} listen address: {exc.reason}",
                                   field=f"proxies[{index}].listen") from exc  # fmt: skip
        # Toxiproxy reports the address it bound, and a wildcard is reached on loopback (``with_address``).
        bound += [*addresses, *(("127.0.0.1",) if {"0.0.0.0", "::"} & set(addresses) else ())]
        # IPv4 first where the name has both: a container without IPv6 still lists ::1 for localhost.
        chosen = sorted(addresses, key=lambda a: ":" in a)[0] if addresses else Place.of(listen).host
        listens[proxy.name] = _address(chosen, Place.of(listen).port)
        upstream = url if proxy.upstream is None else f"http://{proxy.upstream}"
        port = Place.of(upstream).port
        timeout_s = scenario.client.connect_timeout_ms / 1000.0
        field = "target.url" if proxy.upstream is None else f"proxies[{index}].upstream"
        addresses = await destinations.admit(upstream, field=field)
        if (problem := await upstream_problem(addresses, settings.toxiproxy_url)) is not None:
            raise TargetNotAllowed(upstream, f"proxy {proxy.name} upstream: {problem}", field=field)
        address = await first_reachable(addresses, port, timeout_s=timeout_s)
        upstreams[proxy.name] = _address(address, port)
    return CheckedProxies(upstreams=upstreams, listens=listens, listen=settings.proxy_listen.including(bound))


def _address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


async def check_webhooks(settings: Settings, scenario: Scenario) -> None:
    """Raises ``ScenarioInvalid`` naming ``notify[i].webhook`` / ``.secret`` for a webhook that could not be told
    (outside ``CLIFFWATCH_ALLOWED_WEBHOOKS``, denied, a secret unreadable): refused before the load, not found out
    as a failed delivery when the run ends."""
    if scenario.notify:
        notifier = WebhookNotifier(settings.allowed_webhooks, secret_resolver(settings).resolve)
        if problems := await notifier.problems(scenario.notify):
            raise ScenarioInvalid(problems, source=scenario.name)


@asynccontextmanager
async def prepare_run(
    settings: Settings,
    scenario: Scenario,
    *,
    observer: ProgressObserver,
    sink: RecordSink | None = None,
    run_id: str | None = None,
    ledger: FaultLedger | None = None,
    secrets: SecretResolver | None = None,
    descriptors: DescriptorBudget | None = None,
    prepared: PreparedRun | None = None,
) -> AsyncIterator[ReadyRun]:
    """Starts what the run needs and stops it afterwards; raises before any load when something is missing
    (a secret, a target or proxy outside the allowlist, a worst case over the caps, an unreachable Toxiproxy).
    The scenario is prepared first (``adapters.workload.preparation``, off the event loop) unless ``prepared``
    already is: every file it names read within the bounds, the caps judged on what its files make it send.
    Every place the run connects to is admitted here and pinned (``Destinations``): the HTTP client reaches
    nothing else.

    The scenario's secret references are read first, into the HTTP client's copy only: the run's result
    and everything it shows come from ``scenario`` as given, and every URL it shows has no password. The
    run's connection pool is cut to its share of ``descriptors`` (the process's budget settled at start; by
    default, one run's share of the limit as it is), and the run says so.
    """
    await check_webhooks(settings, scenario)
    if prepared is None:
        prepared = await prepare_off_loop(scenario, caps=settings.caps, limits=settings.preparation,
                                          data_dirs=settings.data_dirs)  # fmt: skip
    scenario = prepared.workload  # what is sent: the scenario with what its files hold
    run_id = run_id or new_run_id()
    budget = descriptors or descriptor_budget(runs=1, reserve=settings.fd_reserve)
    scenario, capped = pool_within(scenario, budget, observer)
    clock = MonotonicClock()
    sent = with_secrets(settings, scenario, secrets)
    async with AsyncExitStack() as stack:
        destinations = Destinations(settings.allowlist)
        url = await start_target(stack, scenario, observer, destinations)
        proxies = await check_proxies(settings, scenario, url, destinations)
        faults: FaultInjector = NoFaultInjector(NO_FAULTS)
        load_url = url
        if scenario.proxies or scenario.needs_faults():
            server_url, managed = await stack.enter_async_context(toxiproxy_server(settings, observer))
            api = await stack.enter_async_context(ToxiproxyClient(server_url, timeout_s=settings.toxiproxy_timeout_s))
            await api.version()  # unreachable or hanging: a clear error now, before any load
            await destinations.recheck()  # a private Toxiproxy's free port may be a place admitted above
            ledger = ledger or FileFaultLedger(settings.fault_ledger_path)
            injector = ToxiproxyFaultInjector(
                api, ledger, run_id=run_id, scenario=scenario, clock=clock, managed=managed
            )
            await ledger.run_started(run_id)
            stack.push_async_callback(_finish_run, ledger, run_id)
            stack.push_async_callback(_tear_down, injector, observer)
            load_url = await injector.set_up(url, upstreams=proxies.upstreams, listens=proxies.listens)
            faults = injector
            if load_url != url:  # through a proxy: the address it bound, checked above, pinned for the run
                await destinations.admit(load_url, proxies.listen)
        watcher = await server_watcher(stack, scenario, url, destinations, clock)
        cap = attempt_cap(settings, clock)
        executor = await stack.enter_async_context(
            HttpExecutor(sent, load_url, destinations=destinations, cap=cap, **prepared.executor_options())
        )
        generator: LoadGenerator = OpenLoopGenerator(scenario, executor, clock, cap=cap)
        placed = await placement(scenario, most=settings.caps.max_workers, ray_address=settings.ray_address,
                                 ray_host=settings.ray_host)  # fmt: skip
        await destinations.recheck()  # a Ray cluster joined just now: its services are control planes too
        if placed.count:
            pool = await stack.enter_async_context(worker_pool(
                sent, executor, load_url=load_url, destinations=destinations,
                allowlist=await destinations.shared_allowlist(), cap=cap.limit,
                secrets=tuple(secret_values(scenario, sent, settings.redaction)), redaction=settings.redaction,
                log_level=settings.log_level, count=placed.count,
                launcher=placed.launcher,
            ))  # fmt: skip
            generator = ShardedGenerator(pool, scenario, clock)
        if placed.note is not None:
            observer.note(placed.note)
        service = RunService(
            clock=clock,
            generator=generator,
            faults=faults,
            sink=sink or NullSink(),
            observer=observer,
            notes=(() if capped is None else (capped,)) + prepared.notes,
            workload=prepared.workload,
            watcher=watcher,
        )
        yield ReadyRun(service=service, run_id=run_id, target_url=mask_url(url), load_url=mask_url(load_url),
                       prepared=prepared)  # fmt: skip


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
    # Bookkeeping: a run whose ledger is down at its end (a database outage) still ends with its result.
    try:
        await asyncio.shield(ledger.run_finished(run_id))
    except CliffwatchError as exc:
        log.warning("the fault ledger could not record the run's end", run_id=run_id, error=str(exc))
