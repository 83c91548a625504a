"""Every setting declared once: its environment variable, its parser, its default and its help (``SPECS``).

The same table reads a settings file's keys (the names without the ``CLIFFWATCH_`` prefix, in lower case),
documents ``cliffwatch serve --help`` and feeds docs/operations.md. A parser (``config.parsers``) raises
``ValueError`` with the reason; ``Settings.from_env`` (``config.settings``) reports each with its source, all at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cliffwatch.config.parsers import (
    _allowlist,
    _boolean,
    _choice,
    _database_url,
    _denied_targets,
    _env_pattern,
    _existing_file,
    _header_name,
    _name,
    _names,
    _number,
    _param_name,
    _proxy_listen,
    _ray_address,
    _secret_dirs,
    _state_dir,
    _text,
    _toxiproxy_url,
    expand_home,
)
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.scenario.target_spec import MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS

LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./cliffwatch.db"
DEFAULT_SECRET_ENV = ("TARGET_*",)
DEFAULT_SECRET_DIRS = (Path("/run/secrets"),)  # where Docker and Compose mount secrets


class SettingsInvalid(CliffwatchError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid settings: " + "; ".join(problems))


@dataclass(frozen=True, kw_only=True)
class Spec:
    field: str  # the Settings field it sets
    env: str
    parse: Callable[[Any, Mapping[str, str]], Any]  # raises ValueError with the reason
    help: str

    @property
    def key(self) -> str:
        """Its name in a config file."""
        return self.env.removeprefix("CLIFFWATCH_").lower()


SPECS: tuple[Spec, ...] = (
    Spec(field="allowlist", env="CLIFFWATCH_ALLOWED_TARGETS", parse=_allowlist,
         help="Hosts, IPs or CIDRs (optional :port), comma-separated, that runs may target; "
              "default loopback only (127.0.0.0/8,::1,localhost)."),
    Spec(field="proxy_listen", env="CLIFFWATCH_ALLOWED_PROXY_LISTEN", parse=_proxy_listen,
         help="Addresses (same syntax) a scenario's Toxiproxy proxies may listen on; default loopback only. "
              "A wildcard listen (0.0.0.0, ::) opens a tunnel from the network to the upstream: list 0.0.0.0 "
              "or :: here to allow it."),
    Spec(field="allowed_webhooks", env="CLIFFWATCH_ALLOWED_WEBHOOKS", parse=_allowlist,
         help="Hosts, IPs or CIDRs (same syntax) a game day's webhooks may post to; default loopback only. The deny "
              "list applies too."),
    Spec(field="denied_targets", env="CLIFFWATCH_DENIED_TARGETS", parse=_denied_targets,
         help="Hosts, IPs or CIDRs (optional :port), comma-separated, that no run may reach whatever the "
              "allowlists say (targets, metrics URLs, proxy upstreams and listen addresses, redirects). Always "
              "denied as well: link-local and cloud metadata addresses, and cliffwatch's own control planes (the "
              "Toxiproxy API, the database, the Ray cluster these settings name); docs/security.md. Default none."),
    Spec(field="log_format", env="CLIFFWATCH_LOG_FORMAT", parse=_choice(LOG_FORMATS),
         help="auto (console on a terminal, JSON lines otherwise), json or console."),
    Spec(field="log_level", env="CLIFFWATCH_LOG_LEVEL", parse=_choice(LOG_LEVELS),
         help="debug, info, warning or error."),
    Spec(field="state_dir", env="CLIFFWATCH_STATE_DIR", parse=_state_dir,
         help="Absolute directory for state that outlives a run (the CLI's fault ledger); "
              "default $XDG_STATE_HOME/cliffwatch or ~/.local/state/cliffwatch."),
    Spec(field="toxiproxy_url", env="CLIFFWATCH_TOXIPROXY_URL", parse=_toxiproxy_url,
         help="A running Toxiproxy server's API (http://127.0.0.1:8474); unset, a private toxiproxy-server is "
              "started for each run that needs faults."),
    Spec(field="toxiproxy_bin", env="CLIFFWATCH_TOXIPROXY_BIN", parse=_existing_file,
         help="The toxiproxy-server binary to start; default toxiproxy-server on PATH, then .tools/bin."),
    Spec(field="toxiproxy_timeout_s", env="CLIFFWATCH_TOXIPROXY_TIMEOUT_S",
         parse=_number(low=0, high=300, unit="seconds"),
         help="Timeout of each call to Toxiproxy's API (three attempts); default 5."),
    Spec(field="database_url", env="CLIFFWATCH_DATABASE_URL", parse=_database_url,
         help=f"The service's database: SQLite (default {DEFAULT_DATABASE_URL}) or "
              "postgresql+asyncpg://user:password@host:port/db."),
    Spec(field="listen_host", env="CLIFFWATCH_LISTEN_HOST", parse=lambda raw, env: _text(raw),
         help="Address the API listens on; default 127.0.0.1."),
    Spec(field="listen_port", env="CLIFFWATCH_LISTEN_PORT", parse=_number(low=0, high=65535, integer=True),
         help="Port the API listens on; default 8080 (0: any free port)."),
    Spec(field="instance_id", env="CLIFFWATCH_INSTANCE_ID", parse=_name,
         help="This instance's name, owner of the runs it claims; default host-pid-random."),
    Spec(field="max_concurrent_runs", env="CLIFFWATCH_MAX_CONCURRENT_RUNS", parse=_number(low=1, high=64, integer=True),
         help="Runs one instance executes at once; default 2."),
    Spec(field="max_offered_rate", env="CLIFFWATCH_MAX_OFFERED_RATE", parse=_number(low=0, high=100_000),
         help="Highest arrival rate (requests/s, at any phase's peak) a run may offer; default 1000."),
    Spec(field="max_attempt_rate", env="CLIFFWATCH_MAX_ATTEMPT_RATE", parse=_number(low=0, high=100_000),
         help="Most requests/s one run sends, retries and followed redirects included: a run whose worst case "
              "(peak rate × (1 + retries) × the hops each may follow) is higher is refused, and the generator never "
              "sends more (a first attempt beyond it is recorded not_sent, reason cap; a retry or redirect hop "
              "beyond it is not sent, the request keeping the answers it had); default the maximum offered rate."),
    Spec(field="attempt_burst_s", env="CLIFFWATCH_ATTEMPT_BURST_S", parse=_number(low=0, high=60, unit="seconds"),
         help="The attempt limiter's burst, in seconds of the attempt rate (at least one attempt): over any T "
              "seconds a run sends at most max attempt rate × (T + this); default 1."),
    Spec(field="fd_reserve", env="CLIFFWATCH_FD_RESERVE", parse=_number(low=16, high=1 << 20, integer=True),
         help="File descriptors kept for the service itself (API clients, the database pool, Toxiproxy, logs): "
              "what the descriptor limit leaves after them is shared by the runs that may run at once, and a "
              "run's client.pool_size is capped to its share. Default 256."),
    Spec(field="max_run_duration_s", env="CLIFFWATCH_MAX_RUN_DURATION_S", parse=_number(low=0, high=7 * 86_400),
         help="Longest run accepted, in seconds; default 3600."),
    Spec(field="max_concurrency", env="CLIFFWATCH_MAX_CONCURRENCY", parse=_number(low=1, high=100_000, integer=True),
         help="Most closed-loop clients a concurrency sweep may run at once; default 1000."),
    Spec(field="max_prompt_tokens", env="CLIFFWATCH_MAX_PROMPT_TOKENS",
         parse=_number(low=1, high=MAX_PROMPT_TOKENS, integer=True),
         help="Largest prompt a run may send (the largest value its prompt_tokens can draw); default 131072."),
    Spec(field="max_output_tokens", env="CLIFFWATCH_MAX_OUTPUT_TOKENS",
         parse=_number(low=1, high=MAX_OUTPUT_TOKENS, integer=True),
         help="Largest answer a run may ask for (the largest value its max_tokens can draw); default 32768."),
    Spec(field="prepare_timeout_s", env="CLIFFWATCH_PREPARE_TIMEOUT_S", parse=_number(low=0, high=86_400),
         help="Longest a run's preparation (reading its traces, dataset and tokenizer) may take; default 300."),
    Spec(field="prepare_max_memory_mb", env="CLIFFWATCH_PREPARE_MAX_MEMORY_MB",
         parse=_number(low=16, high=1 << 20, integer=True),
         help="Most a run's preparation may grow the process by, in MiB; default 4096."),
    Spec(field="prepare_max_file_mb", env="CLIFFWATCH_PREPARE_MAX_FILE_MB",
         parse=_number(low=1, high=1 << 20, integer=True),
         help="Largest data file (trace, dataset, tokenizer) a run may read, in MiB (each format has its own "
              "ceiling too: traces 512, tokenizers 64); default 1024."),
    Spec(field="prepare_max_rows", env="CLIFFWATCH_PREPARE_MAX_ROWS", parse=_number(low=1, high=10**8, integer=True),
         help="Most requests a trace, or entries a dataset, may hold; default 2000000."),
    Spec(field="template_render_s", env="CLIFFWATCH_TEMPLATE_RENDER_S", parse=_number(low=0, high=600),
         help="Longest one render of a tokenizer's chat template may take, in seconds; default 1."),
    Spec(field="template_max_chars", env="CLIFFWATCH_TEMPLATE_MAX_CHARS",
         parse=_number(low=1_000, high=10**9, integer=True),
         help="Most characters (or items) a chat template render may build; default 1000000."),
    Spec(field="max_pool_size", env="CLIFFWATCH_MAX_POOL_SIZE", parse=_number(low=1, high=100_000, integer=True),
         help="Most connections one run may open (client.pool_size, and a concurrency sweep's clients); "
              "default 1000."),
    Spec(field="max_in_flight", env="CLIFFWATCH_MAX_IN_FLIGHT", parse=_number(low=1, high=1_000_000, integer=True),
         help="Most requests one run may have in flight (client.max_in_flight); default 10000."),
    Spec(field="max_workers", env="CLIFFWATCH_MAX_WORKERS", parse=_number(low=1, high=256, integer=True),
         help="Most generator worker processes one run may start (client.workers; auto takes one a core, within "
              "this); default 16."),
    Spec(field="ray_address", env="CLIFFWATCH_RAY_ADDRESS", parse=lambda raw, env: _ray_address(_text(raw)),
         help="A Ray cluster (auto: the one `ray start` made on this machine, or HOST:PORT) whose actors send the "
              "load of every run that asks for client.workers (auto: one per free CPU), instead of this machine's "
              "processes; needs cliffwatch[ray] here and on every node. Unset: this machine."),
    Spec(field="ray_host", env="CLIFFWATCH_RAY_HOST", parse=lambda raw, env: _text(raw) or None,
         help="The address of this machine that the Ray cluster's actors connect back to; default loopback when "
              "the whole cluster is this machine, else this node's address as Ray sees it."),
    Spec(field="max_queued_runs_per_token", env="CLIFFWATCH_MAX_QUEUED_RUNS_PER_TOKEN",
         parse=_number(low=1, high=10_000, integer=True),
         help="Runs one API token may have queued at once; beyond, 429 with Retry-After. Default 10."),
    Spec(field="max_documents_per_token", env="CLIFFWATCH_MAX_DOCUMENTS_PER_TOKEN",
         parse=_number(low=1, high=100_000, integer=True),
         help="New inline scenario documents one API token may have stored in 24 hours; beyond, 429 with "
              "Retry-After. Default 100."),
    Spec(field="api_rate_per_token", env="CLIFFWATCH_API_RATE_PER_TOKEN", parse=_number(low=0, high=100_000),
         help="API requests/s one token may make, sustained; beyond, 429 with Retry-After. Default 20."),
    Spec(field="api_burst_per_token", env="CLIFFWATCH_API_BURST_PER_TOKEN",
         parse=_number(low=1, high=100_000, integer=True),
         help="API requests one token may make at once above its rate; default 40."),
    Spec(field="api_failed_auth_per_minute", env="CLIFFWATCH_API_FAILED_AUTH_PER_MINUTE",
         parse=_number(low=0, high=100_000),
         help="Bearer tokens this service does not know, per minute and client address, that the API looks up "
              "(bursts of as many); beyond, 429 with Retry-After before any lookup, while tokens it knows are "
              "served as ever. Default 60."),
    Spec(field="ui_login_per_minute", env="CLIFFWATCH_UI_LOGIN_PER_MINUTE", parse=_number(low=0, high=10_000),
         help="Dashboard login attempts per minute, sustained, from one client address and with one token; "
              "beyond, 429 with Retry-After. Default 10."),
    Spec(field="ui_login_burst", env="CLIFFWATCH_UI_LOGIN_BURST", parse=_number(low=1, high=10_000, integer=True),
         help="Dashboard login attempts at once above that rate; default 10."),
    Spec(field="lease_s", env="CLIFFWATCH_LEASE_S", parse=_number(low=1, high=3_600, unit="seconds"),
         help="A worker's lease on a run, renewed every third of it; an instance silent this long loses its "
              "runs (they become interrupted). Default 30."),
    Spec(field="lease_grace_s", env="CLIFFWATCH_LEASE_GRACE_S", parse=_number(low=0, high=3_600, unit="seconds"),
         help="How long after a run's lease expired another instance waits before it presumes the run's owner dead, "
              "interrupts the run and removes its faults. An owner that cannot renew its lease stops the run's load "
              "before the lease expires; the grace covers clock differences between hosts and the time to remove "
              "faults. Default 10."),
    Spec(field="outcome_buffer", env="CLIFFWATCH_OUTCOME_BUFFER", parse=_number(low=100, high=10_000_000, integer=True),
         help="Request outcomes one run may hold in memory while the database cannot take them (they are written "
              "when it is back); a run that would hold more is stopped, saying why. Default 100000."),
    Spec(field="shutdown_grace_s", env="CLIFFWATCH_SHUTDOWN_GRACE_S", parse=_number(low=0, high=3_600, unit="seconds"),
         help="On SIGTERM, how long running runs may take to stop (faults rolled back) before the process "
              "exits; default 20."),
    Spec(field="api_max_body_bytes", env="CLIFFWATCH_API_MAX_BODY_BYTES",
         parse=_number(low=1_024, high=64 << 20, integer=True), help="Largest request body accepted; default 1 MiB."),
    Spec(field="api_max_expensive", env="CLIFFWATCH_API_MAX_EXPENSIVE", parse=_number(low=1, high=1_000, integer=True),
         help="Expensive API calls (outcomes, time series, trends) served at once; beyond, 429 with "
              "Retry-After. Default 4."),
    Spec(field="trend_regression_margin", env="CLIFFWATCH_TREND_REGRESSION_MARGIN", parse=_number(low=0, high=100),
         help="Score points below the trailing median that flag a regression; default 5."),
    Spec(field="ui_cookie_secure", env="CLIFFWATCH_UI_COOKIE_SECURE", parse=_boolean,
         help="Mark the dashboard's session cookie Secure (sent over HTTPS only; browsers also keep it for "
              "http://127.0.0.1 and http://localhost). Set false only to reach the dashboard over plain HTTP "
              "on another address, e.g. inside a private network; default true."),
    Spec(field="ui_session_ttl_s", env="CLIFFWATCH_UI_SESSION_TTL_S", parse=_number(low=0, high=30 * 86_400,
                                                                                  unit="seconds"),
         help="How long a dashboard login lasts before the user must log in again; default 28800 (8 hours)."),
    Spec(field="sensitive_headers", env="CLIFFWATCH_SENSITIVE_HEADERS", parse=_names(_header_name),
         help="Header names, comma-separated, whose values are credentials, masked in every stored document, "
              "view, report and log line like those of Authorization, Proxy-Authorization, Cookie, api-key and "
              "x-api-key (always masked); case-insensitive. Default none."),
    Spec(field="sensitive_query_params", env="CLIFFWATCH_SENSITIVE_QUERY_PARAMS", parse=_names(_param_name),
         help="Query parameter names, comma-separated, whose values are credentials, masked wherever a scenario is "
              "shown and in log lines like those always masked (api_key, apikey, key, token, access_token, "
              "refresh_token, id_token, client_secret, password, signature, sig, X-Amz-Signature, "
              "X-Amz-Credential, X-Amz-Security-Token, X-Goog-Signature, X-Goog-Credential); case-insensitive. "
              "Default none."),
    Spec(field="secret_env", env="CLIFFWATCH_SECRET_ENV", parse=_names(_env_pattern),
         help="Environment variables a scenario's {secret: env:NAME} may read: names, or prefixes ending in *, "
              "comma-separated (never CLIFFWATCH_*). Default TARGET_*."),
    Spec(field="data_dirs", env="CLIFFWATCH_DATA_DIRS", parse=_secret_dirs,
         help="Directories a scenario's data files (request.tokenizer, request.dataset, traces) may be read below "
              "(symlinks followed), "
              "comma-separated absolute paths. Default: the working directory of the process."),
    Spec(field="secret_dirs", env="CLIFFWATCH_SECRET_DIRS", parse=_secret_dirs,
         help="Directories a scenario's {secret: file:/path} may read files below (symlinks followed), "
              "comma-separated absolute paths; empty: none. Default /run/secrets."),
)  # fmt: skip


def describe_settings() -> str:
    """Every setting with its help, for ``--help`` texts and the operations guide."""
    return "\n".join(f"  {spec.env}\n      {spec.help}" for spec in SPECS)


def _default_state_dir(env: Mapping[str, str]) -> Path:
    # The XDG spec says a relative (or empty) XDG_STATE_HOME is to be ignored.
    xdg = env.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else expand_home("~/.local/state", env)
    return base / "cliffwatch"
