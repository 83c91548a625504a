"""A finished run put into the configured store (``CLIFFWATCH_DATABASE_URL``) as the service's worker leaves one:
created, claimed, finished with its result. For the CLI's tests that read stored runs (report, compare)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cliffwatch.bootstrap.service import open_store
from cliffwatch.config import Settings
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import Run, RunEnd, Trigger

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def store_finished_run(
    document: dict[str, Any],
    *,
    run_id: str,
    took: timedelta = timedelta(minutes=1),
    timeseries: Sequence[dict[str, Any]] = (),
    usable_rps: float | None = None,
    run_fields: Mapping[str, Any] | None = None,
) -> None:
    """Stores ``document`` as the result of run ``run_id`` (``run_fields``: a sweep's kind and spec, say)."""
    async with open_store(Settings.from_env()) as store:
        run = Run(
            id=run_id, scenario_name=document["scenario"]["name"], scenario_hash="h" * 64,
            status=RunStatus.QUEUED, trigger=Trigger.CLI, triggered_by="test", created_at=T0,
            target_url="builtin", seed=1, threshold=70.0, **(run_fields or {}),
        )  # fmt: skip
        await store.create_run(run)
        claimed = await store.claim_run(owner="me", now=T0, lease_until=T0 + timedelta(minutes=5))
        assert claimed is not None
        end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=T0 + took, result=document,
                     timeseries=tuple(timeseries), usable_rps=usable_rps)  # fmt: skip
        assert await store.finish_run(run.id, owner="me", end=end)
