"""Settings: one frozen value built from the environment and a settings file read by the caller; the only reader
of ``os.environ``.

The environment wins over the file; every bad value is reported with its source, all at once. The file itself is
read where files are (``bootstrap.settings``): here it is a parsed document (``ConfigFile``), so the settings
import nothing but the domain.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cliffwatch.config.parsers import _allowlist, _proxy_listen, _Several
from cliffwatch.config.specs import (
    DEFAULT_DATABASE_URL,
    DEFAULT_SECRET_DIRS,
    DEFAULT_SECRET_ENV,
    SPECS,
    SettingsInvalid,
    _default_state_dir,
)
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, Allowlist
from cliffwatch.domain.security.deny_list import (
    ALWAYS_DENIED,
    DenyList,
    DenyRule,
    database_rules,
    ray_rules,
    rule_for_url,
)
from cliffwatch.domain.security.redaction import RedactionRules
from cliffwatch.domain.security.secrets import env_name_allowed
from cliffwatch.domain.service.caps import Caps
from cliffwatch.domain.service.runs import Quotas
from cliffwatch.domain.workload.prepared import PreparationLimits


def process_environment() -> Mapping[str, str]:
    """This process's environment: what ``Settings.from_env`` reads when given none."""
    return os.environ


@dataclass(frozen=True, kw_only=True)
class ConfigFile:
    """The settings file ``CLIFFWATCH_CONFIG`` names, as its reader found it: its path as written, and the document
    it holds (any JSON value; None when empty) or why it could not be read."""

    path: str
    document: Any = None
    problem: str | None = None

    def settings(self, problems: list[str]) -> dict[str, Any]:
        """Its settings by key, or {} with the problem added: a file that could not be read, or is not a mapping of
        setting names to values."""
        if self.problem is not None:
            problems.append(f"CLIFFWATCH_CONFIG: {self.problem}")
            return {}
        if self.document is None:
            return {}
        if not isinstance(self.document, dict) or not all(isinstance(k, str) for k in self.document):
            problems.append(f"CLIFFWATCH_CONFIG: {self.path} must be a mapping of setting names to values")
            return {}
        return dict(self.document)


