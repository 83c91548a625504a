"""The store contract: what every store promises the services, held on the in-memory twin, SQLite and
PostgreSQL alike (each test runs on all three unless it says otherwise)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from store_kit import T0, Backend, Store, make_record, make_run, scored_end, seconds, sql_only

from cliffwatch.domain.errors import RunNotFound
from cliffwatch.domain.ports import LedgerEntry
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.metrics_spec import EngineKind, Signal
from cliffwatch.domain.security.redaction import Credential
from cliffwatch.domain.server.server_view import ServerSeries, ServerView
from cliffwatch.domain.service.runs import (
    ApiToken,
    CatchUp,
    Overrides,
    RunEnd,
    RunQuery,
    ScenarioSource,
    Schedule,
    StoredOutcome,
    TokenRole,
    Trigger,
)

LEASE = seconds(30)
DOC_V1 = {"name": "burst", "seed": 1, "phases": [{"name": "calm", "duration_s": 1.5}]}
DOC_V2 = {"name": "burst", "seed": 2, "phases": [{"name": "calm", "duration_s": 2}]}


async def _queue(store: Store, *run_ids: str, start: datetime = T0) -> None:
    for i, run_id in enumerate(run_ids):
        await store.create_run(make_run(run_id, at=start + seconds(i)))


async def _claimed(backend: Backend, run_id: str, owner: str = "instance-a") -> None:
    await backend.store.create_run(make_run(run_id, at=backend.clock()))
    now = backend.clock()
    claimed = await backend.store.claim_run(owner=owner, now=now, lease_until=now + LEASE)
    assert claimed is not None
    assert claimed.id == run_id


# Scenarios


async def test_a_saved_version_becomes_its_names_latest_and_saving_it_again_changes_nothing(backend: Backend) -> None:
    store = backend.store
    first = await store.save_scenario(name="burst", document=DOC_V1, content_hash="v1",
                                      source=ScenarioSource.BUNDLED, at=T0)  # fmt: skip
    assert first.document == DOC_V1
    assert first.created_at == T0
    await store.save_scenario(name="burst", document=DOC_V2, content_hash="v2", source=ScenarioSource.REGISTERED,
                              at=T0 + seconds(1))  # fmt: skip
    assert (await store.latest_scenario("burst")).content_hash == "v2"  # type: ignore[union-attr]
    again = await store.save_scenario(name="burst", document=DOC_V1, content_hash="v1",
                                      source=ScenarioSource.BUNDLED, at=T0 + seconds(2))  # fmt: skip
    assert again == first  # the first save's time and document stand
    assert await store.latest_scenario("burst") == first  # and it is the latest again
    assert await store.scenario_version("burst", "v2") is not None
    assert await store.scenario_version("burst", "v3") is None
    assert await store.latest_scenario("nothing") is None


async def test_an_inline_version_is_kept_but_never_made_a_latest(backend: Backend) -> None:
    store = backend.store
    await store.save_scenario(name="burst", document=DOC_V1, content_hash="v1", source=ScenarioSource.BUNDLED, at=T0)
    inline = await store.save_scenario(name="burst", document=DOC_V2, content_hash="v2",
                                       source=ScenarioSource.INLINE, at=T0)  # fmt: skip
    assert inline.source is ScenarioSource.INLINE
    assert (await store.latest_scenario("burst")).content_hash == "v1"  # type: ignore[union-attr]
    await store.save_scenario(name="adhoc", document=DOC_V2, content_hash="a1", source=ScenarioSource.INLINE, at=T0)
    assert await store.latest_scenario("adhoc") is None
    assert await store.scenario_version("adhoc", "a1") is not None
    promoted = await store.save_scenario(name="burst", document=DOC_V2, content_hash="v2",
                                         source=ScenarioSource.REGISTERED, at=T0 + seconds(5))  # fmt: skip
    assert promoted.source is ScenarioSource.REGISTERED
    assert await store.latest_scenario("burst") == promoted


async def test_the_scenario_list_holds_each_names_latest_by_name(backend: Backend) -> None:
    store = backend.store
    for name, content_hash in (("zeta", "z1"), ("alpha", "a1"), ("alpha", "a2"), ("mid", "m1")):
        await store.save_scenario(name=name, document={"name": name, "v": content_hash}, content_hash=content_hash,
                                  source=ScenarioSource.REGISTERED, at=T0)  # fmt: skip
    assert [(v.name, v.content_hash) for v in await store.list_scenarios()] == [
        ("alpha", "a2"),
        ("mid", "m1"),
        ("zeta", "z1"),
    ]


async def test_credentials_are_kept_apart_from_their_version_and_only_by_it(backend: Backend) -> None:
    """A version's credentials come back only from ``scenario_credentials``, as saved with it, and only the first
    save of a (name, hash) counts; a version without any has none."""
    store = backend.store
    masked = {**DOC_V1, "target": {"request": {"headers": {"x-api-key": "***", "X-Trace": "\u00e9"}}}}
    kept = (Credential(path=("target", "request", "headers", "x-api-key"), value="sk-é\u2028-1"),
            Credential(path=("phases", 0, "name"), value="calm"))  # fmt: skip
    version = await store.save_scenario(name="burst", document=masked, content_hash="c1",
                                        source=ScenarioSource.REGISTERED, at=T0, credentials=kept)  # fmt: skip
    await store.save_scenario(name="burst", document=masked, content_hash="c1", source=ScenarioSource.REGISTERED,
                              at=T0 + seconds(1), credentials=(Credential(path=("x",), value="other"),))  # fmt: skip
    await store.save_scenario(name="burst", document=DOC_V2, content_hash="v2", source=ScenarioSource.INLINE, at=T0)

    assert version.document == masked
    assert "sk-" not in repr(version)
    assert await store.scenario_credentials("burst", "c1") == kept
    assert await backend.another_store().scenario_credentials("burst", "c1") == kept
    assert await store.scenario_credentials("burst", "v2") == ()
    assert await store.scenario_credentials("burst", "nothing") == ()


async def test_the_fingerprint_key_is_made_once_and_shared_by_every_instance(backend: Backend) -> None:
    """The first call makes the key; every later call, on any instance of the database, gets the same one."""
    stores = [backend.store, backend.another_store(), backend.another_store()]
    keys = await asyncio.gather(*(s.fingerprint_key() for s in stores))

    assert len(keys[0]) == 32
    assert set(keys) == {keys[0]}
    assert await backend.another_store().fingerprint_key() == keys[0]


# Creating runs


async def test_a_created_run_comes_back_as_it_was_with_its_times_in_utc(backend: Backend) -> None:
    berlin = timezone(timedelta(hours=1))
    run = make_run("r1", at=T0.astimezone(berlin), trigger=Trigger.SCHEDULE, triggered_by="nightly",
                   schedule_id="nightly", fire_time=datetime(2026, 3, 1, 3, 0, tzinfo=berlin), idempotency_key="k1",
                   overrides=Overrides(target_url="http://127.0.0.1:9000", seed=7, threshold=61.25))  # fmt: skip
    stored, created = await backend.store.create_run(run)
    assert created
    assert stored == run
    fetched = await backend.store.get_run("r1")
    assert fetched == run
    assert fetched is not None
    assert fetched.created_at.tzinfo == UTC
    assert fetched.created_at.microsecond == 123456
    assert fetched.fire_time == datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
    assert await backend.store.get_run("nope") is None


async def test_a_run_is_found_by_its_idempotency_key(backend: Backend) -> None:
    await backend.store.create_run(make_run("r1", idempotency_key="req-7"))
    await backend.store.create_run(make_run("r2"))
    found = await backend.store.run_with_key("req-7")
    assert found is not None
    assert found.id == "r1"
    assert await backend.store.run_with_key("req-8") is None


async def test_a_request_made_twice_with_one_idempotency_key_queues_one_run(backend: Backend) -> None:
    first, created = await backend.store.create_run(make_run("r1", idempotency_key="req-7"))
    assert created
    again, created_again = await backend.store.create_run(make_run("r2", idempotency_key="req-7", seed=99))
    assert not created_again
    assert again == first
    assert await backend.store.get_run("r2") is None


async def test_a_schedules_fire_time_is_queued_once(backend: Backend) -> None:
    fire = T0.replace(microsecond=0)
    first, _ = await backend.store.create_run(make_run("r1", schedule_id="s1", fire_time=fire))
    again, created = await backend.store.create_run(make_run("r2", schedule_id="s1", fire_time=fire))
    assert (again, created) == (first, False)
    _, next_fire = await backend.store.create_run(make_run("r3", schedule_id="s1", fire_time=fire + seconds(60)))
    _, other_schedule = await backend.store.create_run(make_run("r4", schedule_id="s2", fire_time=fire))
    _, unscheduled = await backend.store.create_run(make_run("r5"))
    _, unscheduled_too = await backend.store.create_run(make_run("r6"))
    assert next_fire
    assert other_schedule
    assert unscheduled
    assert unscheduled_too


async def test_concurrent_requests_with_one_key_queue_one_run(backend: Backend) -> None:
    stores = [backend.another_store() for _ in range(4)]
    results = await asyncio.gather(
        *(stores[i % 4].create_run(make_run(f"r{i}", idempotency_key="same")) for i in range(12))
    )
    assert sum(created for _, created in results) == 1
    assert len({run.id for run, _ in results}) == 1
    assert (await backend.store.count_runs())["queued"] == 1


async def test_a_run_id_taken_by_another_request_is_refused(backend: Backend) -> None:
    await backend.store.create_run(make_run("r1", idempotency_key="a"))
    with pytest.raises(ValueError, match="already taken"):
        await backend.store.create_run(make_run("r1", idempotency_key="b"))


async def test_a_naive_time_is_refused_rather_than_guessed(backend: Backend) -> None:
    with pytest.raises(ValueError, match="naive"):
        await backend.store.create_run(make_run("r1", at=datetime(2026, 3, 1, 12, 0)))
    assert await backend.store.get_run("r1") is None


# Claims and leases


async def test_a_claim_takes_the_oldest_queued_run_under_a_lease(backend: Backend) -> None:
    await _queue(backend.store, "newer", start=T0 + seconds(10))
    await _queue(backend.store, "older", start=T0)
    now = T0 + seconds(60)
    claimed = await backend.store.claim_run(owner="instance-a", now=now, lease_until=now + LEASE)
    assert claimed is not None
    assert (claimed.id, claimed.status, claimed.owner) == ("older", RunStatus.RUNNING, "instance-a")
    assert (claimed.started_at, claimed.lease_until) == (now, now + LEASE)
    assert await backend.store.get_run("older") == claimed
    second = await backend.store.claim_run(owner="instance-b", now=now, lease_until=now + LEASE)
    assert second is not None
    assert second.id == "newer"
    assert await backend.store.claim_run(owner="instance-a", now=now, lease_until=now + LEASE) is None


async def test_concurrent_claimers_take_every_run_exactly_once(backend: Backend) -> None:
    run_ids = [f"r{i:03d}" for i in range(48)]
    await _queue(backend.store, *run_ids)
    stores = [backend.another_store() for _ in range(3)]
    claims: list[tuple[str, str]] = []

    async def claim(number: int) -> bool:
        owner = f"instance-{number}"
        run = await stores[number % 3].claim_run(owner=owner, now=T0, lease_until=T0 + LEASE)
        if run is not None:
            claims.append((run.id, owner))
        return run is not None

    # All at once, with runs enough for each: every claimer gets one (none waits on another's row and
    # then finds nothing), and no two get the same.
    assert all(await asyncio.gather(*(claim(n) for n in range(12))))
    assert len({run_id for run_id, _ in claims}) == 12

    async def claimer(number: int) -> None:
        while True:
            if not await claim(number):
                return
            await asyncio.sleep(0)  # let the others in between two claims

    await asyncio.gather(*(claimer(n) for n in range(12)))
    assert sorted(run_id for run_id, _ in claims) == run_ids
    for run_id, owner in claims:
        assert (await backend.store.get_run(run_id)).owner == owner  # type: ignore[union-attr]


async def test_instances_writing_at_once_wait_for_each_other_instead_of_failing(backend: Backend) -> None:
    run_ids = [f"r{i}" for i in range(4)]
    for run_id in run_ids:
        await _claimed(backend, run_id, owner=f"owner-{run_id}")
    stores = [backend.another_store() for _ in run_ids]

    async def stream(store: Store, run_id: str) -> None:
        for batch in range(15):  # each batch writes (its run checked by the foreign key), like every flush
            await store.add_outcomes(run_id, [make_record(batch * 10 + i) for i in range(10)])
            assert await store.renew_lease(run_id, owner=f"owner-{run_id}", lease_until=T0 + LEASE)
        await store.request_abort(run_id, "stop")

    await asyncio.gather(*(stream(store, run_id) for store, run_id in zip(stores, run_ids, strict=True)))
    for run_id in run_ids:
        assert len(await backend.store.list_outcomes(run_id, after=None, limit=1_000)) == 150
        assert (await backend.store.get_run(run_id)).abort_requested == "stop"  # type: ignore[union-attr]


async def test_only_the_owner_of_a_running_run_renews_its_lease(backend: Backend) -> None:
    await _claimed(backend, "r1", owner="instance-a")
    later = T0 + seconds(90)
    assert await backend.store.renew_lease("r1", owner="instance-a", lease_until=later)
    assert (await backend.store.get_run("r1")).lease_until == later  # type: ignore[union-attr]
    assert not await backend.store.renew_lease("r1", owner="instance-b", lease_until=later + seconds(1))
    assert not await backend.store.renew_lease("missing", owner="instance-a", lease_until=later)
    await _queue(backend.store, "queued")
    assert not await backend.store.renew_lease("queued", owner="instance-a", lease_until=later)


async def test_a_lease_not_renewed_in_time_ends_the_run_as_interrupted(backend: Backend) -> None:
    await _claimed(backend, "lapsed", owner="instance-a")
    backend.clock.advance(10)
    await _claimed(backend, "renewed", owner="instance-b")
    lease_end = T0 + LEASE
    assert await backend.store.expire_leases(lease_end) == []  # ending exactly now is not yet over
    expired = await backend.store.expire_leases(lease_end + seconds(1))
    assert [run.id for run in expired] == ["lapsed"]
    run = expired[0]
    assert run.status is RunStatus.INTERRUPTED
    assert run.finished_at == lease_end + seconds(1)
    assert run.reason == "the instance instance-a stopped renewing its lease (last until 2026-03-01T12:00:30+00:00)"
    assert await backend.store.get_run("lapsed") == run
    # the instance that lost the run cannot keep it, nor can anyone else record its end
    assert not await backend.store.renew_lease("lapsed", owner="instance-a", lease_until=lease_end + LEASE)
    end = RunEnd(status=RunStatus.INTERRUPTED, finished_at=lease_end + seconds(5), reason="fenced")
    assert not await backend.store.finish_run("lapsed", owner="instance-b", end=end)
    assert (await backend.store.get_run("lapsed")).status is RunStatus.INTERRUPTED  # type: ignore[union-attr]
    assert (await backend.store.get_run("renewed")).status is RunStatus.RUNNING  # type: ignore[union-attr]


async def test_a_lease_is_expired_only_once_the_grace_after_it_has_passed_too(backend: Backend) -> None:
    """An owner that could not renew fences itself before its lease ends; the reaper waits out the grace."""
    await _claimed(backend, "r1", owner="instance-a")
    grace = seconds(10)
    assert await backend.store.expire_leases(T0 + LEASE + seconds(9), grace=grace) == []
    assert (await backend.store.get_run("r1")).status is RunStatus.RUNNING  # type: ignore[union-attr]
    [expired] = await backend.store.expire_leases(T0 + LEASE + seconds(11), grace=grace)
    assert expired.id == "r1"
    assert expired.status is RunStatus.INTERRUPTED
    assert expired.finished_at == T0 + LEASE + seconds(11)


async def test_the_owner_of_a_reaped_run_still_records_how_it_ended_once(backend: Backend) -> None:
    """A run reaped while its owner could not reach the database takes the owner's end (result, phases, time
    series) when the owner gets through: the owner fenced itself in time, its end is what happened."""
    await _claimed(backend, "r1", owner="instance-a")
    [reaped] = await backend.store.expire_leases(T0 + LEASE + seconds(1))
    assert reaped.result is None
    end = replace(scored_end("r1", finished_at=T0 + LEASE + seconds(20)), status=RunStatus.INTERRUPTED,
                  reason="fenced: the lease could not be renewed")  # fmt: skip
    assert not await backend.store.finish_run("r1", owner="instance-b", end=end)
    assert await backend.store.finish_run("r1", owner="instance-a", end=end)
    run = await backend.store.get_run("r1")
    assert run is not None
    assert (run.status, run.reason, run.score) == (RunStatus.INTERRUPTED, "fenced: the lease could not be renewed",
                                                  end.score)  # fmt: skip
    assert run.result is not None
    assert await backend.store.timeseries("r1") != []
    # once: the end it recorded stands
    again = replace(end, reason="something else")
    assert not await backend.store.finish_run("r1", owner="instance-a", end=again)
    assert (await backend.store.get_run("r1")).reason == end.reason  # type: ignore[union-attr]


# Aborts


async def test_aborting_a_queued_run_ends_it_at_once(backend: Backend) -> None:
    await _queue(backend.store, "r1")
    backend.clock.advance(5)
    aborted = await backend.store.request_abort("r1", "operator changed their mind")
    assert aborted is not None
    assert aborted.status is RunStatus.ABORTED
    assert aborted.reason == aborted.abort_requested == "operator changed their mind"
    assert aborted.finished_at == T0 + seconds(5)
    assert await backend.store.claim_run(owner="instance-a", now=T0, lease_until=T0 + LEASE) is None


async def test_aborting_a_running_run_flags_it_for_its_worker_with_the_first_reason(backend: Backend) -> None:
    await _claimed(backend, "r1")
    flagged = await backend.store.request_abort("r1", "too hot")
    assert flagged is not None
    assert (flagged.status, flagged.abort_requested, flagged.finished_at) == (RunStatus.RUNNING, "too hot", None)
    again = await backend.store.request_abort("r1", "emergency stop")
    assert again == flagged
    assert await backend.store.renew_lease("r1", owner="instance-a", lease_until=T0 + LEASE)  # still its worker's


async def test_aborting_an_ended_or_unknown_run_changes_nothing(backend: Backend) -> None:
    await _claimed(backend, "r1")
    end = RunEnd(status=RunStatus.FAILED, finished_at=T0 + seconds(3), reason="target unreachable")
    assert await backend.store.finish_run("r1", owner="instance-a", end=end)
    before = await backend.store.get_run("r1")
    assert await backend.store.request_abort("r1", "too late") == before
    assert await backend.store.request_abort("missing", "whatever") is None


# Ending a run


async def test_a_finished_run_keeps_its_score_result_and_time_series(backend: Backend) -> None:
    await _claimed(backend, "r1")
    end = scored_end("r1", finished_at=T0 + seconds(4))
    assert end.result is not None
    assert await backend.store.timeseries("r1") == []
    assert await backend.store.finish_run("r1", owner="instance-a", end=end)
    run = await backend.store.get_run("r1")
    assert run is not None
    assert (run.status, run.finished_at, run.score, run.passed) == (end.status, end.finished_at, end.score, end.passed)
    assert (run.score_version, run.verdicts, run.reason) == (end.score_version, end.verdicts, None)
    assert run.result == end.result
    assert "timeseries" not in run.result
    assert await backend.store.timeseries("r1") == list(end.timeseries)
    assert not await backend.store.finish_run("r1", owner="instance-a", end=end)  # it has ended already


async def test_a_finished_run_keeps_the_servers_series_in_its_result_and_its_rows(backend: Backend) -> None:
    waiting = ServerSeries(name="waiting", signal=Signal.WAITING, expr="vllm:num_requests_waiting", unit="requests",
                           values=(0.0, None, 7.5, 12.0))  # fmt: skip
    server = ServerView(url="http://127.0.0.1:8000/metrics", engine=EngineKind.VLLM, interval_ms=500.0,
                        times_s=(0.25, 0.75, 2.25, 3.5), series=(waiting,), scrapes=5, failures={"HTTP 503": 1},
                        notes=("kv_cache_usage: never had a value",))  # fmt: skip
    await _claimed(backend, "r1")
    end = scored_end("r1", finished_at=T0 + seconds(4), server=server)
    assert await backend.store.finish_run("r1", owner="instance-a", end=end)
    run = await backend.store.get_run("r1")
    assert run is not None
    assert run.result is not None
    assert ServerView.from_dict(run.result["server_metrics"]) == server
    rows = await backend.store.timeseries("r1")
    assert [row["server"]["waiting"] for row in rows][:4] == [0.0, None, 7.5, 12.0]


async def test_a_run_ends_only_by_its_owner_and_only_in_a_final_state(backend: Backend) -> None:
    await _claimed(backend, "r1", owner="instance-a")
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=T0 + seconds(4), score=80.0)
    assert not await backend.store.finish_run("r1", owner="instance-b", end=end)
    with pytest.raises(ValueError, match="not queued"):
        await backend.store.finish_run("r1", owner="instance-a", end=replace(end, status=RunStatus.QUEUED))
    assert (await backend.store.get_run("r1")).status is RunStatus.RUNNING  # type: ignore[union-attr]
    await _queue(backend.store, "queued")
    assert not await backend.store.finish_run("queued", owner="instance-a", end=end)
    assert not await backend.store.finish_run("missing", owner="instance-a", end=end)


async def test_a_document_with_non_finite_numbers_is_kept_with_nulls_for_them(backend: Backend) -> None:
    await _claimed(backend, "r1")
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=T0, score=1.0,
                 result={"ratio": float("nan"), "nested": [{"x": float("inf")}, 2.5]})  # fmt: skip
    assert await backend.store.finish_run("r1", owner="instance-a", end=end)
    assert (await backend.store.get_run("r1")).result == {"ratio": None, "nested": [{"x": None}, 2.5]}  # type: ignore[union-attr]


async def test_a_nul_character_from_outside_is_kept_as_a_replacement_character(backend: Backend) -> None:
    """PostgreSQL cannot store NUL in text; a misbehaving target's error message must not fail a write."""
    await _claimed(backend, "r1")
    sent = make_record(1)
    broken = replace(sent, attempts=(replace(sent.attempts[0], error="bad\x00byte"),))
    await backend.store.add_outcomes("r1", [broken])
    assert (await backend.store.list_outcomes("r1", after=None, limit=1))[0].error == "bad\ufffdbyte"
    aborted = await backend.store.request_abort("r1", "target said \x00")
    assert aborted is not None
    assert aborted.abort_requested == "target said \ufffd"
    await backend.store.set_emergency_stop("\x00")
    assert await backend.store.emergency_stop() == "\ufffd"


