"""``cliffwatch run --junit`` and its GitHub Actions outputs, as a pipeline sees them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from test_cli import QUICK, cliffwatch, write

# QUICK with an SLO no answer can meet: its score fails the pass mark.
MISSED = {**QUICK, "slo": {"ttft_ms": 1, "e2e_ms": 2, "timeout_ms": 3000}}


def test_run_writes_junit_and_under_github_actions_a_summary_and_annotations(tmp_path: Path) -> None:
    """A run that missed its SLO completes, on a generator that kept its schedule, and fails its score: the JUnit
    report and the annotation say so, and the job summary shows its scorecard."""
    summary = tmp_path / "summary.md"
    junit = tmp_path / "junit.xml"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    result = cliffwatch("run", str(write(tmp_path, MISSED)), "--junit", str(junit), env=env)
    assert result.returncode == 1, result.stdout + result.stderr  # the exit code is the score's, as without CI
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("name") == "quick"
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert {"run completed", "score >= 70", "generator kept its schedule", "workload as asked"} <= set(cases)
    assert cases["run completed"].find("failure") is None
    failure = cases["score >= 70"].find("failure")
    assert failure is not None
    assert failure.get("type") == "score_below_threshold"
    text = summary.read_text()
    assert text.startswith("### ❌ failed: quick, score ")
    assert "| push | stress |" in text
    errors = [line for line in result.stdout.splitlines() if line.startswith("::error ")]
    assert errors
    assert errors[0].startswith("::error title=quick%3A score >= 70::")


def test_outside_github_actions_run_prints_no_workflow_command(tmp_path: Path) -> None:
    result = cliffwatch("run", str(write(tmp_path, MISSED)), env={"GITHUB_ACTIONS": ""})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "::error" not in result.stdout
    assert "::warning" not in result.stdout
