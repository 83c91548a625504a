"""Run requests: from a scenario (by name or inline) and overrides to a queued run, or a clear refusal.

Everything that can refuse a run is checked here, before it is queued: the emergency stop, the scenario's
validity, the target allowlist (the service must never aim load at an arbitrary host), the caps (the worst
case the scenario allows, ``domain.service.caps``) and, for API callers, their quotas. A sweep is a run of kind
sweep: the same checks, with the caps applied to the sweep's highest step and length. A refused request
stores nothing: an inline document is kept only once every check has passed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog

from cliffwatch.domain.capacity.sweep_plan import sweep_warnings
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.errors import (
    EmergencyStopActive,
    EmergencyStopNotRecorded,
    IdempotencyKeyReused,
    QuotaExceeded,
    RunNotFound,
    RunRefused,
    ScenarioInvalid,
    StoreUnavailable,
    TargetNotAllowed,
)
from cliffwatch.domain.ports import ControlStore, RunStore
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.security.masking import mask_url
from cliffwatch.domain.service.caps import Caps, cap_violations, sweep_cap_violations
from cliffwatch.domain.service.runs import Overrides, Quotas, Run, RunKind, RunPage, RunQuery, ScenarioVersion, Trigger
from cliffwatch.services.catalog import Identified, ScenarioCatalog
from cliffwatch.services.overrides import with_overrides
from cliffwatch.services.ports import LocalRuns, Notifier, TargetPolicy
from cliffwatch.services.store_values import stop_reason

log = structlog.get_logger(__name__)
QUEUED_RETRY_AFTER_S = 30.0  # when a queued run will start is unknown; half a minute keeps pollers polite


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
        quotas: Quotas | None = None,
        local: LocalRuns | None = None,
        webhooks: Notifier | None = None,
    ) -> None:
        self.local = local
        self.webhooks = webhooks  # judges a scenario's notify: before the run is queued
        self.runs = runs
        self.control = control
        self.catalog = catalog
        self.policy = policy
        self.caps = caps
        self.now = now
        self.quotas = quotas or Quotas()

    async def submit(self, request: RunRequest) -> tuple[Run, bool]:
        """Queues the run (True), or returns the run an earlier identical request queued (False).

        Raises ``EmergencyStopActive``, ``ScenarioNotFound``, ``ScenarioInvalid`` (the document or an
        override), ``TargetNotAllowed``, ``RunRefused`` (over the caps) or, for an API caller, ``QuotaExceeded``
        (its queued runs or its new documents), all before anything is stored; ``IdempotencyKeyReused`` when
        the request's key already queued a different request.
        """
        run, inline = await self._checked(request)
        if request.idempotency_key is not None:
            # A repeat is answered before the quotas (the run it queued counts in them) and before its document
            # is kept: it adds nothing, or is refused having stored nothing.
            earlier = await self.runs.run_with_key(request.idempotency_key)
            if earlier is not None:
                return _repeated(earlier, run), False
        if request.trigger is Trigger.API:
            await self._check_quotas(request.triggered_by, run, inline)
        await self._keep(inline)
        stored, created = await self.runs.create_run(run)
        if created:
            log.info("run queued", run_id=stored.id, scenario=stored.scenario_name, trigger=stored.trigger.value)
            return stored, True
        return _repeated(stored, run), False  # a repeat that raced its first: the insert found it

    async def build(self, request: RunRequest) -> Run:
        """The queued run a request would make, every check passed, not stored (schedules insert it with
        their own key; an inline document is stored, once the checks passed). Raises as ``submit`` does,
        quotas aside."""
        run, inline = await self._checked(request)
        await self._keep(inline)
        return run

    async def check(self, request: RunRequest, *, quotas: bool = False) -> Run:
        """The queued run a request would make, every check passed (the caller's quotas only with ``quotas``),
        nothing stored (a game day checks each experiment before any runs). Raises as ``submit`` does."""
        run, inline = await self._checked(request)
        if quotas and request.trigger is Trigger.API:
            await self._check_quotas(request.triggered_by, run, inline)
        return run

    async def _checked(self, request: RunRequest) -> tuple[Run, Identified | None]:
        """The run a request would make and the inline document it carries (identified, to be kept), every
        check but the quotas passed; nothing stored."""
        if problems := request.overrides.credential_problems():
            raise ScenarioInvalid(problems)  # overrides are stored and shown as given: no password in them
        held = None if self.local is None else self.local.unrecorded_stop()
        if held is not None:  # the database does not know it yet, so its own check below would let the run in
            raise EmergencyStopNotRecorded([], reason=held)
        stop = await self.control.emergency_stop()
        if stop is not None:
            raise EmergencyStopActive(stop)
        if (request.scenario is None) == (request.document is None):
            raise ValueError("a run request names a scenario or carries a document, not both")
        inline: Identified | None = None
        if request.document is not None:
            # The version it would be (its hash fingerprints its credentials), judged without storing it.
            inline = await self.catalog.identify(request.document)
            parsed, name, digest = inline.scenario, inline.scenario.name, inline.content_hash
            o = request.overrides
            scenario = with_overrides(parsed, target_url=o.target_url, seed=o.seed, threshold=o.threshold)
        else:
            assert request.scenario is not None
            version = await self.catalog.latest(request.scenario)
            name, digest = version.name, version.content_hash
            scenario = _resolved(version, request.overrides)
        await self._check_targets(scenario)
        # told hours later, a typo would only show as a failed delivery: the webhooks are judged now
        if (
            self.webhooks is not None
            and scenario.notify
            and (problems := await self.webhooks.problems(scenario.notify))
        ):
            raise ScenarioInvalid(problems)
        # A sweep replaces the phases with its own steps: its caps are the sweep's highest step and length.
        problems = cap_violations(scenario, self.caps) if request.sweep is None else (
            sweep_cap_violations(scenario, request.sweep, self.caps))  # fmt: skip
        if problems:
            raise RunRefused(problems)
        run = Run(
            id=uuid.uuid4().hex[:12],
            scenario_name=name,
            scenario_hash=digest,
            status=RunStatus.QUEUED,
            trigger=request.trigger,
            triggered_by=request.triggered_by,
            created_at=self.now(),
            target_url=mask_url(scenario.target.url),  # shown everywhere runs are; the run reads its scenario's
            seed=scenario.seed,
            threshold=scenario.score.threshold,
            overrides=request.overrides,
            schedule_id=request.schedule_id,
            fire_time=request.fire_time,
            idempotency_key=request.idempotency_key,
            kind=request.kind,
            sweep=request.sweep,
        )
        return run, inline

    async def _keep(self, inline: Identified | None) -> None:
        if inline is not None:
            await self.catalog.keep_inline(inline)

    async def _check_quotas(self, caller: str, run: Run, document: Identified | None) -> None:
        """Raises ``QuotaExceeded`` when ``caller`` already has its most queued runs, or would store a new inline
        document beyond its most in the window. Checked before the run is inserted, so two requests racing may
        both pass: a quota bounds what one caller holds, give or take its concurrent requests."""
        now = self.now()
        usage = await self.runs.caller_usage(caller, since=now - timedelta(seconds=self.quotas.documents_window_s))
        if usage.queued >= self.quotas.max_queued_runs:
            raise QuotaExceeded("queued runs", limit=self.quotas.max_queued_runs, retry_after_s=QUEUED_RETRY_AFTER_S)
        if document is None or len(usage.documents) < self.quotas.max_documents:
            return
        if await self.catalog.has_version(run.scenario_name, run.scenario_hash):
            return  # stored already: this request adds nothing
        expires = usage.documents[0] + timedelta(seconds=self.quotas.documents_window_s)
        raise QuotaExceeded(
            f"new scenario documents in {self.quotas.documents_window_s / 3600:g} h",
            limit=self.quotas.max_documents,
            retry_after_s=max(1.0, (expires - now).total_seconds()),
        )

    async def warnings(self, run: Run) -> tuple[str, ...]:
        """What a queued sweep should be warned about (``sweep_plan.sweep_warnings``: steps too short for its
        SLO, say), judged on its stored scenario version with the run's overrides; () for a run."""
        if run.sweep is None:
            return ()
        version = await self.catalog.version(run.scenario_name, run.scenario_hash)
        return sweep_warnings(_resolved(version, run.overrides), run.sweep)

    async def _check_targets(self, scenario: Scenario) -> None:
        await check_places(scenario, self.policy)

    async def get(self, run_id: str) -> Run:
        run = await self.runs.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def page(self, query: RunQuery) -> RunPage:
        return await self.runs.list_runs(query)

    async def abort(self, run_id: str, reason: str) -> Run:
        """Stops a run: a queued one ends at once, a running one is stopped by its worker — at once when it
        runs on this instance (database or not), else within a second or two — faults rolled back. A
        finished run is returned as it is. Raises ``StoreUnavailable`` only when the run does not run here."""
        here = self.local.abort_local(run_id, reason) if self.local is not None else None
        try:
            run = await self.runs.request_abort(run_id, reason)
        except StoreUnavailable:
            if here is None:
                raise
            log.warning("run aborted on this instance; the database could not record the request", run_id=run_id)
            return here
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def stop_all(self, reason: str) -> list[Run]:
        """The emergency stop: no run is accepted, and every queued or running run is aborted. This instance's
        runs stop at once, database or not; when the database cannot record the stop for the other
        instances, ``EmergencyStopNotRecorded`` says so (this instance stays stopped until it is recorded, or
        released here).

        A run this sweep misses (its submission passed the check before the stop, and was stored after the
        sweep read the active runs) never starts either: the stores' claims start nothing while the stop
        is on and end such a run as aborted, as releasing the stop does."""
        stopped_here = self.local.stop_local(reason) if self.local is not None else []
        try:
            await self.control.set_emergency_stop(reason)
            stopped = {run.id: run for run in stopped_here}
            for run in await self.runs.active_runs():
                aborted = await self.runs.request_abort(run.id, stop_reason(reason))
                if aborted is not None:
                    stopped[aborted.id] = aborted
        except StoreUnavailable as exc:
            if self.local is None:
                raise
            log.error("emergency stop: this instance stopped, the database could not record it", reason=reason,
                      runs=len(stopped_here), error=str(exc))  # fmt: skip
            raise EmergencyStopNotRecorded([run.id for run in stopped_here], exc) from exc
        if self.local is not None:
            self.local.release_local()  # recorded: the database's stop now holds every instance, this one included
        log.warning("emergency stop", reason=reason, runs=len(stopped))
        return list(stopped.values())

    async def release_stop(self) -> None:
        """Releases the emergency stop, and aborts every run still queued: none was accepted while it was on, so
        each crossed it. A stop this instance held without the database knowing is released the same way: runs
        queued through other instances meanwhile never saw it, and must not fire now (``StoreUnavailable`` when the
        database cannot be reached; the stop then stays)."""
        held = None if self.local is None else self.local.unrecorded_stop()
        if held is not None:  # recorded at last, so no instance starts or accepts a run from here on ...
            await self.control.set_emergency_stop(held)
            log.warning("emergency stop recorded to be released: the runs queued under it are aborted", reason=held)
        await self.control.set_emergency_stop(None)  # ... and released: the store aborts the queued runs at once
        if self.local is not None:
            self.local.release_local()

    async def emergency_stop(self) -> str | None:
        return await self.control.emergency_stop()


def _repeated(earlier: Run, run: Run) -> Run:
    """The run a repeated key names, when the repeat asks for what it asked; ``IdempotencyKeyReused`` if not."""
    if _asked(earlier) != _asked(run):
        raise IdempotencyKeyReused(earlier.id)
    return earlier


def _asked(run: Run) -> tuple[object, ...]:
    """What a run request asked for, as its run records it: a repeat under the same key must ask the same."""
    sweep = None if run.sweep is None else run.sweep.to_dict()
    return (run.kind, run.scenario_name, run.scenario_hash, run.overrides.to_dict(), sweep)


def _resolved(version: ScenarioVersion, overrides: Overrides) -> Scenario:
    """The scenario a run of ``version`` with ``overrides`` runs."""
    base = parse_scenario(version.document, source=f"{version.name}@{version.content_hash[:12]}")
    o = overrides
    return with_overrides(base, target_url=o.target_url, seed=o.seed, threshold=o.threshold)


async def check_places(scenario: Scenario, policy: TargetPolicy) -> None:
    """Raises ``TargetNotAllowed``, naming the field, for the first place of ``scenario`` that ``policy`` refuses:
    its target (the built-in one is ours), its metrics page (scraped all run long, so judged like the target), each
    proxy's upstream (the target's unless it names another, judged also by where Toxiproxy runs) and listen
    address."""
    urls = [] if scenario.target.is_builtin else [("target.url", scenario.target.url)]
    if scenario.target.metrics_url is not None:
        urls.append(("target.metrics.url", scenario.target.metrics_url))
    for named, url in urls:
        reason = await policy.check(url)
        if reason is not None:
            raise TargetNotAllowed(url, reason, field=named)
    for index, proxy in enumerate(scenario.proxies):
        if proxy.upstream is None and scenario.target.is_builtin:
            continue  # the built-in target's address is known once it starts, and judged then
        named, url = (f"proxies[{index}].upstream", f"http://{proxy.upstream}") if proxy.upstream is not None else (
            "target.url", scenario.target.url)  # fmt: skip
        reason = await policy.check_upstream(url)
        if reason is not None:
            raise TargetNotAllowed(url, f"proxy {proxy.name} upstream: {reason}", field=named)
    for index, proxy in enumerate(scenario.proxies):
        reason = await policy.check_listen(proxy.listen)
        if reason is not None:
            raise TargetNotAllowed(f"http://{proxy.listen}", f"proxy {proxy.name} listen address: {reason}",
                                   field=f"proxies[{index}].listen")  # fmt: skip
