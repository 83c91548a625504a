"""A running sweep's provisional document: the steps measured so far, summarised as the final one will be.

``SweepProgress`` is the ``SweepObserver`` the service's worker gives a sweep. It keeps every finished step
per retry variant and makes, on demand, the document ``SweepOutcome.to_dict()`` would make of them now:
status "running", each variant's steps summarised by the domain's ``summarize`` (rates settled so far, the
usable capacity and verdict they support), ``finished_at`` null and ``"provisional": true``. The worker
stores it after every step (``RunStore.save_provisional_result``), so the API, the report and the dashboard
show a sweep while it runs; the final document replaces it when the sweep ends.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from cliffwatch.domain.capacity.capacity import StepStats, StepVerdict, summarize
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.services.sweep import SweepOutcome, SweepReport, describe_variant, unit_of


class SweepProgress:
    """Implements ``SweepObserver``: collects finished steps; ``changed`` is set after each one."""

    def __init__(self, *, sweep_id: str, scenario: Scenario, spec: SweepSpec, target_url: str,
                 started_at: datetime) -> None:  # fmt: skip
        self.sweep_id = sweep_id
        self.scenario = scenario
        self.spec = spec
        self.target_url = target_url  # the prepared sweep's (a built-in target's real URL) once it is known
        self.started_at = started_at
        self.changed = asyncio.Event()
        self._steps: dict[str, list[StepStats]] = {}

    @property
    def step_count(self) -> int:
        return sum(len(steps) for steps in self._steps.values())

    def step_started(self, variant: str, rate: float, trial: int) -> None:
        pass

    def step_finished(self, variant: str, step: StepStats, verdict: StepVerdict) -> None:
        self._steps.setdefault(variant, []).append(step)
        self.changed.set()

    def document(self, now: datetime) -> dict[str, Any]:
        """The sweep document of the steps so far (the final document's shape), marked provisional."""
        spec, scenario = self.spec, self.scenario
        reports = []
        for variant in spec.variants:
            steps = self._steps.get(variant)
            if not steps:
                continue
            result = summarize(
                steps,
                target=spec.target,
                e2e_slo_ms=scenario.slo.e2e_ms,
                ttft_slo_ms=scenario.slo.ttft_ms,
                finished_because=f"provisional: {len(steps)} step(s) so far, the sweep is still running",
                confidence=spec.confidence,
                max_trials=spec.trials,
                unit=unit_of(spec, scenario),
            )
            reports.append(SweepReport(variant=variant, policy_description=describe_variant(scenario, variant),
                                       result=result))  # fmt: skip
        outcome = SweepOutcome(sweep_id=self.sweep_id, scenario=scenario, spec=spec, status=RunStatus.RUNNING,
                               reason=None, reports=tuple(reports), started_at=self.started_at, finished_at=now,
                               target_url=self.target_url)  # fmt: skip
        document = outcome.to_dict()
        document["finished_at"] = None  # not yet: duration_s is the time so far
        document["provisional"] = True
        document["updated_at"] = now.isoformat()
        document["steps_so_far"] = self.step_count
        return document
