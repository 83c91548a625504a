"""Operating the service: the emergency stop, the probes, /metrics, request ids, the 429 on saturated
expensive endpoints, and errors nobody planned for."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
import structlog
from api_harness import Api, build_parts, make_settings, serve

from cliffwatch.adapters.api import ops
from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.domain.service.runs import TokenRole
from cliffwatch.services.memory_store import InMemoryStore

_SAMPLE = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (-?[0-9.]+([eE][-+]?[0-9]+)?|[-+]?Inf|NaN)$')


async def test_the_emergency_stop_aborts_queued_runs_and_refuses_new_ones_until_released(api: Api) -> None:
    queued = [(await api.queue())["id"] for _ in range(2)]
    reply = await api.call("POST", "/api/v1/stop-all", json={"reason": "game day gone wrong"})
    assert reply.body == {"active": True, "reason": "game day gone wrong", "aborted": queued}
    assert {r["status"] for r in (await api.call("GET", "/api/v1/runs")).body["runs"]} == {"aborted"}
    state = await api.call("GET", "/api/v1/stop-all", role=TokenRole.VIEWER)
    assert state.body == {"active": True, "reason": "game day gone wrong"}

    refused = await api.call("POST", "/api/v1/runs", role=TokenRole.OPERATOR, json={"scenario": "burst-storm"})
    assert refused.status == 503
    assert refused.body["type"].endswith(":emergency-stop")
    assert refused.body["reason"] == "game day gone wrong"
    assert int(refused.headers["Retry-After"]) > 0

    assert (await api.call("DELETE", "/api/v1/stop-all")).body == {"active": False, "reason": None}
    assert (await api.call("GET", "/api/v1/stop-all")).body == {"active": False, "reason": None}
    await api.queue()


async def test_the_emergency_stop_without_a_reason_names_who_pulled_it(api: Api) -> None:
    reply = await api.call("POST", "/api/v1/stop-all")
    assert reply.body == {"active": True, "reason": "emergency stop by admin-token", "aborted": []}


async def test_liveness_is_200_even_when_not_ready(api: Api) -> None:
    api.not_ready.append("the database is unreachable")
    assert (await api.call("GET", "/healthz", role=None)).body == {"status": "ok"}
    assert (await api.call("GET", "/readyz", role=None)).status == 503


async def test_readiness_is_503_with_every_reason(api: Api) -> None:
    api.not_ready += ["the database is unreachable", "migrations are behind (at 3, code needs 4)"]
    reply = await api.call("GET", "/readyz", role=None)
    assert reply.status == 503
    assert reply.body["type"].endswith(":not-ready")
    assert [p["message"] for p in reply.body["problems"]] == api.not_ready
    assert "migrations are behind" in reply.body["detail"]
    assert "Retry-After" in reply.headers
    api.not_ready.clear()
    assert (await api.call("GET", "/readyz", role=None)).body == {"status": "ready"}


async def test_a_failing_or_hanging_readiness_check_is_503_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings()
    parts = await build_parts(settings)

    async def broken() -> list[str]:
        raise ConnectionError("postgresql://cliffwatch:hunter2@db/cliffwatch refused")

    async def hanging() -> list[str]:
        await asyncio.sleep(60)
        return []

    monkeypatch.setattr(ops, "READINESS_TIMEOUT_S", 0.05)
    for check, said in [(broken, "failed"), (hanging, "did not answer")]:
        async with serve(replace(parts, services=replace(parts.services, readiness=check)), settings) as api:
            reply = await api.call("GET", "/readyz", role=None)
            assert reply.status == 503
            assert said in reply.body["detail"]
            assert "hunter2" not in str(reply.body)


async def test_metrics_show_runs_by_status_outcomes_active_runs_and_latency_by_route(api: Api) -> None:
    await api.queue()
    await api.queue()
    api.services.metrics.count_outcomes("run-1", Counter({"on_time": 3, "late": 1}))
    api.services.metrics.count_outcomes("run-2", {"on_time": 2})
    api.services.metrics.watch_active_runs(lambda: 2)
    await api.call("GET", "/api/v1/runs/abc123")
    reply = await api.call("GET", "/metrics", role=TokenRole.VIEWER)
    assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    lines = reply.body.splitlines()
    assert all(_SAMPLE.match(line) for line in lines if not line.startswith("#")), lines
    assert 'cliffwatch_runs{status="queued"} 2' in lines
    assert 'cliffwatch_runs{status="running"} 0' in lines
    assert "cliffwatch_active_runs 2" in lines
    assert "cliffwatch_emergency_stop 0" in lines
    assert 'cliffwatch_request_outcomes_total{outcome="on_time"} 5' in lines
    assert 'cliffwatch_request_outcomes_total{outcome="late"} 1' in lines
    assert 'cliffwatch_request_outcomes_total{outcome="timeout"} 0' in lines
    by_id = 'route="/api/v1/runs/{run_id}",method="GET",status="404"'
    assert f"cliffwatch_api_request_duration_seconds_count{{{by_id}}} 1" in lines
    assert f'cliffwatch_api_request_duration_seconds_bucket{{{by_id},le="+Inf"}} 1' in lines
    assert "abc123" not in reply.body
    assert 'route="/api/v1/runs",method="POST",status="202"' in reply.body


async def test_the_request_id_is_echoed_or_generated(api: Api) -> None:
    given = await api.call("GET", "/api/v1/runs/none", headers={"X-Request-ID": "trace-42.a"})
    assert given.headers["X-Request-ID"] == "trace-42.a"
    assert given.body["request_id"] == "trace-42.a"
    for offered in ({}, {"X-Request-ID": "x" * 129}, {"X-Request-ID": "a b"}):
        reply = await api.call("GET", "/healthz", role=None, headers=offered)
        assert re.fullmatch(r"[0-9a-f]{32}", reply.headers["X-Request-ID"])


class GatedStore:
    """The in-memory store, except that time series and outcomes wait at a gate the test opens."""

    def __init__(self, store: InMemoryStore) -> None:
        self.store = store
        self.inside = 0
        self.full = asyncio.Event()
        self.open = asyncio.Event()
        self.expected = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def _wait(self) -> None:
        self.inside += 1
        if self.inside == self.expected:
            self.full.set()
        await self.open.wait()

    async def timeseries(self, run_id: str) -> list[Mapping[str, Any]]:
        await self._wait()
        return await self.store.timeseries(run_id)

    async def list_outcomes(self, run_id: str, *, after: int | None, limit: int) -> list[Any]:
        await self._wait()
        return await self.store.list_outcomes(run_id, after=after, limit=limit)


async def test_saturated_expensive_endpoints_answer_429_at_once_and_recover() -> None:
    """Two slots: two slow time-series reads hold them; a third expensive call gets 429 with Retry-After
    without waiting, cheap endpoints still answer, and the slots come back when the slow ones finish."""
    settings = make_settings(api_max_expensive=2)
    parts = await build_parts(settings)
    gated = GatedStore(parts.store)
    gated.expected = 2
    async with serve(replace(parts, services=replace(parts.services, run_store=gated)), settings) as api:
        run_id = (await api.queue())["id"]
        slow = [asyncio.create_task(api.call("GET", f"/api/v1/runs/{run_id}/timeseries")) for _ in range(2)]
        await asyncio.wait_for(gated.full.wait(), 5)
        for path in (f"/api/v1/runs/{run_id}/outcomes", f"/api/v1/runs/{run_id}/timeseries", "/api/v1/trends"):
            refused = await asyncio.wait_for(api.call("GET", path, role=TokenRole.VIEWER), 1)
            assert refused.status == 429
            assert refused.headers["Retry-After"] == "1"
            assert refused.body["type"].endswith(":overloaded")
        assert (await api.call("GET", "/api/v1/runs")).status == 200
        gated.open.set()
        assert [r.status for r in await asyncio.gather(*slow)] == [200, 200]
        assert (await api.call("GET", "/api/v1/trends")).status == 200


class FailingStore(InMemoryStore):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def count_runs(self) -> Mapping[str, int]:
        raise self.error


async def test_an_unexpected_error_is_a_500_problem_that_leaks_nothing_and_is_logged() -> None:
    settings = make_settings()
    parts = await build_parts(settings)
    failing = FailingStore(RuntimeError("postgresql://cliffwatch:hunter2@db/cliffwatch exploded"))
    async with serve(replace(parts, services=replace(parts.services, run_store=failing)), settings) as api:
        with structlog.testing.capture_logs() as logs:
            reply = await api.call("GET", "/metrics")
    assert reply.status == 500
    assert reply.body["type"].endswith(":internal")
    assert "hunter2" not in str(reply.body)
    assert reply.body["request_id"] == reply.headers["X-Request-ID"]
    [logged] = [e for e in logs if e["event"] == "unexpected error"]
    assert "hunter2" in str(logged["exc_info"])


async def test_an_unavailable_store_is_a_503_that_does_not_name_the_database() -> None:
    settings = make_settings()
    parts = await build_parts(settings)
    failing = FailingStore(StoreUnavailable("postgresql://cliffwatch:hunter2@db.internal/cw", "connection refused"))
    async with serve(replace(parts, services=replace(parts.services, run_store=failing)), settings) as api:
        reply = await api.call("GET", "/metrics")
    assert reply.status == 503
    assert reply.body["type"].endswith(":store-unavailable")
    assert "db.internal" not in str(reply.body)
    assert reply.headers["Retry-After"] == "5"
