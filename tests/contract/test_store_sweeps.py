"""Sweeps in the stores: a run of kind sweep keeps its parameters and its usable capacity, listings filter by
kind, capacity trends read succeeded sweeps only, and schedules keep what their fires queue — on the
in-memory twin, SQLite and PostgreSQL alike."""

from __future__ import annotations

from dataclasses import replace

from store_kit import T0, Backend, make_run, scored_end, seconds

from cliffwatch.domain.capacity.capacity import CapacityResult, summarize
from cliffwatch.domain.capacity.sweep_spec import SweepArrival, SweepMode, SweepSpec
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.service.runs import CatchUp, RunEnd, RunKind, RunQuery, Schedule
from cliffwatch.services.memory_sweep import ModelStepRunner

SPEC = SweepSpec(start=2.0, stop=12.0, trials=2, step_s=5.0, warmup_s=1.0, cooldown_s=0.5,
                 arrival=SweepArrival.CONSTANT, variants=("as-written", "none"))  # fmt: skip
AUTO = SweepSpec(mode=SweepMode.CONCURRENCY, auto=True, max_rate=64.0)
RESULT = {"usable_rps": 7.5, "first_bad_rps": 8.0, "unit": "req/s", "target": 0.99}
DOCUMENT = {"format": 1, "kind": "sweep", "status": "succeeded",
            "variants": [{"variant": "as-written", "retry": "as written", "result": RESULT}]}  # fmt: skip


async def _claim(backend: Backend, run_id: str) -> None:
    now = backend.clock()
    claimed = await backend.store.claim_run(owner="w", now=now, lease_until=now + seconds(30))
    assert claimed is not None
    assert claimed.id == run_id


async def test_a_sweep_run_comes_back_with_its_kind_and_parameters(backend: Backend) -> None:
    sweep = make_run("s1", kind=RunKind.SWEEP, sweep=SPEC)
    auto = make_run("s2", at=T0 + seconds(1), kind=RunKind.SWEEP, sweep=AUTO)
    stored, created = await backend.store.create_run(sweep)
    assert created
    assert stored == sweep
    await backend.store.create_run(auto)
    assert await backend.store.get_run("s1") == sweep
    assert await backend.store.get_run("s2") == auto
    plain = make_run("r1", at=T0 + seconds(2))
    await backend.store.create_run(plain)
    fetched = await backend.store.get_run("r1")
    assert fetched is not None
    assert (fetched.kind, fetched.sweep, fetched.usable_rps) == (RunKind.RUN, None, None)


async def test_listings_filter_by_kind(backend: Backend) -> None:
    await backend.store.create_run(make_run("r1"))
    await backend.store.create_run(make_run("s1", at=T0 + seconds(1), kind=RunKind.SWEEP, sweep=SPEC))
    await backend.store.create_run(make_run("r2", at=T0 + seconds(2)))
    sweeps = await backend.store.list_runs(RunQuery(kind=RunKind.SWEEP))
    runs = await backend.store.list_runs(RunQuery(kind=RunKind.RUN))
    every = await backend.store.list_runs(RunQuery())
    assert [r.id for r in sweeps.runs] == ["s1"]
    assert [r.id for r in runs.runs] == ["r2", "r1"]
    assert len(every.runs) == 3


async def test_a_finished_sweep_keeps_its_document_and_usable_capacity(backend: Backend) -> None:
    await backend.store.create_run(make_run("s1", kind=RunKind.SWEEP, sweep=SPEC))
    await _claim(backend, "s1")
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=T0 + seconds(90), result=DOCUMENT, usable_rps=7.5)
    assert await backend.store.finish_run("s1", owner="w", end=end)
    run = await backend.store.get_run("s1")
    assert run is not None
    assert (run.status, run.usable_rps, run.result) == (RunStatus.SUCCEEDED, 7.5, DOCUMENT)
    assert run.sweep == SPEC
    assert await backend.store.timeseries("s1") == []


