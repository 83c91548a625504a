"""Starts the worker processes of a run or sweep whose scenario asks for them (``client.workers``)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, replace

from cliffwatch.adapters.distributed.cpu_limit import usable_cores
from cliffwatch.adapters.distributed.pool import Launcher, WorkerPool
from cliffwatch.adapters.distributed.ray_launcher import RayLauncher, connect
from cliffwatch.adapters.distributed.spec import WorkerSpec
from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.errors import WorkersFailed
from cliffwatch.domain.scenario.client_spec import AUTO_WORKERS, MAX_WORKERS
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.security.allowlist import Allowlist
from cliffwatch.domain.security.redaction import DEFAULT_RULES, RedactionRules
from cliffwatch.domain.traffic.rate_limit import RateLimit
from cliffwatch.domain.traffic.shards import cap_share, client_share, worker_count

AUTO_IN_PROCESS = "client.workers: auto found one usable core (or a cap of one worker): this process sends"


def workers_for(scenario: Scenario, *, most: int = MAX_WORKERS) -> int:
    """How many worker processes ``scenario`` gets on this machine; 0: its run's own process sends (no
    ``client.workers``, or ``auto`` on one core, ``domain.traffic.shards.worker_count``)."""
    asked = scenario.client.workers
    return 0 if asked is None else worker_count(asked, cores=usable_cores(), most=most)


def worker_pool(
    sent: Scenario,
    executor: HttpExecutor,
    *,
    load_url: str,
    destinations: Destinations,
    allowlist: Allowlist | None = None,
    cap: RateLimit | None,
    secrets: tuple[str, ...] = (),
    redaction: RedactionRules = DEFAULT_RULES,
    log_level: str = "warning",
    count: int,
    launcher: Launcher | None = None,
) -> WorkerPool:
    """``count`` workers for ``sent`` (the scenario as sent, secrets read), not started yet: they start at the
    pool's preflight, once the coordinator's client (``executor``) has settled the prompts."""
    share = replace(sent, client=client_share(sent.client, count))

    def specs(settled: HttpExecutor) -> list[WorkerSpec]:
        prompts, pins = settled.settled_prompts(), destinations.pins()
        worker_cap = None if cap is None else cap_share(cap, count)
        niceness = os.getpriority(os.PRIO_PROCESS, 0)
        return [
            WorkerSpec(
                index=index,
                count=count,
                scenario=share,
                base_url=load_url,
                allowlist=allowlist or destinations.allowlist,
                pins=pins,
                cap=worker_cap,
                executor=prompts,
                secrets=secrets,
                redaction=redaction,
                log_level=log_level,
                niceness=niceness,
            )
            for index in range(count)
        ]

    return WorkerPool(executor, specs, cap=cap, launcher=launcher)


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a run's generator workers go: how many, started by what, and what the run says about it."""

    count: int  # 0: the run's own process sends
    launcher: Launcher | None = None  # None: processes on this machine
    note: str | None = None


async def placement(
    scenario: Scenario, *, most: int = MAX_WORKERS, ray_address: str | None = None, ray_host: str | None = None
) -> Placement:
    """The workers ``scenario`` gets: none without ``client.workers``; on this machine's cores; or, with a Ray
    address, actors on that cluster (``auto``: one per CPU it has free, within ``most``)."""
    asked = scenario.client.workers
    if asked is None:
        return Placement(count=0)
    if ray_address is None:
        count = workers_for(scenario, most=most)
        return Placement(count=count, note=None if count else AUTO_IN_PROCESS)
    cluster = await asyncio.to_thread(connect, ray_address, host=ray_host)
    count = min(most, cluster.free_cpus if asked == AUTO_WORKERS else asked)
    if count < 1:
        raise WorkersFailed(f"the Ray cluster at {ray_address} has no free CPU for a generator worker")
    note = f"sending from {count} Ray actor(s) on a cluster of {cluster.nodes} node(s) at {ray_address}"
    return Placement(count=count, launcher=RayLauncher(cluster), note=note)