@dataclass(frozen=True, kw_only=True)
class Settings:
    allowlist: Allowlist
    # Where a scenario's Toxiproxy proxies may listen: loopback only, so a proxy is no tunnel from the network.
    proxy_listen: Allowlist = field(default_factory=lambda: _proxy_listen(",".join(DEFAULT_ALLOWLIST), {}))
    # Where a game day's webhooks may post: loopback only unless widened (a webhook is a request out of the network).
    allowed_webhooks: Allowlist = field(default_factory=lambda: _allowlist(",".join(DEFAULT_ALLOWLIST), {}))
    denied_targets: tuple[DenyRule, ...] = ()  # CLIFFWATCH_DENIED_TARGETS: never a target, whatever is allowed
    log_format: str = "auto"  # auto: console on a terminal, JSON otherwise
    log_level: str = "info"
    # What must survive the process (the fault ledger); built from the process environment when not given.
    state_dir: Path = field(default_factory=lambda: _default_state_dir(os.environ))
    toxiproxy_url: str | None = None  # an existing Toxiproxy server's API; None: start one per run
    toxiproxy_bin: Path | None = None  # the toxiproxy-server to start; None: PATH, then the project's .tools
    toxiproxy_timeout_s: float = 5.0  # for each call to Toxiproxy's API
    database_url: str = DEFAULT_DATABASE_URL
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    instance_id: str = field(default_factory=lambda: _default_instance_id())
    max_concurrent_runs: int = 2
    fd_reserve: int = 256  # descriptors kept from runs' connection pools for the service itself
    max_offered_rate: float = 1_000.0
    max_attempt_rate: float | None = None  # None: the same as max_offered_rate
    attempt_burst_s: float = 1.0
    max_run_duration_s: float = 3_600.0
    max_concurrency: int = 1_000
    max_prompt_tokens: int = 131_072
    max_output_tokens: int = 32_768
    max_pool_size: int = 1_000
    max_in_flight: int = 10_000
    max_workers: int = 16
    # A run's preparation (reading its files, rendering its chat template): bounds it works within.
    prepare_timeout_s: float = 300.0
    prepare_max_memory_mb: int = 4_096
    prepare_max_file_mb: int = 1_024
    prepare_max_rows: int = 2_000_000
    template_render_s: float = 1.0
    template_max_chars: int = 1_000_000
    ray_address: str | None = None  # a Ray cluster that runs asking for client.workers send from (cliffwatch[ray])
    ray_host: str | None = None  # where that cluster's actors connect back to this process; None: found
    max_queued_runs_per_token: int = 10
    max_documents_per_token: int = 100  # new inline scenario documents per token per day
    api_rate_per_token: float = 20.0
    api_burst_per_token: int = 40
    api_failed_auth_per_minute: float = 60.0
    ui_login_per_minute: float = 10.0
    ui_login_burst: int = 10
    lease_s: float = 30.0
    lease_grace_s: float = 10.0
    outcome_buffer: int = 100_000
    shutdown_grace_s: float = 20.0
    api_max_body_bytes: int = 1 << 20
    api_max_expensive: int = 4
    trend_regression_margin: float = 5.0
    ui_cookie_secure: bool = True  # the dashboard's session cookie is Secure (browsers keep it on loopback http)
    ui_session_ttl_s: float = 8 * 3_600.0
    sensitive_headers: tuple[str, ...] = ()  # masked like Authorization, in addition to the built-in names
    sensitive_query_params: tuple[str, ...] = ()  # masked like api_key, in addition to the built-in names
    secret_env: tuple[str, ...] = DEFAULT_SECRET_ENV  # variables env: references may read (names, PREFIX_*)
    secret_dirs: tuple[Path, ...] = DEFAULT_SECRET_DIRS  # directories file: references may read below
    # Directories a scenario's data files (tokenizer, dataset, traces) may be read below; None: the working directory.
    data_dirs: tuple[Path, ...] | None = None
    # The variables of the environment that ``secret_env`` allows, and nothing else: what env: references read.
    secret_environment: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Both allowlists always carry the deny list these very settings make (a copy made with ``replace``
        # recomputes it), so no caller can check a target against an allowlist without it.
        object.__setattr__(self, "allowlist", self.allowlist.denying(self.denied))
        object.__setattr__(self, "proxy_listen", self.proxy_listen.denying(self.denied))
        object.__setattr__(self, "allowed_webhooks", self.allowed_webhooks.denying(self.denied))

    @property
    def denied(self) -> DenyList:
        """Where no run may send, whatever the allowlists say: link-local and metadata addresses, the Toxiproxy
        API, the database and the Ray cluster these settings name, and ``denied_targets``."""
        planes = [rule_for_url(self.toxiproxy_url, "cliffwatch's Toxiproxy API (CLIFFWATCH_TOXIPROXY_URL)")
                  if self.toxiproxy_url else None]  # fmt: skip
        rules = [r for r in planes if r is not None]
        return ALWAYS_DENIED.adding((*rules, *database_rules(self.database_url), *ray_rules(self.ray_address),
                                     *self.denied_targets))  # fmt: skip

    @property
    def fault_ledger_path(self) -> Path:
        """The fault ledger's file, shared by every cliffwatch process that uses this state directory."""
        return self.state_dir / "faults.jsonl"

    @property
    def redaction(self) -> RedactionRules:
        """Which header and query parameter names are credentials: the built-in ones, ``sensitive_headers`` and
        ``sensitive_query_params``."""
        return RedactionRules.adding(self.sensitive_headers, query=self.sensitive_query_params)

    @property
    def caps(self) -> Caps:
        return Caps(
            max_concurrent_runs=self.max_concurrent_runs,
            max_offered_rate=self.max_offered_rate,
            max_attempt_rate=self.max_offered_rate if self.max_attempt_rate is None else self.max_attempt_rate,
            attempt_burst_s=self.attempt_burst_s,
            max_duration_s=self.max_run_duration_s,
            max_concurrency=self.max_concurrency,
            max_prompt_tokens=self.max_prompt_tokens,
            max_output_tokens=self.max_output_tokens,
            max_pool_size=self.max_pool_size,
            max_in_flight=self.max_in_flight,
            max_workers=self.max_workers,
        )

    @property
    def preparation(self) -> PreparationLimits:
        return PreparationLimits(
            timeout_s=self.prepare_timeout_s,
            max_memory_bytes=self.prepare_max_memory_mb << 20,
            max_file_bytes=self.prepare_max_file_mb << 20,
            max_rows=self.prepare_max_rows,
            template_render_s=self.template_render_s,
            template_max_chars=self.template_max_chars,
        )

    @property
    def quotas(self) -> Quotas:
        return Quotas(max_queued_runs=self.max_queued_runs_per_token, max_documents=self.max_documents_per_token)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, config_file: ConfigFile | None = None) -> Settings:
        """Reads ``CLIFFWATCH_*`` variables and, when ``CLIFFWATCH_CONFIG`` names a file, its values as the caller read
        them (``config_file``: ``bootstrap.settings.load_settings`` reads it); raises ``SettingsInvalid`` naming each
        bad value and where it came from. ``SPECS`` lists them all."""
        env = process_environment() if environ is None else environ
        problems: list[str] = []
        if env.get("CLIFFWATCH_CONFIG") and config_file is None:
            raise SettingsInvalid(
                ["CLIFFWATCH_CONFIG is set, but its file was not read (bootstrap.settings.load_settings)"]
            )
        from_file = {} if config_file is None else config_file.settings(problems)
        values: dict[str, Any] = {}
        for spec in SPECS:
            if spec.env in env:
                raw, where = env[spec.env], spec.env
            elif spec.key in from_file:
                raw, where = from_file[spec.key], f"{env['CLIFFWATCH_CONFIG']}: {spec.key}"
            else:
                continue
            try:
                values[spec.field] = spec.parse(raw, env)
            except _Several as exc:
                problems += [f"{where}: {message}" for message in exc.messages]
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
        unknown = sorted(set(from_file) - {s.key for s in SPECS})
        problems += [f"{env['CLIFFWATCH_CONFIG']}: {key}: unknown setting" for key in unknown]
        if "allowlist" not in values:
            values["allowlist"] = _allowlist(",".join(DEFAULT_ALLOWLIST), env)
        if "state_dir" not in values:
            values["state_dir"] = _default_state_dir(env)
        patterns = values.get("secret_env", DEFAULT_SECRET_ENV)
        values["secret_environment"] = {k: v for k, v in env.items() if env_name_allowed(k, patterns)}
        if problems:
            raise SettingsInvalid(problems)
        return cls(**values)


def _default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
