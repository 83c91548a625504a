"""Submit-time judgement of a scenario's places, proxies' upstreams by where Toxiproxy runs among them."""

from __future__ import annotations

import pytest

from cliffwatch.adapters.network.target_policies import AllowlistPolicy, DenyListPolicy, upstream_problem
from cliffwatch.config import Settings

# As docker-compose.yml wires it: Toxiproxy in a container of its own, loopback allowed beside the target service.
COMPOSE = {"CLIFFWATCH_ALLOWED_TARGETS": "target:8000,127.0.0.0/8,::1,localhost",
           "CLIFFWATCH_ALLOWED_PROXY_LISTEN": "toxiproxy,127.0.0.0/8,::1,localhost",
           "CLIFFWATCH_TOXIPROXY_URL": "http://10.89.0.7:8474"}  # fmt: skip


@pytest.mark.parametrize("upstream", ["http://127.0.0.1:8474", "http://localhost:8474", "http://127.0.0.1:5432",
                                      "http://[::1]:9"])  # fmt: skip
async def test_a_loopback_upstream_is_refused_when_toxiproxy_runs_on_another_host(upstream: str) -> None:
    """Toxiproxy connects from its own host: 127.0.0.1:8474 there is its own API (POST /reset, other runs'
    toxics), whatever the allowlist admits here."""
    settings = Settings.from_env(COMPOSE)
    policy = AllowlistPolicy(settings.allowlist, listen=settings.proxy_listen, toxiproxy_url=settings.toxiproxy_url)

    assert await policy.check(upstream) is None  # as a target, loopback is allowed here
    reason = await policy.check_upstream(upstream)
    assert reason is not None
    assert "runs on another host" in reason
    validate = DenyListPolicy(settings.denied, toxiproxy_url=settings.toxiproxy_url)
    assert await validate.check_upstream(upstream) is not None


@pytest.mark.parametrize("toxiproxy_url", [None, "http://127.0.0.1:8474", "http://localhost:8474"])
async def test_a_loopback_upstream_is_fine_for_a_toxiproxy_on_this_host(toxiproxy_url: str | None) -> None:
    assert await upstream_problem(("127.0.0.1",), toxiproxy_url) is None
    assert await upstream_problem(("10.0.0.5",), "http://10.89.0.7:8474") is None
