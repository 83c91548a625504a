"""Credentials apart from the documents that showed them.

Revision ID: 0006
Revises: 0005
Created: 2026-12-14

``scenario_credentials`` (name, content_hash → the literal credentials masked out of that version's
document, JSON) and ``store_keys`` (keys the store makes once: the one that fingerprints credentials in
content hashes). Then what earlier versions stored in the clear is masked: each scenario document's
sensitive header values and URL passwords move to ``scenario_credentials`` (the version keeps its hash, so
the runs that point at it still find it), and runs' target URLs (the column, and the URL in their result
documents) lose their passwords. The masking rules are the ones of this revision, written out here so that
later changes to ``domain.security.redaction`` cannot change what this migration did; header names an operator adds
by setting are masked from the next time a document is stored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MASK = "***"
SENSITIVE = {"authorization", "proxy-authorization", "cookie", "api-key", "x-api-key"}
USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#\"'<>]*)@")


def _json() -> sa.JSON:
    return sa.JSON(none_as_null=True)


def upgrade() -> None:
    op.create_table(
        "scenario_credentials",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("credentials", _json(), nullable=False),
        sa.ForeignKeyConstraint(
            ["name", "content_hash"],
            ["scenario_versions.name", "scenario_versions.content_hash"],
            name="fk_scenario_credentials_name_scenario_versions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("name", "content_hash", name="pk_scenario_credentials"),
    )
    op.create_table(
        "store_keys",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_store_keys"),
    )
    _mask_stored()


def downgrade() -> None:
    # The credentials go back into their documents before their table goes: nothing a run needs is lost.
    _unmask_stored()
    op.drop_table("store_keys")
    op.drop_table("scenario_credentials")


versions = sa.table("scenario_versions", sa.column("name"), sa.column("content_hash"), sa.column("document", _json()))
credentials = sa.table(
    "scenario_credentials", sa.column("name"), sa.column("content_hash"), sa.column("credentials", _json())
)
runs = sa.table(
    "runs",
    sa.column("id"),
    sa.column("target_url"),
    sa.column("result", _json()),
    sa.column("provisional_result", _json()),
)


def _mask_stored() -> None:
    bind = op.get_bind()
    for row in bind.execute(sa.select(versions)).mappings().all():
        found: list[dict[str, Any]] = []
        masked = _masked(row["document"], [], None, found)
        if found:
            key = (versions.c.name == row["name"]) & (versions.c.content_hash == row["content_hash"])
            bind.execute(sa.update(versions).where(key).values(document=masked))
            bind.execute(sa.insert(credentials).values(name=row["name"], content_hash=row["content_hash"],
                                                       credentials=found))  # fmt: skip
    for row in bind.execute(sa.select(runs).where(runs.c.target_url.contains("@"))).mappings().all():
        values = {"target_url": _url(row["target_url"])}
        for column in ("result", "provisional_result"):
            document = row[column]
            if isinstance(document, dict) and isinstance(document.get("target"), dict):
                target = document["target"]
                if isinstance(target.get("url"), str):
                    values[column] = {**document, "target": {**target, "url": _url(target["url"])}}
        bind.execute(sa.update(runs).where(runs.c.id == row["id"]).values(**values))


def _unmask_stored() -> None:
    bind = op.get_bind()
    for row in bind.execute(sa.select(credentials)).mappings().all():
        key = (versions.c.name == row["name"]) & (versions.c.content_hash == row["content_hash"])
        document = bind.execute(sa.select(versions.c.document).where(key)).scalar_one()
        for credential in row["credentials"]:
            *parents, last = credential["path"]
            node = document
            for part in parents:
                node = node[part]
            node[last] = credential["value"]
        bind.execute(sa.update(versions).where(key).values(document=document))


def _masked(value: Any, path: list[Any], header: str | None, found: list[dict[str, Any]]) -> Any:
    if isinstance(value, dict):
        in_headers = bool(path) and path[-1] == "headers"
        return {k: _masked(v, [*path, k], k if in_headers else None, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, [*path, i], None, found) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value
    if header is not None and header.lower() in SENSITIVE and value != MASK:
        found.append({"path": path, "value": value})
        return MASK
    masked = _url(value)
    if masked != value:
        found.append({"path": path, "value": value})
    return masked


def _url(text: str) -> str:
    def mask(match: re.Match[str]) -> str:
        userinfo = match["userinfo"]
        if not userinfo:
            return match[0]
        user, colon, _ = userinfo.partition(":")
        return f"{match['scheme']}{user}:{MASK}@" if colon else f"{match['scheme']}{MASK}@"

    return USERINFO.sub(mask, text)
