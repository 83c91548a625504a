"""How the fenced examples of README.md and docs/*.md are checked: parsed with Sybil, each language by its rule.

- ``sh``: line by line. ``curl`` runs against a real ``cliffwatch serve`` (the port in the example is
  replaced by the test's, ``$TOKEN`` is a real admin token) with ``--fail-with-body``, so an error answer
  fails the example; ``cliffwatch serve`` is that service (it must answer ``/readyz``); quick ``cliffwatch``
  commands (``scenarios``, ``validate``, ``token create``, ``db upgrade``) run for real; every other
  ``cliffwatch`` command is parsed by the real CLI parser and the scenario it names must load (unless it is
  a bare file name such as ``my.yaml``: the reader's own) (a run takes minutes: its flags and
  its scenario are what drift); ``make T`` must be a target (``make -n``). Any other command fails: no rule
  checks it.
- ``CLIFFWATCH_X=value`` on its own line: a setting cliffwatch knows, with a value it accepts; ``pip install``:
  this project and extras it declares; ``python bench/X.py --flag``: the script's ``--help`` lists the flag;
  ``uptime``: run.
- ``yaml``: a ``CLIFFWATCH_CONFIG`` file (its keys are settings) read by the settings loader; a fragment of
  docker-compose.yml (it has ``services``) merged into the repository's file, valid against the Compose spec;
  else a scenario, or a fragment of one (its top-level keys replace those of a small valid scenario),
  validated by ``cliffwatch validate``; files the example names (a tokenizer, a dataset, a trace) are the
  reader's, so "does not exist" for one of them is the only problem allowed.
- ``http`` and ``json``: against the OpenAPI document (``api_examples_kit``).
- anything else, or a block without a language: fails, unless a ``<!-- skip: next "why" -->`` comment
  before it marks it illustrative, with its reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from api_examples_kit import ApiExamples
from cliffwatch.adapters.documents.scenario_files import load_scenario
from cliffwatch.adapters.documents.suite_files import experiment_scenarios
from cliffwatch.bootstrap.settings import load_settings
from cliffwatch.cli import _parser, main
from cliffwatch.config import SPECS, Settings, SettingsInvalid
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.gameday.suite_spec import parse_suite

REPO = Path(__file__).resolve().parent.parent
CHECKED = ("sh", "yaml", "http", "json")
QUICK_COMMANDS = {("scenarios",), ("validate",), ("token", "create"), ("db", "upgrade")}
READ_ONLY_PROGRAMS = {"uptime"}  # run for real: they only read the machine's state
SCENARIO_COMMANDS = {"run", "sweep", "validate"}
BASE_SCENARIO: dict[str, Any] = {
    "name": "docs-example",
    "seed": 1,
    "target": {"url": "http://127.0.0.1:8000", "api": "openai-chat", "request": {"model": "m"}},
    "slo": {"e2e_ms": 5000, "timeout_ms": 10000},
    "phases": [{"name": "calm", "role": "baseline", "duration_s": 10, "arrival": {"process": "constant", "rate": 1}}],
}
_FENCE_INFO = re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE)


@dataclass(frozen=True)
class Service:
    """The real ``cliffwatch serve`` that shell examples talk to."""

    base_url: str  # http://127.0.0.1:PORT
    token: str
    env: dict[str, str] = field(default_factory=dict)  # its database and state, for `cliffwatch token create`


class ShellExamples:
    """The ``sh`` rule (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def __call__(self, example: Example) -> str | None:
        problems = [p for line in _commands(str(example.parsed)) if (p := self.check(line)) is not None]
        return "\n".join(problems) or None

    def check(self, line: str) -> str | None:
        words = shlex.split(line, comments=True)
        if len(words) == 1 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # an assignment on its own
            return _setting(line, words[0])
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # VAR=value before the command
            words = words[1:]
        if not words:
            return f"{line}: only variable assignments: no rule checks them"
        program = Path(words[0]).name
        if program == "curl":
            return self.curl(line)
        if program == "make":
            done = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
            return None if done.returncode == 0 else f"{line}: not a make target: {done.stderr.strip()}"
        if program == "cliffwatch":
            return self.cliffwatch(line, words[1:])
        if program in READ_ONLY_PROGRAMS:
            done = subprocess.run(words, capture_output=True, text=True, timeout=30)
            return None if done.returncode == 0 else f"{line}: exit {done.returncode}"
        if program == "pip" and words[1:2] == ["install"]:
            return _pip_install(line, words[2:])
        if program.startswith("python") and len(words) > 1 and words[1].startswith("bench/"):
            return _bench_script(line, words[1:])
        return f"{line}: no rule checks `{program}`: check it here or mark the block illustrative"

    def curl(self, line: str) -> str | None:
        port = self.service.base_url.rsplit(":", 1)[1]
        command = re.sub(r"127\.0\.0\.1:8080", f"127.0.0.1:{port}", line).replace("curl ", "curl --fail-with-body ", 1)
        done = subprocess.run(["bash", "-c", command], env={**os.environ, "TOKEN": self.service.token},
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        if done.returncode != 0:
            return f"{line}: curl exited {done.returncode}: {done.stdout.strip()} {done.stderr.strip()}"
        return None

    def cliffwatch(self, line: str, args: list[str]) -> str | None:
        if args[:1] == ["serve"]:
            with urllib.request.urlopen(self.service.base_url + "/readyz", timeout=10) as answer:
                return None if answer.status == 200 else f"{line}: the service is not ready"
        try:
            with contextlib.redirect_stderr(io.StringIO()) as said:
                parsed = _parser().parse_args(args)
        except SystemExit:
            return f"{line}: the CLI refuses it: {said.getvalue().strip()}"
        if any(tuple(args[: len(quick)]) == quick for quick in QUICK_COMMANDS):
            command = re.sub(r"^(\S*/)?cliffwatch", f"{shlex.quote(sys.executable)} -m cliffwatch", line.strip())
            done = subprocess.run(["bash", "-c", command], cwd=REPO, env={**os.environ, **self.service.env},
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
            return None if done.returncode == 0 else f"{line}: exit {done.returncode}: {done.stdout}{done.stderr}"
        if parsed.command in SCENARIO_COMMANDS and getattr(parsed, "scenario", None):
            reference = parsed.scenario
            if not Path(reference).is_absolute() and (REPO / reference).exists():
                reference = str(REPO / reference)
            elif reference.endswith((".yaml", ".yml")) and "/" not in reference:
                return None  # a bare file name (my.yaml) is the reader's own scenario: its flags were parsed
            try:
                load_scenario(reference)
            except Exception as exc:  # the scenario the docs name must exist and load
                return f"{line}: its scenario does not load: {exc}"
        return None


def _setting(line: str, assignment: str) -> str | None:
    """``CLIFFWATCH_X=value``: a setting cliffwatch knows, with a value it accepts."""
    name, value = assignment.split("=", 1)
    if name not in {spec.env for spec in SPECS}:
        return f"{line}: {name} is not a cliffwatch setting"
    try:
        Settings.from_env({name: value})
    except SettingsInvalid as exc:
        return f"{line}: {exc}"
    return None


def _pip_install(line: str, args: list[str]) -> str | None:
    """``pip install .`` or ``cliffwatch[extra,…]``: the project, with extras it declares."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for target in (a for a in args if not a.startswith("-")):
        name, _, extras = target.partition("[")
        if name not in (".", project["name"]):
            return f"{line}: {target} is not this project"
        asked = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
        unknown = asked - set(project["optional-dependencies"])
        if unknown:
            return f"{line}: no such extra: {', '.join(sorted(unknown))}"
    return None


def _bench_script(line: str, args: list[str]) -> str | None:
    """``python bench/X.py --flag …``: the script exists and its ``--help`` lists every flag used."""
    script = REPO / args[0]
    if not script.is_file():
        return f"{line}: {args[0]} does not exist"
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    if done.returncode != 0:
        return f"{line}: {args[0]} --help failed: {done.stderr[-500:]}"
    unknown = [flag for flag in (a.split("=")[0] for a in args[1:] if a.startswith("--")) if flag not in done.stdout]
    return f"{line}: {args[0]} has no {', '.join(unknown)}" if unknown else None


def scenario_example(example: Example) -> str | None:
    """The ``yaml`` rule: the block, as a scenario or merged into ``BASE_SCENARIO``, passes ``cliffwatch validate``."""
    document = yaml.safe_load(str(example.parsed))
    if not isinstance(document, dict):
        return f"not a YAML mapping: {document!r}"
    if "services" in document:
        return _compose_fragment(document)
    if "experiments" in document:
        return _suite(document)
    if document and set(document) <= {spec.key for spec in SPECS}:
        return _config_file(str(example.parsed))
    whole = document if {"name", "phases"} <= document.keys() else {**BASE_SCENARIO, **document}
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "example.yaml"
        path.write_text(yaml.safe_dump(whole, sort_keys=False))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["validate", str(path)])
    if code == 0:
        return None
    problems = [line.strip() for line in out.getvalue().splitlines() if line.startswith("  ")]
    missing = [m.group(1) for p in problems if (m := re.search(r": (\S+) does not exist$", p))]
    if problems and len(missing) == len(problems) and all(path in str(example.parsed) for path in missing):
        return None  # only the reader's own files (a tokenizer, a trace) are missing: the scenario itself is valid
    return f"cliffwatch validate: {out.getvalue().strip()}"


def _suite(document: dict[str, Any]) -> str | None:
    """A game-day suite: valid as a suite, and every experiment's scenario made as ``cliffwatch gameday`` makes it
    (bundled names and the repository's files resolved from its root)."""
    try:
        with contextlib.chdir(REPO):
            experiment_scenarios(parse_suite(document, source="example"))
    except ScenarioInvalid as exc:
        return f"not a valid suite: {exc}"
    return None


def _config_file(text: str) -> str | None:
    """A ``CLIFFWATCH_CONFIG`` file: every setting known and its value accepted."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "cliffwatch.yaml"
        path.write_text(text)
        try:
            load_settings({"CLIFFWATCH_CONFIG": str(path)})
        except SettingsInvalid as exc:
            return f"as a CLIFFWATCH_CONFIG file: {exc}"
    return None


def _compose_fragment(document: dict[str, Any]) -> str | None:
    """A fragment of docker-compose.yml: merged into the repository's file, valid against the Compose spec
    (the schema tests/unit/test_docker_compose.py checks the file with)."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for key, value in document.items():
        if key == "services":
            for name, service in value.items():
                compose["services"].setdefault(name, {}).update(service)
        else:
            compose[key] = {**compose.get(key, {}), **value}
    schema = json.loads((REPO / "tests" / "fixtures" / "compose-spec.json").read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=str)
    return "; ".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors) or None


class UncheckedBlocks:
    """Every fenced block in a language no rule checks, or with none: it fails unless skipped."""

    def __init__(self) -> None:
        self.lexer = RawFencedCodeBlockLexer(info_pattern=_FENCE_INFO, mapping={"info": "language", "source": "source"})

    def __call__(self, document: Document) -> Any:
        for region in self.lexer(document):
            language = str(region.lexemes["language"]).strip()
            if language in CHECKED:
                continue
            yield Region(region.start, region.end, language or "(none)", _unchecked)


def _unchecked(example: Example) -> str:
    return (f"a ```{example.parsed} block nothing checks: make it a checked language ({', '.join(CHECKED)}), or "
            'mark it <!-- skip: next "why it is illustrative" -->')  # fmt: skip


def _commands(source: str) -> list[str]:
    """The command lines of a shell block (continuations joined; comment-only and blank lines dropped). Kept
    as written: bash reads them, comments and quotes included."""
    joined = source.replace("\\\n", " ")
    return [raw for raw in joined.splitlines() if shlex.split(raw, comments=True)]


def docs_sybil(service: Service) -> Sybil:
    api = ApiExamples()
    return Sybil(
        parsers=[
            SkipParser(),
            CodeBlockParser("sh", ShellExamples(service)),
            CodeBlockParser("yaml", scenario_example),
            CodeBlockParser("http", api.http),
            CodeBlockParser("json", api.json),
            UncheckedBlocks(),
        ]
    )


@dataclass
class Checked:
    """What checking one document found."""

    checked: list[int] = field(default_factory=list)  # lines of the examples run or validated
    illustrative: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)
    failures: list[str] = field(default_factory=list)


def check_document(path: Path, service: Service) -> Checked:
    from unittest import SkipTest

    found = Checked()
    for example in docs_sybil(service).parse(path).examples():
        if isinstance(example.parsed, tuple):  # a skip directive itself
            if example.parsed[0] == "next" and not example.parsed[1]:
                found.failures.append(f'{path.name}:{example.line}: a skip needs its reason: skip: next "why"')
            example.evaluate()
            continue
        try:
            example.evaluate()
        except SkipTest as skipped:
            if str(skipped).strip():
                found.illustrative.append((example.line, str(skipped)))
            else:
                found.failures.append(f"{path.name}:{example.line}: marked illustrative with a blank reason")
        except Exception as exc:
            found.failures.append(f"{path.name}:{example.line}: {exc}")
        else:
            found.checked.append(example.line)
    return found
