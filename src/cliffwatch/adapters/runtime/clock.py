"""The real clock: ``perf_counter_ns`` for measuring, UTC wall time for timestamps people read."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime


class MonotonicClock:
    def now_ns(self) -> int:
        return time.perf_counter_ns()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def wall(self) -> datetime:
        return datetime.now(UTC)
