"""``cliffwatch sweep``: find a target's usable capacity (the highest rate that still meets the SLO
attainment target) and say whether it is capacity-constrained. Thin, as ``cli``: parse, call, exit code.

Exit codes as ``run``: 0 the sweep finished, 2 invalid input (naming the option), 3 the environment failed
(target unreachable, or lost mid-sweep), 130 interrupted or aborted.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from cliffwatch.adapters.ci.markdown import sweep_summary
from cliffwatch.adapters.documents.result_files import write_document
from cliffwatch.adapters.documents.scenario_files import load_scenario
from cliffwatch.adapters.report.files import write_run_report
from cliffwatch.adapters.runtime.descriptors import settle_descriptors
from cliffwatch.adapters.terminal.console import ConsoleProgress
from cliffwatch.adapters.terminal.sweep_console import SweepConsoleObserver, sweep_report
from cliffwatch.bootstrap.run import clean_up_leftover_faults
from cliffwatch.bootstrap.sweep import SweepOutcome, prepare_sweep
from cliffwatch.cli.ci import add_junit_option, publish
from cliffwatch.cli.notify import deliver, print_deliveries
from cliffwatch.cli.output import stdout
from cliffwatch.cli.signals import stopping_on_signals
from cliffwatch.cli.workers import add_worker_options, sent_from
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.sweep_plan import short_step_warning
from cliffwatch.domain.capacity.sweep_spec import VARIANT_HELP, SweepSpec, parse_sweep_options
from cliffwatch.domain.ci.checks import CiReport
from cliffwatch.domain.ci.sweep_checks import sweep_suites
from cliffwatch.domain.results.notices import sweep_events, sweep_notice
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.notify_spec import SWEEP_DEFAULTS
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.services.overrides import with_overrides
from cliffwatch.services.sweep import unit_of

EXIT_DONE, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 0, 3, 130


def add_parser(commands: Any) -> None:
    """Adds the ``sweep`` command to the CLI's subparsers."""
    sweep = commands.add_parser(
        "sweep",
        help="find the usable capacity: the highest rate that still meets the SLO attainment target",
        description="Measures steady steps of increasing load against the scenario's target (its phases, "
        "faults and abort guards are not used), then bisects to the cliff. See docs/sweep.md.",
    )
    sweep.add_argument("scenario", help="a scenario file, or the name of a bundled scenario")
    sweep.add_argument("--from", dest="start", type=float, help="lowest rate of a range (req/s, or clients)")
    sweep.add_argument("--to", dest="stop", type=float, help="highest rate of a range")
    sweep.add_argument("--auto", action="store_true", default=None, help="double from a low rate until it fails")
    sweep.add_argument("--attainment", dest="target", type=float, help="on-time share a usable rate needs (0.99)")
    sweep.add_argument("--trials", type=int, help="most measurements of one rate while undecided (3); the usable "
                       "rate is confirmed until it has had these and 3/(1 - attainment) requests")  # fmt: skip
    sweep.add_argument("--step-seconds", dest="step_s", type=float, help="measured window of each step")
    sweep.add_argument("--warmup-seconds", dest="warmup_s", type=float, help="unmeasured lead-in of each step")
    sweep.add_argument("--cooldown-seconds", dest="cooldown_s", type=float, help="idle time after each step")
    sweep.add_argument(
        "--drain-timeout", dest="drain_timeout_s", type=float,
        help="after each step, the most seconds to wait for the target itself to be idle (its waiting and running "
        "requests at 0 by target.metrics, else a probe as fast as on the idle target): 60",
    )  # fmt: skip
    sweep.add_argument("--arrival", choices=("poisson", "constant"), help="arrival process of rate steps")
    sweep.add_argument(
        "--extend-seconds", dest="extend_s", type=float,
        help="measured window of a step re-measured because its queue grew inside it (3 × --step-seconds)",
    )  # fmt: skip
    sweep.add_argument(
        "--no-growth-check", dest="growth_check", action="store_false", default=None,
        help="judge each rate by its SLO attainment alone, not also by whether its queue grew within the step",
    )  # fmt: skip
    sweep.add_argument(
        "--no-luck-correction", dest="luck_correction", action="store_false", default=None,
        help="judge Poisson steps on their counted attainment, not corrected for the luck of their draws",
    )  # fmt: skip
    sweep.add_argument(
        "--recheck", action=argparse.BooleanOptionalAction, default=None,
        help="end by measuring the first rate again, to see whether the target's speed drifted during the sweep "
        "(one more step; on for --auto, off for a range)",
    )  # fmt: skip
    sweep.add_argument(
        "--concurrency", dest="mode", action="store_const", const="concurrency",
        help="steps are numbers of closed-loop clients instead of arrival rates",
    )  # fmt: skip
    sweep.add_argument("--retry-variants", dest="variants", help=f"comma-separated: {VARIANT_HELP}")
    sweep.add_argument("--max-rate", dest="max_rate", type=float, help="--auto never goes above this (1000)")
    sweep.add_argument("--target", dest="target_url", help="send to this base URL instead of the scenario's")
    sweep.add_argument("--seed", type=int, help="override the scenario's seed")
    add_worker_options(sweep, workers_help="send each rate step from this many worker processes, or 'auto'")
    sweep.add_argument("--json", type=Path, dest="json_path", help="write the sweep result document here")
    sweep.add_argument("--report", type=Path, dest="report_path", help="write the sweep's HTML report here")
    add_junit_option(sweep)
    sweep.set_defaults(handler=run_sweep)


