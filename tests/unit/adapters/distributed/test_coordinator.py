"""The coordinator's dealer, with workers that only note what they are sent: each share gets its rows about
``LOOKAHEAD_S`` ahead of their time, in slices (one wake-up and one message per slice, not per request)."""

from __future__ import annotations

from typing import Any, cast

from cliffwatch.adapters.distributed.coordinator import (
    DEAL_SLICE_S,
    LOOKAHEAD_S,
    ShardedGenerator,
    _Share,
)
from cliffwatch.adapters.distributed.pool import GeneratorWorker, WorkerPool
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.outcomes import NS_PER_S, RequestRecord
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.traffic.plan import PlannedRequest, iter_plan


class NotingWorker:
    """A worker's stream end that keeps each message with the coordinator's clock when it was sent."""

    def __init__(self, index: int, clock: MonotonicClock) -> None:
        self.index = index
        self.clock = clock
        self.failure: str | None = None
        self.sent: list[tuple[int, tuple[Any, ...]]] = []

    def send(self, message: tuple[Any, ...]) -> None:
        self.sent.append((self.clock.now_ns(), message))

    async def drain(self) -> None:
        return None


class Unused:
    def dispatched(self, request: PlannedRequest, at_ns: int) -> None:
        raise AssertionError("the dealer dispatches nothing")

    def finished(self, record: RequestRecord) -> None:
        raise AssertionError(f"nothing was stopped or lost, yet {record.id} finished")


async def test_the_plan_reaches_each_worker_ahead_of_its_time_a_slice_at_a_time() -> None:
    rate, duration_s = 2_000, LOOKAHEAD_S + 0.3  # the last 0.3 s of the plan is dealt while the clock runs
    scenario = parse_scenario({
        "name": "dealt", "seed": 1, "slo": {"e2e_ms": 1000, "timeout_ms": 3000},
        "target": {"url": "http://127.0.0.1:9", "api": "http", "request": {"method": "GET", "path": "/"}},
        "client": {"workers": 2},
        "phases": [{"name": "only", "role": "baseline", "duration_s": duration_s,
                    "arrival": {"process": "constant", "rate": rate}}],
    })  # fmt: skip
    clock = MonotonicClock()
    workers = [NotingWorker(i, clock) for i in range(2)]
    generator = ShardedGenerator(cast(WorkerPool, object()), scenario, clock)
    generator._shares = [_Share(worker=cast(GeneratorWorker, w)) for w in workers]
    start_ns = clock.now_ns()

    await generator._deal(iter_plan(scenario), start_ns, Unused())

    plan = list(iter_plan(scenario))
    for number, worker in enumerate(workers):
        rows = [(at_ns, row) for at_ns, message in worker.sent if message[0] == "plan" for row in message[1]]
        assert [row[0] for _, row in rows] == [r.id for r in plan[number::2]]  # its share, in order
        assert worker.sent[-1][1] == ("end",)
        slack_ns = round((LOOKAHEAD_S + DEAL_SLICE_S) * NS_PER_S) + 5 * NS_PER_S // 1000
        scheduled = {r.id: r.scheduled_ns for r in plan}
        assert all(start_ns + scheduled[row[0]] - at_ns <= slack_ns for at_ns, row in rows)  # never too early
        # Nor late: what is dealt while the clock runs is sent its lookahead ahead (give or take a timer's delay).
        dealt_later = [start_ns + scheduled[row[0]] - at_ns for at_ns, row in rows if scheduled[row[0]] > NS_PER_S]
        assert dealt_later
        assert min(dealt_later) >= LOOKAHEAD_S * NS_PER_S / 2
        # 600 requests dealt while the clock runs: one message a slice (or full batch), not one a request.
        later = [m for at_ns, m in worker.sent if m[0] == "plan" and at_ns - start_ns > NS_PER_S // 100]
        assert len(later) <= 0.3 / DEAL_SLICE_S + 4
