"""Generator workers as Ray actors, for runs larger than one machine (``cliffwatch[ray]``, ``--ray``).

Ray places the workers and keeps them alive; nothing else about a run changes. A placement group asks the
cluster for one CPU per worker, spread across its nodes; each worker is an actor that opens a TCP connection
back to the coordinator (the cliffwatch process that owns the run) and hands it to a plain worker process it
starts beside itself (sending from inside Ray's own worker process, with its threads, was measured to stall
far more: docs/design.md), which from then on speaks exactly what a local worker speaks over its socket pair
(``wire.py``): the coordinator deals the plan, stops, beats and reads the
records, so faults, stop-all, leases, fencing and the store work as they do on one machine. A worker on another
node has its clock measured (``domain.traffic.clock_agreement``) and is sent the start in its own clock.

The connection is the trust boundary: the coordinator listens on one address for as long as the workers
start, each actor is given a random token of its own, and a connection that does not open with a token the
coordinator is still waiting for is closed before anything it sends is unpickled. Ray itself does not
authenticate its clients; run it on a network you trust (docs/design.md).

An actor belongs to the process that made it: if the coordinator's process dies, Ray ends its actors, and each
one fences itself anyway when its stream ends or the beats stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import structlog

from cliffwatch.adapters.distributed.pool import WORKER_MODULE, GeneratorWorker, hand_spec
from cliffwatch.adapters.distributed.spec import WorkerSpec
from cliffwatch.adapters.network.control_planes import CONTROL_PLANES
from cliffwatch.domain.errors import WorkersFailed
from cliffwatch.domain.security.deny_list import DenyRule, rule_for
from cliffwatch.domain.traffic.ray_address import ray_address_problem

log = structlog.get_logger(__name__)

TOKEN_BYTES = 32
PLACE_TIMEOUT_S = 60.0  # the cluster has this long to find a CPU for every worker
CONNECT_TIMEOUT_S = 120.0  # an actor starts a Python process, imports cliffwatch and connects back in this
ANSWER_TIMEOUT_S = 5.0  # a Ray head's address must accept a connection within this
INSTALL = "Ray is not installed here: pip install 'cliffwatch[ray]' (and cliffwatch on every node of the cluster)"


def ray_module() -> ModuleType:
    """Ray, imported on first use (an extra most users do not install); ``WorkersFailed`` saying how to get it."""
    try:
        import ray
    except ImportError as exc:
        raise WorkersFailed(INSTALL) from exc
    return ray


@dataclass(frozen=True, kw_only=True)
class RayCluster:
    """The cluster a run's workers go to, as this process found it."""

    address: str
    nodes: int
    free_cpus: int  # CPUs no task or actor holds: ``auto`` starts one worker on each
    host: str  # the address this process listens on for its workers: reachable from every node


def connect(address: str, *, host: str | None = None) -> RayCluster:
    """Joins the Ray cluster at ``address`` (``auto``: the one started on this machine with ``ray start``;
    ``HOST:PORT``, or ``ray://HOST:PORT`` for Ray Client) once per process, blocking: call it off the event loop.
    ``host``: where workers connect back; default loopback when every node is this machine, else this node's
    address as Ray sees it."""
    ray = ray_module()
    if not ray.is_initialized():
        _answers(address)
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise WorkersFailed(f"could not join the Ray cluster at {address!r}: {exc}") from exc
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    _deny_while_joined(cluster_control_planes(ray, nodes))
    here = ray.util.get_node_ip_address()
    if host is None:
        host = "127.0.0.1" if all(n.get("NodeManagerAddress") == here for n in nodes) else here
    free = int(ray.available_resources().get("CPU", 0))
    return RayCluster(address=address, nodes=len(nodes), free_cpus=free, host=host)


# Each node's HTTP services that act: the dashboard agent's serves the job API (jobs run arbitrary commands), the
# runtime environment agent installs packages. Its metrics page is read-only, and a fair target.metrics.url.
_NODE_SERVICES = {"DashboardAgentListenPort": "dashboard agent", "RuntimeEnvAgentPort": "runtime environment agent"}


