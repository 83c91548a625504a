"""Composition root: settings and a scenario in, a ready ``RunService`` (and the target's URL) out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from cliffwatch.adapters.builtin_target import BuiltinTarget
from cliffwatch.adapters.clock import MonotonicClock
from cliffwatch.adapters.loadgen.engine import OpenLoopGenerator
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.target_access import ensure_allowed
from cliffwatch.config import Settings
from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.ports import ProgressObserver, RecordSink
from cliffwatch.domain.scenario import Scenario
from cliffwatch.services.memory import NoFaultInjector, NullSink
from cliffwatch.services.runner import RunService

NO_FAULTS = "this build of cliffwatch has no Toxiproxy fault injector, so scenarios with faults or proxies cannot run"


@dataclass(frozen=True, kw_only=True)
class PreparedRun:
    service: RunService
    target_url: str


@asynccontextmanager
async def prepare_run(
    settings: Settings, scenario: Scenario, *, observer: ProgressObserver, sink: RecordSink | None = None
) -> AsyncIterator[PreparedRun]:
    """Starts what the run needs (the built-in target when asked for) and stops it afterwards."""
    if scenario.proxies or scenario.target.via_proxy or scenario.needs_faults():
        raise FaultInjectionFailed(proxy=scenario.target.via_proxy or "-", toxic=None, reason=NO_FAULTS)
    async with AsyncExitStack() as stack:
        if scenario.target.is_builtin:
            assert scenario.target.builtin is not None
            observer.note("starting the built-in simulated target")
            url = await stack.enter_async_context(BuiltinTarget(scenario.target.builtin))
        else:
            url = scenario.target.url
            await ensure_allowed(url, settings.allowlist)
        executor = await stack.enter_async_context(HttpExecutor(scenario, url))
        clock = MonotonicClock()
        service = RunService(
            clock=clock,
            generator=OpenLoopGenerator(scenario, executor, clock),
            faults=NoFaultInjector(NO_FAULTS),
            sink=sink or NullSink(),
            observer=observer,
        )
        yield PreparedRun(service=service, target_url=url)
