"""The initial schema.

Revision ID: 0001
Revises:
Created: 2026-11-30

Scenario versions, runs with their phases, seconds and outcomes, the fault ledger, schedules, API tokens
and the control switches. Written out in full rather than imported from ``tables.py``: a revision records
what the schema was, and must not change when the tables do. Times are ``DateTime(timezone=True)`` (``timestamptz`` on
PostgreSQL; on SQLite the store writes naive UTC); names follow the metadata's naming convention.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OUTCOMES = ("on_time", "late", "shed", "timeout", "error", "not_sent")


def _time(name: str, *, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _json(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.JSON(none_as_null=True), nullable=nullable)


def _text(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.Text(), nullable=nullable)


def _double(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.Double(), nullable=nullable)


def _counts() -> list[sa.Column[object]]:
    return [sa.Column(name, sa.Integer(), nullable=False) for name in OUTCOMES]


def _run_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=f"fk_{table}_run_id_runs", ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "scenario_versions",
        _text("name"),
        _text("content_hash"),
        _json("document"),
        _text("source"),
        _time("created_at", nullable=False),
        sa.PrimaryKeyConstraint("name", "content_hash", name="pk_scenario_versions"),
    )
    op.create_table(
        "scenario_latest",
        _text("name"),
        _text("content_hash"),
        sa.ForeignKeyConstraint(
            ["name", "content_hash"],
            ["scenario_versions.name", "scenario_versions.content_hash"],
            name="fk_scenario_latest_name_scenario_versions",
        ),
        sa.PrimaryKeyConstraint("name", name="pk_scenario_latest"),
    )
    op.create_table(
        "runs",
        _text("id"),
        _text("scenario_name"),
        _text("scenario_hash"),
        _text("status"),
        _text("trigger"),
        _text("triggered_by"),
        _time("created_at", nullable=False),
        _text("target_url"),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        _double("threshold", nullable=False),
        _json("overrides"),
        _text("schedule_id", nullable=True),
        _time("fire_time", nullable=True),
        _text("idempotency_key", nullable=True),
        _text("owner", nullable=True),
        _time("lease_until", nullable=True),
        _time("started_at", nullable=True),
        _time("finished_at", nullable=True),
        _text("abort_requested", nullable=True),
        _text("reason", nullable=True),
        _double("score"),
        _text("score_version", nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        _json("verdicts"),
        _json("result", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("idempotency_key", name="uq_runs_idempotency_key"),
        sa.UniqueConstraint("schedule_id", "fire_time", name="uq_runs_schedule_id_fire_time"),
    )
    op.create_index("ix_runs_created_at_id", "runs", ["created_at", "id"])
    op.create_index("ix_runs_status_created_at_id", "runs", ["status", "created_at", "id"])
    op.create_index("ix_runs_scenario_name_created_at", "runs", ["scenario_name", "created_at"])
    op.create_index("ix_runs_finished_at", "runs", ["finished_at"])
    op.create_table(
        "run_phases",
        _text("run_id"),
        sa.Column("phase", sa.Integer(), nullable=False),
        _text("name"),
        _text("role"),
        sa.Column("offered", sa.Integer(), nullable=False),
        sa.Column("sent", sa.Integer(), nullable=False),
        *_counts(),
        _double("on_time_ratio"),
        _double("offered_rps"),
        _double("goodput_rps"),
        _double("tokens_per_s"),
        _double("amplification"),
        _double("e2e_p50_ms"),
        _double("e2e_p99_ms"),
        _double("ttft_p50_ms"),
        _double("ttft_p99_ms"),
        _run_fk("run_phases"),
        sa.PrimaryKeyConstraint("run_id", "phase", name="pk_run_phases"),
    )
    op.create_table(
        "run_seconds",
        _text("run_id"),
        sa.Column("t", sa.Integer(), nullable=False),
        sa.Column("offered", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("completions", sa.Integer(), nullable=False),
        sa.Column("on_time_completions", sa.Integer(), nullable=False),
        _double("in_flight", nullable=False),
        _double("output_tokens", nullable=False),
        *_counts(),
        _double("e2e_p99_ms"),
        _double("ttft_p99_ms"),
        _json("row"),
        _run_fk("run_seconds"),
        sa.PrimaryKeyConstraint("run_id", "t", name="pk_run_seconds"),
    )
    op.create_table(
        "request_outcomes",
        _text("run_id"),
        sa.Column("request_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("phase", sa.Integer(), nullable=False),
        _double("scheduled_ms", nullable=False),
        _text("outcome"),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        _text("error", nullable=True),
        _double("e2e_ms"),
        _double("ttft_ms"),
        _double("tpot_ms"),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        _text("token_source"),
        _double("schedule_lag_ms"),
        _json("attempt_log"),
        _run_fk("request_outcomes"),
        sa.PrimaryKeyConstraint("run_id", "request_id", name="pk_request_outcomes"),
    )
    op.create_table(
        "fault_ledger",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        _text("run_id"),
        _text("server"),
        _text("proxy"),
        _text("toxic", nullable=True),
        sa.Column("managed", sa.Boolean(), nullable=False),
        _time("planned_at", nullable=False),
        _time("removed_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_fault_ledger"),
    )
    op.create_index("ix_fault_ledger_removed_at_id", "fault_ledger", ["removed_at", "id"])
    op.create_index("ix_fault_ledger_run_id", "fault_ledger", ["run_id"])
    op.create_table(
        "ledger_runs",
        _text("run_id"),
        _text("host"),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.BigInteger(), nullable=True),
        _text("boot_id", nullable=True),
        _time("started_at", nullable=False),
        _time("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_ledger_runs"),
    )
    op.create_table(
        "schedules",
        _text("id"),
        _text("name"),
        _text("cron"),
        _text("timezone"),
        _text("scenario_name"),
        _json("overrides"),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        _text("catch_up"),
        _time("created_at", nullable=False),
        _text("created_by"),
        _time("last_fire_time", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_schedules"),
    )
    op.create_table(
        "api_tokens",
        _text("id"),
        _text("name"),
        _text("role"),
        _text("token_hash"),
        _time("created_at", nullable=False),
        _time("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
    )
    op.create_table(
        "control",
        _text("key"),
        _text("value"),
        _time("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_control"),
    )


def downgrade() -> None:
    for table in ("control", "api_tokens", "schedules", "ledger_runs", "fault_ledger", "request_outcomes",
                  "run_seconds", "run_phases", "runs", "scenario_latest", "scenario_versions"):  # fmt: skip
        op.drop_table(table)  # its indexes go with it
