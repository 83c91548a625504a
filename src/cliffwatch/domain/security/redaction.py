"""Redaction of scenario documents: literal credentials out, one fixed mask in, and back for the run.

``redact_document`` is the one function every document goes through where it enters (the CLI's files, the
service's catalog: bundled, registered and inline documents). It masks, anywhere in the document:

- the value of a sensitive header (``RedactionRules``: Authorization, Proxy-Authorization, Cookie, api-key,
  x-api-key and the names a setting adds, case-insensitively) in any ``headers`` mapping;
- the value of a query parameter with a sensitive name (``api_key``, ``key``, ``token``, ``sig``… and the names a
  setting adds) in any string (``request.path: /v1/x?api_key=…``), and in a ``query`` mapping;
- in a request ``body`` or ``extra_body``, a string under a key that names a credential (a sensitive header's name,
  ``api_key``, ``access_token``, ``password``, ``token``…, and the query parameter names a setting adds: not
  ``key`` or ``sig``, which a body uses for much else);
- the password (or the user part without a password) of every URL in a string: the target URL, a proxy's
  upstream, a URL in a description.

Secret references (``{secret: env:NAME}``) are not credentials and stay as written. What was masked is
kept as ``Credential``s (path and value) for the one reader that needs them, the run, to ``restore``.

The content hash of a masked document must still tell apart two documents that differ only in a
credential, without letting anyone who sees the hash test guesses of it: ``Redaction.content_hash`` mixes
in each credential's HMAC under a key the service keeps; without a key (the CLI, which stores nothing) the
hash is the masked document's, naming the document without its credentials.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from cliffwatch.domain.errors import CliffwatchError, Problem
from cliffwatch.domain.security.masking import (
    DEFAULT_SENSITIVE_QUERY,
    MASK,
    mask_query,
    mask_url,
    query_credentials,
    query_pattern,
    url_credentials,
)

DEFAULT_SENSITIVE_HEADERS = ("authorization", "proxy-authorization", "cookie", "api-key", "x-api-key")
HEADERS_KEY = "headers"
QUERY_KEY = "query"
NOTIFY_KEY, WEBHOOK_KEY = "notify", "webhook"  # notify[i].webhook: a URL whose path is often its secret
BODY_KEYS = ("body", "extra_body")
# Body keys that name a credential. Fewer than the query's names: in a body, "key" and "sig" are mostly not secrets.
DEFAULT_SENSITIVE_BODY_KEYS = ("api_key", "apikey", "access_token", "refresh_token", "id_token", "client_secret",
                               "password", "token", "private_key", "secret_key")  # fmt: skip
Path = tuple[str | int, ...]


@dataclass(frozen=True, kw_only=True)
class RedactionRules:
    """Which header and query parameter names carry credentials (compared in lower case)."""

    sensitive_headers: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_SENSITIVE_HEADERS))
    sensitive_query: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_SENSITIVE_QUERY))

    @classmethod
    def adding(cls, names: Iterable[str], query: Iterable[str] = ()) -> RedactionRules:
        """The default names and ``names`` (headers), ``query`` (query parameters)."""
        return cls(sensitive_headers=frozenset(DEFAULT_SENSITIVE_HEADERS) | {n.strip().lower() for n in names},
                   sensitive_query=frozenset(DEFAULT_SENSITIVE_QUERY) | {n.strip().lower() for n in query})  # fmt: skip

    def is_sensitive(self, header: str) -> bool:
        return header.lower() in self.sensitive_headers

    def is_sensitive_param(self, name: str) -> bool:
        return name.lower() in self.sensitive_query

    def is_sensitive_body_key(self, name: str) -> bool:
        """A body key naming a credential: a sensitive header's name, a usual credential's, or a query parameter
        name the settings add (the operator's own word for their API's key)."""
        lowered = name.lower()
        added = lowered in self.sensitive_query and lowered not in DEFAULT_SENSITIVE_QUERY
        return lowered in self.sensitive_headers or lowered in DEFAULT_SENSITIVE_BODY_KEYS or added

    @property
    def query(self) -> re.Pattern[str]:
        """Finds the sensitive query parameters' values in a string (``masking.query_pattern``)."""
        return _query_pattern(self.sensitive_query)

    def mask_text(self, text: str) -> str:
        """``text`` with its URLs' passwords and its sensitive query parameters' values masked."""
        return mask_query(mask_url(text), self.query)

    def credentials_in(self, text: str) -> list[str]:
        """The credentials ``mask_text`` would mask in ``text`` (the mask itself included where it stands)."""
        return url_credentials(text) + query_credentials(text, self.query)


@functools.lru_cache(maxsize=16)
def _query_pattern(names: frozenset[str]) -> re.Pattern[str]:
    return query_pattern(names)


DEFAULT_RULES = RedactionRules()


@dataclass(frozen=True, kw_only=True)
class Credential:
    """A literal credential masked out of a document: where it was (keys and list indices) and its value
    (the whole string found there: a header's value, or a URL with its password)."""

    path: Path
    value: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": list(self.path), "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Credential:
        return cls(path=tuple(data["path"]), value=str(data["value"]))


