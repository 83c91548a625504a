"""Strict JSON under ``DocumentLimits``: its values are counted before it is parsed, so no body of a million
tiny values is ever built; then its depth and strings are checked, without recursion."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from cliffwatch.adapters.documents.limits import (
    MAX_NUMBER_CHARS,
    DocumentInvalid,
    DocumentLimits,
    check_text,
    too_deep,
    too_long_number,
    too_many,
    utf8,
)

# A JSON string: its quotes and everything between, escapes included, or an unterminated one to the end of the
# text. The match never fails once a quote is seen, so the regex engine never retries from inside a string:
# the pattern without the end alternative takes quadratic time on '"\"\"\"…' (3 s for 40 KB).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)


def load_json(text: str | bytes, limits: DocumentLimits) -> Any:
    """The JSON value in ``text``.

    Raises ``DocumentInvalid`` for text over the size limit, not UTF-8 or not JSON; NaN and Infinity (which
    Python's json module accepts, JSON not); numbers too long or too large for a float; unpaired surrogates
    (``"\\ud800"``); more values than ``max_nodes`` (counted as JSON's separators, so a document full of
    empty lists may be refused a little early) or nesting deeper than ``max_depth``.
    """
    decoded = utf8(text, limits).decode("utf-8")
    bare = _JSON_STRING.sub("", decoded)
    # Each value or key but the first follows a separator or an opening bracket.
    bound = 1 + bare.count(",") + bare.count(":") + bare.count("[") + bare.count("{")
    if bound > limits.max_nodes:
        raise DocumentInvalid(too_many(limits), over_limit=True)
    try:
        value = json.loads(decoded, parse_constant=_no_constant, parse_int=_integer, parse_float=_float)
    except _NotAccepted as exc:
        raise DocumentInvalid(str(exc), over_limit=exc.over_limit) from exc
    except json.JSONDecodeError as exc:
        raise DocumentInvalid(f"not valid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from exc
    except RecursionError as exc:  # json's C scanner counts its levels against the recursion limit
        raise DocumentInvalid(too_deep(limits), over_limit=True) from exc
    _check_tree(value, limits)
    return value


class _NotAccepted(ValueError):
    """A value outside the rules, raised from inside ``json.loads``."""

    def __init__(self, reason: str, *, over_limit: bool = False) -> None:
        super().__init__(reason)
        self.over_limit = over_limit


def _no_constant(name: str) -> None:
    raise _NotAccepted(f"{name} is not a number in JSON")


def _integer(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _NotAccepted(too_long_number(), over_limit=True)
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _NotAccepted(too_long_number(), over_limit=True)
    value = float(text)
    if not math.isfinite(value):
        raise _NotAccepted(f"the number {text} is too large for a float")
    return value


def _check_tree(root: object, limits: DocumentLimits) -> None:
    stack: list[tuple[object, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _text(value)
        elif isinstance(value, dict | list):
            if depth > limits.max_depth:
                raise DocumentInvalid(too_deep(limits), over_limit=True)
            if isinstance(value, dict):
                for key, item in value.items():
                    _text(key)
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)


def _text(text: str) -> None:
    reason = check_text(text)
    if reason is not None:
        raise DocumentInvalid(reason)
