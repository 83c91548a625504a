"""Scenario files: bundled names, loading by name or path, and every failure a ScenarioInvalid naming the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cliffwatch.adapters.documents.scenario_files import (
    BUNDLED_DIR,
    MAX_SCENARIO_BYTES,
    bundled_names,
    load_scenario,
    parse_scenario_text,
    resolve,
)
from cliffwatch.domain.errors import ScenarioInvalid
from cliffwatch.domain.scenario.scenario import Scenario

BUNDLED = sorted(BUNDLED_DIR.glob("*.yaml"))

VALID = """\
name: tiny
slo: {e2e_ms: 1000, timeout_ms: 2000}
target: {url: "http://127.0.0.1:8000", request: {model: m}}
phases:
  - {name: calm, role: baseline, duration_s: 1, arrival: {process: constant, rate: 1}}
"""


def _invalid(reference: str) -> ScenarioInvalid:
    with pytest.raises(ScenarioInvalid) as caught:
        load_scenario(reference)
    return caught.value


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run from an empty directory, so a bare name can only mean a bundled scenario."""
    monkeypatch.chdir(tmp_path)


def test_the_bundled_scenarios_are_listed_by_name() -> None:
    """bundled_names lists the stem of every YAML file in scenarios/, sorted."""
    assert BUNDLED, f"no bundled scenarios in {BUNDLED_DIR}"
    assert bundled_names() == sorted(p.stem for p in BUNDLED)  # by name: noisy-neighbour before -fair
    assert "burst-storm" in bundled_names()


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_every_bundled_scenario_is_valid_and_named_after_its_file(path: Path) -> None:
    """Each bundled scenario loads by its name, validates, and carries the name of its file."""
    scenario = load_scenario(path.stem)
    assert isinstance(scenario, Scenario)
    assert scenario.name == path.stem
    assert scenario.content_hash


def test_a_scenario_loads_from_a_path(tmp_path: Path) -> None:
    """An existing path is read as a scenario file."""
    path = tmp_path / "mine.yaml"
    path.write_text(VALID, encoding="utf-8")
    assert resolve(str(path)) == path
    assert load_scenario(str(path)).name == "tiny"


def test_a_file_in_the_working_directory_wins_over_a_bundled_name(tmp_path: Path) -> None:
    """A reference that exists as a file is that file, even when a bundled scenario has the same name."""
    (tmp_path / "burst-storm").write_text(VALID, encoding="utf-8")
    assert load_scenario("burst-storm").name == "tiny"


def test_json_is_accepted() -> None:
    """A JSON document is valid YAML and loads the same way."""
    text = (
        '{"name": "tiny", "slo": {"e2e_ms": 1000, "timeout_ms": 2000}, '
        '"target": {"url": "http://127.0.0.1:8000", "request": {"model": "m"}}, '
        '"phases": [{"name": "calm", "role": "baseline", "duration_s": 1, '
        '"arrival": {"process": "constant", "rate": 1}}]}'
    )
    assert parse_scenario_text(text, source="s.json").name == "tiny"


@pytest.mark.parametrize("reference", ["no-such-scenario", "dir/no-such.yaml", "burst-storm.yaml"])
def test_an_unknown_reference_names_itself_and_the_bundled_scenarios(reference: str) -> None:
    """Neither a file nor a bundled name: the error names the reference and lists what is bundled."""
    error = _invalid(reference)
    assert error.source == reference
    assert str(error).startswith(f"{reference}: invalid scenario")
    assert "no such file, and not a bundled scenario (" in str(error)
    assert ", ".join(bundled_names()) in str(error)


@pytest.mark.parametrize(
    "reference", ["x" * 5_000, "a/" * 3_000 + "b", "nul\0byte"], ids=["long-name", "long-path", "nul-byte"]
)
def test_a_reference_the_filesystem_cannot_even_look_up_is_not_found(reference: str) -> None:
    """Names too long for the filesystem, or with a NUL byte, are reported like any missing file."""
    error = _invalid(reference)
    assert error.source == reference
    assert "no such file" in str(error)


