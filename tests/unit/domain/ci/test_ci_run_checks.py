from __future__ import annotations

from ci_kit import limited_generator, run_result, score
from cliffwatch.domain.ci.checks import CheckStatus, CheckSuite, CiReport
from cliffwatch.domain.ci.run_checks import run_suite
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.workload.prompt_sizing import PromptSizing


def statuses(suite: CheckSuite) -> dict[str, CheckStatus]:
    return {check.name: check.status for check in suite.checks}


def test_a_passing_run_passes_every_check_and_skips_the_component_that_does_not_apply() -> None:
    suite = run_suite(run_result())
    assert suite.name == "ci-test"
    assert suite.classname == "cliffwatch.run.ci-test"
    assert suite.duration_s == 3.0
    assert statuses(suite) == {
        "run completed": CheckStatus.PASSED,
        "score >= 70": CheckStatus.PASSED,
        "component preservation": CheckStatus.PASSED,
        "component recovery": CheckStatus.PASSED,
        "component isolation": CheckStatus.SKIPPED,
        "generator kept its schedule": CheckStatus.PASSED,
        "load sent as written": CheckStatus.PASSED,
        "workload as asked": CheckStatus.PASSED,
        "faults removed": CheckStatus.PASSED,
        "flag hidden_overload": CheckStatus.PASSED,
    }
    assert CiReport(name="r", suites=(suite,)).annotations() == []


def test_a_failed_threshold_fails_with_the_scores_sentence_and_the_components_that_pulled_it_down() -> None:
    failing = score({"preservation": 0.9, "recovery": 0.2, "isolation": 0.5})
    suite = run_suite(run_result(score=failing))
    checks = {check.name: check for check in suite.checks}
    assert checks["score >= 70"].status is CheckStatus.FAILED
    assert checks["score >= 70"].message == failing.summary
    assert checks["score >= 70"].kind == "score_below_threshold"
    # below the pass mark: recovery (20) and isolation (50); preservation (90) held
    assert checks["component recovery"].status is CheckStatus.FAILED
    assert checks["component recovery"].message == "recovery said its sentence"
    assert checks["component isolation"].status is CheckStatus.FAILED
    assert checks["component preservation"].status is CheckStatus.PASSED
    assert "value 90.0 of 100" in checks["component preservation"].detail


def test_a_low_component_of_a_passing_score_does_not_fail() -> None:
    suite = run_suite(run_result(score=score({"preservation": 1.0, "recovery": 1.0, "isolation": 0.4})))
    assert statuses(suite)["component isolation"] is CheckStatus.PASSED


def test_a_generator_limited_run_fails_its_generator_check_with_the_verdicts_summary() -> None:
    result = run_result(generator=limited_generator())
    check = next(c for c in run_suite(result).checks if c.name == "generator kept its schedule")
    assert check.status is CheckStatus.FAILED
    assert check.kind == "generator_limited"
    assert check.message == next(v.summary for v in result.verdicts() if v.name == "generator_limited")
    annotations = CiReport(name="r", suites=(run_suite(result),)).annotations()
    assert [(a.level, a.title) for a in annotations] == [("error", "ci-test: generator kept its schedule")]


def test_a_workload_mismatch_fails_the_workload_check_with_its_reason() -> None:
    result = run_result(prompt_sizing=PromptSizing(failure="the calibration failed"))
    check = next(c for c in run_suite(result).checks if c.name == "workload as asked")
    assert check.status is CheckStatus.FAILED
    assert check.kind == "workload_mismatch"
    assert "the calibration failed" in check.message


def test_an_aborted_run_fails_its_completion_with_the_abort_reason() -> None:
    suite = run_suite(run_result(status=RunStatus.ABORTED, abort_reason="error rate over 50 %"))
    check = suite.checks[0]
    assert (check.name, check.status, check.kind, check.message) == (
        "run completed", CheckStatus.FAILED, "aborted", "error rate over 50 %",
    )  # fmt: skip


def test_a_raised_flag_warns_without_failing() -> None:
    result = run_result(score=score({"preservation": 0.9}, hidden_overload=True))
    report = CiReport(name="r", suites=(run_suite(result),))
    assert not report.failed
    assert [(a.level, a.message) for a in report.annotations()] == [("warning", "answers were hollow")]
