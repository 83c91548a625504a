"""TLS on the load path, over each transport: a target whose certificate a trusted authority signed is reached
and its answer read; one the client does not trust fails the attempt as a connection failure, never as an
answer. The authority is trustme's, trusted through SSL_CERT_FILE as a user's internal one would be."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import TestServer
from loadgen_testkit import planned, scenario_for

from cliffwatch.adapters.loadgen.http_client import HttpExecutor
from cliffwatch.domain.outcomes import Attempt
from cliffwatch.domain.scenario.retry import FailureKind

pytestmark = pytest.mark.usefixtures("over_each_transport")  # aiohttp and the lean client alike


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_target(authority: trustme.CA) -> AsyncIterator[str]:
    """A loopback HTTPS target answering every path with a small JSON body, its certificate for 127.0.0.1."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "path": request.path})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=context)
    yield f"https://127.0.0.1:{server.port}"
    await server.close()


@pytest.fixture
def trusting(authority: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The authority trusted as the system's roots are read (OpenSSL's SSL_CERT_FILE)."""
    bundle = tmp_path / "authority.pem"
    authority.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))


async def attempt(url: str) -> Attempt:
    scenario = scenario_for(url, api="http", request={"method": "GET", "path": "/load"})
    async with HttpExecutor(scenario, url) as executor:
        return await executor.attempt(planned(), 1, 5.0, origin_ns=0, deadline_bound=False)


@pytest.mark.usefixtures("trusting")
async def test_a_trusted_certificate_is_reached_and_answered(tls_target: str) -> None:
    done = await attempt(tls_target)
    assert (done.failure, done.status) == (None, 200)


async def test_an_untrusted_certificate_fails_as_a_connection_never_as_an_answer(tls_target: str) -> None:
    done = await attempt(tls_target)
    assert done.failure is FailureKind.CONNECTION
    assert done.status is None
    assert "certificate" in (done.error or "").lower()
