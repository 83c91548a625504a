"""The bounded document loader: YAML (through libyaml and through PyYAML's own parser alike) and JSON read
into JSON's values within their limits, every refusal a ``DocumentInvalid`` with its reason and place, and
the work a hostile document costs bounded by the limits, not by its size."""

from __future__ import annotations

import inspect
import json
import sys
import time
from typing import Any

import pytest

from cliffwatch.adapters.documents import (
    SCENARIO_LIMITS,
    DocumentInvalid,
    DocumentLimits,
    dump_yaml,
    load_json,
    load_off_loop,
    load_yaml,
    yaml_loader,
)
from cliffwatch.domain.scenario.scenario import content_hash, parse_scenario
from cliffwatch.services.store_values import plain_json
from loop_watch import frozen_heap, watch_loop

SMALL = DocumentLimits(max_bytes=10_000, max_depth=4, max_nodes=20, max_aliases=3)


@pytest.fixture(params=["libyaml", "pyyaml"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each YAML test runs with libyaml's parser (the one used when PyYAML has it) and with PyYAML's own."""
    if request.param == "pyyaml":
        monkeypatch.setattr(yaml_loader, "_Loader", yaml_loader._PureLoader)
    elif yaml_loader._Loader is yaml_loader._PureLoader:
        pytest.fail("PyYAML was built without libyaml: the service would parse YAML five times slower")
    return request.param


def refusal(text: str | bytes, limits: DocumentLimits = SCENARIO_LIMITS, *, load: Any = load_yaml) -> str:
    with pytest.raises(DocumentInvalid) as caught:
        load(text, limits)
    return str(caught.value)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a: 1\nb: [x, 2.5, null, true]\n", {"a": 1, "b": ["x", 2.5, None, True]}),
        ("", None),
        ("when: 2026-11-30\n", {"when": "2026-11-30"}),
        ("base: &b {x: 1}\nmore: {<<: *b, y: 2}\n", {"base": {"x": 1}, "more": {"x": 1, "y": 2}}),
        ('{"a": [1, "é", {"b": null}]}', {"a": [1, "é", {"b": None}]}),
        ('a: "\\0 and \\u00e9"\n', {"a": "\x00 and é"}),
    ],
    ids=["plain", "empty", "date-is-text", "merge-key", "json-is-yaml", "escapes"],
)
def test_yaml_is_read_as_json_values(text: str, value: object) -> None:
    """Ordinary YAML, anchors and merge keys included, gives the values PyYAML's safe loader gives, except
    that an unquoted date stays text."""
    assert load_yaml(text, SCENARIO_LIMITS) == value


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 5 + "]" * 5, "line 1, column 5: nested too deeply (more than 4 levels)"),
        ("a: &a [[[1]]]\nb: [*a]\n", "line 2, column 5: nested too deeply (more than 4 levels)"),
        ("[" + ", ".join(["0"] * 20) + "]", "line 1, column 59: has more than 20 values"),
        ("a: &a [1, 2, 3, 4, 5]\nb: [*a, *a, *a]\n", "line 2, column 9: aliases expand to more than 20 values"),
        ("a: &a 1\nb: [*a, *a, *a, *a]\n", "line 2, column 17: has more than 3 aliases"),
        ("a: &a {b: *a}\n", "line 1, column 11: an alias refers to a node that contains it"),
        ("a: *nowhere\n", "line 1, column 4: found undefined alias 'nowhere'"),
        ("a: &x 1\nb: &x 2\n", "line 2, column 4: found a second anchor 'x'"),
        ("1: one\n", "line 1, column 1: a mapping key must be a string, got '1' (quote it to make it one)"),
        ("on: 1\n", "a mapping key must be a string, got 'on'"),
        ("? [a]\n: b\n", "line 1, column 3: a mapping key must be a string, got a list"),
        ("a: " + "9" * 401 + "\n", "line 1, column 4: a number of more than 400 characters"),
        ("a: .inf\n", "line 1, column 4: .inf is not a finite number"),
        ("a: 1.0e+999\n", "1.0e+999 is not a finite number"),
        ("a: !!binary aGk=\n", "line 1, column 4: the tag !!binary is not allowed: documents hold JSON values only"),
        ("a: !!set {x}\n", "the tag !!set is not allowed"),
        ("a: !!timestamp 2026-11-30\n", "the tag !!timestamp is not allowed"),
        ("a: !!python/object:os.system {}\n", "not valid YAML: could not determine a constructor"),
        ("a: 1\n---\nb: 2\n", "line 2, column 1: expected a single document, but found another"),
        ("a: [1\n", "line 2, column 1: not valid YAML"),
        ("a: \x00\n", "not valid YAML:"),
        ("a: !!int abc\n", "line 1, column 4: 'abc' is not a valid !!int"),
        ("a: !!int 0x_\n", "'0x_' is not a valid !!int"),
        ("a: !!int ''\n", "'' is not a valid !!int"),
        ("a: !!float abc\n", "'abc' is not a valid !!float"),
        ("a: !!bool maybe\n", "'maybe' is not a valid !!bool"),
    ],
    ids=["depth", "depth-through-alias", "values", "expansion", "aliases", "cycle", "undefined-alias",
         "second-anchor", "int-key", "bool-key", "list-key", "long-number", "infinity", "overflowing-float",
         "binary", "set", "timestamp", "python-tag", "two-documents", "syntax", "nul", "tagged-int",
         "tagged-hex", "tagged-empty", "tagged-float", "tagged-bool"],
)  # fmt: skip
def test_yaml_over_a_limit_or_outside_json_is_refused_with_its_place(text: str, message: str) -> None:
    """Each limit and each value JSON cannot hold is refused with the line and column where it was found."""
    assert message in refusal(text, SMALL if "4 levels" in message or " 20 " in message or "3 aliases" in message
                              else SCENARIO_LIMITS)  # fmt: skip


@pytest.mark.usefixtures("parser")
def test_an_alias_bomb_stops_at_the_value_limit_at_once() -> None:
    """Ten levels of ten aliases each stand for ten billion values; refused after 10,000, in milliseconds."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    started = time.perf_counter()
    assert "aliases expand to more than 10,000 values" in refusal("\n".join(lines))
    assert time.perf_counter() - started < 0.05


@pytest.mark.usefixtures("parser")
def test_a_document_of_many_values_stops_at_the_limit_not_at_its_end() -> None:
    """A 900 KB flow list of half a million values is refused after the 10,000th, so its cost does not grow
    with its size."""
    text = "[" + ",".join(["0"] * 450_000) + "]"
    started = time.perf_counter()
    assert "has more than 10,000 values" in refusal(text)
    # PyYAML's own scanner takes ~0.3 s alone (libyaml ~25 ms), reading the whole list 10 s: a bound of 2 s
    # tells the two apart on a busy shared machine, where 0.5 s did not always hold.
    assert time.perf_counter() - started < 2.0


@pytest.mark.usefixtures("parser")
def test_nesting_at_the_limit_is_read_one_more_level_is_not() -> None:
    """64 lists inside each other are a document; 65 are refused, well before Python's recursion limit."""
    value = load_yaml("[" * 64 + "]" * 64, SCENARIO_LIMITS)
    for _ in range(63):
        value = value[0]
    assert value == []
    assert "nested too deeply (more than 64 levels)" in refusal("[" * 65 + "]" * 65)
    assert "nested too deeply" in refusal("[" * 5_000 + "]" * 5_000)


@pytest.mark.usefixtures("parser")
def test_text_that_is_not_unicode_or_too_long_is_refused_before_parsing() -> None:
    """Undecodable bytes, unpaired surrogates and text over the byte limit never reach the parser."""
    assert refusal(b"a: \xff\n") == "not UTF-8: invalid start byte at byte 3"
    assert refusal("a: \ud800\n") == "not valid Unicode: an unpaired surrogate at character 3"
    assert refusal("a: " + "é" * 6_000, SMALL) == "is over the limit of 10,000 bytes"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 5 + "]" * 5, "nested too deeply (more than 4 levels)"),
        ("[" * 100_000 + "]" * 100_000, "has more than 20 values"),
        ("[" + ",".join(["0"] * 20) + "]", "has more than 20 values"),
        ('{"a": ' + "1" * 401 + "}", "a number of more than 400 characters"),
        ('{"a": 1e400}', "the number 1e400 is too large for a float"),
        ('{"a": NaN}', "NaN is not a number in JSON"),
        ('{"a": -Infinity}', "-Infinity is not a number in JSON"),
        ('{"a": "\\ud800"}', "not valid Unicode: a string holds an unpaired surrogate (U+D800)"),
        ('{"\\udfff": 1}', "unpaired surrogate (U+DFFF)"),
        ('{"a": }', "line 1, column 7: not valid JSON: Expecting value"),
        ('"unterminated', "not valid JSON: Unterminated string"),
    ],
    ids=["depth", "very-deep", "values", "long-number", "huge-float", "nan", "infinity", "surrogate",
         "surrogate-key", "syntax", "unterminated"],
)  # fmt: skip
def test_json_over_a_limit_or_outside_json_is_refused(text: str, message: str) -> None:
    """JSON's limits are those of YAML, and Python's extensions to JSON (NaN, Infinity, lone surrogates) are
    refused."""
    small = DocumentLimits(max_bytes=1_000_000, max_depth=4, max_nodes=20)
    assert message in refusal(text, small if "4 levels" in message or " 20 " in message else SCENARIO_LIMITS,
                              load=load_json)  # fmt: skip


