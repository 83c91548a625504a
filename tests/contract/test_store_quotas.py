"""What an API caller holds, for its quotas (``RunStore.caller_usage``), on the in-memory twin, SQLite and
PostgreSQL alike: its queued runs, and the inline scenario documents its recent runs point at."""

from __future__ import annotations

from store_kit import T0, Backend, make_run, seconds

from cliffwatch.domain.service.runs import CallerUsage, ScenarioSource, Trigger

LEASE = seconds(30)


async def _version(backend: Backend, name: str, digest: str, source: ScenarioSource) -> None:
    await backend.store.save_scenario(name=name, document={"name": name}, content_hash=digest, source=source, at=T0)


async def test_a_callers_queued_runs_are_its_own_api_runs_still_waiting(backend: Backend) -> None:
    """Only runs the caller queued through the API and still queued count: not its running or ended runs, not
    another caller's, not a schedule's that happens to carry the same name."""
    store = backend.store
    await store.create_run(make_run("q1", at=T0))
    await store.create_run(make_run("q2", at=T0 + seconds(1)))
    await store.create_run(make_run("q3", at=T0 + seconds(2)))
    await store.create_run(make_run("other", at=T0 + seconds(3), triggered_by="someone-else"))
    await store.create_run(make_run("fired", at=T0 + seconds(4), trigger=Trigger.SCHEDULE))
    claimed = await store.claim_run(owner="i", now=T0, lease_until=T0 + LEASE)
    assert claimed is not None
    assert claimed.id == "q1"
    await store.request_abort("q3", "no")
    usage = await store.caller_usage("ci-token", since=T0)
    assert usage.queued == 1
    assert (await store.caller_usage("nobody", since=T0)) == CallerUsage(queued=0, documents=())


async def test_a_callers_documents_are_the_distinct_inline_versions_of_its_runs_since_a_time(backend: Backend) -> None:
    """Each inline version counts once, at its first run in the window; registered versions, runs before the
    window and other callers' runs do not count; the times come back oldest first, in UTC."""
    store = backend.store
    await _version(backend, "a", "1" * 64, ScenarioSource.INLINE)
    await _version(backend, "b", "2" * 64, ScenarioSource.INLINE)
    await _version(backend, "c", "3" * 64, ScenarioSource.INLINE)
    await _version(backend, "shared", "4" * 64, ScenarioSource.REGISTERED)
    runs = [
        ("before", "c", "3", -10, "ci-token"),  # before the window
        ("b-first", "b", "2", 5, "ci-token"),
        ("a-first", "a", "1", 7, "ci-token"),
        ("b-again", "b", "2", 9, "ci-token"),
        ("registered", "shared", "4", 11, "ci-token"),
        ("theirs", "c", "3", 12, "someone-else"),
    ]
    for run_id, name, digit, at_s, caller in runs:
        await store.create_run(make_run(run_id, at=T0 + seconds(at_s), scenario_name=name, scenario_hash=digit * 64,
                                        triggered_by=caller))  # fmt: skip
    usage = await store.caller_usage("ci-token", since=T0)
    assert usage.documents == (T0 + seconds(5), T0 + seconds(7))
    assert all(t.utcoffset() == seconds(0) for t in usage.documents)
    assert usage.queued == 5
