"""Trends queries: stored runs in, judged score series out; stored sweeps in, judged capacity series out."""

from __future__ import annotations

from datetime import datetime

from cliffwatch.domain.ports import RunStore
from cliffwatch.domain.service.trends import Bucket, CapacitySeries, TrendSeries, capacity_series, trend_series


class TrendsService:
    def __init__(self, runs: RunStore, *, margin: float) -> None:
        self.runs = runs
        self.margin = margin

    async def series(
        self, *, scenario: str | None, target_url: str | None, since: datetime | None, bucket: Bucket
    ) -> list[TrendSeries]:
        finished = await self.runs.finished_runs(scenario=scenario, target_url=target_url, since=since)
        return trend_series(finished, bucket=bucket, margin=self.margin)

    async def capacity(
        self, *, scenario: str | None, target_url: str | None, since: datetime | None
    ) -> list[CapacitySeries]:
        finished = await self.runs.finished_sweeps(scenario=scenario, target_url=target_url, since=since)
        return capacity_series(finished)