def cluster_control_planes(ray: ModuleType, nodes: list[dict[str, Any]]) -> list[DenyRule]:
    """The services of the joined cluster that no run may reach, as Ray reports them: its GCS, its dashboard, and
    each node's agents (a port Ray does not report is left out: the configured address's defaults still hold)."""
    rules: list[DenyRule] = []
    places: list[tuple[str, str]] = []
    with contextlib.suppress(Exception):  # Ray Client's context has no GCS address to give
        places.append((str(ray.get_runtime_context().gcs_address), "the Ray cluster's GCS"))
    with contextlib.suppress(Exception):  # a private API: best effort, the defaults stand without it
        worker: Any = ray._private.worker
        places.append((str(worker.get_dashboard_url() or "").removeprefix("http://"), "the Ray cluster's dashboard"))
    for place, what in places:
        host, _, digits = place.rpartition(":")
        if host and digits.isdigit():
            rules.append(rule_for(host, int(digits), f"{what} (of the cluster this process joined)"))
    for node in nodes:
        host = str(node.get("NodeManagerAddress") or "")
        for key, name in _NODE_SERVICES.items():
            port: object = node.get(key)
            if host and isinstance(port, int) and 0 < port < 65536:
                rules.append(rule_for(host, port, f"a Ray node's {name} (of the cluster this process joined)"))
    return rules


_joined: list[int] = []  # the CONTROL_PLANES keys of the cluster this process joined, as last seen
_joining = threading.Lock()  # runs join from worker threads, and two at once must not leave stale rules


def _deny_while_joined(rules: list[DenyRule]) -> None:
    """The joined cluster's services, as found now (a node may have joined since), denied until ``leave``."""
    with _joining:
        keys = [CONTROL_PLANES.hold(rule) for rule in rules]
        for key in _joined:
            CONTROL_PLANES.release(key)
        _joined[:] = keys


def leave() -> None:
    """Leaves the cluster this process joined (``ray.shutdown``): its services are no longer denied, their ports
    being anyone's once it is gone. The service never leaves; tests do, between clusters."""
    ray_module().shutdown()
    _deny_while_joined([])


def _answers(address: str) -> None:
    """A ``HOST:PORT`` where nothing listens is an error now: Ray itself would retry it for minutes."""
    if address == "auto" or "://" in address:
        return
    if (problem := ray_address_problem(address)) is not None:  # settings and --ray were checked: a caller's slip
        raise WorkersFailed(f"the Ray address {problem}")
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=ANSWER_TIMEOUT_S).close()
    except OSError as exc:
        raise WorkersFailed(
            f"nothing answers at the Ray address {address} ({exc}): is a Ray head running there (ray start --head)?"
        ) from exc


class ShardActor:
    """One generator worker as a Ray actor (made remote when launched: Ray is imported only then): it connects
    back, proves itself, and supervises the worker process it hands the connection to until that exits (the
    child dies with it: ``PR_SET_PDEATHSIG``)."""

    def serve(self, host: str, port: int, token: bytes) -> int:
        ray = ray_module()
        node_id = ray.get_runtime_context().get_node_id()
        node = f"{ray.util.get_node_ip_address()} ({node_id[:8]})"
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as connection:
            connection.sendall(token)
            connection.settimeout(None)
            argv = [sys.executable, "-m", WORKER_MODULE, str(connection.fileno()), node]
            child = subprocess.Popen(argv, pass_fds=(connection.fileno(),), stdin=subprocess.DEVNULL)
        return child.wait()


class RayActor:
    """A worker's process as a Ray actor: ended when its ``serve`` call returns or the actor dies."""

    def __init__(self, actor: Any, serving: Any) -> None:
        self.actor = actor
        self._done: asyncio.Future[Any] = asyncio.wrap_future(serving.future())

    def gone(self) -> bool:
        return self._done.done()

    async def ended(self, timeout_s: float) -> str | None:
        try:
            async with asyncio.timeout(timeout_s):
                return f"exit code {await asyncio.shield(self._done)}"
        except TimeoutError:
            return None
        except Exception as exc:  # the actor died (ray.exceptions.RayActorError) or its task raised
            return f"its Ray actor ended: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"

    async def kill(self) -> None:
        with contextlib.suppress(Exception):  # already gone
            ray_module().kill(self.actor, no_restart=True)
        await self.ended(10.0)


