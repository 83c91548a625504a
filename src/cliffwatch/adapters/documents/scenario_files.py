"""Scenario files: finding them (a path, or the name of a bundled scenario) and parsing YAML or JSON."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cliffwatch.adapters.documents import SCENARIO_LIMITS, DocumentInvalid, load_yaml
from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.security.redaction import DEFAULT_RULES, RedactionRules

MAX_SCENARIO_BYTES = SCENARIO_LIMITS.max_bytes
# src/cliffwatch/adapters/documents/ → the repository root, where the bundled scenarios live.
BUNDLED_DIR = Path(__file__).resolve().parents[4] / "scenarios"


def bundled_names() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml"))


def resolve(reference: str) -> Path:
    """The file a command-line reference names: an existing path, or a bundled scenario's name."""
    path = Path(reference)
    if _exists(path):
        return path
    bundled = BUNDLED_DIR / f"{reference}.yaml"
    if "/" not in reference and _exists(bundled):
        return bundled
    known = ", ".join(bundled_names()) or "none"
    raise ScenarioInvalid(
        [Problem(path="", message=f"no such file, and not a bundled scenario ({known})")], source=reference
    )


def load_scenario(reference: str, *, rules: RedactionRules = DEFAULT_RULES) -> Scenario:
    """Reads and validates a scenario; every failure is a ``ScenarioInvalid`` naming the file. Its content
    hash is of the document with the credentials ``rules`` name masked."""
    path, text = _read(reference)
    return parse_scenario(_yaml(text, source=str(path)), source=str(path), rules=rules)


def load_document(reference: str) -> Mapping[str, Any]:
    """The document of a valid scenario file, as written (what the service stores and hashes)."""
    path, text = _read(reference)
    document = _yaml(text, source=str(path))
    parse_scenario(document, source=str(path))
    assert isinstance(document, Mapping)
    return document


def _read(reference: str) -> tuple[Path, bytes]:
    """The file's bytes, as the loader judges them (size, UTF-8): never decoded here, so a byte that is not
    UTF-8 is refused with its place rather than read as U+FFFD."""
    path = resolve(reference)
    try:
        with path.open("rb") as handle:
            # one byte over the limit is enough to refuse: an endless device or a huge file is never read whole
            return path, handle.read(MAX_SCENARIO_BYTES + 1)
    except OSError as exc:
        raise ScenarioInvalid([Problem(path="", message=f"cannot read: {exc.strerror}")], source=str(path)) from exc


def parse_scenario_text(text: str, *, source: str) -> Scenario:
    """A scenario from YAML (JSON is YAML too), with YAML syntax errors and refusals reported by line and
    column; raises ``ScenarioInvalid`` only."""
    return parse_scenario(_yaml(text, source=source), source=source)


def _yaml(text: str | bytes, *, source: str) -> Any:
    """The document in ``text``, read within the scenario limits (``adapters.documents``)."""
    try:
        return load_yaml(text, SCENARIO_LIMITS)
    except DocumentInvalid as exc:
        raise ScenarioInvalid([Problem(path="", message=str(exc))], source=source) from exc


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte: no such file either way
        return False