def test_json_is_read_exactly() -> None:
    """Strings with commas, colons, brackets and escaped quotes are one value each (the document's 14 values
    are within a limit of 14); pairs of surrogates are the character they encode."""
    text = json.dumps({"a": [',:[{"', "\\", "😀"], "b": {"c": None, "d": 1.5, "e": -7}}, ensure_ascii=True)
    assert load_json(text, DocumentLimits(max_bytes=1_000, max_nodes=14)) == {
        "a": [',:[{"', "\\", "😀"],
        "b": {"c": None, "d": 1.5, "e": -7},
    }


def test_counting_json_values_takes_linear_time_on_escaped_quotes() -> None:
    """The separator count before parsing runs in linear time on the inputs that make a naive string regex
    quadratic (an unterminated string of escaped quotes: 3 s for 40 KB)."""
    # A quadratic count takes 3 s for 40 KB, so minutes for these 800 KB; a linear one takes 10-30 ms here. The
    # bound is loose on purpose: the suite runs in parallel, and a busy machine must not fail it.
    for text in ('"' + '\\"' * 400_000, '"\\' * 400_000, '["' + "\\" * 800_000):
        started = time.perf_counter()
        refusal(text, load=load_json)
        assert time.perf_counter() - started < 1.0


def test_dumped_yaml_reads_back_as_the_same_document() -> None:
    """``dump_yaml`` (the dashboard's view of a stored scenario) writes what ``load_yaml`` reads back."""
    document = {"name": "x", "list": [1, 2.5, None, True, "2026-11-30", "on", "é\x00"], "deep": [[[{"k": "v"}]]]}
    assert load_yaml(dump_yaml(document), SCENARIO_LIMITS) == document


