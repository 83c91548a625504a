"""The path-tracking Reader and check_number: every wrong input becomes a problem with its path, never an exception."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from cliffwatch.domain.validation import Problems, Reader, check_number, short_repr


def _reader(data: dict[str, Any], path: str = "doc") -> tuple[Reader, Problems]:
    problems = Problems()
    reader = Reader.of(data, path, problems)
    assert reader is not None
    return reader, problems


def _messages(problems: Problems) -> list[str]:
    return [str(p) for p in problems.items]


@pytest.mark.parametrize(
    ("value", "kwargs", "expected", "problem"),
    [
        (3, {}, 3.0, None),
        (3, {"integer": True}, 3, None),
        (3.0, {"integer": True}, 3, None),
        (0.5, {"gt": 0, "le": 1}, 0.5, None),
        (1, {"ge": 1}, 1.0, None),
        (True, {}, None, "x: must be a number, got a boolean"),
        ("3", {}, None, "x: must be a number, got a string"),
        (None, {}, None, "x: must be a number, got null"),
        ([3], {}, None, "x: must be a number, got a list"),
        ({"v": 3}, {}, None, "x: must be a number, got a mapping"),
        (float("nan"), {}, None, "x: must be a finite number"),
        (float("-inf"), {}, None, "x: must be a finite number"),
        (10**400, {}, None, "x: is too large"),
        (10**400, {"integer": True}, None, "x: is too large"),
        (2.5, {"integer": True}, None, "x: must be a whole number, got 2.5"),
        (0, {"gt": 0}, None, "x: must be > 0"),
        (-0.5, {"ge": 0}, None, "x: must be >= 0"),
        (100.5, {"le": 100}, None, "x: must be <= 100"),
    ],
)
def test_check_number_returns_the_value_or_records_exactly_why_not(
    value: object, kwargs: dict[str, Any], expected: object, problem: str | None
) -> None:
    problems = Problems()

    result = check_number(value, "x", problems, **kwargs)

    assert result == expected
    assert type(result) is type(expected)
    assert _messages(problems) == ([problem] if problem else [])


def test_an_absent_optional_key_takes_its_default_without_a_problem() -> None:
    reader, problems = _reader({})

    assert reader.string("s", "dflt") == "dflt"
    assert reader.number("n", 7) == 7
    assert reader.boolean("b", False) is False
    assert reader.mapping("m", None) is None
    assert list(reader.items("l", [])) == []
    reader.done()
    assert not problems


def test_an_absent_required_key_is_reported_as_required() -> None:
    reader, problems = _reader({})

    assert reader.string("s") is None
    assert reader.number("n") is None
    assert reader.boolean("b") is None
    assert reader.mapping("m") is None
    assert list(reader.items("l")) == []

    assert _messages(problems) == [
        "doc.s: is required",
        "doc.n: is required",
        "doc.b: is required",
        "doc.m: is required",
        "doc.l: is required",
    ]


def test_an_explicit_null_is_a_value_of_the_wrong_type_even_where_the_key_is_optional() -> None:
    reader, problems = _reader({"s": None, "n": None, "b": None, "m": None, "l": None})

    assert reader.string("s", "dflt") is None
    assert reader.number("n", None) is None
    assert reader.boolean("b", True) is None
    assert reader.mapping("m", None) is None
    assert list(reader.items("l", [])) == []

    assert _messages(problems) == [
        "doc.s: must be a string, got null",
        "doc.n: must be a number, got null",
        "doc.b: must be true or false, got null",
        "doc.m: must be a mapping, got null",
        "doc.l: must be a list, got null",
    ]


def test_a_given_value_equal_to_the_default_is_still_checked() -> None:
    reader, problems = _reader({"n": 0})

    assert reader.number("n", 0, gt=0) is None
    assert _messages(problems) == ["doc.n: must be > 0"]


@pytest.mark.parametrize(
    ("value", "kwargs", "problem"),
    [
        ("", {}, "doc.s: must not be empty"),
        ("  ", {}, "doc.s: must not be empty"),
        (3, {}, "doc.s: must be a string, got a number"),
        ("c", {"choices": ("a", "b")}, "doc.s: must be one of a, b; got 'c'"),
    ],
)
def test_a_bad_string_is_reported(value: object, kwargs: dict[str, Any], problem: str) -> None:
    reader, problems = _reader({"s": value})

    assert reader.string("s", **kwargs) is None
    assert _messages(problems) == [problem]


def test_an_empty_string_is_accepted_where_emptiness_is_allowed() -> None:
    reader, problems = _reader({"s": ""})

    assert reader.string("s", nonempty=False) == ""
    assert not problems


def test_items_yield_each_element_with_its_indexed_path() -> None:
    reader, problems = _reader({"l": ["a", "b"]})

    assert list(reader.items("l")) == [("doc.l[0]", "a"), ("doc.l[1]", "b")]
    assert not problems


def test_an_empty_list_is_reported_where_one_is_required() -> None:
    reader, problems = _reader({"l": []})

    assert list(reader.items("l", nonempty=True)) == []
    assert _messages(problems) == ["doc.l: must not be empty"]


def test_done_reports_every_key_nobody_asked_for() -> None:
    reader, problems = _reader({"known": 1, "typo": 2, "other": 3})
    reader.number("known")

    reader.done()

    assert _messages(problems) == ["doc.typo: unknown key", "doc.other: unknown key"]


def test_paths_at_the_top_level_have_no_leading_dot() -> None:
    reader, problems = _reader({}, path="")

    reader.number("rate")

    assert _messages(problems) == ["rate: is required"]


def test_a_yaml_bare_on_key_is_reported_as_a_non_string_key() -> None:
    problems = Problems()

    assert Reader.of(yaml.safe_load("on: [timeout]"), "retry", problems) is None
    assert _messages(problems) == ["retry: keys must be strings, got True"]


def test_a_non_mapping_is_reported_with_its_type() -> None:
    problems = Problems()

    assert Reader.of([1], "doc", problems) is None
    assert _messages(problems) == ["doc: must be a mapping, got a list"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("abc", "'abc'"),
        (12, "12"),
        ("x" * 100, "'" + "x" * 58 + "…"),
    ],
)
def test_short_repr_quotes_a_value_within_its_limit(value: object, expected: str) -> None:
    assert short_repr(value) == expected


def test_short_repr_never_raises_for_ints_too_long_to_print() -> None:
    assert short_repr(10**5000) == "<a number>"
