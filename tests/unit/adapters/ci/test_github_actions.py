from __future__ import annotations

from pathlib import Path

import pytest

from ci_kit import limited_generator, run_result
from cliffwatch.adapters.ci.github_actions import GithubActions, annotation_line, escape_data, escape_property
from cliffwatch.adapters.ci.markdown import run_summary
from cliffwatch.domain.ci.checks import Annotation, CiReport
from cliffwatch.domain.ci.run_checks import run_suite


@pytest.mark.parametrize(
    ("environ", "found"),
    [
        ({"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": "/tmp/s.md"}, GithubActions(step_summary=Path("/tmp/s.md"))),
        ({"GITHUB_ACTIONS": "true"}, GithubActions(step_summary=None)),
        ({"GITHUB_ACTIONS": "false", "GITHUB_STEP_SUMMARY": "/tmp/s.md"}, None),
        ({}, None),
    ],
)
def test_github_actions_is_detected_only_when_the_runner_says_true(
    environ: dict[str, str], found: GithubActions | None
) -> None:
    assert GithubActions.detect(environ) == found


def test_a_message_escapes_percent_and_line_breaks_and_a_property_also_colon_and_comma() -> None:
    assert escape_data("50% done\r\nnext: a, b") == "50%25 done%0D%0Anext: a, b"
    assert escape_property("50% done\r\nnext: a, b") == "50%25 done%0D%0Anext%3A a%2C b"


def test_an_annotation_is_one_line_that_no_text_can_end_or_forge() -> None:
    line = annotation_line(Annotation(level="error", title="demo: score >= 70", message="low\n::error::forged"))
    assert line == "::error title=demo%3A score >= 70::low%0A::error::forged"
    assert "\n" not in line


def test_the_summary_is_appended_and_says_nothing_without_a_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    path.write_text("# an earlier step\n")
    assert GithubActions(step_summary=path).append_summary("## ours")
    assert path.read_text() == "# an earlier step\n## ours\n"
    assert not GithubActions(step_summary=None).append_summary("## ours")


def test_the_run_summary_has_the_headline_phases_components_verdicts_and_checks() -> None:
    result = run_result(generator=limited_generator())
    markdown = run_summary(result, CiReport(name="r", suites=(run_suite(result),)))
    assert markdown.startswith("### ❌ failed: ci-test, score 90 (pass mark 70)\n")
    assert "| phase | role | offered | sent | on time | goodput req/s | p99 e2e ms |" in markdown
    assert "| calm | baseline | 0 | 0 | – | 0.00 | – |" in markdown
    assert "| recovery | 90.0 | 0.25 | recovery said its sentence |" in markdown
    assert "| isolation | n/a | 0.25 |" in markdown
    assert "- **generator\\_limited**: the load generator could not keep its schedule" in markdown
    assert "Checks: 8 passed, 1 failed, 0 warned, 1 skipped." in markdown
    assert "- error: **ci-test: generator kept its schedule**:" in markdown


def test_text_from_the_run_shows_as_written_never_as_markup() -> None:
    result = run_result(target_url="http://h/<script>|*x*")
    markdown = run_summary(result, CiReport(name="r", suites=(run_suite(result),)))
    assert "http://h/&lt;script&gt;\\|\\*x\\*" in markdown
    assert "<script>" not in markdown
