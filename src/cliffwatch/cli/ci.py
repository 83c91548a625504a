"""The CI outputs ``run`` and ``sweep`` share: ``--junit FILE``, and under GitHub Actions (``GITHUB_ACTIONS=true``)
the job summary and the annotations. They change no exit code; docs/gamedays.md, "CI outputs", says what they hold.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.console import Console

from cliffwatch.adapters.ci.github_actions import GithubActions, annotation_lines
from cliffwatch.adapters.ci.junit import write_junit
from cliffwatch.config import process_environment
from cliffwatch.domain.ci.checks import CiReport


def add_junit_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--junit", type=Path, dest="junit_path",
        help="write a JUnit XML report here: a testcase per check (score, components, verdicts), for a CI's test view",
    )  # fmt: skip


def publish(
    args: argparse.Namespace,
    report: CiReport,
    summary: Callable[[], str],
    console: Console,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Writes the JUnit report when ``--junit`` asks; in a GitHub Actions job, appends ``summary()`` to the job
    summary and prints an annotation a failed or warned check (``environ``: this process's by default)."""
    if args.junit_path is not None:
        write_junit(report, args.junit_path)
        console.print(f"JUnit report written to {args.junit_path}", markup=False, soft_wrap=True)
    github = GithubActions.detect(process_environment() if environ is None else environ)
    if github is None:
        return
    github.append_summary(summary())
    for line in annotation_lines(report.annotations()):
        # print, not the console: a workflow command is one raw line the runner reads, never wrapped or styled
        print(line, flush=True)
