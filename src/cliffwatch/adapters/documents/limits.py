"""What a document from outside may be (``DocumentLimits`` and the limits of each kind of document), and the
error for one that is refused (``DocumentInvalid``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cliffwatch.domain.errors import CliffwatchError

# No real number is written with more characters (2**63 has 19 digits), and Python itself refuses ints of
# over 4,300 digits, with a message about sys.set_int_max_str_digits that would mean nothing to a user.
MAX_NUMBER_CHARS = 400
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, kw_only=True)
class DocumentLimits:
    """What one document may be: its size, and what it holds once read."""

    max_bytes: int  # of its UTF-8 text
    max_depth: int = 64  # mappings and lists inside each other, the outermost counting as 1
    max_nodes: int = 10_000  # values as a tree (every alias expanded), mapping keys included
    max_aliases: int = 1_000


DocumentLoader = Callable[[str | bytes, DocumentLimits], Any]  # load_yaml or load_json

# Scenario documents, wherever they come from (files, the dashboard's paste box, API bodies). A real scenario
# has a few hundred values (the largest bundled one, 130); within these limits validation, the content hash
# and the dashboard's YAML view of the worst document each take a few milliseconds to a few tens
# (docs/security.md, "Hostile documents"), and nothing that walks one recurses more than a few hundred frames.
SCENARIO_LIMITS = DocumentLimits(max_bytes=1_000_000)
# Files cliffwatch wrote itself and reads back (results for reports): a day-long run's has millions of values.
RESULT_LIMITS = DocumentLimits(max_bytes=256 << 20, max_nodes=50_000_000, max_aliases=0)
# The settings file and the built-in target's parameters: a flat mapping and a few lists.
CONFIG_LIMITS = DocumentLimits(max_bytes=1 << 20, max_depth=16, max_nodes=10_000, max_aliases=100)


class DocumentInvalid(CliffwatchError):
    """A document the loader will not read: malformed, or over a limit (``over_limit``). ``reason`` says
    why; the message starts with the line and column (counted from 1) when they are known."""

    def __init__(
        self, reason: str, *, line: int | None = None, column: int | None = None, over_limit: bool = False
    ) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        self.over_limit = over_limit
        where = f"line {line}, column {column}: " if line is not None and column is not None else ""
        super().__init__(f"{where}{reason}")


def too_deep(limits: DocumentLimits) -> str:
    return f"nested too deeply (more than {limits.max_depth} levels)"


def too_many(limits: DocumentLimits) -> str:
    return f"has more than {limits.max_nodes:,} values"


def too_long_number() -> str:
    return f"a number of more than {MAX_NUMBER_CHARS} characters"


def check_text(text: str) -> str | None:
    """Why ``text`` is not valid Unicode (it holds an unpaired surrogate, which no UTF-8 can carry), or None."""
    if text.isascii() or (found := _SURROGATE.search(text)) is None:
        return None
    return f"not valid Unicode: a string holds an unpaired surrogate (U+{ord(found[0]):04X})"


def utf8(text: str | bytes, limits: DocumentLimits) -> bytes:
    """``text`` as UTF-8 bytes, within ``max_bytes``; raises ``DocumentInvalid`` for text that is too long,
    bytes that are not UTF-8, or a string that holds an unpaired surrogate."""
    too_long = f"is over the limit of {limits.max_bytes:,} bytes"
    if isinstance(text, str):
        if len(text) > limits.max_bytes:  # never more bytes than characters: no need to encode to know
            raise DocumentInvalid(too_long, over_limit=True)
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DocumentInvalid(f"not valid Unicode: an unpaired surrogate at character {exc.start}") from exc
    else:
        raw = text
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentInvalid(f"not UTF-8: {exc.reason} at byte {exc.start}") from exc
    if len(raw) > limits.max_bytes:
        raise DocumentInvalid(too_long, over_limit=True)
    return raw
