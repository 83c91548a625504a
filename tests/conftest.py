"""Fixtures every test directory may use; kept small: directory-specific fixtures live in their own conftests.

``toxiproxy``: a Toxiproxy server of the tests' own, so no test ever touches a shared one (such as a
developer's on the default port 8474, whose toxics would be someone else's).
``postgres``: likewise a PostgreSQL server of the tests' own, for the stores' contract suite.
``ray_cluster``: a local Ray cluster of two nodes, for the generator's Ray workers (one per test module).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import structlog

from cliffwatch.adapters.faults.toxiproxy_server import ManagedToxiproxy, find_toxiproxy_server
from postgres_kit import PostgresServer, postgres_cluster
from ray_kit import LocalRay, local_ray


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first. ``make test`` hands test modules out to parallel workers in this order, so the longest
    start first and the run ends on short ones, not on one long module begun last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _fresh_structlog(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests that call the CLI in-process configure logging as the CLI does, which caches each module's logger
    on first use; a cached logger keeps that configuration for the rest of the session, so a later test's
    ``capture_logs`` would see nothing. Here nothing is cached, and every test starts from structlog's defaults."""
    configure = structlog.configure

    def uncached(**settings: object) -> None:
        configure(**{**settings, "cache_logger_on_first_use": False})  # type: ignore[arg-type]

    monkeypatch.setattr(structlog, "configure", uncached)
    yield
    structlog.reset_defaults()


@dataclass(frozen=True, kw_only=True)
class ToxiproxyServer:
    """A running toxiproxy-server: its API at ``url`` (``http://host:port``)."""

    url: str
    host: str
    port: int
    pid: int


@pytest.fixture(scope="session")
def toxiproxy() -> Iterator[ToxiproxyServer]:
    """A private toxiproxy-server on a free 127.0.0.1 port, started once for the whole session.

    Fails rather than skips when the binary is missing, so a machine without it cannot pass the suite
    without testing fault injection. Tests share it: each names its proxies uniquely and removes them.
    """
    if find_toxiproxy_server() is None:
        pytest.fail("toxiproxy-server is not on PATH nor in .tools/bin: run `make toxiproxy`")
    managed = ManagedToxiproxy()
    # Its own loop, which sets no current loop: pytest-asyncio gives each test a loop of its own. The server's
    # output is drained by a thread, so it keeps running between tests while no loop runs.
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        runner.run(managed.__aenter__())
        try:
            assert managed.pid is not None
            yield ToxiproxyServer(url=managed.url, host=managed.host, port=managed.port, pid=managed.pid)
        finally:
            runner.run(managed.__aexit__(None, None, None))


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalRay]:
    # Per module, not per session: a live cluster and this process's Ray threads would otherwise stay for every
    # later test, and the timing tests (a loop never blocked over 100 ms) measured them.
    with local_ray(nodes=2) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL server (``postgres_cluster``) for the whole session, with a database ``cliffwatch``."""
    with postgres_cluster() as cluster:
        server = cluster.server
        # In a thread of its own: the fixture may be set up while this thread runs an event loop (Playwright's
        # sync API keeps one running for a browser test's whole module).
        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, server.create_database("cliffwatch")).result(timeout=60)
        yield PostgresServer(host="127.0.0.1", port=cluster.port, user="postgres", database="cliffwatch")