def sweep_spec_from(args: argparse.Namespace) -> SweepSpec:
    """The sweep's parameters from the options; raises ``SweepInvalid`` naming each bad option."""
    names = ("start", "stop", "auto", "target", "trials", "step_s", "warmup_s", "cooldown_s", "arrival", "extend_s",
             "growth_check", "luck_correction", "recheck", "drain_timeout_s")  # fmt: skip
    options: dict[str, Any] = {name: getattr(args, name) for name in names}
    options["mode"] = args.mode
    options["max_rate"] = args.max_rate
    options["variants"] = None if args.variants is None else [v.strip() for v in args.variants.split(",")]
    return parse_sweep_options(options)


def run_sweep(args: argparse.Namespace, settings: Settings) -> int:
    spec = sweep_spec_from(args)
    scenario = with_overrides(load_scenario(args.scenario, rules=settings.redaction), target_url=args.target_url,
                              seed=args.seed)  # fmt: skip
    settings, scenario = sent_from(args, settings, scenario)
    outcome = asyncio.run(_execute(scenario, spec, settings))
    console = stdout(width=170)
    console.print(sweep_report(outcome))
    document = outcome.to_dict()
    # The scenario's webhooks hear the sweep's events, before the file is written (it keeps every delivery).
    notice = sweep_notice(sweep_id=outcome.sweep_id, scenario=outcome.scenario.name, status=outcome.status,
                          reason=outcome.reason, document=document)  # fmt: skip
    deliveries = deliver(outcome.scenario.notify, sweep_events(outcome.status), notice, defaults=SWEEP_DEFAULTS,
                         settings=settings)  # fmt: skip
    print_deliveries(console, deliveries)
    if args.json_path is not None:
        write_document({**document, "notifications": [d.to_dict() for d in deliveries]}, args.json_path)
        console.print(f"sweep result written to {args.json_path}")
    if args.report_path is not None:
        write_run_report(outcome.to_dict(), args.report_path)  # a sweep's report, by the document's kind
        console.print(f"sweep report written to {args.report_path}")
    report = ci_report(outcome)
    publish(args, report, lambda: sweep_summary(outcome, report), console)
    if outcome.status in (RunStatus.INTERRUPTED, RunStatus.ABORTED):
        return EXIT_INTERRUPTED
    if outcome.status is RunStatus.FAILED:
        return EXIT_ENVIRONMENT
    return EXIT_DONE


def ci_report(outcome: SweepOutcome) -> CiReport:
    """What a pipeline is told of the sweep: its own suite and one a variant (``domain.ci.sweep_checks``)."""
    suites = sweep_suites(
        scenario=outcome.scenario.name, status=outcome.status, reason=outcome.reason, duration_s=outcome.duration_s,
        workload_mismatch=outcome.workload_mismatch, variants=[(r.variant, r.result) for r in outcome.reports],
    )  # fmt: skip
    return CiReport(name=f"cliffwatch sweep {outcome.scenario.name}", suites=suites)


async def _execute(scenario: Scenario, spec: SweepSpec, settings: Settings) -> SweepOutcome:
    descriptors = settle_descriptors(runs=1, reserve=settings.fd_reserve)
    with ConsoleProgress() as progress:
        report = await clean_up_leftover_faults(settings)
        if not report.is_empty():
            progress.note(report.summary())
        warning = short_step_warning(scenario, spec)
        if warning is not None:
            progress.note(f"warning: {warning}")
        unit = unit_of(spec, scenario)
        observer = SweepConsoleObserver(progress, unit=unit)
        async with prepare_sweep(
            settings, scenario, spec, observer=progress, sweep_observer=observer, descriptors=descriptors
        ) as sweep:
            with stopping_on_signals("sweep", sweep.interrupt, progress.note):
                progress.note(
                    f"sweep {sweep.sweep_id}: {scenario.name} against {sweep.target_url}, at most "
                    f"{spec.max_duration_s() / 60:.0f} min"
                )
                return await sweep.run()