def test_an_unreadable_path_is_reported_with_the_reason(tmp_path: Path) -> None:
    """A path that exists but cannot be read (here a directory) is invalid, with the OS's reason."""
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    error = _invalid(str(folder))
    assert error.source == str(folder)
    assert [p.message for p in error.problems] == ["cannot read: Is a directory"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("name: tiny\nslo: {e2e_ms: 1000\n", "line 3, column 1"),
        ("name: tiny\n  bad: indent\n", "line 2, column 6"),
        ("a:\n  - 1\n  b: 2\n", "line 3, column 3"),
        ("\tname: x\n", "line 1, column 1"),
        ("name: [unclosed\n", "line 2, column 1"),
        ("thing: !!python/object:os.system {}\n", "line 1, column 8"),
    ],
)
def test_yaml_syntax_errors_give_the_line_and_column(tmp_path: Path, text: str, where: str) -> None:
    """A YAML error is one problem saying where in the file, counted from 1."""
    path = tmp_path / "broken.yaml"
    path.write_text(text, encoding="utf-8")
    error = _invalid(str(path))
    assert error.source == str(path)
    assert len(error.problems) == 1
    assert error.problems[0].message.startswith(f"{where}: not valid YAML: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- 1\n- 2\n", "must be a mapping, got a list"),
        ("just text\n", "must be a mapping"),
        ("", "must be a mapping"),
        ("42\n", "must be a mapping"),
    ],
)
def test_a_document_that_is_not_a_mapping_is_invalid(tmp_path: Path, text: str, message: str) -> None:
    """A list, a scalar or an empty file is not a scenario, and says so for that file."""
    path = tmp_path / "odd.yaml"
    path.write_text(text, encoding="utf-8")
    error = _invalid(str(path))
    assert error.source == str(path)
    assert [p.path for p in error.problems] == [""]
    assert error.problems[0].message.startswith(message)


def test_an_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    """A file over the size limit is invalid, with the limit in the message."""
    path = tmp_path / "huge.yaml"
    path.write_bytes(VALID.encode() + b"#" * MAX_SCENARIO_BYTES)
    error = _invalid(str(path))
    assert error.source == str(path)
    assert f"{MAX_SCENARIO_BYTES:,}" in str(error)


def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    """Exactly the limit is allowed."""
    path = tmp_path / "full.yaml"
    padding = MAX_SCENARIO_BYTES - len(VALID.encode()) - 1
    path.write_bytes(VALID.encode() + b"#" + b" " * padding)
    assert path.stat().st_size == MAX_SCENARIO_BYTES
    assert load_scenario(str(path)).name == "tiny"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_file_is_refused_at_the_size_limit() -> None:
    """A device that never ends is read only up to the limit, then refused."""
    error = _invalid("/dev/zero")
    assert error.source == "/dev/zero"
    assert f"{MAX_SCENARIO_BYTES:,}" in str(error)


def test_deeply_nested_yaml_is_invalid_not_a_crash(tmp_path: Path) -> None:
    """Nesting deeper than the parser can follow is reported as a problem with the file."""
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 700 + "]" * 700, encoding="utf-8")
    error = _invalid(str(path))
    assert error.source == str(path)
    assert "nested too deeply" in str(error)


