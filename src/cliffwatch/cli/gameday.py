"""``cliffwatch gameday SUITE.yaml``: a game day's experiments one after another, each against its hypothesis.

Every experiment's scenario is made before anything runs (a bad one refuses the whole suite, exit 2); each then
runs exactly as ``cliffwatch run`` would (faults, caps, the allowlist, a crash leaving nothing behind) and its
scorecard is printed with its hypothesis held or broken. Exit 0 when every hypothesis held, 1 when one broke,
2 for invalid input, 3 when an experiment could not run (nothing runs after it), 130 when stopped (Ctrl-C ends
the whole suite). ``--json`` writes the combined document, ``--report`` one HTML page (the summary, then each
experiment's report), ``--junit`` a testsuite per experiment (its run's checks, and its hypothesis); under
GitHub Actions the job summary and annotations follow, as for ``run``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from rich.text import Text

from cliffwatch.adapters.documents.suite_files import experiment_scenarios, load_suite
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.adapters.notify.webhooks import WebhookNotifier, notify
from cliffwatch.adapters.report.gameday_report import render_gameday_report
from cliffwatch.adapters.terminal.console import scorecard
from cliffwatch.adapters.workload.preparation import prepare
from cliffwatch.bootstrap.run import check_webhooks, secret_resolver
from cliffwatch.cli.ci import add_junit_option, publish
from cliffwatch.cli.notify import print_deliveries
from cliffwatch.cli.output import stdout
from cliffwatch.config import Settings
from cliffwatch.domain.ci.checks import Check, CheckStatus, CheckSuite, CiReport
from cliffwatch.domain.ci.run_checks import run_suite
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.gameday.suite_spec import ExperimentSpec
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.scenario.notify_spec import Delivery
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.services.gameday import ExperimentOutcome, GamedayService, SuiteOutcome

Execute = Callable[[Scenario, Settings], Awaitable[RunResult]]


def add_gameday_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], execute: Execute) -> None:
    gameday = commands.add_parser(
        "gameday", help="run a game day: a suite's experiments in order, each against its hypothesis (exit 0 all "
        "held, 1 one broke, 3 one could not run)", description=__doc__.splitlines()[0] if __doc__ else None,
    )  # fmt: skip
    gameday.add_argument("suite", type=Path, help="the suite file (docs/gamedays.md)")
    gameday.add_argument("--json", type=Path, dest="json_path", help="write the combined result document here")
    gameday.add_argument("--report", type=Path, dest="report_path",
                         help="write one HTML page: the summary table, then each experiment's report")  # fmt: skip
    add_junit_option(gameday)
    gameday.set_defaults(handler=partial(run_gameday, execute=execute))


def run_gameday(args: argparse.Namespace, settings: Settings, *, execute: Execute) -> int:
    suite = load_suite(args.suite)
    scenarios = dict(zip((e.name for e in suite.experiments), experiment_scenarios(suite, rules=settings.redaction),
                         strict=True))  # fmt: skip
    for name, scenario in scenarios.items():  # every file each names read and every cap judged, before any load
        try:
            prepare(scenario, caps=settings.caps, limits=settings.preparation, data_dirs=settings.data_dirs)
            asyncio.run(check_webhooks(settings, scenario))
        except ScenarioInvalid as exc:
            raise ScenarioInvalid(exc.problems, source=f"{suite.name}: experiment {name}") from exc
    notifier = WebhookNotifier(settings.allowed_webhooks, secret_resolver(settings).resolve)
    if suite.notify and (problems := asyncio.run(notifier.problems(suite.notify))):
        raise ScenarioInvalid(problems, source=suite.name)  # refused before the load, not found out at its end
    console = stdout()
    results: dict[str, RunResult] = {}  # each experiment's result as run, for its JUnit checks

    async def play() -> SuiteOutcome:
        service: GamedayService

        class Runner:
            async def run(self, experiment: ExperimentSpec) -> RunResult:
                console.print(Text(f"experiment {experiment.name}: expecting {experiment.expect.describe()}",
                                   style="bold"))  # fmt: skip
                result = await execute(scenarios[experiment.name], settings)
                results[experiment.name] = result
                if result.status is RunStatus.INTERRUPTED:
                    service.stop()  # Ctrl-C stopped the experiment: the whole game day ends with it
                console.print(scorecard(result))
                return result

        service = GamedayService(suite, Runner(), pause=asyncio.sleep)
        return await service.run()

    outcome = asyncio.run(play())
    for experiment in outcome.experiments:
        console.print(Text(f"{experiment.experiment.name}: {_state_line(experiment)}"))
    console.print(Text(outcome.summary(), style="bold"))
    deliveries = asyncio.run(_notify(outcome, settings))
    print_deliveries(console, deliveries)
    document = {**outcome.to_dict(), "notifications": [d.to_dict() for d in deliveries]}
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(document, indent=2), encoding="utf-8")
        console.print(f"result written to {args.json_path}", markup=False)
    if args.report_path is not None:
        args.report_path.write_text(render_gameday_report(document), encoding="utf-8")
        console.print(f"report written to {args.report_path}", markup=False)
    report = CiReport(name=f"cliffwatch gameday {suite.name}",
                      suites=tuple(_suite(e, results.get(e.experiment.name)) for e in outcome.experiments))  # fmt: skip
    publish(args, report, lambda: _markdown(outcome), console)
    return outcome.exit_code


async def _notify(outcome: SuiteOutcome, settings: Settings) -> list[Delivery]:
    """The suite's events to its webhooks (none of which can fail the game day): finished when every experiment
    ran, hypothesis_broken when one broke, failed when one could not run or the suite was stopped."""
    if not outcome.suite.notify:
        return []
    summary = outcome.notice()
    destinations = Destinations(settings.allowed_webhooks)
    found: list[Delivery] = []
    for event in outcome.events():
        found += await notify(outcome.suite.notify, event, summary, destinations=destinations,
                              resolve=secret_resolver(settings).resolve)  # fmt: skip
    return found


STOPPED = "stopped: the game day was stopped while its run went on, so it has no verdict"


def _state_line(experiment: ExperimentOutcome) -> str:
    if experiment.stopped:
        return STOPPED
    if experiment.judgement is not None:
        return f"hypothesis {experiment.judgement.summary()}"
    return f"could not run: {experiment.error}" if experiment.error is not None else "not run"


def _suite(experiment: ExperimentOutcome, result: RunResult | None) -> CheckSuite:
    """An experiment's testsuite: its run's checks and its hypothesis, or one check saying why it did not run."""
    name = experiment.experiment.name
    hypothesis = f"hypothesis: {experiment.experiment.expect.describe()}"
    if result is None or experiment.judgement is None:
        status = CheckStatus.FAILED if experiment.error is not None else CheckStatus.SKIPPED
        check = Check(name=hypothesis, status=status, kind="experiment_failed" if experiment.error else "",
                      message=experiment.error or (STOPPED if experiment.stopped else "not run: the game day "
                                                   "stopped before it"))  # fmt: skip
        return CheckSuite(name=name, classname=f"cliffwatch.gameday.{name}", duration_s=0.0, checks=(check,))
    held = experiment.judgement.held
    check = Check(name=hypothesis, status=CheckStatus.PASSED if held else CheckStatus.FAILED,
                  kind="" if held else "hypothesis_broken", message=experiment.judgement.summary())  # fmt: skip
    run = run_suite(result)
    return CheckSuite(name=name, classname=f"cliffwatch.gameday.{name}", duration_s=run.duration_s,
                      checks=(check, *run.checks))  # fmt: skip


def _markdown(outcome: SuiteOutcome) -> str:
    rows = "\n".join(f"| {e.experiment.name} | {e.experiment.expect.describe()} | {_state_line(e)} |"
                     for e in outcome.experiments)  # fmt: skip
    return f"## {outcome.summary()}\n\n| experiment | hypothesis | outcome |\n|---|---|---|\n{rows}\n"