async def test_a_large_document_is_parsed_off_the_loop() -> None:
    """Parsing the largest YAML within the limits in the service leaves the loop free: it wakes within a
    few milliseconds throughout."""
    text = "[" + ",".join(["0"] * (SCENARIO_LIMITS.max_nodes - 1)) + "]"
    # The heap frozen as the service freezes its own: a full collection of the test session's heap (thousands of
    # tests' objects) would hold the interpreter lock on its own account, and is not the parser's doing.
    with frozen_heap():
        async with watch_loop() as watch:
            assert len(await load_off_loop(load_yaml, text, SCENARIO_LIMITS)) == SCENARIO_LIMITS.max_nodes - 1
    assert watch.longest_ms < 100, watch.report()


def test_a_document_at_the_depth_limit_is_validated_hashed_and_shown_with_frames_to_spare() -> None:
    """A valid scenario nested to the depth limit, at the value limit, is validated, hashed, stored as JSON
    and written as YAML with at most 400 frames of Python's recursion limit left."""
    body: Any = "end"
    for _ in range(SCENARIO_LIMITS.max_depth - 4):  # the top, target, request and body levels around it
        body = [body]
    text = json.dumps({
        "name": "deep", "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "target": {"url": "http://127.0.0.1:9", "api": "http",
                   "request": {"body": {"deep": body, "many": list(range(SCENARIO_LIMITS.max_nodes - 120))}}},
        "phases": [{"name": "a", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 1}}],
    })  # fmt: skip
    document = load_json(text, SCENARIO_LIMITS)
    here = len(inspect.stack(0))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(here + 400)
    try:
        scenario = parse_scenario(document)
        assert scenario.content_hash == content_hash(document)
        assert plain_json(document) == document
        assert load_yaml(dump_yaml(document), SCENARIO_LIMITS) == document
    finally:
        sys.setrecursionlimit(limit)