async def test_capacity_trends_read_succeeded_sweeps_only_and_score_trends_no_sweeps(backend: Backend) -> None:
    store = backend.store
    for index, status in enumerate((RunStatus.SUCCEEDED, RunStatus.INTERRUPTED, RunStatus.SUCCEEDED)):
        run_id = f"s{index}"
        await store.create_run(make_run(run_id, at=T0 + seconds(index), kind=RunKind.SWEEP, sweep=SPEC))
        await _claim(backend, run_id)
        end = RunEnd(status=status, finished_at=T0 + seconds(100 - index), result=DOCUMENT, usable_rps=7.5)
        assert await store.finish_run(run_id, owner="w", end=end)
    await store.create_run(make_run("r1", at=T0 + seconds(10)))
    await _claim(backend, "r1")
    assert await store.finish_run("r1", owner="w", end=scored_end("r1", finished_at=T0 + seconds(50)))
    await store.create_run(make_run("s9", at=T0 + seconds(11), kind=RunKind.SWEEP, sweep=SPEC, scenario_name="other"))

    sweeps = await store.finished_sweeps(scenario=None, target_url=None, since=None)
    assert [r.id for r in sweeps] == ["s2", "s0"]  # oldest end first; the interrupted one left out
    assert [r.id for r in await store.finished_sweeps(scenario="burst", target_url=None,
                                                       since=T0 + seconds(99))] == ["s0"]  # fmt: skip
    assert await store.finished_sweeps(scenario="other", target_url=None, since=None) == []
    assert await store.finished_sweeps(scenario=None, target_url="http://elsewhere", since=None) == []
    assert [r.id for r in await store.finished_runs(scenario=None, target_url=None, since=None)] == ["r1"]


async def test_a_sweep_schedule_keeps_its_kind_and_parameters(backend: Backend) -> None:
    schedule = Schedule(id="nightly", name="nightly capacity", cron="0 3 * * *", timezone="UTC",
                        scenario_name="burst", catch_up=CatchUp.RUN_ONCE, created_at=T0, kind=RunKind.SWEEP,
                        sweep=SPEC)  # fmt: skip
    assert await backend.store.save_schedule(schedule) == schedule
    assert await backend.store.get_schedule("nightly") == schedule
    plain = Schedule(id="p", name="plain", cron="0 4 * * *", timezone="UTC", scenario_name="burst", created_at=T0)
    await backend.store.save_schedule(plain)
    assert [(s.id, s.kind, s.sweep) for s in await backend.store.list_schedules()] == [
        ("nightly", RunKind.SWEEP, SPEC),
        ("p", RunKind.RUN, None),
    ]


async def test_a_sweeps_recheck_and_the_target_drift_it_found_come_back(backend: Backend) -> None:
    """A sweep asked not to recheck keeps that choice, and a finished document's ``target_drift`` (the trials that
    disagreed, when they ran) reads back into the same capacity result."""
    asked = replace(SPEC, recheck=False)
    await backend.store.create_run(make_run("s1", kind=RunKind.SWEEP, sweep=asked))
    await _claim(backend, "s1")
    fast, slow = ModelStepRunner(capacity=20.0, step_s=400.0), ModelStepRunner(capacity=0.5, step_s=400.0)
    steps = [replace(fast.step(1.0, 1), started_s=0.0), fast.step(6.0, 1),
             replace(slow.step(1.0, 2), started_s=50.0, recheck=True)]  # fmt: skip
    result = summarize(steps, target=0.99, e2e_slo_ms=4000.0, finished_because="no cliff found up to 6 req/s")
    assert result.target_drift is not None
    document = {**DOCUMENT, "variants": [{"variant": "as-written", "retry": "as written", "result": result.to_dict()}]}
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=T0 + seconds(90), result=document, usable_rps=None)
    assert await backend.store.finish_run("s1", owner="w", end=end)

    run = await backend.store.get_run("s1")

    assert run is not None
    assert run.sweep == asked
    assert run.result is not None
    stored = run.result["variants"][0]["result"]
    assert CapacityResult.from_dict(stored).target_drift == result.target_drift
    assert [t["started_s"] for t in stored["target_drift"]["disagreements"][0]["trials"]] == [0.0, 50.0]


