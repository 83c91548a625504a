"""A run's worth of outcomes: 100,000 requests written a thousand at a time, as a worker flushes them, all
stored and read back in order. Timings are printed for docs/performance.md, never asserted (a loaded CI
machine must not fail the suite); that the last batches cost what the first did is what to look for."""

from __future__ import annotations

import time

import pytest
from store_kit import Backend, make_record, make_run, sql_only

from cliffwatch.domain.outcomes import RequestRecord
from cliffwatch.domain.service.runs import StoredOutcome

TOTAL = 100_000
BATCH = 1_000
PAGE = 5_000


@pytest.mark.slow
@sql_only()
async def test_a_hundred_thousand_outcomes_are_stored_in_batches_and_read_back_in_order(
    backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    await backend.store.create_run(make_run("big"))
    records: list[RequestRecord] = [make_record(i, phase=i // 40_000, retried=i % 9 == 0) for i in range(TOTAL)]
    batch_s: list[float] = []
    started = time.perf_counter()
    for first in range(0, TOTAL, BATCH):
        t = time.perf_counter()
        await backend.store.add_outcomes("big", records[first : first + BATCH])
        batch_s.append(time.perf_counter() - t)
    written_s = time.perf_counter() - started

    started = time.perf_counter()
    read: list[int] = []
    after = None
    while page := await backend.store.list_outcomes("big", after=after, limit=PAGE):
        read += [o.request_id for o in page]
        after = page[-1].request_id
    read_s = time.perf_counter() - started
    assert read == list(range(TOTAL))
    last = await backend.store.list_outcomes("big", after=TOTAL - 2, limit=PAGE)
    assert last == [StoredOutcome.of("big", records[-1])]

    def ms(values: list[float]) -> str:
        return f"{sum(values) / len(values) * 1000:.1f} ms"

    with capsys.disabled():
        print(
            f"\n[{backend.name}] {TOTAL:,} outcomes in batches of {BATCH:,}: {written_s:.2f} s "
            f"({TOTAL / written_s:,.0f}/s; first 10 batches {ms(batch_s[:10])}, last 10 {ms(batch_s[-10:])} each); "
            f"read back in pages of {PAGE:,}: {read_s:.2f} s"
        )
