"""``cliffwatch target``: serve the built-in simulated LLM target, its model parameters from a YAML or JSON
file, a JSON object and flags, each overriding the one before. Exit codes as ``run``: 0 served until
interrupted, 2 invalid model parameters.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import fields
from pathlib import Path
from typing import Any

from cliffwatch.adapters.documents import CONFIG_LIMITS, DocumentInvalid, DocumentLoader, load_json, load_yaml
from cliffwatch.config import Settings
from cliffwatch.domain.errors import Problem, TargetConfigInvalid
from cliffwatch.domain.scenario.target_model import TargetModel, target_model_from

EXIT_PASS = 0


def add_parser(commands: Any) -> None:
    """Adds the ``target`` command to the CLI's subparsers."""
    target = commands.add_parser("target", help="serve the built-in simulated LLM target")
    target.add_argument("--host", default="127.0.0.1")
    target.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    target.add_argument("--config", type=Path, help="a YAML or JSON file of model parameters (flags override it)")
    target.add_argument("--config-json", help="model parameters as one JSON object (flags override it)")
    for field in fields(TargetModel):
        default = getattr(TargetModel(), field.name)
        shown = default.value if hasattr(default, "value") else default
        target.add_argument(f"--{field.name.replace('_', '-')}", dest=f"model_{field.name}", help=f"(default {shown})")
    target.set_defaults(handler=_target)


def _target(args: argparse.Namespace, settings: Settings) -> int:
    from cliffwatch.simulator.runner import serve

    overrides: dict[str, Any] = {}
    for source, text, load in _target_configs(args):
        try:
            document = load(text, CONFIG_LIMITS)
        except DocumentInvalid as exc:
            raise TargetConfigInvalid([Problem(path=source, message=str(exc))]) from exc
        if not isinstance(document, dict):
            raise TargetConfigInvalid([Problem(path=source, message="must be a mapping of model parameters")])
        overrides.update(document)
    for field in fields(TargetModel):
        raw = getattr(args, f"model_{field.name}")
        if raw is not None:
            overrides[field.name] = _coerce(raw, getattr(TargetModel(), field.name))
    model = target_model_from(overrides)

    def ready(url: str) -> None:
        print(f"cliffwatch target: listening on {url} ({model.model}, max_batch {model.max_batch}, "
              f"admission {model.admission.value})", flush=True)  # fmt: skip

    try:
        asyncio.run(serve(model, host=args.host, port=args.port, on_ready=ready))
    except KeyboardInterrupt:
        return EXIT_PASS
    return EXIT_PASS


def _target_configs(args: argparse.Namespace) -> list[tuple[str, str | bytes, DocumentLoader]]:
    """Each source of model parameters: its name, its text and how to read it (a file is YAML or JSON)."""
    configs: list[tuple[str, str | bytes, DocumentLoader]] = []
    if args.config is not None:
        try:
            with args.config.open("rb") as handle:
                configs.append((str(args.config), handle.read(CONFIG_LIMITS.max_bytes + 1), load_yaml))
        except OSError as exc:
            raise TargetConfigInvalid([Problem(path=str(args.config), message=f"cannot read: {exc.strerror}")]) from exc
    if args.config_json:
        configs.append(("--config-json", args.config_json, load_json))
    return configs


def _coerce(raw: str, default: object) -> object:
    """A command-line string as the type of the field's default, left as text when it does not parse
    (validation then names the field and the reason)."""
    if isinstance(default, bool):
        return {"true": True, "false": False}.get(raw.strip().lower(), raw)
    try:
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        return raw
    return raw
