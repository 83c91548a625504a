"""Secret references: a scenario value that names where a secret is instead of holding it.

``{secret: env:NAME}`` is the environment variable NAME of the process that executes the run;
``{secret: file:/path}`` the content of a file (the ``_FILE`` convention of containers: a Docker or
Kubernetes secret mounted as a file), one trailing newline stripped. A reference may stand for a header's
value, a query parameter's (``request.query``) or any string of a request body (``body``, ``extra_body``).
Here a reference is only parsed and checked as a reference (its form, its scheme, a variable name or an
absolute path); reading it is the
``SecretResolver`` port's job, done where the run is executed, at its start (``services.secrets``).
Messages never quote what was written in place of a reference: it may be the secret itself, put there
by mistake.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import quote, urlencode

from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.validation import Problems

SECRET_KEY = "secret"
MAX_PATH = 4_096
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
# cliffwatch's own settings (the database URL and its password among them) are never a scenario's to send.
RESERVED_ENV_PREFIX = "CLIFFWATCH_"
FORMS = "env:NAME or file:/absolute/path"


class SecretScheme(StrEnum):
    ENV = "env"
    FILE = "file"


@dataclass(frozen=True, kw_only=True)
class SecretRef:
    """Where a secret is: an environment variable's name, or a file's absolute path."""

    scheme: SecretScheme
    name: str  # the variable's name, or the file's path

    def __str__(self) -> str:
        return f"{self.scheme.value}:{self.name}"


def is_reference(value: object) -> bool:
    """Whether ``value`` is written as a reference (a mapping with the one key ``secret``), well-formed or not."""
    return isinstance(value, Mapping) and list(value) == [SECRET_KEY]


def parse_reference(value: object, path: str, problems: Problems) -> SecretRef | None:
    """The reference ``value`` (``{secret: "env:NAME"}``) makes, or None with the problem recorded at ``path``."""
    if not is_reference(value):
        problems.add(path, f"must be a string or a secret reference {{secret: {FORMS}}}")
        return None
    assert isinstance(value, Mapping)
    text = value[SECRET_KEY]
    if not isinstance(text, str):
        problems.add(path, f"a secret reference must be a string, {FORMS}")
        return None
    scheme, colon, name = text.partition(":")
    if not colon or scheme not in tuple(SecretScheme):
        known = ", ".join(s.value for s in SecretScheme)
        problems.add(path, f"a secret reference must be {FORMS} (its scheme one of {known})")
        return None
    if scheme == SecretScheme.ENV:
        if not _ENV_NAME.fullmatch(name):
            problems.add(path, "a secret reference env:NAME must name a variable: letters, digits and '_', "
                               "not starting with a digit")  # fmt: skip
            return None
        if name.upper().startswith(RESERVED_ENV_PREFIX):
            problems.add(path, f"a secret reference must not name cliffwatch's own settings ({RESERVED_ENV_PREFIX}*)")
            return None
        return SecretRef(scheme=SecretScheme.ENV, name=name)
    if not name.startswith("/") or len(name) > MAX_PATH or any(not c.isprintable() for c in name):
        problems.add(path, f"a secret reference file:PATH must give an absolute path of printable characters "
                           f"(at most {MAX_PATH})")  # fmt: skip
        return None
    return SecretRef(scheme=SecretScheme.FILE, name=name)


class SecretUnavailable(CliffwatchError):
    """One secret a reference names cannot be read; the message names the reference, never a value."""

    def __init__(self, reference: SecretRef, reason: str) -> None:
        self.reference = reference
        self.reason = reason
        super().__init__(f"{reference} {reason}")


class SecretsUnavailable(CliffwatchError):
    """The secrets of a run could not all be read, so no load was sent; each problem names its field."""

    def __init__(self, problems: Iterable[tuple[str, SecretUnavailable]]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {path}: {error}" for path, error in self.problems)
        super().__init__(f"secrets are missing, no load was sent ({len(self.problems)} problem(s)):\n{lines}")


def env_name_allowed(name: str, patterns: Iterable[str]) -> bool:
    """Whether a reference may read the variable ``name``: a pattern is a name, or a prefix ending in ``*``;
    cliffwatch's own settings never match."""
    if name.upper().startswith(RESERVED_ENV_PREFIX):
        return False
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def is_body_reference(value: object) -> bool:
    """Whether a value of a request body is a reference: a mapping of the one key ``secret`` whose string names a
    scheme (``{secret: "env:NAME"}``, ``{secret: "file:/path"}``). Any other mapping, ``{secret: "hello"}`` among
    them, is part of the body as written."""
    if not is_reference(value):
        return False
    assert isinstance(value, Mapping)
    text = value[SECRET_KEY]
    return isinstance(text, str) and text.partition(":")[0] in tuple(SecretScheme) and ":" in text


def body_references(value: object, path: str, problems: Problems) -> list[tuple[str, SecretRef]]:
    """Every reference in a request body (``body``, ``extra_body``) with its path, each checked as a reference
    (its problems recorded at its path)."""
    found: list[tuple[str, SecretRef]] = []
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if is_body_reference(item):
            reference = parse_reference(item, where, problems)
            if reference is not None:
                found.append((where, reference))
        elif isinstance(item, Mapping):
            stack += [(v, f"{where}.{k}") for k, v in reversed(list(item.items()))]
        elif isinstance(item, list | tuple):
            stack += [(v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item)))]
    return found


def with_body_secrets(value: Any, read: Callable[[SecretRef], str]) -> Any:
    """A copy of a request body with each reference replaced by what ``read`` gives for it (a body without
    references is returned as it is)."""
    if is_body_reference(value):
        problems = Problems()
        reference = parse_reference(value, "body", problems)
        if reference is None:
            raise CliffwatchError(
                "a secret reference in a request body is malformed: " + "; ".join(p.message for p in problems.items)
            )
        return read(reference)
    if isinstance(value, Mapping):
        return {k: with_body_secrets(v, read) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [with_body_secrets(v, read) for v in value]
    return value


def unresolved_body(value: object) -> bool:
    """Whether a request body still holds a reference (a bug: the run's start reads every one before sending)."""
    return bool(body_references(value, "body", Problems()))


def sendable_headers(headers: Iterable[tuple[str, str | SecretRef]]) -> dict[str, str]:
    """The headers as they are sent; raises ``CliffwatchError`` if a reference was never resolved (a bug:
    the run's start resolves every one before anything is sent)."""
    out: dict[str, str] = {}
    for name, value in headers:
        if isinstance(value, SecretRef):
            raise CliffwatchError(f"target.request.headers.{name}: the secret {value} was not resolved")
        out[name] = value
    return out


def sendable_path(path: str, query: Iterable[tuple[str, str | SecretRef]]) -> str:
    """``path`` with ``query``'s parameters added to its own query, percent-encoded; raises ``CliffwatchError`` if
    a reference was never resolved (a bug: the run's start resolves every one before anything is sent)."""
    pairs = []
    for name, value in query:
        if isinstance(value, SecretRef):
            raise CliffwatchError(f"target.request.query.{name}: the secret {value} was not resolved")
        pairs.append((name, value))
    if not pairs:
        return path
    path, hash_sign, fragment = path.partition("#")  # a fragment is never sent: the query goes before it
    return path + ("&" if "?" in path else "?") + urlencode(pairs, quote_via=quote) + hash_sign + fragment
