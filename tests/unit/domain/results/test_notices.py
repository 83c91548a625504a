"""Which events a run's or a sweep's end is, and what its webhooks are told of it."""

from __future__ import annotations

import pytest

from cliffwatch.domain.results.notices import run_events, run_notice, stored_summary, sweep_events, sweep_notice
from cliffwatch.domain.results.result import RunStatus


@pytest.mark.parametrize(
    ("status", "passed", "events"),
    [
        (RunStatus.SUCCEEDED, True, ["finished"]),
        (RunStatus.SUCCEEDED, False, ["finished", "not_passed"]),  # its score, generator_limited, capped, …
        (RunStatus.FAILED, None, ["failed"]),
        (RunStatus.ABORTED, False, ["failed"]),
        (RunStatus.INTERRUPTED, False, ["interrupted"]),
        (RunStatus.RUNNING, None, []),
    ],
)
def test_a_runs_end_is_the_events_its_status_and_pass_say(status: RunStatus, passed: bool | None,
                                                          events: list[str]) -> None:  # fmt: skip
    assert list(run_events(status, passed)) == events


@pytest.mark.parametrize(
    ("status", "events"),
    [(RunStatus.SUCCEEDED, ["finished"]), (RunStatus.FAILED, ["failed"]), (RunStatus.ABORTED, ["failed"]),
     (RunStatus.INTERRUPTED, ["interrupted"]), (RunStatus.QUEUED, [])],
)  # fmt: skip
def test_a_sweeps_end_is_finished_failed_or_interrupted(status: RunStatus, events: list[str]) -> None:
    assert list(sweep_events(status)) == events


def test_a_run_notice_is_a_summary_with_the_scorecards_line() -> None:
    notice = run_notice(run_id="r1", scenario="burst-storm", status=RunStatus.SUCCEEDED, passed=False, score=44.2,
                        threshold=70, verdicts=["hidden_overload"], summary="Score 44.2/100, FAIL at 70: …",
                        target_url="http://127.0.0.1:8000")  # fmt: skip
    assert notice == {"kind": "run", "run_id": "r1", "scenario": "burst-storm", "status": "succeeded", "passed": False,
                      "score": 44.2, "threshold": 70, "verdicts": ["hidden_overload"],
                      "summary": "Score 44.2/100, FAIL at 70: …", "target": "http://127.0.0.1:8000",
                      "headline": "burst-storm  score 44/100 (pass ≥ 70)  FAIL  status succeeded, target "
                                  "http://127.0.0.1:8000"}  # fmt: skip


def test_a_stored_runs_sentence_is_its_scores_unless_it_did_not_run_to_its_end() -> None:
    document = {"score": {"summary": "Score 90.0/100, PASS at 70."}}
    assert stored_summary(RunStatus.SUCCEEDED, document, None) == "Score 90.0/100, PASS at 70."
    assert stored_summary(RunStatus.ABORTED, document, "guard: error rate") == "guard: error rate"
    assert stored_summary(RunStatus.FAILED, None, "target unreachable") == "target unreachable"
    assert stored_summary(RunStatus.FAILED, None, None) is None


def test_a_sweep_notice_says_its_capacity_and_each_variants_verdict() -> None:
    found = {"usable_rps": 5.75, "unit": "req/s", "verdict": "usable at 5.75 req/s", "steps": []}
    document = {"variants": [{"variant": "as-written", "result": found}]}
    notice = sweep_notice(sweep_id="s1", scenario="burst-storm", status=RunStatus.SUCCEEDED, reason=None,
                          document=document)  # fmt: skip
    assert notice["usable_rps"] == 5.75
    assert notice["variants"] == [{"variant": "as-written", "usable_rps": 5.75, "unit": "req/s",
                                   "verdict": "usable at 5.75 req/s"}]  # fmt: skip
    assert notice["headline"] == "burst-storm sweep: usable 5.75 req/s  status succeeded"
    failed = sweep_notice(sweep_id="s2", scenario="x", status=RunStatus.FAILED, reason="unreachable", document=None)
    assert (failed["usable_rps"], failed["variants"], failed["headline"]) == (
        None, [], "x sweep: no usable rate  status failed (unreachable)")  # fmt: skip
