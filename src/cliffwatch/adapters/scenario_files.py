"""Scenario files: finding them (a path, or the name of a bundled scenario) and parsing YAML or JSON."""

from __future__ import annotations

from pathlib import Path

import yaml

from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.scenario import Scenario, parse_scenario

MAX_SCENARIO_BYTES = 1_000_000
# src/cliffwatch/adapters/ → the repository root, where the bundled scenarios live.
BUNDLED_DIR = Path(__file__).resolve().parents[3] / "scenarios"


def bundled_names() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml"))


def resolve(reference: str) -> Path:
    """The file a command-line reference names: an existing path, or a bundled scenario's name."""
    path = Path(reference)
    if path.exists():
        return path
    bundled = BUNDLED_DIR / f"{reference}.yaml"
    if "/" not in reference and bundled.exists():
        return bundled
    known = ", ".join(bundled_names()) or "none"
    raise ScenarioInvalid(
        [Problem(path="", message=f"no such file, and not a bundled scenario ({known})")], source=reference
    )


def load_scenario(reference: str) -> Scenario:
    """Reads and validates a scenario; every failure is a ``ScenarioInvalid`` naming the file."""
    path = resolve(reference)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioInvalid([Problem(path="", message=f"cannot read: {exc.strerror}")], source=str(path)) from exc
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioInvalid(
            [Problem(path="", message=f"is {len(raw):,} bytes; the limit is {MAX_SCENARIO_BYTES:,}")], source=str(path)
        )
    return parse_scenario_text(raw.decode("utf-8", errors="replace"), source=str(path))


def parse_scenario_text(text: str, *, source: str) -> Scenario:
    """A scenario from YAML (JSON is YAML too), with YAML syntax errors reported by line and column."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise ScenarioInvalid([Problem(path="", message=f"not valid YAML: {where}{reason}")], source=source) from exc
    return parse_scenario(document, source=source)
