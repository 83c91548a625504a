"""cliffwatch is never aimed at its own control planes (docs/security.md, "The deny list"): a real Toxiproxy, a
real `cliffwatch serve`, and the command line as users run it.

The hostile operator of the issue: a run whose target is Toxiproxy's admin API, asking it to open a proxy on
every interface (``POST /proxies`` with ``listen: 0.0.0.0:…``), or to ``POST /reset`` (which removes every
toxic: another run's faults). Every server here is on loopback.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_load_destinations import settings
from test_service_api import REPO, call, served_instance

from cliffwatch.adapters.faults.toxiproxy import ToxiproxyClient
from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.domain.errors import TargetNotAllowed
from cliffwatch.domain.outcomes import Outcome
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.faults import ToxicState, ToxicType
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.services.memory import CollectingObserver

TOXIPROXY_RULE = "cliffwatch's Toxiproxy API"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hijack(url: str, listen_port: int, name: str) -> dict[str, Any]:
    """A plain-HTTP scenario whose every request asks Toxiproxy's API at ``url`` for a proxy on every interface."""
    return {
        "name": "hijack",
        "slo": {"e2e_ms": 500, "timeout_ms": 1000},
        "target": {"url": url, "api": "http",
                   "request": {"method": "POST", "path": "/proxies",
                               "body": {"name": name, "listen": f"0.0.0.0:{listen_port}", "upstream": "127.0.0.1:9"}}},
        "phases": [{"name": "p", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant", "rate": 2}}],
    }  # fmt: skip


def proxies_of(toxiproxy_url: str) -> set[str]:
    with urllib.request.urlopen(f"{toxiproxy_url}/proxies", timeout=5) as response:
        return set(json.loads(response.read()))


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def cliffwatch(*args: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CLIFFWATCH_")}
    environment |= {"CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_STATE_DIR": str(tmp_path / "state"), **env}
    return subprocess.run([sys.executable, "-m", "cliffwatch", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=environment, check=False)  # fmt: skip


@pytest.mark.slow
def test_the_service_refuses_a_run_aimed_at_its_toxiproxy_api_and_toxiproxy_gains_no_proxy(
    toxiproxy: Any, tmp_path: Path
) -> None:
    """The issue's reproduction against a real `cliffwatch serve` using the real Toxiproxy: the run is refused at
    submit (422, naming the field and the rule), at the Toxiproxy's own address and at another loopback alias of
    it, and as a metrics page; Toxiproxy holds no new proxy and nothing listens on the asked port."""
    port, name = free_port(), f"hijack-{uuid.uuid4().hex[:8]}"
    database = f"sqlite+aiosqlite:///{tmp_path / 'cw.db'}"
    with served_instance(database, tmp_path, settings={"CLIFFWATCH_TOXIPROXY_URL": toxiproxy.url}) as (base, admin):
        for url in (toxiproxy.url, f"http://127.0.0.2:{toxiproxy.port}", f"http://localhost:{toxiproxy.port}"):
            status, problem = call(base, admin, "POST", "/api/v1/runs", {"document": hijack(url, port, name)})
            assert status == 422, problem
            assert problem["type"].endswith(":target-not-allowed")
            assert problem["field"] == "target.url"
            assert f"{TOXIPROXY_RULE} (CLIFFWATCH_TOXIPROXY_URL)" in problem["detail"]
        scraping = hijack("builtin", port, name) | {
            "target": {
                "url": "builtin",
                "request": {"model": "sim-llm"},
                "metrics": {"url": f"{toxiproxy.url}/proxies"},
            }
        }
        status, problem = call(base, admin, "POST", "/api/v1/runs", {"document": scraping})
        assert status == 422, problem
        assert problem.get("field") == "target.metrics.url", problem
        assert TOXIPROXY_RULE in problem["detail"]
        assert call(base, admin, "GET", "/api/v1/runs")[1]["runs"] == []  # nothing was queued
    assert name not in proxies_of(toxiproxy.url)
    assert not listening(port)


def test_the_cli_refuses_a_scenario_aimed_at_toxiproxys_api_before_any_request(toxiproxy: Any, tmp_path: Path) -> None:
    """`CLIFFWATCH_TOXIPROXY_URL=… cliffwatch run s.json`, s.json aimed at that Toxiproxy's ``POST /proxies``: exit
    code 2 naming the rule, and Toxiproxy holds no new proxy."""
    port, name = free_port(), f"hijack-{uuid.uuid4().hex[:8]}"
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(hijack(toxiproxy.url, port, name)))
    result = cliffwatch("run", str(scenario), env={"CLIFFWATCH_TOXIPROXY_URL": toxiproxy.url}, tmp_path=tmp_path)

    assert result.returncode == 2, result.stdout + result.stderr
    assert f"target.url: {toxiproxy.url} is not allowed" in result.stderr
    assert f"{TOXIPROXY_RULE} (CLIFFWATCH_TOXIPROXY_URL)" in result.stderr
    assert name not in proxies_of(toxiproxy.url)
    assert not listening(port)


def test_validate_refuses_the_metadata_address_even_when_the_allowlist_names_its_network(tmp_path: Path) -> None:
    """`CLIFFWATCH_ALLOWED_TARGETS=127.0.0.0/8,169.254.0.0/16 cliffwatch validate` of a scenario aimed at
    http://169.254.169.254 exits 2 naming the rule; the same file aimed at loopback validates."""
    document = hijack("http://169.254.169.254", 80, "x")
    document["target"]["request"] = {"path": "/latest/meta-data/iam/security-credentials/"}
    path = tmp_path / "metadata.yaml"
    path.write_text(yaml.safe_dump(document))
    env = {"CLIFFWATCH_ALLOWED_TARGETS": "127.0.0.0/8,169.254.0.0/16"}
    result = cliffwatch("validate", str(path), env=env, tmp_path=tmp_path)

    assert result.returncode == 2, result.stdout + result.stderr
    assert "target.url: http://169.254.169.254 is not allowed" in result.stdout
    assert "is a link-local address (169.254.0.0/16" in result.stdout
    document["target"]["url"] = "http://127.0.0.1:8000"
    path.write_text(yaml.safe_dump(document))
    assert cliffwatch("validate", str(path), env=env, tmp_path=tmp_path).returncode == 0


async def test_a_followed_redirect_to_a_toxiproxy_this_process_runs_is_refused_and_its_faults_stay(
    toxiproxy: Any, servers: Callable[..., Any], tmp_path: Path
) -> None:
    """A target that redirects every request (307: method and body kept) to ``POST /reset`` of a Toxiproxy this
    process started, with redirects followed and all of loopback allowed: every hop is refused naming the rule,
    and the toxic another run holds on that Toxiproxy is still there."""
    target = await servers(redirect_to=f"{toxiproxy.url}/reset")
    name = f"held-{uuid.uuid4().hex[:8]}"
    async with ToxiproxyClient(toxiproxy.url, timeout_s=5) as api:
        await api.create_proxy(name=name, listen="127.0.0.1:0", upstream="127.0.0.1:9")
        await api.add_toxic(name, ToxicState(name="theirs", type=ToxicType.LATENCY.value, stream="downstream",
                                             toxicity=1.0, attributes={"latency": 100}))  # fmt: skip
        try:
            chosen = parse_scenario(hijack(f"http://127.0.0.1:{target.port}", free_port(), "x")
                                    | {"client": {"follow_redirects": True}})  # fmt: skip
            async with prepare_run(settings(tmp_path, "127.0.0.0/8"), chosen, observer=CollectingObserver()) as run:
                result = await run.service.execute(chosen, run_id=run.run_id, target_url=run.target_url)
            proxy = await api.get_proxy(name)
        finally:
            await api.delete_proxy(name)

    assert result.status is RunStatus.SUCCEEDED, result.abort_reason
    [phase] = result.metrics.phases
    assert phase.outcomes[Outcome.ERROR] == phase.offered == 2
    assert len(target.requests) == 1 + 2  # the pre-flight and the two planned requests, none followed
    assert proxy is not None
    assert [toxic.name for toxic in proxy.toxics] == ["theirs"]


@pytest.mark.parametrize("listen", ["*:0", "localhost:0"])
async def test_a_proxy_listens_on_the_ip_its_host_was_checked_as(
    toxiproxy: Any, servers: Callable[..., Any], tmp_path: Path, listen: str
) -> None:
    """Toxiproxy resolves a listen host itself (or cannot: ``*``): the proxy is created on the IP the listen
    allowlist checked, and the run's load goes through it."""

    target = await servers()
    name = f"it-{uuid.uuid4().hex[:8]}"
    document = hijack(f"http://127.0.0.1:{target.port}", 1, "x") | {"proxies": [{"name": name, "listen": listen}]}
    document["target"] = {"url": f"http://127.0.0.1:{target.port}", "api": "http", "via_proxy": name}
    chosen = parse_scenario(document)
    config = settings(tmp_path, "127.0.0.0/8", "::1", "localhost", toxiproxy_url=toxiproxy.url)
    async with prepare_run(config, chosen, observer=CollectingObserver()) as run:
        async with ToxiproxyClient(toxiproxy.url, timeout_s=5) as api:
            proxy = await api.get_proxy(name)
        result = await run.service.execute(chosen, run_id=run.run_id, target_url=run.target_url)

    assert proxy is not None
    host = proxy.listen.rpartition(":")[0].strip("[]")
    assert ipaddress.ip_address(host).is_loopback
    assert result.status is RunStatus.SUCCEEDED, result.abort_reason
    assert result.metrics.phases[0].outcomes[Outcome.ON_TIME] == 2


async def test_a_toxiproxy_on_another_host_is_never_given_a_loopback_upstream(
    servers: Callable[..., Any], tmp_path: Path
) -> None:
    """Compose runs Toxiproxy in a container of its own: a proxy whose upstream is this host's loopback (the
    target's, by default) would connect to that container's loopback, where Toxiproxy's own API listens. The run is
    refused at its start, before Toxiproxy is even asked, and the target receives nothing."""
    target = await servers()
    document = hijack(f"http://127.0.0.1:{target.port}", 1, "x") | {"proxies": [{"name": "p", "listen": "127.0.0.1:0"}]}
    document["target"] = {"url": f"http://127.0.0.1:{target.port}", "api": "http", "via_proxy": "p"}
    config = settings(tmp_path, "127.0.0.0/8", toxiproxy_url="http://10.255.255.1:8474")
    with pytest.raises(TargetNotAllowed) as caught:
        async with prepare_run(config, parse_scenario(document), observer=CollectingObserver()):
            pass
    assert caught.value.field == "target.url"
    assert "proxy p upstream: 127.0.0.1 is this host's loopback, but Toxiproxy" in caught.value.reason
    assert target.requests == []