# Listing runs


async def test_runs_are_listed_newest_first_a_page_at_a_time_unmoved_by_new_runs(backend: Backend) -> None:
    store = backend.store
    await _queue(store, *(f"r{i}" for i in range(10)))
    first = await store.list_runs(RunQuery(limit=4))
    assert [r.id for r in first.runs] == ["r9", "r8", "r7", "r6"]
    await _queue(store, "new-a", "new-b", start=T0 + seconds(100))  # arrive between two page loads
    second = await store.list_runs(RunQuery(limit=4, cursor=first.next_cursor))
    assert [r.id for r in second.runs] == ["r5", "r4", "r3", "r2"]
    last = await store.list_runs(RunQuery(limit=4, cursor=second.next_cursor))
    assert [r.id for r in last.runs] == ["r1", "r0"]
    assert last.next_cursor is None
    exact = await store.list_runs(RunQuery(limit=12))
    assert exact.next_cursor is None
    assert len(exact.runs) == 12


async def test_runs_made_at_the_same_instant_page_by_id_without_loss(backend: Backend) -> None:
    for run_id in ("c", "a", "e", "b", "d"):
        await backend.store.create_run(make_run(run_id, at=T0))
    seen: list[str] = []
    cursor = None
    while True:
        page = await backend.store.list_runs(RunQuery(limit=2, cursor=cursor))
        seen += [r.id for r in page.runs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == ["e", "d", "c", "b", "a"]


async def test_run_listings_filter_by_scenario_status_schedule_and_time(backend: Backend) -> None:
    store = backend.store
    await store.create_run(make_run("a", at=T0, scenario_name="burst"))
    await store.create_run(make_run("b", at=T0 + seconds(1), scenario_name="spike", schedule_id="s1",
                                    fire_time=T0))  # fmt: skip
    await store.create_run(make_run("c", at=T0 + seconds(2), scenario_name="burst", schedule_id="s1",
                                    fire_time=T0 + seconds(60)))  # fmt: skip
    await store.claim_run(owner="i", now=T0, lease_until=T0 + LEASE)  # "a", the oldest

    async def ids(**query: object) -> list[str]:
        return [r.id for r in (await store.list_runs(RunQuery(**query))).runs]  # type: ignore[arg-type]

    assert await ids(scenario="burst") == ["c", "a"]
    assert await ids(status=RunStatus.QUEUED) == ["c", "b"]
    assert await ids(schedule_id="s1") == ["c", "b"]
    assert await ids(since=T0 + seconds(1)) == ["c", "b"]  # since is inclusive
    assert await ids(until=T0 + seconds(2)) == ["b", "a"]  # until is not
    assert await ids(scenario="burst", status=RunStatus.QUEUED, schedule_id="s1") == ["c"]
    assert await ids(scenario="nothing") == []


async def test_a_cursor_that_is_not_ours_and_an_empty_page_are_refused(backend: Backend) -> None:
    for cursor in ("garbage!", "bm90IGpzb24", "WzEsMl0"):  # not base64, not JSON, not [time, id]
        with pytest.raises(ValueError, match="invalid cursor"):
            await backend.store.list_runs(RunQuery(cursor=cursor))
    with pytest.raises(ValueError, match="at least one"):
        await backend.store.list_runs(RunQuery(limit=0))


async def test_active_runs_and_counts_by_status(backend: Backend) -> None:
    await _queue(backend.store, "q1", "q2", "q3")
    await backend.store.claim_run(owner="i", now=T0, lease_until=T0 + LEASE)
    await backend.store.request_abort("q3", "no")
    assert [r.id for r in await backend.store.active_runs()] == ["q1", "q2"]
    counts = await backend.store.count_runs()
    assert counts == {"queued": 1, "running": 1, "succeeded": 0, "aborted": 1, "interrupted": 0, "failed": 0}


async def test_finished_runs_for_trends_are_scored_and_filtered_oldest_end_first(backend: Backend) -> None:
    store = backend.store
    for run_id, scenario, target, end_s, score in (
        ("late", "burst", "http://a", 30, 70.0),
        ("early", "burst", "http://a", 10, 80.0),
        ("other-target", "burst", "http://b", 20, 60.0),
        ("other-scenario", "spike", "http://a", 25, 50.0),
        ("unscored", "burst", "http://a", 15, None),
    ):
        await store.create_run(make_run(run_id, scenario_name=scenario, target_url=target))
        claimed = await store.claim_run(owner="i", now=T0, lease_until=T0 + LEASE)
        assert claimed is not None
        end = RunEnd(status=RunStatus.SUCCEEDED if score else RunStatus.FAILED, finished_at=T0 + seconds(end_s),
                     score=score, score_version="v1" if score else None)  # fmt: skip
        assert await store.finish_run(claimed.id, owner="i", end=end)
    await _queue(store, "still-queued")

    async def ids(**query: object) -> list[str]:
        return [r.id for r in await store.finished_runs(**query)]  # type: ignore[arg-type]

    assert await ids(scenario=None, target_url=None, since=None) == ["early", "other-target", "other-scenario",
                                                                      "late"]  # fmt: skip
    assert await ids(scenario="burst", target_url="http://a", since=None) == ["early", "late"]
    assert await ids(scenario=None, target_url=None, since=T0 + seconds(25)) == ["other-scenario", "late"]


# Outcomes


async def test_outcomes_come_back_by_request_id_a_keyset_page_at_a_time(backend: Backend) -> None:
    await _claimed(backend, "r1")
    records = [make_record(i, phase=i % 3, retried=i % 7 == 0, sent=i % 11 != 0) for i in range(2_500)]
    for batch in (records[1000:2000], records[:1000], records[2000:]):  # out of order, as flushes may be
        await backend.store.add_outcomes("r1", batch)
    pages: list[list[StoredOutcome]] = []
    after = None
    while page := await backend.store.list_outcomes("r1", after=after, limit=700):
        pages.append(page)
        after = page[-1].request_id
    assert [len(p) for p in pages] == [700, 700, 700, 400]
    stored = [o for p in pages for o in p]
    assert stored == [StoredOutcome.of("r1", r) for r in records]
    assert await backend.store.list_outcomes("r1", after=2_499, limit=10) == []
    assert await backend.store.list_outcomes("other", after=None, limit=10) == []


async def test_an_outcome_stored_twice_keeps_its_first_record(backend: Backend) -> None:
    await _claimed(backend, "r1")
    await backend.store.add_outcomes("r1", [make_record(1), make_record(2)])
    await backend.store.add_outcomes("r1", [make_record(2, retried=True), make_record(3)])  # a retried flush
    await backend.store.add_outcomes("r1", [])
    stored = await backend.store.list_outcomes("r1", after=None, limit=10)
    assert [(o.request_id, o.attempts) for o in stored] == [(1, 1), (2, 1), (3, 1)]


async def test_outcomes_of_an_unknown_run_are_refused(backend: Backend) -> None:
    with pytest.raises(RunNotFound):
        await backend.store.add_outcomes("missing", [make_record(1)])
    with pytest.raises(RunNotFound):  # no row to fail the foreign key: asked all the same
        await backend.store.add_outcomes("missing", [])
    with pytest.raises(ValueError, match="at least one"):
        await backend.store.list_outcomes("missing", after=None, limit=0)


# Schedules


def _schedule(schedule_id: str, name: str, **changes: object) -> Schedule:
    schedule = Schedule(id=schedule_id, name=name, cron="0 3 * * *", timezone="Europe/Berlin", scenario_name="burst",
                        overrides=Overrides(target_url="http://127.0.0.1:9000"), catch_up=CatchUp.RUN_ONCE,
                        created_at=T0, created_by="admin")  # fmt: skip
    return replace(schedule, **changes)  # type: ignore[arg-type]


async def test_schedules_are_saved_replaced_listed_and_deleted(backend: Backend) -> None:
    store = backend.store
    nightly = await store.save_schedule(_schedule("s1", "nightly"))
    assert nightly == _schedule("s1", "nightly")
    await store.save_schedule(_schedule("s2", "hourly", cron="0 * * * *"))
    disabled = await store.save_schedule(replace(nightly, enabled=False, last_fire_time=T0 + seconds(3600)))
    assert await store.get_schedule("s1") == disabled
    assert [s.id for s in await store.list_schedules()] == ["s2", "s1"]  # by name
    assert await store.delete_schedule("s2")
    assert not await store.delete_schedule("s2")
    assert await store.get_schedule("s2") is None
    assert [s.id for s in await store.list_schedules()] == ["s1"]


async def test_a_fire_time_is_marked_handled_only_forward(backend: Backend) -> None:
    await backend.store.save_schedule(_schedule("s1", "nightly"))
    fire = T0.replace(microsecond=0)
    await backend.store.mark_fired("s1", fire)
    await backend.store.mark_fired("s1", fire - seconds(86_400))  # handled late: does not move back
    assert (await backend.store.get_schedule("s1")).last_fire_time == fire  # type: ignore[union-attr]
    await backend.store.mark_fired("s1", fire + seconds(86_400))
    assert (await backend.store.get_schedule("s1")).last_fire_time == fire + seconds(86_400)  # type: ignore[union-attr]
    await backend.store.mark_fired("missing", fire)  # nothing to mark
    assert await backend.store.get_schedule("missing") is None


# Tokens and control


async def test_tokens_are_found_by_hash_listed_and_revoked_once(backend: Backend) -> None:
    store = backend.store
    viewer = ApiToken(id="t1", name="dash", role=TokenRole.VIEWER, token_hash="a" * 64, created_at=T0)
    admin = ApiToken(id="t2", name="ops", role=TokenRole.ADMIN, token_hash="b" * 64, created_at=T0 + seconds(1))
    await store.add_token(admin)
    await store.add_token(viewer)
    assert await store.token_by_hash("a" * 64) == viewer
    assert await store.token_by_hash("c" * 64) is None
    assert await store.list_tokens() == [viewer, admin]
    assert await store.revoke_token("t1", T0 + seconds(9))
    assert not await store.revoke_token("t1", T0 + seconds(10))  # the first revocation stands
    assert not await store.revoke_token("missing", T0)
    assert await store.token_by_hash("a" * 64) == replace(viewer, revoked_at=T0 + seconds(9))
    for duplicate in (replace(viewer, token_hash="d" * 64), replace(viewer, id="t3")):
        with pytest.raises(ValueError, match="already stored"):
            await store.add_token(duplicate)


async def test_the_emergency_stop_is_on_with_its_reason_until_released(backend: Backend) -> None:
    assert await backend.store.emergency_stop() is None
    await backend.store.set_emergency_stop("target on fire")
    await backend.store.set_emergency_stop("target on fire, really")
    assert await backend.another_store().emergency_stop() == "target on fire, really"  # every instance sees it
    await backend.store.set_emergency_stop(None)
    await backend.store.set_emergency_stop(None)
    assert await backend.store.emergency_stop() is None


# The fault ledger


def _toxic(run_id: str, toxic: str | None, *, proxy: str = "llm", managed: bool = False) -> LedgerEntry:
    return LedgerEntry(run_id=run_id, server="http://127.0.0.1:8474", proxy=proxy, toxic=toxic, managed=managed)


async def test_planned_faults_are_outstanding_oldest_first_until_removed(backend: Backend) -> None:
    ledger = backend.ledger()
    proxy, latency, reset = _toxic("r1", None), _toxic("r1", "latency"), _toxic("r1", "reset")
    other_run = _toxic("r2", "latency")
    for entry in (proxy, latency, reset, other_run):
        await ledger.planned(entry)
    await ledger.planned(replace(latency, managed=True))  # planned again: keeps its place, takes the details
    assert await ledger.outstanding() == [proxy, replace(latency, managed=True), reset, other_run]
    await ledger.removed(latency)
    await ledger.removed(_toxic("r1", "never-planned"))
    assert await ledger.outstanding() == [proxy, reset, other_run]
    await ledger.planned(latency)  # a new toxic of the same name, after the first was removed: the newest
    await ledger.removed(proxy)  # the proxy entry, not the toxics on it
    assert await backend.ledger().outstanding() == [reset, other_run, latency]


async def test_a_service_run_is_running_for_the_ledger_while_its_lease_holds(backend: Backend) -> None:
    ledger = backend.ledger()
    await _queue(backend.store, "r1")
    assert not await ledger.is_running("r1")  # queued: nobody can have applied a fault yet
    claimed = await backend.store.claim_run(owner="instance-a", now=T0, lease_until=T0 + LEASE)
    assert claimed is not None
    await ledger.run_started("r1")
    assert await ledger.is_running("r1")
    backend.clock.advance(31)  # the instance went silent: its lease ended
    assert not await ledger.is_running("r1")
    assert await backend.ledger(grace=seconds(10)).is_running("r1")  # its owner may still be stopping
    backend.clock.advance(10)
    assert not await backend.ledger(grace=seconds(10)).is_running("r1")  # past the grace: presumed dead
    assert await backend.store.renew_lease("r1", owner="instance-a", lease_until=backend.clock() + LEASE)
    assert await ledger.is_running("r1")  # (not yet expired by anyone: renewing brought it back)
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=backend.clock(), score=90.0)
    assert await backend.store.finish_run("r1", owner="instance-a", end=end)
    assert not await ledger.is_running("r1")
    await ledger.run_finished("r1")
    assert not await ledger.is_running("r1")