SO_FAR = {**RESULT, "finished_because": "provisional", "ratio": float("nan")}
PROVISIONAL = {**DOCUMENT, "status": "running", "finished_at": None, "provisional": True, "steps_so_far": 2,
               "variants": [{"variant": "as-written", "retry": "as written", "result": SO_FAR}]}  # fmt: skip


async def test_only_the_owner_of_a_running_sweep_stores_its_provisional_result(backend: Backend) -> None:
    store = backend.store
    await store.create_run(make_run("s1", kind=RunKind.SWEEP, sweep=SPEC))
    assert not await store.save_provisional_result("s1", owner="w", result=PROVISIONAL)  # queued: not yet
    assert not await store.save_provisional_result("missing", owner="w", result=PROVISIONAL)
    await _claim(backend, "s1")
    assert not await store.save_provisional_result("s1", owner="another", result=PROVISIONAL)
    assert (await store.get_run("s1")).provisional_result is None  # type: ignore[union-attr]
    assert await store.save_provisional_result("s1", owner="w", result=PROVISIONAL)
    run = await store.get_run("s1")
    assert run is not None
    # kept as a JSON column keeps it (a non-finite number is null), and without touching the final result
    assert run.provisional_result == {
        **PROVISIONAL,
        "variants": [
            {**PROVISIONAL["variants"][0], "result": {**RESULT, "finished_because": "provisional", "ratio": None}}
        ],
    }
    assert (run.status, run.result, run.usable_rps) == (RunStatus.RUNNING, None, None)
    later = {**PROVISIONAL, "steps_so_far": 3}
    assert await store.save_provisional_result("s1", owner="w", result=later)
    assert (await store.get_run("s1")).provisional_result["steps_so_far"] == 3  # type: ignore[union-attr,index]
    listed = await store.list_runs(RunQuery(kind=RunKind.SWEEP))
    assert listed.runs[0].provisional_result == (await store.get_run("s1")).provisional_result  # type: ignore[union-attr]
    end = RunEnd(status=RunStatus.SUCCEEDED, finished_at=T0 + seconds(90), result=DOCUMENT, usable_rps=7.5)
    assert await store.finish_run("s1", owner="w", end=end)
    run = await store.get_run("s1")
    assert run is not None
    assert (run.result, run.provisional_result) == (DOCUMENT, None)  # the final document replaces it
    assert not await store.save_provisional_result("s1", owner="w", result=PROVISIONAL)  # ended: refused
    assert (await store.get_run("s1")).provisional_result is None  # type: ignore[union-attr]


async def test_a_sweep_that_ends_without_a_final_document_keeps_its_provisional_one(backend: Backend) -> None:
    store = backend.store
    for index, run_id in enumerate(("failed", "lapsed")):
        await store.create_run(make_run(run_id, at=T0 + seconds(index), kind=RunKind.SWEEP, sweep=SPEC))
        await _claim(backend, run_id)
        assert await store.save_provisional_result(run_id, owner="w", result=DOCUMENT | {"provisional": True})
    end = RunEnd(status=RunStatus.FAILED, finished_at=T0 + seconds(5), reason="cliffwatch internal error: boom")
    assert await store.finish_run("failed", owner="w", end=end)
    await store.create_run(make_run("late", at=T0 + seconds(2), kind=RunKind.SWEEP, sweep=SPEC))
    now = backend.clock()
    lapsed = [r.id for r in await store.expire_leases(now + seconds(3_600))]
    assert lapsed == ["lapsed"]
    for run_id, status in (("failed", RunStatus.FAILED), ("lapsed", RunStatus.INTERRUPTED)):
        run = await store.get_run(run_id)
        assert run is not None
        assert (run.status, run.result) == (status, None)
        assert run.provisional_result == DOCUMENT | {"provisional": True}
    assert await store.finished_sweeps(scenario=None, target_url=None, since=None) == []
