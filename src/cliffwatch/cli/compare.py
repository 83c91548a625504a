"""``cliffwatch compare A B``: is B worse than A, or is it noise?

A and B are two run results or two sweep results: result files (``--json`` of ``run`` or ``sweep``), one
experiment of a game day's file (``SUITE.json#EXPERIMENT``), or the ids of runs or sweeps in the service's
database (``CLIFFWATCH_DATABASE_URL``). Every figure gets a verdict with its corrected p-value and the smallest
difference these samples could have detected (docs/gamedays.md, "Compare"). Runs of another workload or score
version are refused unless ``--allow-unlike``. Exit codes: 0 nothing regressed, 1 a figure regressed, 2 the
inputs could not be compared.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from pathlib import Path

from rich.table import Table
from rich.text import Text

from cliffwatch.adapters.documents.result_files import write_document
from cliffwatch.adapters.report.compare_report import render_comparison_report, shown_p, shown_value
from cliffwatch.adapters.report.compare_sources import file_side, looks_like_a_path
from cliffwatch.adapters.report.files import write_text_atomically
from cliffwatch.adapters.report.render import ReportInvalid
from cliffwatch.cli.output import stdout
from cliffwatch.config import Settings
from cliffwatch.domain.compare.comparison import Comparison, Side, compare
from cliffwatch.domain.compare.family import ALPHA, Change, Margins
from cliffwatch.domain.errors import CompareRefused, RunNotFound
from cliffwatch.domain.security.masking import without_password

EXIT_SAME, EXIT_REGRESSED, EXIT_INVALID = 0, 1, 2
_STYLE = {Change.REGRESSED: "bold red", Change.IMPROVED: "green", Change.WITHIN_MARGIN: "dim",
          Change.NOT_TESTED: "dim"}  # fmt: skip


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "compare", help="compare two runs or sweeps: per figure, B regressed, improved or no detectable difference "
        "(exit 1 when one regressed)", description=__doc__.splitlines()[0] if __doc__ else None,
    )  # fmt: skip
    parser.add_argument("a", metavar="A", help="the reference: a result file, SUITE.json#EXPERIMENT, or a stored id")
    parser.add_argument("b", metavar="B", help="the one judged against A, in the same forms")
    parser.add_argument("--json", type=Path, dest="json_path", help="write the comparison document here")
    parser.add_argument("--report", type=Path, dest="report_path", help="write the comparison as an HTML page")
    parser.add_argument(
        "--allow-unlike",
        action="store_true",
        help="compare runs of another workload or score version anyway (the notes say how they differ)",
    )
    parser.add_argument("--alpha", type=float, default=ALPHA, help="the family's error rate (default %(default)s)")
    parser.add_argument(
        "--margin-share",
        type=float,
        default=Margins().share,
        help="the smallest change of a share worth calling one (default %(default)s: one point)",
    )
    parser.add_argument(
        "--margin-latency",
        type=float,
        default=Margins().latency,
        help="the smallest change of a latency, relative to A's (default %(default)s: 5 %%)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (the same seed, the same figures)")
    parser.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace, settings: Settings) -> int:
    try:
        sides = [_side(source, settings) for source in (args.a, args.b)]
        margins = Margins(share=args.margin_share, latency=args.margin_latency)
        comparison = compare(sides[0], sides[1], rng=random.Random(args.seed), margins=margins, alpha=args.alpha,
                             allow_unlike=args.allow_unlike)  # fmt: skip
    except (ReportInvalid, CompareRefused, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except FileNotFoundError as exc:
        print(f"error: no result file {exc}", file=sys.stderr)
        return EXIT_INVALID
    except RunNotFound as exc:
        where = without_password(settings.database_url)
        print(f"error: {exc.run_id!r} is neither a result file nor a run in {where}", file=sys.stderr)
        return EXIT_INVALID
    console = stdout()
    console.print(_table(comparison))
    for note in comparison.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    console.print(Text(comparison.summary(), style=_STYLE.get(comparison.verdict, "bold")))
    document = comparison.to_dict()
    if args.json_path is not None:
        write_document(document, args.json_path)
        console.print(f"comparison written to {args.json_path}", markup=False)
    if args.report_path is not None:
        write_text_atomically(render_comparison_report(document), args.report_path)
        console.print(f"report written to {args.report_path}", markup=False)
    return EXIT_REGRESSED if comparison.verdict is Change.REGRESSED else EXIT_SAME


def _side(source: str, settings: Settings) -> Side:
    side = file_side(source)
    if side is not None:
        return side
    if looks_like_a_path(source):
        raise FileNotFoundError(source)
    return Side(label=source, document=asyncio.run(_stored(settings, source)))


async def _stored(settings: Settings, run_id: str) -> dict[str, object]:
    """A stored run's or sweep's result document (the store keeps a run's time series apart: compare needs none)."""
    from cliffwatch.bootstrap.service import open_store  # the store only when an id is given

    async with open_store(settings) as store:
        run = await store.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        if run.result is None:
            raise CompareRefused([f"{run_id} has no result yet (it is {run.status.value})"])
        return dict(run.result)


def _table(comparison: Comparison) -> Table:
    table = Table(title=f"{comparison.a.label} (A) against {comparison.b.label} (B)", title_justify="left")
    for column in ("scope", "figure", "A", "B", "B − A", "p (corrected)", "detectable", "change"):
        table.add_column(column, justify="left" if column in ("scope", "figure", "change") else "right")
    for figure in comparison.figures:
        unit = figure.unit
        table.add_row(
            figure.scope, figure.name, shown_value(figure.a, unit), shown_value(figure.b, unit),
            shown_value(figure.difference, unit, signed=True), shown_p(figure.p_adjusted),
            shown_value(figure.detectable, unit, points=True),
            Text(figure.change.value, style=_STYLE.get(figure.change, "")),
        )  # fmt: skip
    return table
