"""The checks of one sweep (``sweep_suites``): one suite for the sweep as a whole (it ran to its end, on the
workload asked for) and one a retry variant (a usable capacity was found, by a generator that kept its schedule,
on a target whose speed held).

A sweep's command exits 0 whatever capacity it found; these checks are what a pipeline can hold it to. A variant
with no usable capacity fails (not even the lowest rate met the attainment target). Generator-limited steps fail
their variant: their numbers describe the client, not the target, as a generator-limited run's do. Drift warns:
the sweep already judged the drifted rates on their slower trials, so its capacity stands, with the caveat that
the target was not one steady thing (docs/sweep.md, "A target whose speed drifts").
"""

from __future__ import annotations

from collections.abc import Sequence

from cliffwatch.domain.capacity.capacity_result import num
from cliffwatch.domain.capacity.drift import TargetDrift
from cliffwatch.domain.capacity.found_capacity import CapacityResult
from cliffwatch.domain.ci.checks import Check, CheckStatus, CheckSuite
from cliffwatch.domain.results.result import RunStatus


def sweep_suites(
    *,
    scenario: str,
    status: RunStatus,
    reason: str | None,
    duration_s: float,
    workload_mismatch: str | None,
    variants: Sequence[tuple[str, CapacityResult]],
) -> tuple[CheckSuite, ...]:
    """The sweep's own suite, then one a variant in the order measured (``variants``: each one's name and result)."""
    completed = Check(name="sweep completed", status=CheckStatus.PASSED)
    if status is not RunStatus.SUCCEEDED:
        completed = Check(name="sweep completed", status=CheckStatus.FAILED, kind=status.value,
                          message=reason or f"the sweep {status.value}")  # fmt: skip
    workload = Check(name="workload as asked", status=CheckStatus.PASSED)
    if workload_mismatch is not None:
        message = ("the prompts sent are not the sizes the scenario asks for, so this capacity is another's: "
                   + workload_mismatch)  # fmt: skip
        workload = Check(name="workload as asked", status=CheckStatus.FAILED, kind="workload_mismatch", message=message)
    whole = CheckSuite(name=f"{scenario} sweep", classname=f"cliffwatch.sweep.{scenario}", duration_s=duration_s,
                       checks=(completed, workload))  # fmt: skip
    return (whole, *(_variant_suite(scenario, name, result) for name, result in variants))


def _variant_suite(scenario: str, variant: str, result: CapacityResult) -> CheckSuite:
    unit = result.unit
    if result.usable_rps is None:
        usable = Check(name="usable capacity found", status=CheckStatus.FAILED, kind="no_usable_capacity",
                       message=result.verdict, detail=f"search ended: {result.finished_because}")  # fmt: skip
    else:
        detail = f"usable capacity {num(result.usable_rps)} {unit} at {result.target:.1%} on time: {result.verdict}"
        usable = Check(name="usable capacity found", status=CheckStatus.PASSED, detail=detail)
    limited = [s for s in result.steps if s.generator_limited]
    generator = Check(name="generator kept its schedule", status=CheckStatus.PASSED)
    if limited:
        where = "; ".join(f"{num(s.rate)} {unit} (trial {s.trial}): {', '.join(s.generator_reasons) or 'limited'}"
                          for s in limited)  # fmt: skip
        generator = Check(name="generator kept its schedule", status=CheckStatus.FAILED, kind="generator_limited",
                          message=f"the load generator could not keep its schedule in {len(limited)} step(s), so "
                          f"their numbers describe the client, not the target: {where}")  # fmt: skip
    drift = Check(name="target speed steady", status=CheckStatus.PASSED)
    if result.target_drift is not None:
        drift = Check(name="target speed steady", status=CheckStatus.WARNED, kind="target_drift",
                      message=_drift_sentence(result.target_drift, unit))  # fmt: skip
    return CheckSuite(name=f"{scenario} sweep ({variant})", classname=f"cliffwatch.sweep.{scenario}.{variant}",
                      duration_s=sum(s.duration_s for s in result.steps),
                      checks=(usable, generator, drift))  # fmt: skip


def _drift_sentence(drift: TargetDrift, unit: str) -> str:
    parts = [f"trials at {num(d.rate)} {unit} disagreed ({d.share_change * 100:+.1f} points on time)"
             for d in drift.disagreements]  # fmt: skip
    parts += [f"the median {s.signal} at {num(s.rate)} {unit} moved {s.change * 100:+.0f} % in the recheck"
              for s in drift.latency]  # fmt: skip
    return ("the target's speed drifted during the sweep: " + "; ".join(parts)
            + "; rates measured while it was faster may overstate its slowest period")  # fmt: skip
