"""The dashboard under test: the API's harness with the dashboard mounted as `cliffwatch serve` mounts it, and
a client that handles cookies by hand (no cookie jar), so each test sees exactly what the server set and sends.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

from aiohttp import DummyCookieJar
from aiohttp.test_utils import TestClient, TestServer
from api_harness import Parts, TickingClock, build_parts, make_settings

from cliffwatch.adapters.api import create_app
from cliffwatch.adapters.dashboard import mount_dashboard
from cliffwatch.adapters.dashboard.context import DashboardServices
from cliffwatch.domain.service.runs import TokenRole
from cliffwatch.services.sessions import InMemorySessionStore, SessionService

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


@dataclass
class Ui:
    client: TestClient[Any, Any]
    parts: Parts

    async def get(self, path: str, cookie: str | None = None) -> tuple[int, dict[str, str], str, SimpleCookie]:
        headers = {"Cookie": cookie} if cookie else {}
        async with self.client.get(path, headers=headers, allow_redirects=False) as response:
            return response.status, dict(response.headers), await response.text(), _cookies(response)

    async def post(
        self, path: str, data: dict[str, str], cookie: str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str, SimpleCookie]:
        sent = {**({"Cookie": cookie} if cookie else {}), **(headers or {})}
        async with self.client.post(path, data=data, headers=sent, allow_redirects=False) as response:
            return response.status, dict(response.headers), await response.text(), _cookies(response)

    async def login(self, role: TokenRole) -> tuple[str, str]:
        """Logs in with the role's token; returns the Cookie header to send and the session's CSRF token."""
        _, _, page, cookies = await self.get("/ui/login")
        nonce = re.search(r'name="nonce" value="([^"]+)"', page)
        assert nonce is not None
        status, headers, _, set_cookies = await self.post(
            "/ui/login", {"token": self.parts.tokens[role], "nonce": nonce.group(1), "next": "/ui/runs"},
            cookie=f"cw_login={cookies['cw_login'].value}",
        )  # fmt: skip
        assert status == 303, headers
        cookie = f"cw_session={set_cookies['cw_session'].value}"
        _, _, runs, _ = await self.get("/ui/runs", cookie)
        csrf = CSRF.search(runs)
        assert csrf is not None
        return cookie, csrf.group(1)


def _cookies(response: Any) -> SimpleCookie:
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.getall("Set-Cookie", []):
        jar.load(header)
    return jar


async def serve_ui(**changes: Any) -> AsyncIterator[Ui]:
    settings = make_settings(**changes)
    parts = await build_parts(settings)
    app = create_app(parts.services, settings=settings)
    clock: TickingClock = parts.clock
    sessions = SessionService(InMemorySessionStore(parts.store), parts.services.tokens, ttl_s=3_600, now=clock)
    mount_dashboard(app, DashboardServices(api=parts.services, sessions=sessions), settings=settings)
    async with TestClient(TestServer(app, host="127.0.0.1"), cookie_jar=DummyCookieJar()) as client:
        yield Ui(client=client, parts=parts)
