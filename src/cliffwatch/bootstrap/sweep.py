"""Composition root for capacity sweeps: settings, a scenario and a sweep spec in, a ready sweep out.

Used by ``cliffwatch sweep`` and by the service's worker. The target is checked against the allowlist
exactly as for a run, and started (the built-in one) or reached (a real one) once for the whole sweep,
before any load: a target that is not allowed or does not answer raises here, not in the first step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from cliffwatch.adapters.distributed.pool import WorkerPool
from cliffwatch.adapters.distributed.setup import placement, worker_pool
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.loadgen.sweep_steps import HttpStepRunner
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.adapters.runtime.descriptors import DescriptorBudget, descriptor_budget
from cliffwatch.adapters.workload.preparation import prepare_off_loop
from cliffwatch.bootstrap.run import (
    attempt_cap,
    check_webhooks,
    new_run_id,
    pool_within,
    server_watcher,
    start_target,
    with_secrets,
)
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.sweep_plan import sweep_client_scenario
from cliffwatch.domain.capacity.sweep_spec import SweepMode, SweepSpec, variant_policy
from cliffwatch.domain.errors import CliffwatchError, Problem, ScenarioInvalid
from cliffwatch.domain.ports import Clock, ProgressObserver, SecretResolver
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.security.masking import mask_url
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing
from cliffwatch.services.ports import StepRunner, SweepObserver
from cliffwatch.services.secrets import secret_values
from cliffwatch.services.sweep import SweepOutcome, SweepReport, SweepService

__all__ = ["SweepHandle", "SweepOutcome", "SweepReport", "prepare_sweep"]


class SweepHandle:
    """A prepared sweep: ``run`` it once; ``interrupt`` or ``abort`` it from a signal handler or a watcher."""

    def __init__(
        self,
        *,
        sweep_id: str,
        scenario: Scenario,
        spec: SweepSpec,
        service: SweepService,
        clock: Clock,
        target_url: str,
        prompt_sizing: PromptSizing = WORDS_SIZING,
    ) -> None:
        self.sweep_id = sweep_id
        self.prompt_sizing = prompt_sizing  # the preflight's: how every step's prompts are sized
        self.scenario = scenario
        self.spec = spec
        self.service = service
        self.clock = clock
        self.target_url = target_url

    def interrupt(self) -> None:
        self.service.interrupt()

    def abort(self, reason: str) -> None:
        self.service.abort(reason)

    async def run(self) -> SweepOutcome:
        """Runs every variant and returns the outcome; a failure during the sweep (the target stopped
        answering) ends it as FAILED with the variants finished before it, rather than raising."""
        started_at = self.clock.wall()
        status, reason = RunStatus.SUCCEEDED, None
        try:
            await self.service.run()
        except CliffwatchError as exc:
            status, reason = RunStatus.FAILED, str(exc)
        if self.service.interrupted:
            status, reason = RunStatus.INTERRUPTED, "the sweep was stopped before its end"
        elif self.service.abort_reason is not None:
            status, reason = RunStatus.ABORTED, self.service.abort_reason
        return SweepOutcome(
            sweep_id=self.sweep_id,
            scenario=self.scenario,
            spec=self.spec,
            status=status,
            reason=reason,
            reports=tuple(self.service.reports),
            started_at=started_at,
            finished_at=self.clock.wall(),
            target_url=self.target_url,
            prompt_sizing=self.prompt_sizing,
        )


@asynccontextmanager
async def prepare_sweep(
    settings: Settings,
    scenario: Scenario,
    spec: SweepSpec,
    *,
    observer: ProgressObserver,
    sweep_id: str | None = None,
    sweep_observer: SweepObserver | None = None,
    secrets: SecretResolver | None = None,
    descriptors: DescriptorBudget | None = None,
) -> AsyncIterator[SweepHandle]:
    """Starts what the sweep needs (the built-in target, one HTTP session) and stops it afterwards.

    Raises before any load: ``RunRefused`` for a sweep over the caps, ``TargetNotAllowed`` for a target
    outside the allowlist, ``TargetUnreachable`` when it does not answer, ``BuiltinTargetFailed`` when the
    simulator does not start, ``SecretsUnavailable`` when a secret reference cannot be read (read once, here,
    into the HTTP client's copy only). The scenario's proxies and faults are not used (a sweep measures the
    target as it is), so Toxiproxy is not needed. A sweep sets its own arrivals (a trace phase is not replayed)
    and does not draw from a dataset yet: a scenario with ``request.dataset`` is refused, rather than swept with
    synthetic prompts it did not ask for.
    """
    await check_webhooks(settings, scenario)
    if scenario.target.request.dataset is not None:
        raise ScenarioInvalid(
            [Problem(path="target.request.dataset", message="sweeps do not draw from datasets yet: sweep a copy "
                     "with prompt_tokens and max_tokens set to the dataset's lengths")],
            source=scenario.name,
        )  # fmt: skip
    prepared = await prepare_off_loop(scenario, caps=settings.caps, limits=settings.preparation,
                                      data_dirs=settings.data_dirs, sweep=spec)  # fmt: skip
    sweep_id = sweep_id or new_run_id()
    clock = MonotonicClock()
    cap = attempt_cap(settings, clock)  # one for the whole sweep: back-to-back steps share its burst
    sent = with_secrets(settings, scenario, secrets)
    async with AsyncExitStack() as stack:
        destinations = Destinations(settings.allowlist)
        url = await start_target(stack, scenario, observer, destinations)
        shown = mask_url(url)
        # One HTTP client for every step: in concurrency mode its pool must hold the highest level's connections,
        # within the sweep's share of the file descriptors (a cut is told and logged, like a run's).
        budget = descriptors or descriptor_budget(runs=1, reserve=settings.fd_reserve)
        client, _ = pool_within(sweep_client_scenario(sent, spec), budget, observer)
        executor = await stack.enter_async_context(
            HttpExecutor(client, url, destinations=destinations, cap=cap, **prepared.executor_options())
        )
        sizing = await executor.preflight()
        if sizing.failure is not None:
            observer.note(f"prompt sizes cannot be vouched for: {sizing.failure}")
        watcher = await server_watcher(stack, scenario, url, destinations, clock)
        pool = await sweep_workers(stack, settings, scenario, spec, client, executor, observer,
                                   url=url, destinations=destinations, cap=cap)  # fmt: skip

        def runner_for(variant: str) -> AbstractAsyncContextManager[StepRunner]:
            return _runner(
                HttpStepRunner(
                    scenario=scenario,
                    spec=spec,
                    variant=variant,
                    retry=variant_policy(variant),
                    executor=executor,
                    clock=clock,
                    observer=observer,
                    target_url=shown,
                    sweep_id=sweep_id,
                    cap=cap,
                    watcher=watcher,
                    pool=pool,
                )
            )

        service = SweepService(scenario=scenario, spec=spec, runner_for=runner_for, observer=observer,
                               sweep_observer=sweep_observer, clock=clock)  # fmt: skip
        yield SweepHandle(sweep_id=sweep_id, scenario=scenario, spec=spec, service=service, clock=clock,
                          target_url=shown, prompt_sizing=sizing)  # fmt: skip


async def sweep_workers(
    stack: AsyncExitStack, settings: Settings, scenario: Scenario, spec: SweepSpec, sent: Scenario,
    executor: HttpExecutor, observer: ProgressObserver, *, url: str, destinations: Destinations, cap: TokenBucket,
) -> WorkerPool | None:  # fmt: skip
    """The sweep's worker processes (``client.workers``), started once for all its steps; None without them,
    or for a concurrency sweep, whose closed-loop clients stay in the sweep's own process (it says so)."""
    if sent.client.workers is None:
        return None
    if spec.mode is SweepMode.CONCURRENCY:
        observer.note("client.workers is not used by a concurrency sweep: its clients run in this process")
        return None
    placed = await placement(sent, most=settings.caps.max_workers, ray_address=settings.ray_address,
                             ray_host=settings.ray_host)  # fmt: skip
    await destinations.recheck()  # a Ray cluster joined just now: its services are control planes too
    if not placed.count:
        observer.note(placed.note or "")
        return None
    pool = await stack.enter_async_context(worker_pool(
        sent, executor, load_url=url, destinations=destinations,
        allowlist=await destinations.shared_allowlist(), cap=cap.limit,
        secrets=tuple(secret_values(scenario, sent, settings.redaction)), redaction=settings.redaction,
        log_level=settings.log_level, count=placed.count, launcher=placed.launcher,
    ))  # fmt: skip
    await pool.start()
    observer.note(placed.note or f"sending from {len(pool.workers)} worker processes")
    return pool


@asynccontextmanager
async def _runner(runner: HttpStepRunner) -> AsyncIterator[StepRunner]:
    yield runner
