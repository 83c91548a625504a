"""Where a whole run's load goes (``prepare_run``, as the CLI and the worker run it): only to the places the
allowlist admitted at the start, whatever the target answers or its name later resolves to.

Every server here is on loopback. Outside the allowlist means another loopback address or port: 127.0.0.2
for a name that rebinds (the allowlist is 127.0.0.1 only), another port for a redirect.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cliffwatch.adapters.faults.toxiproxy import ToxiproxyClient
from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.config import Settings
from cliffwatch.domain.errors import TargetNotAllowed
from cliffwatch.domain.outcomes import Outcome
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.security.allowlist import parse_allowlist
from cliffwatch.services.memory import CollectingObserver


def settings(tmp_path: Path, *allowed: str, **changes: Any) -> Settings:
    allowlist, problems = parse_allowlist(allowed)
    assert allowlist is not None, problems
    return Settings(allowlist=allowlist, state_dir=tmp_path, **changes)


def scenario(url: str, *, phases: int = 1, **extra: Any) -> Scenario:
    arrival = {"process": "constant", "rate": 4}
    return parse_scenario(
        {
            "name": "destinations",
            "slo": {"e2e_ms": 500, "timeout_ms": 1000},
            "target": {"url": url, "api": "http", "request": {"headers": {"api-key": "sk-target"}},
                       **extra.pop("target", {})},
            "phases": [
                {"name": f"p{i}", "role": "baseline" if i == 0 else "stress", "duration_s": 1, "arrival": arrival}
                for i in range(phases)
            ],
            **extra,
        }
    )  # fmt: skip


async def run(config: Settings, chosen: Scenario) -> RunResult:
    async with prepare_run(config, chosen, observer=CollectingObserver()) as prepared:
        return await prepared.service.execute(chosen, run_id=prepared.run_id, target_url=prepared.target_url)


@pytest.fixture
async def rebinding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``rebind.test`` resolves to 127.0.0.1 the first time and to 127.0.0.2 ever after; its lookups are listed."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    lookups: list[str] = []

    async def getaddrinfo(host: Any, port: Any, **kwargs: Any) -> list[Any]:
        if host != "rebind.test":
            return await real(host, port, **kwargs)
        address = "127.0.0.1" if not lookups else "127.0.0.2"
        lookups.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port)))]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return lookups


async def test_a_name_that_rebinds_after_the_check_cannot_move_the_load(
    servers: Callable[..., Any], rebinding: list[str], tmp_path: Path
) -> None:
    """The allowlist admits 127.0.0.1 only; the target's name is checked on 127.0.0.1 and would resolve to
    127.0.0.2 from then on: every request still goes to 127.0.0.1, and 127.0.0.2 receives none."""
    checked = await servers("127.0.0.1")
    rebound = await servers("127.0.0.2", checked.port)
    result = await run(settings(tmp_path, "127.0.0.1"), scenario(f"http://rebind.test:{checked.port}"))

    assert result.status is RunStatus.SUCCEEDED, result.abort_reason
    assert rebound.requests == []
    assert len(checked.requests) == 1 + 4  # the pre-flight and the four planned requests
    assert rebinding == ["127.0.0.1"]  # looked up once, at the start


async def test_a_redirect_to_a_place_outside_the_allowlist_carries_no_load_there_and_counts_as_a_failure(
    servers: Callable[..., Any], tmp_path: Path
) -> None:
    """The target answers every request with a 307 to another port the allowlist does not admit: that port
    receives nothing (not the pre-flight, not one request, no api-key); every request is a redirect, and
    the score counts them as failures that were not refused fast."""
    elsewhere = await servers()
    target = await servers(redirect_to=f"http://127.0.0.1:{elsewhere.port}/")
    config = settings(tmp_path, f"127.0.0.1:{target.port}")
    result = await run(config, scenario(f"http://127.0.0.1:{target.port}", phases=2))

    assert elsewhere.requests == []
    assert len(target.requests) == 1 + 8
    for phase in result.metrics.phases:
        assert phase.outcomes[Outcome.REDIRECT] == phase.offered == 4
    degradation = next(c for c in result.score.components if c.name == "safe_degradation")
    assert degradation.value == 0.0
    assert degradation.evidence["redirect"] == 4
    assert degradation.evidence["not_on_time"] == 4
    assert "4 redirected" in degradation.summary


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0", "10.1.2.3:9000"])
async def test_a_proxy_listening_beyond_loopback_is_refused_before_any_proxy_exists(
    servers: Callable[..., Any], tmp_path: Path, listen: str
) -> None:
    """A proxy may listen on loopback only by default (a wildcard listen is a tunnel from the network to
    the upstream): the run is refused naming the proxy and the setting, before Toxiproxy is even looked for."""
    target = await servers()
    chosen = scenario(f"http://127.0.0.1:{target.port}", proxies=[{"name": "llm", "listen": listen}],
                      target={"via_proxy": "llm"})  # fmt: skip
    config = settings(tmp_path, "127.0.0.0/8", toxiproxy_bin=tmp_path / "no-toxiproxy-here")
    with pytest.raises(TargetNotAllowed) as caught:
        await run(config, chosen)
    assert "proxy llm listen address" in caught.value.reason
    assert "CLIFFWATCH_ALLOWED_PROXY_LISTEN" in caught.value.reason
    assert target.requests == []


async def test_a_proxy_upstream_outside_the_allowlist_is_refused_before_any_proxy_exists(
    servers: Callable[..., Any], tmp_path: Path
) -> None:
    target = await servers()
    chosen = scenario(f"http://127.0.0.1:{target.port}", proxies=[{"name": "llm", "upstream": "127.0.0.1:1"}],
                      target={"via_proxy": "llm"})  # fmt: skip
    config = settings(tmp_path, f"127.0.0.1:{target.port}", toxiproxy_bin=tmp_path / "no-toxiproxy-here")
    with pytest.raises(TargetNotAllowed, match=r"127\.0\.0\.1:1 is not in the target allowlist"):
        await run(config, chosen)


async def test_toxiproxy_is_given_the_upstreams_checked_address_not_its_name(
    servers: Callable[..., Any], rebinding: list[str], toxiproxy: Any, tmp_path: Path
) -> None:
    """Toxiproxy resolves an upstream name itself, on every connection: the proxy the run creates is given
    the address the allowlist checked (127.0.0.1), so the name rebinding to 127.0.0.2 moves nothing."""
    checked = await servers("127.0.0.1")
    rebound = await servers("127.0.0.2", checked.port)
    name = f"it-{uuid.uuid4().hex[:8]}"
    chosen = scenario(f"http://rebind.test:{checked.port}", proxies=[{"name": name}], target={"via_proxy": name})
    config = settings(tmp_path, "127.0.0.1", toxiproxy_url=toxiproxy.url)
    async with prepare_run(config, chosen, observer=CollectingObserver()) as prepared:
        async with ToxiproxyClient(toxiproxy.url, timeout_s=5) as api:
            proxy = await api.get_proxy(name)
        result = await prepared.service.execute(chosen, run_id=prepared.run_id, target_url=prepared.target_url)

    assert proxy is not None
    assert proxy.upstream == f"127.0.0.1:{checked.port}"
    assert result.status is RunStatus.SUCCEEDED, result.abort_reason
    assert rebound.requests == []
    assert len(checked.requests) == 1 + 4