@dataclass(frozen=True, kw_only=True)
class Redaction:
    """A document with its credentials masked, and the credentials (in document order)."""

    document: Mapping[str, Any]
    credentials: tuple[Credential, ...] = ()
    problems: tuple[Problem, ...] = ()  # the mask itself where a credential belongs: a document read back

    def content_hash(self, key: bytes | None = None) -> str:
        """The masked document's hash, with each credential's HMAC under ``key`` mixed in when given (so a
        changed credential is a new version); equal to ``content_hash`` of a document without credentials."""
        if not self.credentials or key is None:
            return content_hash(self.document)
        fingerprints = [[_dotted(c.path), hmac.new(key, c.value.encode(), hashlib.sha256).hexdigest()]
                        for c in self.credentials]  # fmt: skip
        return content_hash({"document": self.document, "credentials": fingerprints})


def content_hash(document: Mapping[str, Any]) -> str:
    """A stable hash of a document: equal documents (whatever their key order) hash equal."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def redact_document(document: Mapping[str, Any], rules: RedactionRules = DEFAULT_RULES) -> Redaction:
    """``document`` with every literal credential replaced by ``MASK``, and what was replaced.

    A copy: ``document`` itself is not changed. Values under a sensitive header that already are the mask
    are reported as problems (``Redaction.problems``): a document shown by cliffwatch and sent back would
    otherwise send the mask itself as the credential.
    """
    credentials: list[Credential] = []
    problems: list[Problem] = []

    def walk(value: Any, path: Path, sensitive: bool) -> Any:
        if isinstance(value, Mapping):
            return {k: walk(v, (*path, k), _sensitive(path, k, rules)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v, (*path, i), False) for i, v in enumerate(value)]
        if not isinstance(value, str):
            return value
        if sensitive and path and path[-1] == WEBHOOK_KEY:
            if value.endswith("/" + MASK):
                problems.append(Problem(path=_dotted(path), message=_MASK_SENT))
                return value
            shown = masked_webhook(value)
            if shown != value:
                credentials.append(Credential(path=path, value=value))
            return shown
        if sensitive:
            if value == MASK:
                problems.append(Problem(path=_dotted(path), message=_MASK_SENT))
                return value
            credentials.append(Credential(path=path, value=value))
            return MASK
        found = rules.credentials_in(value)
        if MASK in found:
            problems.append(Problem(path=_dotted(path), message=_MASK_SENT))
        elif found:
            credentials.append(Credential(path=path, value=value))
            return rules.mask_text(value)
        return value

    masked = walk(document, (), False)
    assert isinstance(masked, Mapping)
    return Redaction(document=masked, credentials=tuple(credentials), problems=tuple(problems))


def masked_webhook(url: str) -> str:
    """A webhook's URL with everything past its host masked (``https://hooks.slack.com/***``): where it goes stays
    readable, and the document still parses; a URL with no path, query or user part has nothing to mask."""
    parts = urlsplit(url)
    if parts.path in ("", "/") and not parts.query and not parts.fragment and "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}/{MASK}"


def restore(document: Mapping[str, Any], credentials: Iterable[Credential]) -> dict[str, Any]:
    """``document`` with each credential put back where it was masked (a copy): the document as sent."""
    restored: Any = json.loads(json.dumps(document))
    for credential in credentials:
        *parents, last = credential.path
        node = restored
        try:
            for key in parents:
                node = node[key]
            if not _masks(node[last], credential.value):
                raise KeyError(last)
        except (KeyError, IndexError, TypeError) as exc:
            where = _dotted(credential.path)
            raise CliffwatchError(f"a stored credential does not fit its document at {where}") from exc
        node[last] = credential.value
    assert isinstance(restored, dict)
    return restored


def _sensitive(path: Path, key: object, rules: RedactionRules) -> bool:
    """Whether the string under ``key`` of the mapping at ``path`` is a credential by its name: a sensitive header,
    a sensitive query parameter, a credential's name as a key of a request body, or a webhook's URL (its path is
    often its secret: a Slack incoming webhook's is)."""
    if not isinstance(key, str) or not path:
        return False
    if key == WEBHOOK_KEY and len(path) >= 2 and path[-2] == NOTIFY_KEY:
        return True
    if path[-1] == HEADERS_KEY:
        return rules.is_sensitive(key)
    if path[-1] == QUERY_KEY:
        return rules.is_sensitive_param(key)
    return any(part in BODY_KEYS for part in path) and rules.is_sensitive_body_key(key)


def _masks(shown: object, value: str) -> bool:
    """Whether ``shown`` is ``value`` masked (whole, or in parts: each ``MASK`` standing for some text), whatever
    rules masked it (the settings may have named more parameters since)."""
    if not isinstance(shown, str):
        return False
    pattern = ".*?".join(map(re.escape, shown.split(MASK)))
    return re.fullmatch(pattern, value, re.DOTALL) is not None


_MASK_SENT = (
    f"is {MASK!r}, the mask cliffwatch shows in place of a credential (a document read back from it?): "
    "give the credential itself or a secret reference {secret: env:NAME}"
)


def _dotted(path: Path) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out
