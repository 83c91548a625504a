"""Scenario files: finding them (a path, or the name of a bundled scenario) and parsing YAML or JSON."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.redaction import DEFAULT_RULES, RedactionRules
from cliffwatch.domain.scenario import Scenario, parse_scenario

MAX_SCENARIO_BYTES = 1_000_000
# Aliases are shared when loaded, but validation and the content hash walk the document as a tree, so a
# small file of nested aliases could stand for billions of values. Without aliases a file within the byte
# limit stays well under this.
MAX_EXPANDED_NODES = 1_000_000
# src/cliffwatch/adapters/ → the repository root, where the bundled scenarios live.
BUNDLED_DIR = Path(__file__).resolve().parents[3] / "scenarios"


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


def _read(reference: str) -> tuple[Path, str]:
    path = resolve(reference)
    try:
        with path.open("rb") as handle:
            # one byte over the limit is enough to refuse: an endless device or a huge file is never read whole
            raw = handle.read(MAX_SCENARIO_BYTES + 1)
    except OSError as exc:
        raise ScenarioInvalid([Problem(path="", message=f"cannot read: {exc.strerror}")], source=str(path)) from exc
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioInvalid(
            [Problem(path="", message=f"is over the limit of {MAX_SCENARIO_BYTES:,} bytes")], source=str(path)
        )
    return path, raw.decode("utf-8", errors="replace")


def parse_scenario_text(text: str, *, source: str) -> Scenario:
    """A scenario from YAML (JSON is YAML too), with YAML syntax errors reported by line and column."""
    return parse_scenario(_yaml(text, source=source), source=source)


def _yaml(text: str, *, source: str) -> Any:
    try:
        document = yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise ScenarioInvalid([Problem(path="", message=f"not valid YAML: {where}{reason}")], source=source) from exc
    except RecursionError as exc:  # PyYAML composes nested collections recursively
        raise ScenarioInvalid([Problem(path="", message="not valid YAML: nested too deeply")], source=source) from exc
    return document


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing documents whose aliases loop or expand past ``MAX_EXPANDED_NODES``."""

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        if node is not None:
            _check_expansion(node)
        return node


def _check_expansion(root: yaml.Node) -> None:
    """Raises ``ComposerError`` when the node graph has a cycle or expands to too many nodes as a tree."""
    sizes: dict[int, int] = {}  # id(node) → nodes in its expanded subtree
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_EXPANDED_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"aliases expand to more than {MAX_EXPANDED_NODES:,} values", node.start_mark
                )
        elif key in on_path:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a node that contains it", node.start_mark)
        elif key not in sizes:
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        yield from node.value
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte: no such file either way
        return False
