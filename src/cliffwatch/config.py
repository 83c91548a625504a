"""Settings: one frozen value built from the environment. The only module that reads ``os.environ``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cliffwatch.domain.allowlist import DEFAULT_ALLOWLIST, Allowlist, parse_allowlist
from cliffwatch.domain.errors import CliffwatchError

LOG_FORMATS = ("auto", "json", "console")


class SettingsInvalid(CliffwatchError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid settings: " + "; ".join(problems))


@dataclass(frozen=True, kw_only=True)
class Settings:
    allowlist: Allowlist
    log_format: str = "auto"  # auto: console on a terminal, JSON otherwise
    log_level: str = "info"
    # What must survive the process (the fault ledger); built from the process environment when not given.
    state_dir: Path = field(default_factory=lambda: _default_state_dir(os.environ))
    toxiproxy_url: str | None = None  # an existing Toxiproxy server's API; None: start one per run
    toxiproxy_bin: Path | None = None  # the toxiproxy-server to start; None: PATH, then the project's .tools
    toxiproxy_timeout_s: float = 5.0  # for each call to Toxiproxy's API

    @property
    def fault_ledger_path(self) -> Path:
        """The fault ledger's file, shared by every cliffwatch process that uses this state directory."""
        return self.state_dir / "faults.jsonl"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Reads ``CLIFFWATCH_*`` variables; raises ``SettingsInvalid`` naming each bad one.

        - ``CLIFFWATCH_ALLOWED_TARGETS``: comma-separated hosts, IPs or CIDRs (optional ``:port``) that runs
          may target; default loopback only (``127.0.0.0/8,::1,localhost``).
        - ``CLIFFWATCH_LOG_FORMAT``: ``auto`` | ``json`` | ``console``.
        - ``CLIFFWATCH_LOG_LEVEL``: ``debug`` | ``info`` | ``warning`` | ``error``.
        - ``CLIFFWATCH_STATE_DIR``: an absolute directory for state that outlives a run (the fault ledger);
          default ``$XDG_STATE_HOME/cliffwatch``, or ``~/.local/state/cliffwatch``.
        - ``CLIFFWATCH_TOXIPROXY_URL``: the API of a running Toxiproxy server to inject faults with (e.g.
          ``http://127.0.0.1:8474``); unset, cliffwatch starts its own ``toxiproxy-server`` for each run that
          needs faults.
        - ``CLIFFWATCH_TOXIPROXY_BIN``: the ``toxiproxy-server`` binary to start; default ``toxiproxy-server``
          on PATH, then the project's ``.tools/bin/toxiproxy-server`` (``make toxiproxy``).
        - ``CLIFFWATCH_TOXIPROXY_TIMEOUT_S``: the timeout of each call to Toxiproxy's API (default 5).
        """
        env = os.environ if environ is None else environ
        problems: list[str] = []
        raw_allow = env.get("CLIFFWATCH_ALLOWED_TARGETS")
        items = DEFAULT_ALLOWLIST if raw_allow is None else tuple(i for i in raw_allow.split(",") if i.strip())
        allowlist, allow_problems = parse_allowlist(items)
        problems += [f"CLIFFWATCH_ALLOWED_TARGETS: {p.message}" for p in allow_problems]
        log_format = env.get("CLIFFWATCH_LOG_FORMAT", "auto").lower()
        if log_format not in LOG_FORMATS:
            problems.append(f"CLIFFWATCH_LOG_FORMAT: must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
        log_level = env.get("CLIFFWATCH_LOG_LEVEL", "info").lower()
        if log_level not in ("debug", "info", "warning", "error"):
            problems.append(f"CLIFFWATCH_LOG_LEVEL: must be debug, info, warning or error, got {log_level!r}")
        state_dir = _default_state_dir(env)
        raw_state = env.get("CLIFFWATCH_STATE_DIR")
        if raw_state is not None:
            state_dir = _expand_home(raw_state, env)
            # A relative directory would give each working directory its own ledger, and a clean-up run
            # from elsewhere would miss the faults recorded there.
            if not state_dir.is_absolute():
                problems.append(f"CLIFFWATCH_STATE_DIR: must be an absolute path, got {raw_state!r}")
        toxiproxy_url = env.get("CLIFFWATCH_TOXIPROXY_URL") or None
        if toxiproxy_url is not None:
            parts = urlsplit(toxiproxy_url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
                problems.append(f"CLIFFWATCH_TOXIPROXY_URL: must be http(s)://host:port, got {toxiproxy_url!r}")
            toxiproxy_url = toxiproxy_url.rstrip("/")
        raw_bin = env.get("CLIFFWATCH_TOXIPROXY_BIN") or None
        toxiproxy_bin = None if raw_bin is None else _expand_home(raw_bin, env)
        if toxiproxy_bin is not None and not toxiproxy_bin.is_file():
            problems.append(f"CLIFFWATCH_TOXIPROXY_BIN: no such file: {raw_bin!r}")
        toxiproxy_timeout_s = 5.0
        raw_timeout = env.get("CLIFFWATCH_TOXIPROXY_TIMEOUT_S")
        if raw_timeout is not None:
            try:
                toxiproxy_timeout_s = float(raw_timeout)
            except ValueError:
                toxiproxy_timeout_s = -1.0
            if not 0 < toxiproxy_timeout_s <= 300:
                problems.append(f"CLIFFWATCH_TOXIPROXY_TIMEOUT_S: must be seconds in (0, 300], got {raw_timeout!r}")
        if problems or allowlist is None:
            raise SettingsInvalid(problems)
        return cls(
            allowlist=allowlist,
            log_format=log_format,
            log_level=log_level,
            state_dir=state_dir,
            toxiproxy_url=toxiproxy_url,
            toxiproxy_bin=toxiproxy_bin,
            toxiproxy_timeout_s=toxiproxy_timeout_s,
        )


def _default_state_dir(env: Mapping[str, str]) -> Path:
    # The XDG spec says a relative (or empty) XDG_STATE_HOME is to be ignored.
    xdg = env.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else _expand_home("~/.local/state", env)
    return base / "cliffwatch"


def _expand_home(path: str, env: Mapping[str, str]) -> Path:
    """``~`` expanded with the given environment's HOME (the account's home when it has none)."""
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME") or str(Path.home())
        return Path(home + path[1:])
    return Path(path)