async def test_a_run_outside_the_service_is_running_from_its_start_to_its_finish(backend: Backend) -> None:
    ledger = backend.ledger()
    assert not await ledger.is_running("cli-1")
    await ledger.run_started("cli-1")  # this process: alive
    assert await ledger.is_running("cli-1")
    assert await backend.ledger().is_running("cli-1")
    await ledger.run_finished("cli-1")
    assert not await ledger.is_running("cli-1")
    await ledger.run_started("cli-1")  # started again: running again
    assert await ledger.is_running("cli-1")
    await ledger.run_finished("never-started")
    assert not await ledger.is_running("never-started")


async def test_compaction_forgets_settled_runs_and_changes_no_answer(backend: Backend) -> None:
    ledger = backend.ledger()
    await ledger.run_started("done")
    await ledger.planned(_toxic("done", "a"))
    await ledger.removed(_toxic("done", "a"))
    await ledger.run_finished("done")
    await ledger.run_started("leftover")  # finished with a fault still outstanding
    await ledger.planned(_toxic("leftover", "b"))
    await ledger.run_finished("leftover")
    await ledger.run_started("live")
    await ledger.planned(_toxic("live", "c"))
    await ledger.planned(_toxic("live", "d"))
    await ledger.removed(_toxic("live", "d"))
    runs = ("done", "leftover", "live", "unknown")
    before = (await ledger.outstanding(), [await ledger.is_running(r) for r in runs])
    await ledger.compact()
    await ledger.compact()
    assert (await ledger.outstanding(), [await ledger.is_running(r) for r in runs]) == before
    assert before == ([_toxic("leftover", "b"), _toxic("live", "c")], [False, False, True, False])


