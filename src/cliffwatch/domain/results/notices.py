"""What a run's or a sweep's webhooks are told: which events its end is, and the notice they are sent.

A notice is a summary, not the result: the run's id, scenario, status, whether it passed, its score, its
verdicts' names and the score's sentence (a sweep: its usable capacity and each variant's verdict sentence), and
``headline``, the scorecard's one line, which a Slack-format webhook shows. The CLI makes it from the result it
holds, the service from what it stored of the run's end: both give the same notice for the same run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.scenario.notify_spec import RunEvent, SweepEvent


def run_events(status: RunStatus, passed: bool | None) -> tuple[RunEvent, ...]:
    """The events a run's end is: finished (and not_passed when it did not pass) for a run that ran to its end,
    failed for one that could not run or was aborted, interrupted for one stopped; none while it runs."""
    if status is RunStatus.SUCCEEDED:
        return (RunEvent.FINISHED,) if passed else (RunEvent.FINISHED, RunEvent.NOT_PASSED)
    if status in (RunStatus.FAILED, RunStatus.ABORTED):
        return (RunEvent.FAILED,)
    if status is RunStatus.INTERRUPTED:
        return (RunEvent.INTERRUPTED,)
    return ()


def sweep_events(status: RunStatus) -> tuple[SweepEvent, ...]:
    """The events a sweep's end is: finished, failed (could not run, or aborted) or interrupted."""
    if status is RunStatus.SUCCEEDED:
        return (SweepEvent.FINISHED,)
    if status in (RunStatus.FAILED, RunStatus.ABORTED):
        return (SweepEvent.FAILED,)
    if status is RunStatus.INTERRUPTED:
        return (SweepEvent.INTERRUPTED,)
    return ()


def run_notice(*, run_id: str, scenario: str, status: RunStatus, passed: bool | None, score: float | None,
               threshold: float, verdicts: Sequence[str], summary: str | None,
               target_url: str) -> dict[str, Any]:  # fmt: skip
    """A run's notice; ``summary`` is the score's sentence, or why the run ended as it did."""
    shown = "n/a" if score is None else f"{score:.0f}/100"
    said = "PASS" if passed else "FAIL"
    headline = f"{scenario}  score {shown} (pass ≥ {threshold:g})  {said}  status {status.value}, target {target_url}"
    return {"kind": "run", "run_id": run_id, "scenario": scenario, "status": status.value, "passed": bool(passed),
            "score": score, "threshold": threshold, "verdicts": list(verdicts), "summary": summary,
            "target": target_url, "headline": headline}  # fmt: skip


def result_notice(result: RunResult) -> dict[str, Any]:
    """The notice of a run the CLI holds the result of."""
    summary = result.abort_reason if result.status is RunStatus.ABORTED else result.score.summary
    return run_notice(run_id=result.run_id, scenario=result.scenario.name, status=result.status,
                      passed=result.passed, score=result.score.value, threshold=result.score.threshold,
                      verdicts=[v.name for v in result.verdicts()], summary=summary,
                      target_url=result.target_url)  # fmt: skip


def stored_summary(status: RunStatus, document: Mapping[str, Any] | None, reason: str | None) -> str | None:
    """A stored run's sentence: its score's for a run that ran to its end, else why it ended as it did."""
    score = document.get("score") if document is not None else None
    said = score.get("summary") if isinstance(score, Mapping) else None
    said = said if isinstance(said, str) and said else None
    return (said or reason) if status is RunStatus.SUCCEEDED else (reason or said)


def sweep_notice(*, sweep_id: str, scenario: str, status: RunStatus, reason: str | None,
                 document: Mapping[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    """A sweep's notice, from its document when it has one (a sweep that could not start has none)."""
    variants = []
    for variant in (document or {}).get("variants") or []:
        found = variant.get("result") or {}
        variants.append({"variant": variant.get("variant"), "usable_rps": found.get("usable_rps"),
                         "unit": found.get("unit"), "verdict": found.get("verdict")})  # fmt: skip
    usable = variants[0]["usable_rps"] if variants else None
    unit = (variants[0]["unit"] if variants else None) or "req/s"
    capacity = "no usable rate" if usable is None else f"usable {usable:g} {unit}"
    headline = f"{scenario} sweep: {capacity}  status {status.value}" + (f" ({reason})" if reason else "")
    return {"kind": "sweep", "sweep_id": sweep_id, "scenario": scenario, "status": status.value, "reason": reason,
            "usable_rps": usable, "variants": variants, "headline": headline}  # fmt: skip
