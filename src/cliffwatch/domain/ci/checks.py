"""The CI report as values: a check (one JUnit testcase), a suite of checks (one testsuite: a run, or a sweep's
variant), the report of one command, and the annotations a pipeline shows for it.

A check that fails makes the pipeline's report red; a warning is a check that passed with something a reader
should see (JUnit has no warning, so the writer puts it beside a passing testcase, and GitHub shows it as a
``::warning``); a check that does not apply is skipped. docs/gamedays.md, "CI outputs", lists every check.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class CheckStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # the command's result does not hold: a JUnit failure, a GitHub ::error
    WARNED = "warned"  # it holds, with a caveat: a passing JUnit testcase with system-err, a GitHub ::warning
    SKIPPED = "skipped"  # the check does not apply (a score component with no value)


@dataclass(frozen=True, kw_only=True)
class Check:
    """One thing a pipeline can hold a run to: its name (stable from run to run, so CI history lines up), how it
    came out, why (``kind``: the verdict's or the rule's name), the one-sentence ``message`` and the ``detail``
    behind it (the evidence a reader opens)."""

    name: str
    status: CheckStatus
    kind: str = ""
    message: str = ""
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class CheckSuite:
    """The checks of one run or one sweep variant: ``name`` is what a pipeline groups by (the scenario's name),
    ``classname`` the dotted path JUnit readers show before each check."""

    name: str
    classname: str
    duration_s: float
    checks: tuple[Check, ...]

    def count(self, status: CheckStatus) -> int:
        return sum(1 for check in self.checks if check.status is status)


@dataclass(frozen=True, kw_only=True)
class Annotation:
    """A line a pipeline shows beside the job: ``level`` is ``error`` or ``warning``."""

    level: str
    title: str
    message: str


@dataclass(frozen=True, kw_only=True)
class CiReport:
    """Everything one command tells a pipeline: its suites, in the order they ran."""

    name: str
    suites: tuple[CheckSuite, ...]

    @property
    def failed(self) -> bool:
        return any(check.status is CheckStatus.FAILED for suite in self.suites for check in suite.checks)

    def annotations(self) -> list[Annotation]:
        """An error for every failed check and a warning for every warned one, titled by suite and check, in the
        report's order."""
        levels = {CheckStatus.FAILED: "error", CheckStatus.WARNED: "warning"}
        return [
            Annotation(level=levels[check.status], title=f"{suite.name}: {check.name}", message=check.message)
            for suite in self.suites
            for check in suite.checks
            if check.status in levels
        ]
