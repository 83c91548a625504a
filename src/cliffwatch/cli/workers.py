"""The options that say where a run's load is sent from: ``--workers`` and ``--ray``, for ``run`` and ``sweep``."""

from __future__ import annotations

import argparse
from dataclasses import replace

from cliffwatch.config import Settings, SettingsInvalid
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.traffic.ray_address import ray_address_problem
from cliffwatch.services.overrides import with_overrides

WORKERS_HELP = "send from this many worker processes, or 'auto' (client.workers)"
RAY_HELP = (
    "send from Ray actors on this cluster: 'auto' (the one `ray start` made on this machine) or HOST:PORT "
    "(needs cliffwatch[ray]; without --workers or client.workers, one actor per free CPU; CLIFFWATCH_RAY_ADDRESS)"
)


def add_worker_options(parser: argparse.ArgumentParser, *, workers_help: str = WORKERS_HELP) -> None:
    parser.add_argument("--workers", help=workers_help)
    parser.add_argument("--ray", metavar="auto|ADDRESS", help=RAY_HELP)


def sent_from(args: argparse.Namespace, settings: Settings, scenario: Scenario) -> tuple[Settings, Scenario]:
    """The settings and scenario as the options say: ``--workers`` overrides ``client.workers``; ``--ray``
    overrides ``CLIFFWATCH_RAY_ADDRESS`` and, when nothing asked for workers, asks for ``auto``."""
    scenario = with_overrides(scenario, workers=args.workers)
    if args.ray is not None:
        address = args.ray.strip()
        if (problem := ray_address_problem(address)) is not None:
            raise SettingsInvalid([f"--ray: {problem}"])
        settings = replace(settings, ray_address=address)
        if scenario.client.workers is None:
            scenario = with_overrides(scenario, workers="auto")
    return settings, scenario