# The leader lock


async def test_a_released_leader_lock_can_be_taken_again(backend: Backend) -> None:
    lock = backend.leader_lock()
    assert await lock.try_acquire()
    assert await lock.try_acquire()  # held: asking again keeps it
    await lock.release()
    await lock.release()
    assert await lock.try_acquire()
    await lock.release()


@sql_only("memory", "postgres")
async def test_one_instance_at_a_time_holds_the_leader_lock(backend: Backend) -> None:
    first, second = backend.leader_lock(), backend.leader_lock()
    assert await first.try_acquire()
    assert not await second.try_acquire()
    assert not await second.try_acquire()
    await first.release()
    assert await second.try_acquire()
    assert not await first.try_acquire()
    await second.release()


@sql_only("sqlite")
async def test_on_sqlite_every_instance_holds_the_leader_lock(backend: Backend) -> None:
    """One host, one database file: there is nobody to contend with."""
    first, second = backend.leader_lock(), backend.leader_lock()
    assert await first.try_acquire()
    assert await second.try_acquire()


async def test_each_stored_request_keeps_its_traffic_class_conversation_and_turn(backend: Backend) -> None:
    await _claimed(backend, "r1")
    plain = make_record(1)
    turn = replace(make_record(2), klass=1, conversation=2, turn=1, turns=3)
    later = replace(make_record(3), id=(1 << 40) + 2 * 128 + 2, klass=1, conversation=2, turn=2, turns=3)
    await backend.store.add_outcomes("r1", [plain, turn, later])
    stored = await backend.store.list_outcomes("r1", after=None, limit=10)
    assert [(o.request_id, o.traffic_class, o.conversation, o.turn) for o in stored] == [
        (1, 0, None, None), (2, 1, 2, 1), ((1 << 40) + 258, 1, 2, 2)]  # fmt: skip