class RayLauncher:
    """Implements the pool's ``Launcher`` on a Ray cluster: one actor of one CPU per worker, spread across the
    nodes by a placement group, each connected back to this process."""

    def __init__(self, cluster: RayCluster) -> None:
        self.cluster = cluster
        self._waiting: dict[bytes, asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._server: asyncio.Server | None = None
        self._group: Any = None
        self._actors: list[RayActor] = []

    async def launch(self, specs: list[WorkerSpec]) -> list[GeneratorWorker]:
        ray = ray_module()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        count = len(specs)
        self._server = await asyncio.start_server(self._accept, self.cluster.host, 0)
        port = self._server.sockets[0].getsockname()[1]
        self._group = placement_group([{"CPU": 1}] * count, strategy="SPREAD", name="cliffwatch-generator")
        try:
            async with asyncio.timeout(PLACE_TIMEOUT_S):
                await self._group.ready()
        except TimeoutError as exc:
            raise WorkersFailed(
                f"the Ray cluster at {self.cluster.address} could not place {count} generator workers of one CPU "
                f"each within {PLACE_TIMEOUT_S:g}s ({self.cluster.free_cpus} CPU(s) were free when the run began)"
            ) from exc
        remote = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(ShardActor)
        started = []
        for spec in specs:
            token = secrets.token_bytes(TOKEN_BYTES)
            self._waiting[token] = asyncio.get_running_loop().create_future()
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=self._group, placement_group_bundle_index=spec.index
            )
            actor = remote.options(scheduling_strategy=strategy).remote()
            process = RayActor(actor, actor.serve.remote(self.cluster.host, port, token))
            self._actors.append(process)
            started.append((spec, token, process))
        workers = []
        for spec, token, process in started:
            reader, writer = await self._connected(spec, token, process, port)
            worker = GeneratorWorker(index=spec.index, process=process, reader=reader, writer=writer, remote=True)
            await hand_spec(worker, spec)
            workers.append(worker)
        self._server.close()  # every worker is connected: nobody else may
        return workers

    async def _connected(
        self, spec: WorkerSpec, token: bytes, process: RayActor, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The worker's stream once its actor connected back; ``WorkersFailed`` if the actor ended first or never
        connected."""
        waiting = self._waiting[token]
        ended = asyncio.ensure_future(process.ended(CONNECT_TIMEOUT_S))
        either: set[asyncio.Future[Any]] = {waiting, ended}
        try:
            await asyncio.wait(either, timeout=CONNECT_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
        if waiting.done():
            return waiting.result()
        if ended.done() and not ended.cancelled() and (how := ended.result()) is not None:
            raise WorkersFailed(f"worker {spec.index + 1} (a Ray actor) ended before it connected back: {how}")
        raise WorkersFailed(
            f"worker {spec.index + 1} (a Ray actor) did not connect back to {self.cluster.host}:{port} within "
            f"{CONNECT_TIMEOUT_S:g}s: is that address reachable from the cluster's nodes (CLIFFWATCH_RAY_HOST), "
            "and cliffwatch installed on them?"
        )

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10.0):
                token = await reader.readexactly(TOKEN_BYTES)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        for known, waiting in self._waiting.items():
            if hmac.compare_digest(known, token) and not waiting.done():
                waiting.set_result((reader, writer))
                return
        log.warning("a connection without a worker's token was refused", peer=writer.get_extra_info("peername"))
        writer.close()

    async def close(self) -> None:
        """Every actor ended (a worker whose run is over idles until then, holding its CPU) and the CPUs freed."""
        if self._server is not None:
            self._server.close()
        for waiting in self._waiting.values():
            if waiting.done():
                waiting.result()[1].close()
            else:
                waiting.cancel()
        for actor in self._actors:
            await actor.kill()
        if self._group is not None:
            with contextlib.suppress(Exception):
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self._group)
            self._group = None
