"""The settings' parsers: each reads one raw value (a string from the environment, or what a settings file
holds) into its typed value, or raises ``ValueError`` with the reason (``_Several`` for a list's bad entries).

``SPECS`` (``config.specs``) names the parser of every setting.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cliffwatch.domain.scenario.target_spec import HEADER_NAME
from cliffwatch.domain.security.allowlist import Allowlist, parse_allowlist, parse_denied
from cliffwatch.domain.security.deny_list import DenyRule
from cliffwatch.domain.security.secrets import RESERVED_ENV_PREFIX
from cliffwatch.domain.traffic.ray_address import ray_address_problem


class _Several(ValueError):
    """Several problems with one value (each bad entry of a list)."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = messages
        super().__init__("; ".join(messages))


def _text(raw: Any) -> str:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ValueError(f"must be a string, got {type(raw).__name__}")
    return str(raw).strip()


def _ray_address(address: str) -> str | None:
    if not address:
        return None
    if (problem := ray_address_problem(address)) is not None:
        raise ValueError(problem)
    return address


def _allowlist(raw: Any, env: Mapping[str, str]) -> Allowlist:
    items = [raw] if not isinstance(raw, list) else raw
    entries = tuple(i.strip() for item in items for i in _text(item).split(",") if i.strip())
    allowlist, problems = parse_allowlist(entries)
    if allowlist is None:
        raise _Several([p.message for p in problems])
    return allowlist


def _denied_targets(raw: Any, env: Mapping[str, str]) -> tuple[DenyRule, ...]:
    items = [raw] if not isinstance(raw, list) else raw
    rules, problems = parse_denied([i.strip() for item in items for i in _text(item).split(",") if i.strip()])
    if problems:
        raise _Several([p.message for p in problems])
    return rules


def _proxy_listen(raw: Any, env: Mapping[str, str]) -> Allowlist:
    allowlist = _allowlist(raw, env)
    return replace(allowlist, name="proxy listen allowlist", setting="CLIFFWATCH_ALLOWED_PROXY_LISTEN")


def _choice(options: tuple[str, ...]) -> Callable[[Any, Mapping[str, str]], str]:
    def parse(raw: Any, env: Mapping[str, str]) -> str:
        value = _text(raw).lower()
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return parse


def _number(
    *, low: float, high: float, integer: bool = False, unit: str = ""
) -> Callable[[Any, Mapping[str, str]], Any]:
    """Integers in [low, high]; other numbers in (low, high]."""

    def parse(raw: Any, env: Mapping[str, str]) -> Any:
        try:
            value: float | None = int(_text(raw)) if integer else float(_text(raw))
        except ValueError:
            value = None
        inside = (
            value is not None and math.isfinite(value) and (low <= value <= high if integer else low < value <= high)
        )
        if not inside:
            what = unit or ("a whole number" if integer else "a number")
            interval = f"[{low:g}, {high:g}]" if integer else f"({low:g}, {high:g}]"
            raise ValueError(f"must be {what} in {interval}, got {raw!r}")
        return value

    return parse


def _boolean(raw: Any, env: Mapping[str, str]) -> bool:
    if isinstance(raw, bool):
        return raw
    value = _text(raw).lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {raw!r}")


def _state_dir(raw: Any, env: Mapping[str, str]) -> Path:
    path = expand_home(_text(raw), env)
    # A relative directory would give each working directory its own ledger, and a clean-up run from
    # elsewhere would miss the faults recorded there.
    if not path.is_absolute():
        raise ValueError(f"must be an absolute path, got {raw!r}")
    return path


def _toxiproxy_url(raw: Any, env: Mapping[str, str]) -> str | None:
    text = _text(raw)
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"must be http(s)://host:port, got {text!r}")
    return text.rstrip("/")


def _existing_file(raw: Any, env: Mapping[str, str]) -> Path | None:
    text = _text(raw)
    if not text:
        return None
    path = expand_home(text, env)
    if not path.is_file():
        raise ValueError(f"no such file: {text!r}")
    return path


def _database_url(raw: Any, env: Mapping[str, str]) -> str:
    text = _text(raw)
    if not text.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
        raise ValueError("must be sqlite+aiosqlite:///path or postgresql+asyncpg://user:password@host:port/db")
    return text


def _name(raw: Any, env: Mapping[str, str]) -> str:
    text = _text(raw)
    if not text or len(text) > 100 or any(c.isspace() for c in text):
        raise ValueError(f"must be a short name without spaces, got {raw!r}")
    return text


def _names(check: Callable[[str], str | None]) -> Callable[[Any, Mapping[str, str]], tuple[str, ...]]:
    """A comma-separated list (or a list in the file), each entry judged by ``check`` (its problem, or None)."""

    def parse(raw: Any, env: Mapping[str, str]) -> tuple[str, ...]:
        items = raw if isinstance(raw, list) else [raw]
        entries = tuple(e.strip() for item in items for e in _text(item).split(",") if e.strip())
        bad = [f"{entry!r} {problem}" for entry in entries if (problem := check(entry)) is not None]
        if bad:
            raise _Several(bad)
        return entries

    return parse


def _header_name(entry: str) -> str | None:
    return None if HEADER_NAME.fullmatch(entry) else "is not a header name"


def _param_name(entry: str) -> str | None:
    return None if entry.isprintable() and not any(c in entry for c in "&=?#; ") else "is not a query parameter name"


def _env_pattern(entry: str) -> str | None:
    if not _ENV_PATTERN.fullmatch(entry):
        return "is not a variable name or a prefix ending in *"
    if entry.upper().startswith(RESERVED_ENV_PREFIX):
        return "names cliffwatch's own settings, which scenarios may never read"
    return None


def _secret_dirs(raw: Any, env: Mapping[str, str]) -> tuple[Path, ...]:
    def check(entry: str) -> str | None:
        return None if Path(entry).is_absolute() else "is not an absolute path"

    return tuple(Path(entry) for entry in _names(check)(raw, env))


_ENV_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def expand_home(path: str, env: Mapping[str, str]) -> Path:
    """``~`` expanded with the given environment's HOME (the account's home when it has none)."""
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME") or str(Path.home())
        return Path(home + path[1:])
    return Path(path)
