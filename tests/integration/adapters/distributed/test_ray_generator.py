"""The generator's workers as Ray actors on a local Ray cluster of two nodes (``ray.cluster_utils.Cluster``,
two raylets on this machine, one CPU each): the shares of both nodes make the plan, an actor killed mid-run
loses only its share and the run says so, a stop reaches every actor, and the result says which node sent what.

The cluster (``ray_cluster``, tests/ray_kit.py) is started once for the module, in about ten seconds; each test
places its own actors.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import ray
from loadgen_testkit import Serve
from test_sharded_generator import Listener, Records, answer, load, start_soon

from cliffwatch.adapters.distributed.coordinator import ShardedGenerator
from cliffwatch.adapters.distributed.ray_launcher import RayActor, RayCluster, RayLauncher
from cliffwatch.adapters.distributed.setup import worker_pool
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.network.target_access import ensure_allowed
from cliffwatch.adapters.runtime.clock import MonotonicClock
from cliffwatch.domain.errors import TargetNotAllowed
from cliffwatch.domain.outcomes import Outcome
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.security.allowlist import parse_allowlist
from cliffwatch.domain.traffic.plan import iter_plan
from priority_kit import may_raise_priority_to
from ray_kit import LocalRay

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # the generator must keep its schedule


@asynccontextmanager
async def ray_coordinator(scenario: Scenario, url: str, found: RayCluster) -> AsyncIterator[ShardedGenerator]:
    async with HttpExecutor(scenario, url) as executor:
        made = worker_pool(scenario, executor, load_url=url, destinations=executor.destinations, cap=None,
                           count=scenario.client.workers or 1, launcher=RayLauncher(found))  # fmt: skip
        async with made as pool:
            await pool.preflight()
            yield ShardedGenerator(pool, scenario, MonotonicClock())


async def test_two_nodes_send_the_plan_exactly_and_the_result_names_them(serve: Serve, ray_cluster: LocalRay) -> None:
    found = ray_cluster.found
    assert found.nodes == 2
    assert found.host == "127.0.0.1"  # every node is this machine: the actors connect back over loopback
    served = await serve(answer)
    scenario = load(served.url, rate=200, duration_s=1.0, workers=2)
    records = Records()
    async with ray_coordinator(scenario, served.url, found) as generator:
        report = await generator.run(iter_plan(scenario), start_ns=start_soon(), listener=Listener(records))
    plan = [r.id for r in iter_plan(scenario)]
    by_id = records.once_each()
    assert sorted(by_id) == plan
    assert all(r.outcome is Outcome.ON_TIME for r in by_id.values())
    assert len([s for s in served.requests if s.path == "/load"]) == len(plan)
    assert not report.limited, report.reasons
    assert [w.planned for w in report.workers] == [100, 100]
    nodes = {w.node for w in report.workers}
    assert len(nodes) == 2, "one actor on each node"
    assert None not in nodes
    by_node = report.to_dict()["nodes"]
    assert sorted(n["planned"] for n in by_node) == [100, 100]
    assert {n["processes"] for n in by_node} == {1}
    # both raylets run under this machine's kernel: one clock, nothing to measure or to doubt
    assert {w.clock_skew_ms for w in report.workers} == {None}
    # Ray starts its workers at nice 15: each took the run's priority back where this system lets it
    run_nice = os.getpriority(os.PRIO_PROCESS, 0)
    assert {w.niceness for w in report.workers} == ({run_nice} if may_raise_priority_to(run_nice) else {15})


async def test_an_actor_killed_mid_run_loses_only_its_share(serve: Serve, ray_cluster: LocalRay) -> None:
    found = ray_cluster.found
    served = await serve(answer)
    scenario = load(served.url, rate=100, duration_s=2.0, workers=2)
    records = Records()
    async with ray_coordinator(scenario, served.url, found) as generator:
        running = asyncio.create_task(
            generator.run(iter_plan(scenario), start_ns=start_soon(), listener=Listener(records))
        )
        await served.until_received(40, within_s=20)
        process = generator.pool.workers[1].process
        assert isinstance(process, RayActor)
        ray.kill(process.actor, no_restart=True)
        report = await running
    by_id = records.once_each()
    assert sorted(by_id) == [r.id for r in iter_plan(scenario)]
    lost = [r for r in by_id.values() if r.outcome is Outcome.NOT_SENT]
    assert lost
    assert all("generator worker 2 of 2 died (its Ray actor ended" in (r.not_sent_reason or "") for r in lost)
    assert all(r.id % 2 == 1 for r in lost), "only the killed actor's share is lost"
    assert report.workers[0].failure is None
    assert report.workers[0].finished == 100
    assert report.limited
    assert any("generator worker 2 of 2 died" in reason for reason in report.reasons)
    assert report.workers[1].lost == len(lost)


async def test_a_stop_reaches_every_actor_and_nothing_more_is_sent(serve: Serve, ray_cluster: LocalRay) -> None:
    found = ray_cluster.found
    served = await serve(answer)
    scenario = load(served.url, rate=100, duration_s=3.0, workers=2)
    records = Records()
    async with ray_coordinator(scenario, served.url, found) as generator:
        running = asyncio.create_task(
            generator.run(iter_plan(scenario), start_ns=start_soon(), listener=Listener(records))
        )
        await served.until_received(50, within_s=20)
        generator.stop("aborted: test")
        report = await running
        seen = len(served.requests)
        await asyncio.sleep(0.5)
        assert len(served.requests) == seen, "nothing is sent after the stop"
    by_id = records.once_each()
    assert sorted(by_id) == [r.id for r in iter_plan(scenario)]
    stopped = [r for r in by_id.values() if r.outcome is Outcome.NOT_SENT]
    assert len(stopped) >= 100, "the rest of the plan, on both nodes, was never sent"
    assert {r.id % 2 for r in stopped} == {0, 1}
    assert all(r.not_sent_reason == "aborted: test" for r in stopped)
    assert {w.failure for w in report.workers} == {None}


async def test_a_connection_without_a_worker_token_is_closed_unread(ray_cluster: LocalRay) -> None:
    found = ray_cluster.found
    launcher = RayLauncher(found)
    waiting = asyncio.get_running_loop().create_future()
    launcher._waiting[b"k" * 32] = waiting
    server = await asyncio.start_server(launcher._accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"x" * 32 + b"a pickle that must never be read")
        await writer.drain()
        try:
            assert await asyncio.wait_for(reader.read(), 5) == b"", "the coordinator hung up"
        finally:
            writer.close()
        assert not waiting.done()
    finally:
        server.close()
        await launcher.close()


async def test_the_joined_clusters_gcs_is_a_control_plane_no_run_may_reach(ray_cluster: LocalRay) -> None:
    """Once this process joined the cluster, its GCS (as Ray reports it) is denied to every check of this process,
    on loopback as on its own address, however wide the allowlist."""
    allowlist, _ = parse_allowlist(["0.0.0.0/0", "::/0"])
    assert allowlist is not None
    host, _, port = ray_cluster.address.rpartition(":")
    for url in (f"http://{host}:{port}", f"http://127.0.0.1:{port}"):
        with pytest.raises(TargetNotAllowed, match="the Ray cluster's GCS"):
            await ensure_allowed(url, allowlist)
