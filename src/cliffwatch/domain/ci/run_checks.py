"""The checks of one run (``run_suite``): its score against the pass mark, each score component, and each reason a
run cannot pass (docs/gamedays.md, "CI outputs").

The rule for a component: the score is the components' weighted mean, so when it falls below the pass mark at
least one component is below it too, and those are the components that pulled it down: each fails, with its own
sentence. When the score passes, no component fails (a low one was made up for by the others; its value is in
the detail); a component with no value (not applicable, its summary says why) is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from cliffwatch.domain.ci.checks import Check, CheckStatus, CheckSuite
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.results.score_values import Component, Evidence, Score


@dataclass(frozen=True, kw_only=True)
class _Gate:
    """A reason a run cannot pass: the check's name, and the verdict that fails it."""

    check: str
    verdict: str


# The verdicts that make ``RunResult.passed`` false besides the score, each a check of its own.
_GATES = (
    _Gate(check="generator kept its schedule", verdict="generator_limited"),
    _Gate(check="load sent as written", verdict="capped"),
    _Gate(check="workload as asked", verdict="workload_mismatch"),
)


def run_suite(result: RunResult) -> CheckSuite:
    """The checks of ``result``: completed, score, one per component, the gates, the faults removed, and one per
    score flag (a raised flag warns: it explains a score, it does not fail one)."""
    summaries = {verdict.name: verdict.summary for verdict in result.verdicts()}
    checks = [_completed(result, summaries), _score(result.score)]
    checks += [_component(c, result.score) for c in result.score.components]
    for gate in _GATES:
        summary = summaries.get(gate.verdict)
        status = CheckStatus.PASSED if summary is None else CheckStatus.FAILED
        checks.append(
            Check(name=gate.check, status=status, kind=gate.verdict if summary else "", message=summary or "")
        )
    left = summaries.get("fault_left_behind")
    checks.append(Check(name="faults removed", status=CheckStatus.WARNED if left else CheckStatus.PASSED,
                        kind="fault_left_behind" if left else "", message=left or ""))  # fmt: skip
    for flag in result.score.flags:
        status = CheckStatus.WARNED if flag.raised else CheckStatus.PASSED
        checks.append(Check(name=f"flag {flag.name}", status=status, kind=flag.name if flag.raised else "",
                            message=flag.summary if flag.raised else "", detail=_evidence(flag.evidence)))  # fmt: skip
    name = result.scenario.name
    return CheckSuite(name=name, classname=f"cliffwatch.run.{name}", duration_s=result.duration_s,
                      checks=tuple(checks))  # fmt: skip


def _completed(result: RunResult, summaries: dict[str, str]) -> Check:
    if result.status is RunStatus.SUCCEEDED:
        return Check(name="run completed", status=CheckStatus.PASSED)
    kind = result.status.value
    message = summaries.get(kind) or result.abort_reason or f"the run {kind}"
    return Check(name="run completed", status=CheckStatus.FAILED, kind=kind, message=message)


def _score(score: Score) -> Check:
    value = "none" if score.value is None else f"{score.value:g}"
    detail = f"score {value}, pass mark {score.threshold:g} (score version {score.version})"
    status = CheckStatus.PASSED if score.passed else CheckStatus.FAILED
    kind = "" if score.passed else "score_below_threshold"
    return Check(name=f"score >= {score.threshold:g}", status=status, kind=kind, message=score.summary, detail=detail)


def _component(component: Component, score: Score) -> Check:
    name = f"component {component.name}"
    if component.value is None:
        return Check(name=name, status=CheckStatus.SKIPPED, kind="not_applicable", message=component.summary)
    pulled_down = not score.passed and component.value * 100 < score.threshold
    detail = (f"value {component.value * 100:.1f} of 100, weight {component.weight:g}: {component.summary}\n"
              + _evidence(component.evidence))  # fmt: skip
    if pulled_down:
        return Check(name=name, status=CheckStatus.FAILED, kind="below_threshold", message=component.summary,
                     detail=detail)  # fmt: skip
    return Check(name=name, status=CheckStatus.PASSED, detail=detail)


def _evidence(evidence: Evidence) -> str:
    return "\n".join(f"{key}: {value}" for key, value in evidence.items())
