"""``cliffwatch report``: the HTML report of a run or a sweep, from its result file or from the service's store.

A sweep is told from a run by its document's ``kind`` (``"sweep"``). Exit codes: 0 the report was written;
2 no such file or run, or a document that is neither a run nor a sweep result.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cliffwatch.adapters.report.files import read_result_file, write_run_report
from cliffwatch.adapters.report.render import ReportInvalid
from cliffwatch.config import Settings
from cliffwatch.domain.errors import RunNotFound
from cliffwatch.domain.security.masking import without_password
from cliffwatch.domain.service.runs import RunKind

EXIT_OK, EXIT_INVALID = 0, 2


class RunHasNoResult(ReportInvalid):
    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id!r} has no result yet (it is {status})")


def add_parser(commands: Any) -> None:
    """Registers ``report`` on the top-level sub-command parsers."""
    report = commands.add_parser(
        "report", help="write a self-contained HTML report of a run or sweep (from its --json file or run id)",
        description="Writes one HTML file with the verdict, evidence and charts of a run (score, charts over "
        "time) or a sweep (usable capacity, charts against the offered rate); it opens without network access. "
        "RUN_OR_JSON is a result file written by 'cliffwatch run --json' or 'cliffwatch sweep --json', or the "
        "id of a run or sweep in the service's database (CLIFFWATCH_DATABASE_URL).",
    )  # fmt: skip
    report.add_argument(
        "source", metavar="RUN_OR_JSON", help="a result JSON file, or a run or sweep id in the database"
    )
    report.add_argument("-o", "--output", type=Path, help="the HTML file to write (default: <source>.html)")
    report.set_defaults(handler=run_report_command)


def run_report_command(args: argparse.Namespace, settings: Settings) -> int:
    source: str = args.source
    path = Path(source)
    document: Mapping[str, Any]
    timeseries: Sequence[Mapping[str, Any]] | None
    try:
        if path.is_file():
            document, timeseries = read_result_file(path), None
            default_output = path.with_suffix(".html")
        elif _looks_like_a_path(source):
            raise FileNotFoundError(source)
        else:
            document, timeseries = asyncio.run(_stored(settings, source))
            default_output = Path(f"run-{source}.html")
    except FileNotFoundError:
        print(f"error: no result file {source!r}", file=sys.stderr)
        return EXIT_INVALID
    except RunNotFound:
        where = without_password(settings.database_url)
        print(f"error: {source!r} is neither a result file nor a run in {where}", file=sys.stderr)
        return EXIT_INVALID
    except ReportInvalid as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    output = write_run_report(document, args.output or default_output, timeseries=timeseries)
    print(f"report written to {output}")
    return EXIT_OK


def _looks_like_a_path(source: str) -> bool:
    return "/" in source or "\\" in source or source.endswith((".json", ".JSON")) or Path(source).exists()


async def _stored(settings: Settings, run_id: str) -> tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]:
    """A stored run's result document and its time series, which the store keeps apart (a sweep has none)."""
    from cliffwatch.bootstrap.service import open_store  # the store only when a run id is given

    async with open_store(settings) as store:
        run = await store.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        if run.result is None:
            raise RunHasNoResult(run_id, run.status.value)
        if run.kind is RunKind.SWEEP:
            return run.result, []
        return run.result, await store.timeseries(run_id)
