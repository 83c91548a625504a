"""The service's tables, in SQLAlchemy Core: the one description the SQL store and the migrations share.

Portable across SQLite and PostgreSQL: text without length limits (SQLite would not enforce one, so the
two backends could not agree on what fits), ``Double`` for measurements, ``JSON`` for documents, and every
time an aware UTC datetime (``UtcDateTime``). Constraint names come from the naming convention, so later
migrations (batch mode on SQLite rebuilds tables) can name what they change.

``runs`` holds a run from its request to its end, its lease included; its phases and seconds are split
out of the result document into ``run_phases`` and ``run_seconds`` so they can be queried. The fault
ledger (``fault_ledger``, ``ledger_runs``) has no foreign key to ``runs``: a CLI run sharing the database
is recorded there too, without being a service run.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from cliffwatch.domain.outcomes import OUTCOMES
from cliffwatch.services.store_values import without_nul

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UtcDateTime(sa.TypeDecorator[datetime]):
    """An aware datetime in, the same instant in UTC out, on both backends.

    PostgreSQL keeps ``timestamptz``; SQLite has no time zones, so it gets the naive UTC time (its text form
    sorts as the instants do) and the UTC zone is put back on reading. A naive datetime is refused: which
    instant it means is anybody's guess.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()}: the store keeps aware times only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class FreeText(sa.TypeDecorator[str]):
    """Text that comes from outside (error messages, reasons): PostgreSQL cannot store a NUL character, so on
    both backends (and in the in-memory twin) it is kept as U+FFFD rather than failing the whole write."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else without_nul(value)


def _json() -> sa.JSON:
    # none_as_null: a Python None is SQL NULL, not the JSON text "null", so IS NULL finds it
    return sa.JSON(none_as_null=True)


# The outcome classes of migration 0001. A class added since comes with a migration that adds its column
# with a server default of 0, so rows stored before it existed read as none of it.
_FIRST_OUTCOMES = ("on_time", "late", "shed", "timeout", "error", "not_sent")


def _outcome_counts() -> list[sa.Column[int]]:
    """A count column per outcome class, named by it (``on_time``, ``late``, ...)."""
    return [
        sa.Column(o.value, sa.Integer, nullable=False, server_default=None if o.value in _FIRST_OUTCOMES else "0")
        for o in OUTCOMES
    ]


def _run_fk() -> sa.ForeignKey:
    return sa.ForeignKey("runs.id", ondelete="CASCADE")


scenario_versions = sa.Table(
    "scenario_versions",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("content_hash", sa.Text, primary_key=True),
    sa.Column("document", _json(), nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
)

# A name's latest version: a pointer of its own, so making a version the latest is one upsert.
scenario_latest = sa.Table(
    "scenario_latest",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("content_hash", sa.Text, nullable=False),
    sa.ForeignKeyConstraint(["name", "content_hash"], ["scenario_versions.name", "scenario_versions.content_hash"]),
)

# The literal credentials masked out of a version's document (migration 0006; ``domain.security.redaction``): a
# table of their own, which no view reads, so that nothing that shows a document can show them. Only a
# run of that version reads them back, to put them where the document shows the mask.
scenario_credentials = sa.Table(
    "scenario_credentials",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("content_hash", sa.Text, primary_key=True),
    sa.Column("credentials", _json(), nullable=False),  # [{"path": [...], "value": "..."}, ...]
    sa.ForeignKeyConstraint(
        ["name", "content_hash"], ["scenario_versions.name", "scenario_versions.content_hash"], ondelete="CASCADE"
    ),
)

# Keys the store makes once and every instance shares (migration 0006): the one that fingerprints
# credentials in content hashes (``ScenarioStore.fingerprint_key``).
store_keys = sa.Table(
    "store_keys",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),  # hex
    sa.Column("created_at", UtcDateTime, nullable=False),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("scenario_name", sa.Text, nullable=False),
    sa.Column("scenario_hash", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("trigger", sa.Text, nullable=False),
    sa.Column("triggered_by", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("target_url", sa.Text, nullable=False),
    sa.Column("seed", sa.BigInteger, nullable=False),
    sa.Column("threshold", sa.Double, nullable=False),
    sa.Column("overrides", _json(), nullable=False),
    sa.Column("schedule_id", sa.Text),
    sa.Column("fire_time", UtcDateTime),
    sa.Column("idempotency_key", sa.Text, unique=True),
    sa.Column("owner", sa.Text),
    sa.Column("lease_until", UtcDateTime),
    sa.Column("started_at", UtcDateTime),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("abort_requested", FreeText),
    sa.Column("reason", FreeText),
    sa.Column("score", sa.Double),
    sa.Column("score_version", sa.Text),
    sa.Column("passed", sa.Boolean),
    sa.Column("verdicts", _json(), nullable=False),
    sa.Column("result", _json()),
    sa.Column("kind", sa.Text, nullable=False, server_default="run"),  # RunKind
    sa.Column("sweep", _json()),  # SweepSpec.to_dict() of a sweep
    sa.Column("usable_rps", sa.Double),  # a finished sweep's usable capacity
    sa.Column("provisional_result", _json()),  # a running sweep's document so far (migration 0004)
    # NULLs are distinct in a unique constraint on both backends: runs without a schedule never collide.
    # Its leading column also serves the runs of one schedule.
    sa.UniqueConstraint("schedule_id", "fire_time"),
    sa.Index(None, "created_at", "id"),  # every listing: newest first, by keyset
    sa.Index(None, "status", "created_at", "id"),  # the claim (oldest queued), listings by status
    sa.Index(None, "scenario_name", "created_at"),
    sa.Index(None, "finished_at"),  # trends
)

run_phases = sa.Table(
    "run_phases",
    metadata,
    sa.Column("run_id", sa.Text, _run_fk(), primary_key=True),
    sa.Column("phase", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("offered", sa.Integer, nullable=False),
    sa.Column("sent", sa.Integer, nullable=False),
    *_outcome_counts(),
    sa.Column("on_time_ratio", sa.Double),
    sa.Column("offered_rps", sa.Double),
    sa.Column("goodput_rps", sa.Double),
    sa.Column("tokens_per_s", sa.Double),
    sa.Column("amplification", sa.Double),
    sa.Column("e2e_p50_ms", sa.Double),
    sa.Column("e2e_p99_ms", sa.Double),
    sa.Column("ttft_p50_ms", sa.Double),
    sa.Column("ttft_p99_ms", sa.Double),
)

# One row per second of a run: the numbers a chart or a query needs as columns, the whole row as JSON.
run_seconds = sa.Table(
    "run_seconds",
    metadata,
    sa.Column("run_id", sa.Text, _run_fk(), primary_key=True),
    sa.Column("t", sa.Integer, primary_key=True),
    sa.Column("offered", sa.Integer, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("completions", sa.Integer, nullable=False),
    sa.Column("on_time_completions", sa.Integer, nullable=False),
    sa.Column("in_flight", sa.Double, nullable=False),
    sa.Column("output_tokens", sa.Double, nullable=False),
    *_outcome_counts(),
    sa.Column("e2e_p99_ms", sa.Double),
    sa.Column("ttft_p99_ms", sa.Double),
    sa.Column("row", _json(), nullable=False),
)

# The primary key (run_id, request_id) is the index keyset pages walk.
request_outcomes = sa.Table(
    "request_outcomes",
    metadata,
    sa.Column("run_id", sa.Text, _run_fk(), primary_key=True),
    sa.Column("request_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("phase", sa.Integer, nullable=False),
    sa.Column("scheduled_ms", sa.Double, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("status", sa.Integer),
    sa.Column("error", FreeText),
    sa.Column("e2e_ms", sa.Double),
    sa.Column("ttft_ms", sa.Double),
    sa.Column("tpot_ms", sa.Double),
    sa.Column("output_tokens", sa.Integer, nullable=False),
    sa.Column("token_source", sa.Text, nullable=False),
    sa.Column("schedule_lag_ms", sa.Double),
    sa.Column("attempt_log", _json(), nullable=False),
    sa.Column("traffic_class", sa.Integer, nullable=False, server_default="0"),
    sa.Column("conversation", sa.BigInteger),
    sa.Column("turn", sa.Integer),
)

fault_ledger = sa.Table(
    "fault_ledger",
    metadata,
    # Integer, not BigInteger: only INTEGER PRIMARY KEY is SQLite's auto-incrementing rowid. The id orders
    # the entries: outstanding ones are listed oldest first.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("server", sa.Text, nullable=False),
    sa.Column("proxy", sa.Text, nullable=False),
    sa.Column("toxic", sa.Text),  # None: the entry is the proxy itself
    sa.Column("managed", sa.Boolean, nullable=False),
    sa.Column("planned_at", UtcDateTime, nullable=False),
    sa.Column("removed_at", UtcDateTime),
    sa.Index(None, "removed_at", "id"),  # outstanding entries
    sa.Index(None, "run_id"),
)

# Who runs a run outside the service (a CLI process), for the ledger's liveness check; a service run's
# owner is its lease in ``runs``, and its row here is bookkeeping only.
ledger_runs = sa.Table(
    "ledger_runs",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("start_time", sa.BigInteger),
    sa.Column("boot_id", sa.Text),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("finished_at", UtcDateTime),
)

schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("cron", sa.Text, nullable=False),
    sa.Column("timezone", sa.Text, nullable=False),
    sa.Column("scenario_name", sa.Text, nullable=False),
    sa.Column("overrides", _json(), nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("catch_up", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("last_fire_time", UtcDateTime),
    sa.Column("kind", sa.Text, nullable=False, server_default="run"),
    sa.Column("sweep", _json()),
    sa.Column("suite", _json()),  # a game day's suite document: each fire starts it (migration 0009)
)

# Game days (migration 0009): a suite from its start to its verdict, held by the instance driving it under a
# lease as a run is. Its experiments' runs are ordinary rows of ``runs``, named in ``experiments``.
gamedays = sa.Table(
    "gamedays",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("suite", _json(), nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("trigger", sa.Text, nullable=False),
    sa.Column("triggered_by", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("experiments", _json(), nullable=False),
    sa.Column("schedule_id", sa.Text),
    sa.Column("fire_time", UtcDateTime),
    sa.Column("owner", sa.Text),
    sa.Column("lease_until", UtcDateTime),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("abort_requested", FreeText),
    sa.Column("reason", FreeText),
    sa.Column("verdict", sa.Text),
    sa.Column("summary", FreeText),
    sa.Column("notifications", _json(), nullable=False),
    sa.Column("idempotency_key", sa.Text, unique=True),  # migration 0011: one game day a client's key
    sa.UniqueConstraint("schedule_id", "fire_time"),  # one game day a schedule's fire, as for runs
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "status"),
)

# Webhook deliveries (migration 0010): one row a delivery of a run's, a sweep's or a game day's webhooks,
# delivered or not, named by its run (a sweep is a run) or its game day. No foreign keys: a delivery is a
# record of what was said, kept whatever becomes of what it told of. The id orders them as they were made.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),  # INTEGER PRIMARY KEY: SQLite's rowid
    sa.Column("run_id", sa.Text),
    sa.Column("gameday_id", sa.Text),
    sa.Column("event", sa.Text, nullable=False),
    sa.Column("url", FreeText, nullable=False),  # as shown: scheme and host only
    sa.Column("format", sa.Text, nullable=False),
    sa.Column("ok", sa.Boolean, nullable=False),
    sa.Column("status", sa.Integer),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("error", FreeText),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Index(None, "run_id", "id"),
    sa.Index(None, "gameday_id", "id"),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("revoked_at", UtcDateTime),
)

# Service-wide switches (the emergency stop), one row per switch that is on.
control = sa.Table(
    "control",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", FreeText, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

# Dashboard sessions (migration 0003): found by the SHA-256 of the id in the cookie, never by the id. A
# session goes with its token: deleting the token deletes them, and a revoked token's are not answered.
ui_sessions = sa.Table(
    "ui_sessions",
    metadata,
    sa.Column("id_hash", sa.Text, primary_key=True),
    sa.Column("token_id", sa.Text, sa.ForeignKey("api_tokens.id", ondelete="CASCADE"), nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False),
    sa.Index(None, "expires_at"),  # the clean-up of expired sessions
    sa.Index(None, "token_id"),
)
