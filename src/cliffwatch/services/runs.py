"""Run requests: from a scenario (by name or inline) and overrides to a queued run, or a clear refusal.

Everything that can refuse a run is checked here, before it is queued: the emergency stop, the scenario's
validity, the target allowlist (the service must never aim load at an arbitrary host) and the caps. A sweep
is a run of kind sweep: the same checks, with the caps applied to the sweep's highest rate and length.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import structlog

from cliffwatch.domain.errors import EmergencyStopActive, RunNotFound, RunRefused, TargetNotAllowed
from cliffwatch.domain.result import RunStatus
from cliffwatch.domain.runs import (
    Caps,
    Overrides,
    Run,
    RunKind,
    RunPage,
    RunQuery,
    ScenarioVersion,
    Trigger,
    cap_violations,
    sweep_cap_violations,
)
from cliffwatch.domain.scenario import Scenario, parse_scenario, with_overrides
from cliffwatch.domain.service_ports import ControlStore, RunStore
from cliffwatch.domain.sweep_plan import sweep_warnings
from cliffwatch.domain.sweep_spec import SweepSpec
from cliffwatch.services.catalog import ScenarioCatalog
from cliffwatch.services.store_values import stop_reason

log = structlog.get_logger(__name__)


class TargetPolicy(Protocol):
    async def check(self, url: str) -> str | None:
        """Why load may not be aimed at ``url`` (an http URL or ``http://host:port``), or None."""


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    scenario: str | None = None  # a bundled or registered scenario's name
    document: Mapping[str, Any] | None = None  # or a whole scenario document
    overrides: Overrides = field(default_factory=Overrides)
    idempotency_key: str | None = None
    trigger: Trigger = Trigger.API
    triggered_by: str = ""
    schedule_id: str | None = None
    fire_time: datetime | None = None
    sweep: SweepSpec | None = None  # given: a capacity sweep over the scenario's target, not a run of it

    @property
    def kind(self) -> RunKind:
        return RunKind.RUN if self.sweep is None else RunKind.SWEEP


class RunsService:
    def __init__(
        self,
        *,
        runs: RunStore,
        control: ControlStore,
        catalog: ScenarioCatalog,
        policy: TargetPolicy,
        caps: Caps,
        now: Callable[[], datetime],
    ) -> None:
        self.runs = runs
        self.control = control
        self.catalog = catalog
        self.policy = policy
        self.caps = caps
        self.now = now

    async def submit(self, request: RunRequest) -> tuple[Run, bool]:
        """Queues the run (True), or returns the run an earlier identical request queued (False).

        Raises ``EmergencyStopActive``, ``ScenarioNotFound``, ``ScenarioInvalid`` (the document or an
        override), ``TargetNotAllowed`` or ``RunRefused`` (over the caps), all before anything is stored.
        """
        run = await self.build(request)
        stored, created = await self.runs.create_run(run)
        if created:
            log.info("run queued", run_id=stored.id, scenario=stored.scenario_name, trigger=stored.trigger.value)
        return stored, created

    async def build(self, request: RunRequest) -> Run:
        """The queued run a request would make, every check passed, not stored (schedules insert it with
        their own key). Raises as ``submit`` does."""
        stop = await self.control.emergency_stop()
        if stop is not None:
            raise EmergencyStopActive(stop)
        if (request.scenario is None) == (request.document is None):
            raise ValueError("a run request names a scenario or carries a document, not both")
        if request.document is not None:
            version, _ = await self.catalog.keep_inline(request.document)
        else:
            assert request.scenario is not None
            version = await self.catalog.latest(request.scenario)
        scenario = _resolved(version, request.overrides)
        await self._check_targets(scenario)
        # A sweep replaces the phases with its own steps: its caps are the sweep's highest rate and length.
        problems = cap_violations(scenario, self.caps) if request.sweep is None else (
            sweep_cap_violations(request.sweep, self.caps))  # fmt: skip
        if problems:
            raise RunRefused(problems)
        return Run(
            id=uuid.uuid4().hex[:12],
            scenario_name=version.name,
            scenario_hash=version.content_hash,
            status=RunStatus.QUEUED,
            trigger=request.trigger,
            triggered_by=request.triggered_by,
            created_at=self.now(),
            target_url=scenario.target.url,
            seed=scenario.seed,
            threshold=scenario.score.threshold,
            overrides=request.overrides,
            schedule_id=request.schedule_id,
            fire_time=request.fire_time,
            idempotency_key=request.idempotency_key,
            kind=request.kind,
            sweep=request.sweep,
        )

    async def warnings(self, run: Run) -> tuple[str, ...]:
        """What a queued sweep should be warned about (``sweep_plan.sweep_warnings``: steps too short for its
        SLO, say), judged on its stored scenario version with the run's overrides; () for a run."""
        if run.sweep is None:
            return ()
        version = await self.catalog.version(run.scenario_name, run.scenario_hash)
        return sweep_warnings(_resolved(version, run.overrides), run.sweep)

    async def _check_targets(self, scenario: Scenario) -> None:
        urls = [] if scenario.target.is_builtin else [scenario.target.url]
        urls += [f"http://{p.upstream}" for p in scenario.proxies if p.upstream is not None]
        for url in urls:
            reason = await self.policy.check(url)
            if reason is not None:
                raise TargetNotAllowed(url, reason)

    async def get(self, run_id: str) -> Run:
        run = await self.runs.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def page(self, query: RunQuery) -> RunPage:
        return await self.runs.list_runs(query)

    async def abort(self, run_id: str, reason: str) -> Run:
        """Stops a run: a queued one ends at once, a running one is stopped by its worker within a second
        or two, faults rolled back. A finished run is returned as it is."""
        run = await self.runs.request_abort(run_id, reason)
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def stop_all(self, reason: str) -> list[Run]:
        """The emergency stop: no run is accepted, and every queued or running run is aborted.

        A run this sweep misses (its submission passed the check before the stop, and was stored after the
        sweep read the active runs) never starts either: the stores' claims start nothing while the stop
        is on and end such a run as aborted, as releasing the stop does."""
        await self.control.set_emergency_stop(reason)
        stopped = []
        for run in await self.runs.active_runs():
            aborted = await self.runs.request_abort(run.id, stop_reason(reason))
            if aborted is not None:
                stopped.append(aborted)
        log.warning("emergency stop", reason=reason, runs=len(stopped))
        return stopped

    async def release_stop(self) -> None:
        await self.control.set_emergency_stop(None)

    async def emergency_stop(self) -> str | None:
        return await self.control.emergency_stop()


def _resolved(version: ScenarioVersion, overrides: Overrides) -> Scenario:
    """The scenario a run of ``version`` with ``overrides`` runs."""
    base = parse_scenario(version.document, source=f"{version.name}@{version.content_hash[:12]}")
    o = overrides
    return with_overrides(base, target_url=o.target_url, seed=o.seed, threshold=o.threshold)
