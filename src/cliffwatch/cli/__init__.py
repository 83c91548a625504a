"""The command line: parse, build settings, call a service, set the exit code.

Exit codes: 0 the run passed (or the command succeeded), 1 the run failed its score (or a file did
not validate), 2 invalid input (scenario, settings, arguments, a target outside the allowlist),
3 the environment failed us (target unreachable, faults unavailable), 130 interrupted.

The service and its SQL store are imported by the commands that use them, not at the top: they are most of
the import time (about 0.9 s of 2.6 s), which every ``cliffwatch run`` and ``validate`` would otherwise pay.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from cliffwatch import __version__
from cliffwatch.adapters.ci.markdown import run_summary
from cliffwatch.adapters.documents.result_files import write_document, write_result
from cliffwatch.adapters.documents.scenario_files import bundled_names, load_scenario
from cliffwatch.adapters.network.target_policies import DenyListPolicy
from cliffwatch.adapters.report.files import write_run_report
from cliffwatch.adapters.runtime.descriptors import settle_descriptors
from cliffwatch.adapters.runtime.logs import configure_logging
from cliffwatch.adapters.terminal.console import ConsoleProgress, comparison, scorecard
from cliffwatch.adapters.workload.preparation import prepare
from cliffwatch.bootstrap.run import clean_up_leftover_faults, prepare_run, toxiproxy_unavailable
from cliffwatch.bootstrap.settings import load_settings
from cliffwatch.cli.ci import add_junit_option, publish
from cliffwatch.cli.compare import add_parser as add_compare_parser
from cliffwatch.cli.gameday import add_gameday_parser
from cliffwatch.cli.notify import deliver, print_deliveries
from cliffwatch.cli.output import stdout
from cliffwatch.cli.report import add_parser as add_report_parser
from cliffwatch.cli.signals import stopping_on_signals
from cliffwatch.cli.sweep import add_parser as add_sweep_parser
from cliffwatch.cli.target import add_parser as add_target_parser
from cliffwatch.cli.workers import add_worker_options, sent_from
from cliffwatch.config import Settings, SettingsInvalid, describe_settings
from cliffwatch.domain.ci.checks import CiReport
from cliffwatch.domain.ci.run_checks import run_suite
from cliffwatch.domain.errors import (
    BuiltinTargetFailed,
    CliffwatchError,
    FaultInjectionFailed,
    RunRefused,
    ScenarioInvalid,
    StoreUnavailable,
    TargetConfigInvalid,
    TargetNotAllowed,
    TargetUnreachable,
    WorkersFailed,
)
from cliffwatch.domain.results.notices import result_notice, run_events
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.scenario.notify_spec import RUN_DEFAULTS
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.service.runs import ApiToken, TokenRole
from cliffwatch.services.overrides import with_overrides
from cliffwatch.services.reconcile import ReconcileReport
from cliffwatch.services.runs import check_places
from cliffwatch.services.tokens import TokenService

EXIT_PASS, EXIT_FAIL, EXIT_INVALID, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DEMO_SCENARIOS = ("burst-storm", "retry-storm", "hollow-answers", "noisy-neighbour", "noisy-neighbour-fair")
FAULT_DEMO = "slow-backend"  # runs when Toxiproxy is available
_INPUT_ERRORS = (ScenarioInvalid, TargetConfigInvalid, SettingsInvalid, TargetNotAllowed, RunRefused)
_ENVIRONMENT_ERRORS = (TargetUnreachable, BuiltinTargetFailed, FaultInjectionFailed, StoreUnavailable, WorkersFailed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    err = Console(stderr=True, highlight=False)
    try:
        settings = load_settings()
        # The service logs what it does; one-shot commands keep the terminal for their output unless -v.
        quiet = not args.verbose and args.command != "serve"
        configure_logging(level="warning" if quiet else settings.log_level, fmt=settings.log_format,
                          rules=settings.redaction)  # fmt: skip
        code: int = args.handler(args, settings)
        return code
    except _INPUT_ERRORS as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, soft_wrap=True)
        return EXIT_INVALID
    except _ENVIRONMENT_ERRORS as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, soft_wrap=True)
        return EXIT_ENVIRONMENT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except CliffwatchError as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, soft_wrap=True)
        return EXIT_ENVIRONMENT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cliffwatch", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"cliffwatch {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at the level CLIFFWATCH_LOG_LEVEL sets")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run one scenario and print its scorecard (exit 0 pass, 1 fail)")
    run.add_argument("scenario", help="a scenario file, or the name of a bundled scenario")
    run.add_argument("--target", help="send to this base URL instead of the scenario's (or 'builtin')")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--threshold", type=float, help="override the pass mark (0-100)")
    add_worker_options(run)
    run.add_argument("--json", type=Path, dest="json_path", help="write the full result as JSON to this file")
    add_junit_option(run)
    run.set_defaults(handler=_run)

    add_sweep_parser(commands)
    add_gameday_parser(commands, _execute)

    validate = commands.add_parser(
        "validate", help="check scenario files (and that none aims at a denied place); exit 1 listing every problem, "
        "2 for a denied place"
    )  # fmt: skip
    validate.add_argument("files", nargs="+")
    validate.set_defaults(handler=_validate)

    demo = commands.add_parser(
        "demo",
        help="run burst-storm, retry-storm, hollow-answers, noisy-neighbour and noisy-neighbour-fair (and "
        "slow-backend with Toxiproxy) on the built-in target",
    )
    demo.add_argument("--reports-dir", type=Path, default=Path("demo-out"), help="where the results (JSON, HTML) go")
    demo.set_defaults(handler=_demo)
    add_report_parser(commands)
    add_compare_parser(commands)

    faults = commands.add_parser("faults", help="fault housekeeping")
    fault_commands = faults.add_subparsers(dest="faults_command", required=True)
    reconcile = fault_commands.add_parser(
        "reconcile", help="remove toxics and proxies left behind by crashed runs (also done at every start-up)"
    )
    reconcile.set_defaults(handler=_faults)

    serve = commands.add_parser(
        "serve", help="run the service: REST API, worker, schedules (settings from the environment)",
        description="Runs the long-running service. Every setting comes from the environment or the YAML file "
        "CLIFFWATCH_CONFIG names (keys: the names below without the prefix, in lower case):",
        epilog=describe_settings(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    serve.set_defaults(handler=_serve)

    db = commands.add_parser("db", help="database housekeeping")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_commands.add_parser("upgrade", help="apply the migrations to CLIFFWATCH_DATABASE_URL").set_defaults(
        handler=_db_upgrade
    )

    token = commands.add_parser("token", help="API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser("create", help="create a token and print it (once: it is not stored)")
    create.add_argument("--role", required=True, choices=[r.value for r in TokenRole])
    create.add_argument("--name", default="cli", help="who or what holds it (shown in logs and run triggers)")
    create.set_defaults(handler=_token_create)
    token_commands.add_parser("list", help="list tokens (never their secrets)").set_defaults(handler=_token_list)
    revoke = token_commands.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id")
    revoke.set_defaults(handler=_token_revoke)

    scenarios = commands.add_parser("scenarios", help="list the bundled scenarios")
    scenarios.set_defaults(handler=_scenarios)

    add_target_parser(commands)
    return parser


def _load(reference: str, args: argparse.Namespace, settings: Settings) -> Scenario:
    scenario = load_scenario(reference, rules=settings.redaction)
    return with_overrides(
        scenario, target_url=getattr(args, "target", None), seed=getattr(args, "seed", None),
        threshold=getattr(args, "threshold", None),
    )  # fmt: skip


def _run(args: argparse.Namespace, settings: Settings) -> int:
    settings, scenario = sent_from(args, settings, _load(args.scenario, args, settings))
    result = asyncio.run(_execute(scenario, settings))
    console = stdout()
    console.print(scorecard(result))
    # Told before the file is written, so that it keeps every delivery; none of them changes the exit code.
    deliveries = deliver(result.scenario.notify, run_events(result.status, result.passed), result_notice(result),
                         defaults=RUN_DEFAULTS, settings=settings)  # fmt: skip
    print_deliveries(console, deliveries)
    if args.json_path is not None:
        write_document({**result.to_dict(), "notifications": [d.to_dict() for d in deliveries]}, args.json_path)
        console.print(f"result written to {args.json_path}")
    report = CiReport(name=f"cliffwatch run {result.scenario.name}", suites=(run_suite(result),))
    publish(args, report, lambda: run_summary(result, report), console)
    if result.status is RunStatus.INTERRUPTED:
        return EXIT_INTERRUPTED
    return EXIT_PASS if result.passed else EXIT_FAIL


async def _execute(scenario: Scenario, settings: Settings) -> RunResult:
    descriptors = settle_descriptors(runs=1, reserve=settings.fd_reserve)
    with ConsoleProgress() as progress:
        await _clean_up(settings, progress.note)
        async with prepare_run(settings, scenario, observer=progress, descriptors=descriptors) as ready:
            with stopping_on_signals("run", ready.service.interrupt, progress.note):
                via = "" if ready.load_url == ready.target_url else f" through {ready.load_url}"
                progress.note(f"run {ready.run_id}: {scenario.name} against {ready.target_url}{via}")
                return await ready.service.execute(scenario, run_id=ready.run_id, target_url=ready.target_url)


def _validate(args: argparse.Namespace, settings: Settings) -> int:
    """Each file read and validated as a run would be, every place it names judged by the deny list (not by this
    process's allowlists: a scenario may be meant for an instance that allows its target, but none may aim at what
    is denied), and its worst case, its traces' requests included, by the caps (``CLIFFWATCH_MAX_*``, as a run here
    would be): exit 1 when a file is invalid, 2 when a place is denied or a cap refuses it (both: 2)."""
    out = Console(highlight=False)
    failed = refused = 0
    policy = DenyListPolicy(settings.denied, toxiproxy_url=settings.toxiproxy_url)
    for reference in args.files:
        try:
            scenario = load_scenario(reference)
            # prepared as a run would be (every file it names read, within the bounds), before anything is sent
            prepared = prepare(scenario, caps=settings.caps, limits=settings.preparation, data_dirs=settings.data_dirs)
        except ScenarioInvalid as exc:
            failed += 1
            out.print(str(ScenarioInvalid(exc.problems, source=reference)), markup=False, soft_wrap=True)
            continue
        except RunRefused as exc:  # over the caps, its files' requests judged line by line
            refused += 1
            out.print(f"{reference}: {exc}", markup=False, soft_wrap=True)
            continue
        try:
            asyncio.run(check_places(prepared.scenario, policy))
        except TargetNotAllowed as exc:
            refused += 1
            out.print(f"{reference}: {exc}", markup=False, soft_wrap=True)
        else:
            # one line a file however long its path, off a terminal too (a CI log, a grep)
            ok = f"{reference}: ok ({scenario.name}, {len(scenario.phases)} phases, {scenario.duration_s:g}s)"
            out.print(ok, markup=False, soft_wrap=True)
    return EXIT_INVALID if refused else EXIT_FAIL if failed else EXIT_PASS


def _scenarios(args: argparse.Namespace, settings: Settings) -> int:
    out = Console(highlight=False)
    for name in bundled_names():
        scenario = load_scenario(name)
        out.print(f"[bold]{name}[/bold]  {scenario.duration_s:g}s  {scenario.description.strip().splitlines()[0]}")
    return EXIT_PASS


async def _clean_up(settings: Settings, say: Callable[[str], None]) -> ReconcileReport:
    """The start-up reconciler: leftovers of crashed runs are removed before anything else happens."""
    report = await clean_up_leftover_faults(settings)
    if not report.is_empty():
        say(report.summary())
    return report


def _faults(args: argparse.Namespace, settings: Settings) -> int:
    out = stdout()
    report = asyncio.run(_clean_up(settings, lambda line: None))
    out.print(report.summary(), markup=False, soft_wrap=True)
    return EXIT_ENVIRONMENT if report.unreachable or report.kept else EXIT_PASS


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    out = stdout()
    results: list[RunResult] = []
    reports: list[Path] = []
    args.reports_dir.mkdir(parents=True, exist_ok=True)
    names = list(DEMO_SCENARIOS)
    unavailable = asyncio.run(toxiproxy_unavailable(settings))
    if unavailable is None:
        names.append(FAULT_DEMO)
    for name in names:
        scenario = load_scenario(name)
        out.rule(f"{name}: {scenario.description.strip().splitlines()[0]}")
        result = asyncio.run(_execute(scenario, settings))
        if result.status is RunStatus.INTERRUPTED:
            return EXIT_INTERRUPTED
        path = args.reports_dir / f"{name}.json"
        write_result(result, path)
        out.print(scorecard(result))
        reports.append(write_run_report(result.to_dict(), path.with_suffix(".html")))
        out.print(f"[dim]result: {path}[/dim]\nreport: {reports[-1]}", soft_wrap=True)
        results.append(result)
    if unavailable is not None:
        out.print(f"[bold yellow]{FAULT_DEMO} skipped:[/] {unavailable}")
    out.rule(" vs ".join(r.scenario.name for r in results))
    out.print(comparison(results))
    out.print("HTML reports (open in a browser): " + "  ".join(map(str, reports)), soft_wrap=True)
    return EXIT_PASS


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from cliffwatch.bootstrap.service import serve

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(url: str) -> None:
            print(f"cliffwatch serve: listening on {url} (instance {settings.instance_id})", flush=True)

        await serve(settings, on_ready=ready, stop=stop)

    asyncio.run(main())
    return EXIT_PASS


def _db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from cliffwatch.adapters.store.migrate import upgrade

    revision = asyncio.run(upgrade(settings.database_url))
    print(f"database at revision {revision}")
    return EXIT_PASS


def _token_create(args: argparse.Namespace, settings: Settings) -> int:
    from cliffwatch.bootstrap.service import open_store, utc_now

    async def create() -> tuple[ApiToken, str]:
        async with open_store(settings) as store:
            return await TokenService(store, now=utc_now).create(args.name, TokenRole(args.role))

    record, token = asyncio.run(create())
    print(token)
    print(f"token {record.id} ({record.name}, {record.role.value}): shown once, keep it safe", file=sys.stderr)
    return EXIT_PASS


def _token_list(args: argparse.Namespace, settings: Settings) -> int:
    from cliffwatch.bootstrap.service import open_store, utc_now

    async def listed() -> list[ApiToken]:
        async with open_store(settings) as store:
            return await TokenService(store, now=utc_now).all()

    for record in asyncio.run(listed()):
        state = "revoked " + record.revoked_at.isoformat() if record.revoked_at else "active"
        print(f"{record.id}  {record.role.value:8}  {record.name}  created {record.created_at.isoformat()}  {state}")
    return EXIT_PASS


def _token_revoke(args: argparse.Namespace, settings: Settings) -> int:
    from cliffwatch.bootstrap.service import open_store, utc_now

    async def revoke() -> bool:
        async with open_store(settings) as store:
            return await TokenService(store, now=utc_now).revoke(args.token_id)

    if not asyncio.run(revoke()):
        print(f"no active token {args.token_id!r}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_PASS


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
