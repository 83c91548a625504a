"""A path-tracking reader that turns untrusted mappings into typed values, collecting every problem.

Parsers call ``Reader`` methods; each method returns a usable value (or ``None``) and records a
``Problem`` with the dotted path when the input is wrong, so one pass reports everything at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from cliffwatch.domain.errors import Problem

T = TypeVar("T")
_MISSING: Any = object()


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for quoting untrusted input in a problem message.

    Never raises: ints past ``sys.get_int_max_str_digits()`` have no repr, and very deep nesting has none
    within the recursion limit.
    """
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"<{_type_name(value)}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Problems:
    """The problems found so far in one document."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(Problem(path=path, message=message))

    def __bool__(self) -> bool:
        return bool(self.items)


class Reader:
    """Reads one mapping at ``path``; unknown keys are reported when ``done()`` is called.

    Only an absent key takes its default: an explicit null is a value of the wrong type, and is reported.
    """

    def __init__(self, data: Mapping[str, Any], path: str, problems: Problems) -> None:
        self.data = data
        self.path = path
        self.problems = problems
        self._seen: set[str] = set()

    @classmethod
    def of(cls, value: object, path: str, problems: Problems) -> Reader | None:
        """A reader for ``value`` if it is a mapping with string keys; otherwise records why not."""
        if not isinstance(value, Mapping):
            problems.add(path, f"must be a mapping, got {_type_name(value)}")
            return None
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            problems.add(path, f"keys must be strings, got {short_repr(bad[0])}")
            return None
        return cls(value, path, problems)

    def child(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def error(self, key: str | None, message: str) -> None:
        self.problems.add(self.child(key) if key else self.path, message)

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        """The raw value under ``key``; a missing required key is a problem and gives ``None``."""
        self._seen.add(key)
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            self.problems.add(self.child(key), "is required")
            return None
        return default

    def string(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        choices: tuple[str, ...] | None = None,
        nonempty: bool = True,
    ) -> Any:
        if key not in self.data:
            return self.raw(key, default)
        value = self.raw(key)
        if not isinstance(value, str):
            self.error(key, f"must be a string, got {_type_name(value)}")
            return None
        if nonempty and not value.strip():
            self.error(key, "must not be empty")
            return None
        if choices is not None and value not in choices:
            self.error(key, f"must be one of {', '.join(choices)}; got {short_repr(value)}")
            return None
        return value

    def boolean(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.data:
            return self.raw(key, default)
        value = self.raw(key)
        if not isinstance(value, bool):
            self.error(key, f"must be true or false, got {_type_name(value)}")
            return None
        return value

    def number(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        gt: float | None = None,
        ge: float | None = None,
        le: float | None = None,
        integer: bool = False,
    ) -> Any:
        if key not in self.data:
            return self.raw(key, default)
        return check_number(self.raw(key), self.child(key), self.problems, gt=gt, ge=ge, le=le, integer=integer)

    def mapping(self, key: str, default: Any = _MISSING) -> Reader | None:
        if key not in self.data:
            self.raw(key, default)
            return None
        return Reader.of(self.raw(key), self.child(key), self.problems)

    def items(self, key: str, default: Any = _MISSING, *, nonempty: bool = False) -> Iterator[tuple[str, Any]]:
        """Yields ``(path, item)`` for each element of the list under ``key``."""
        if key not in self.data:
            self.raw(key, default)
            return
        value = self.raw(key)
        if not isinstance(value, list | tuple):
            self.error(key, f"must be a list, got {_type_name(value)}")
            return
        if nonempty and not value:
            self.error(key, "must not be empty")
            return
        for index, item in enumerate(value):
            yield f"{self.child(key)}[{index}]", item

    def done(self) -> None:
        """Records every key that no parser asked for: a typo must never be silently ignored."""
        for key in self.data:
            if key not in self._seen:
                self.problems.add(self.child(key), "unknown key")


def check_number(
    value: object,
    path: str,
    problems: Problems,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    integer: bool = False,
) -> Any:
    """``value`` as an int (``integer``) or a float when it satisfies the bounds; otherwise records the problem.

    Gives None when there is a problem. Ints too large for a float are refused: later arithmetic on the
    value (rates × durations, sums) would raise ``OverflowError`` instead of reporting anything.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.add(path, f"must be a number, got {_type_name(value)}")
        return None
    try:
        as_float = float(value)
    except OverflowError:
        problems.add(path, "is too large")
        return None
    if not math.isfinite(as_float):
        problems.add(path, "must be a finite number")
        return None
    if integer and not (isinstance(value, int) or value.is_integer()):
        problems.add(path, f"must be a whole number, got {value}")
        return None
    if gt is not None and not value > gt:
        problems.add(path, f"must be > {gt:g}")
        return None
    if ge is not None and not value >= ge:
        problems.add(path, f"must be >= {ge:g}")
        return None
    if le is not None and not value <= le:
        problems.add(path, f"must be <= {le:g}")
        return None
    return int(value) if integer else as_float


def parse_each(
    reader: Reader,
    key: str,
    parse: Callable[[object, str, Problems], T | None],
    default: Any = _MISSING,
    *,
    nonempty: bool = False,
) -> list[T]:
    """Parses each element of a list with ``parse(item, path, problems)``, skipping the bad ones."""
    out: list[T] = []
    for path, item in reader.items(key, default, nonempty=nonempty):
        parsed = parse(item, path, reader.problems)
        if parsed is not None:
            out.append(parsed)
    return out