def test_bytes_that_are_not_utf8_are_reported_against_the_file(tmp_path: Path) -> None:
    """A byte that is not UTF-8 is refused with its place, against the file, rather than read as U+FFFD (a
    scenario that would then run under a name nobody wrote)."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes(VALID.replace("name: tiny", "name: caf\xe9").encode("latin-1"))
    error = _invalid(str(path))
    assert error.source == str(path)
    (problem,) = error.problems
    assert problem.path == ""
    assert "UTF-8" in problem.message, problem.message


def test_parse_errors_name_the_source_given() -> None:
    """parse_scenario_text puts its source in front of the problems."""
    with pytest.raises(ScenarioInvalid, match=r"^inline: invalid scenario \(1 problem\(s\)\)"):
        parse_scenario_text("name: [", source="inline")


def test_aliases_reused_a_few_times_are_fine(tmp_path: Path) -> None:
    """Anchors and aliases (and merge keys) are ordinary YAML and load as their expansion."""
    path = tmp_path / "anchors.yaml"
    path.write_text(
        VALID.replace("name: tiny\n", "name: tiny\nseed: &seven 7\n")
        + "  - {name: burst, role: stress, duration_s: 1, arrival: &steady {process: constant, rate: *seven}}\n"
        + "  - {name: after, role: recovery, duration_s: 1, arrival: {<<: *steady, rate: 2}}\n",
        encoding="utf-8",
    )
    scenario = load_scenario(str(path))
    assert scenario.seed == 7
    assert [p.arrival.describe() for p in scenario.phases] == ["constant 1/s", "constant 7/s", "constant 2/s"]


def test_aliases_that_expand_enormously_are_refused_quickly(tmp_path: Path) -> None:
    """A few hundred bytes of nested aliases standing for ten billion values are invalid, not a hang."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text(
        VALID.replace("name: tiny\n", "name: tiny\nbomb:\n" + "".join(f"  {line}\n" for line in levels)),
        encoding="utf-8",
    )
    assert path.stat().st_size < 1_000
    error = _invalid(str(path))
    assert error.source == str(path)
    assert "aliases expand to more than 10,000 values" in str(error)


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    """A self-containing document cannot be validated or hashed, so it is invalid with its position."""
    path = tmp_path / "loop.yaml"
    text = VALID.replace("request: {model: m}", "request: &r {model: m, extra_body: *r}")
    path.write_text(text, encoding="utf-8")
    column = text.splitlines()[2].index("*r") + 1  # the alias, on line 3
    error = _invalid(str(path))
    assert [p.message for p in error.problems] == [
        f"line 3, column {column}: an alias refers to a node that contains it"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (VALID.replace("name: tiny\n", "name: tiny\nseed: " + "1" * 5_000 + "\n"), "a number of more than 400"),
        (VALID.replace("request: {model: m}", "request: {model: m, extra_body: {x: .inf}}"), "not a finite number"),
        (VALID.replace("name: tiny\n", "name: tiny\n1: one\n"), "a mapping key must be a string, got '1'"),
        (VALID.replace("name: tiny\n", "name: !!binary aGVsbG8=\n"), "the tag !!binary is not allowed"),
        (VALID + "---\nname: second\n", "expected a single document"),
    ],
    ids=["huge-int", "infinity", "int-key", "binary", "two-documents"],
)
def test_values_json_cannot_hold_are_invalid_not_a_crash(tmp_path: Path, text: str, message: str) -> None:
    """A number too long to convert, an infinity, a non-string key, a YAML-only type or a second document is
    a problem with the file, with its line, never another exception."""
    path = tmp_path / "odd.yaml"
    path.write_text(text, encoding="utf-8")
    error = _invalid(str(path))
    assert error.source == str(path)
    assert len(error.problems) == 1
    assert message in error.problems[0].message


def test_nesting_within_the_depth_limit_is_read_and_deeper_is_refused(tmp_path: Path) -> None:
    """A request body nested to the limit is valid; one level more is refused before validation walks it."""
    body = "[" * 61 + "]" * 61  # with the top, target and request around it: 64 levels
    path = tmp_path / "deep.yaml"
    path.write_text(VALID.replace("request: {model: m}", f"api: http, request: {{body: {body}}}"), encoding="utf-8")
    assert load_scenario(str(path)).target.request.body is not None
    path.write_text(VALID.replace("request: {model: m}", f"api: http, request: {{body: [{body}]}}"), encoding="utf-8")
    assert "nested too deeply (more than 64 levels)" in str(_invalid(str(path)))
