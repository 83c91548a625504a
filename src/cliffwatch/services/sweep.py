"""The capacity sweep driver: for each client retry variant, ask the search which rate to measure next,
measure it with a ``StepRunner``, and summarise the steps into a ``CapacityResult``.

The statistics and the search are pure (``domain.capacity.capacity``); here are only the order of things, progress,
and stopping. A sweep interrupted or aborted mid-step discards that step: a partial window would count
requests that never had the chance to fail, so it could only make the target look better than it is.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import structlog

from cliffwatch import __version__
from cliffwatch.domain.capacity.capacity import (
    CapacityResult,
    CapacitySearch,
    SearchConfig,
    StepStats,
    StepVerdict,
    summarize,
)
from cliffwatch.domain.capacity.sweep_plan import sweep_warnings
from cliffwatch.domain.capacity.sweep_spec import SweepMode, SweepSpec, variant_policy
from cliffwatch.domain.ports import Clock, ProgressObserver
from cliffwatch.domain.results.cost import usable_cost
from cliffwatch.domain.results.result import RunStatus, scenario_summary
from cliffwatch.domain.results.workload_match import prompt_mismatch
from cliffwatch.domain.scenario.retry import RetryPolicy
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing
from cliffwatch.services.ports import StepRunner, SweepObserver

log = structlog.get_logger(__name__)

RECHECK_NOTE = (
    "{variant}: the search is over; measuring its first rate, {rate}, again to see whether the target drifted"
)


class StepStopped(Exception):
    """Raised by a ``StepRunner`` asked for a step after ``stop``: there is nothing to measure."""


class NullSweepObserver:
    def step_started(self, variant: str, rate: float, trial: int) -> None:
        pass

    def step_finished(self, variant: str, step: StepStats, verdict: StepVerdict) -> None:
        pass


@dataclass(frozen=True, kw_only=True)
class SweepReport:
    """One retry variant's sweep: which policy the clients used, and what capacity that left."""

    variant: str
    policy_description: str
    result: CapacityResult

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "retry": self.policy_description, "result": self.result.to_dict()}


def describe_variant(scenario: Scenario, variant: str) -> str:
    """The retry policy a variant stands for, in words (the scenario's own for ``as-written``)."""
    policy: RetryPolicy | None = variant_policy(variant)
    return (policy or scenario.client.retry).describe()


class SweepService:
    """Runs one sweep: every variant of ``spec`` in order, each a search over step rates."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        spec: SweepSpec,
        runner_for: Callable[[str], AbstractAsyncContextManager[StepRunner]],
        observer: ProgressObserver,
        sweep_observer: SweepObserver | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.scenario = scenario
        self.spec = spec
        self.runner_for = runner_for
        self.observer = observer
        self.sweep_observer = sweep_observer or NullSweepObserver()
        self.clock = clock  # when each step started (``StepStats.started_s``); None: not recorded
        self._started_ns: int | None = None
        self.interrupted = False
        self.abort_reason: str | None = None
        self._runner: StepRunner | None = None
        self.reports: list[SweepReport] = []  # the variants finished so far, also when a later one failed

    @property
    def stopped(self) -> bool:
        return self.interrupted or self.abort_reason is not None

    def _halted(self) -> bool:
        return self.stopped  # a call, not the property: a stop may have come while the step ran

    def interrupt(self) -> None:
        """Stops the sweep (Ctrl-C, shutdown): the step in progress is cut and discarded; the steps already
        measured are summarised."""
        if self.stopped:
            return
        self.interrupted = True
        self.observer.note("interrupted: stopping the sweep (the step in progress is discarded)")
        if self._runner is not None:
            self._runner.stop("sweep interrupted", aborted=False)

    def abort(self, reason: str) -> None:
        """As ``interrupt``, recorded as aborted with ``reason`` (an API abort, the emergency stop)."""
        if self.stopped:
            return
        self.abort_reason = reason
        self.observer.note(f"aborting the sweep: {reason}")
        if self._runner is not None:
            self._runner.stop(f"aborted: {reason}", aborted=True)

    async def run(self) -> list[SweepReport]:
        """Every variant's report, in the order of ``spec.variants``; a stopped sweep returns the variants
        measured so far (the last one partial). Errors of a runner (a target that died) propagate."""
        self._started_ns = None if self.clock is None else self.clock.now_ns()
        for variant in self.spec.variants:
            if self.stopped:
                break
            report = await self._sweep_variant(variant)
            if report is not None:
                self.reports.append(report)
        return list(self.reports)

    async def _sweep_variant(self, variant: str) -> SweepReport | None:
        spec = self.spec
        config = SearchConfig.from_spec(spec)
        search = CapacitySearch(config)
        described = describe_variant(self.scenario, variant)
        self.observer.note(f"sweep {variant} (retry: {described}): target {spec.target:.1%} on time")
        async with self.runner_for(variant) as runner:
            self._runner = runner
            try:
                while not self.stopped and (asked := search.next_rate()) is not None:
                    if asked.recheck:
                        rate = f"{asked.rate:g} {unit_of(spec, self.scenario)}"
                        self.observer.note(RECHECK_NOTE.format(variant=variant, rate=rate))
                    self.sweep_observer.step_started(variant, asked.rate, asked.trial)
                    started_s = self._seconds_in()
                    try:
                        step = await runner.run_step(asked.rate, trial=asked.trial, extended=asked.extended)
                    except StepStopped:
                        break
                    if self._halted():
                        break  # the step was cut short: its window is incomplete, so it is not counted
                    step = self._as_recorded(step, started_s=started_s, recheck=asked.recheck)
                    search.record(step)
                    self.sweep_observer.step_finished(variant, step, _verdict_of(search, asked.rate))
                    log.info("sweep step", variant=variant, rate=asked.rate, trial=asked.trial,
                             attainment=step.attainment, recheck=asked.recheck)  # fmt: skip
            finally:
                self._runner = None
        if not search.steps:
            return None
        finished_because = search.finished_because
        if self.interrupted:
            finished_because = f"interrupted after {len(search.steps)} step(s)"
        elif self.abort_reason is not None:
            finished_because = f"aborted after {len(search.steps)} step(s): {self.abort_reason}"
        result = summarize(
            search.steps,
            target=spec.target,
            e2e_slo_ms=self.scenario.slo.e2e_ms,
            ttft_slo_ms=self.scenario.slo.ttft_ms,
            finished_because=finished_because,
            confidence=spec.confidence,
            max_trials=spec.trials,
            unit=unit_of(spec, self.scenario),
        )
        return SweepReport(variant=variant, policy_description=described, result=result)

    def _seconds_in(self) -> float | None:
        """Seconds since the sweep started, when it has a clock."""
        if self.clock is None or self._started_ns is None:
            return None
        return (self.clock.now_ns() - self._started_ns) / 1e9

    def _as_recorded(self, step: StepStats, *, started_s: float | None, recheck: bool) -> StepStats:
        """The step as the search records it: when it started, whether it is the recheck, and without its growth
        reading when the sweep was asked to judge by attainment alone."""
        growth = step.growth if self.spec.growth_check else None
        return replace(step, started_s=started_s, recheck=recheck, growth=growth)


def unit_of(spec: SweepSpec, scenario: Scenario | None = None) -> str:
    """What a step's rate counts: closed-loop clients; or arrivals per second, which start conversations when
    the scenario's traffic is conversations (each then sends several turns)."""
    if spec.mode is SweepMode.CONCURRENCY:
        return "clients"
    return "conv/s" if scenario is not None and scenario.has_sessions else "req/s"


def _verdict_of(search: CapacitySearch, rate: float) -> StepVerdict:
    for settled in search.settled():
        if settled.rate == rate:
            return settled.verdict
    return StepVerdict.UNSURE


SWEEP_FORMAT = 1


@dataclass(frozen=True, kw_only=True)
class SweepOutcome:
    """A finished sweep: how it ended and every variant's capacity result; ``to_dict`` is its document."""

    sweep_id: str
    scenario: Scenario
    spec: SweepSpec
    status: RunStatus  # SUCCEEDED, INTERRUPTED, ABORTED or FAILED
    reason: str | None  # why it did not succeed (the abort reason, the failure)
    reports: tuple[SweepReport, ...]
    started_at: datetime
    finished_at: datetime
    target_url: str
    prompt_sizing: PromptSizing = WORDS_SIZING  # how the steps' prompt_tokens became prompts (the preflight's)

    @property
    def workload_mismatch(self) -> str | None:
        """Why the steps' prompts were not the sizes the scenario asks for (``workload_match``), every step of
        every variant pooled; None when nothing says so."""
        error = self._prompt_error() or {"answers": 0, "mean_abs_pct": 0.0, "mean_pct": 0.0}
        return prompt_mismatch(self.prompt_sizing, answers=int(error["answers"]), mean_abs_pct=error["mean_abs_pct"],
                               mean_pct=error["mean_pct"])  # fmt: skip

    def _prompt_error(self) -> dict[str, float] | None:
        """Every step's server-counted prompt error pooled (weighted by its answers); None without any."""
        readings = [s.prompt_error for r in self.reports for s in r.result.steps if s.prompt_error]
        answers = sum(r["answers"] for r in readings)
        if not answers:
            return None

        def mean(key: str) -> float:
            return round(sum(r[key] * r["answers"] for r in readings) / answers, 3)

        return {"answers": answers, "mean_pct": mean("mean_pct"), "mean_abs_pct": mean("mean_abs_pct")}

    def _variant(self, report: SweepReport) -> dict[str, Any]:
        """A variant's document, with what an hour at its usable rate buys on time (``target.cost``)."""
        spec = self.scenario.target.cost
        cost = None if spec is None else usable_cost(spec, report.result.usable_rps, report.result.steps)
        return {**report.to_dict(), "cost": cost}

    @property
    def usable_rps(self) -> float | None:
        """The first variant's usable capacity (req/s, or clients in concurrency mode); None without one."""
        return self.reports[0].result.usable_rps if self.reports else None

    @property
    def duration_s(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        """The sweep result document (docs/sweep.md): what ``cliffwatch sweep --json`` writes and the
        service stores."""
        return {
            "format": SWEEP_FORMAT,
            "kind": "sweep",
            "cliffwatch_version": __version__,
            "sweep_id": self.sweep_id,
            "status": self.status.value,
            "reason": self.reason,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "duration_s": round(self.duration_s, 3),
            "usable_rps": self.usable_rps,
            "scenario": scenario_summary(self.scenario),
            "target": {"url": self.target_url, "api": self.scenario.target.api.value},
            "spec": self.spec.to_dict(),
            "warnings": list(sweep_warnings(self.scenario, self.spec)),  # e.g. steps too short for the SLO
            "prompt_tokens": {**self.prompt_sizing.to_dict(), "error": self._prompt_error()},
            "workload_mismatch": self.workload_mismatch is not None,
            "workload_mismatch_reason": self.workload_mismatch,
            "variants": [self._variant(report) for report in self.reports],
        }
