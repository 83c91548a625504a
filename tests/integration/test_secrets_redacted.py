"""Secrets end to end: literal credentials and secret references sent through the API (a registered scenario,
an inline run) and the CLI, run for real against a loopback server that records what it received — the real
values arrive — and then every output surface read: every GET route of the API and of the dashboard, the
CLI's output, result JSON and HTML report, the log lines, the database. No secret is in any of them.

One instance of the service runs in process (SQLite, its real worker), its app served by aiohttp's test
server; the CLI runs as a subprocess. The runs are a few requests each.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import DummyCookieJar, web
from aiohttp.test_utils import TestClient, TestServer

from cliffwatch.adapters.api.app import ROUTE_TABLE
from cliffwatch.adapters.dashboard.app import UI_ROUTE_TABLE
from cliffwatch.adapters.runtime.logs import configure_logging
from cliffwatch.bootstrap.run import prepare_run
from cliffwatch.bootstrap.service import open_service
from cliffwatch.bootstrap.sweep import prepare_sweep
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.sweep_spec import parse_sweep_spec
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.domain.security.secrets import SecretsUnavailable
from cliffwatch.domain.service.runs import TokenRole
from cliffwatch.services.memory import CollectingObserver

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# Every secret of the test, each unique, so any one found anywhere says where it leaked from.
SECRETS = {
    "url_password": "pw-url-4b1d",
    "api_key": "sk-api-7c2e",
    "cookie": "cookie-9f3a",
    "proxy": "proxy-auth-1d8b",
    "tenant": "tenant-5e6f",  # a header the setting names
    "reference": "ref-value-2a9c",  # read from the environment at the run's start
    "inline_bearer": "sk-inline-3b7d",
    "inline_api_key": "sk-inline-8e1f",
    "cli_password": "pw-cli-6c4a",
    "cli_key": "sk-cli-0f5b",
    "webhook_path": "hooks-walk-5d2c",  # a Slack incoming webhook's path is its secret
}
REFERENCE_VARIABLE = "TARGET_WALK_KEY"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
TERMINAL = {"succeeded", "failed", "aborted", "interrupted"}


@dataclass
class Recorder:
    """A loopback target answering 200 to anything, keeping every request's path and headers."""

    received: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((request.path, dict(request.headers)))
        return web.json_response({"ok": True})

    def headers_of(self, marker: str) -> list[dict[str, str]]:
        return [h for _, h in self.received if h.get("X-Scenario") == marker]


@pytest.fixture
async def target() -> AsyncIterator[tuple[Recorder, str]]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    async with TestServer(app, host="127.0.0.1") as server:
        yield recorder, f"127.0.0.1:{server.port}"


def scenario(name: str, url: str, headers: dict[str, Any], *, marker: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": "secrets walk",
        "seed": 1,
        "target": {"url": url, "api": "http", "request": {"path": f"/walk/{marker}",
                                                           "headers": {"X-Scenario": marker, **headers}}},
        "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
        "phases": [{"name": "calm", "role": "baseline", "duration_s": 1, "arrival": {"process": "constant",
                                                                                   "rate": 3}}],
    }  # fmt: skip


def registered(address: str) -> dict[str, Any]:
    return scenario("walk-url", f"http://alice:{SECRETS['url_password']}@{address}", {
        "x-api-key": SECRETS["api_key"], "Cookie": f"session={SECRETS['cookie']}",
        "Proxy-Authorization": f"Basic {SECRETS['proxy']}", "X-Tenant-Key": SECRETS["tenant"],
        "X-Walk-Ref": {"secret": f"env:{REFERENCE_VARIABLE}"},
    }, marker="api")  # fmt: skip


def inline(address: str) -> dict[str, Any]:
    return scenario("walk-inline", f"http://{address}", {
        "Authorization": f"Bearer {SECRETS['inline_bearer']}", "api-key": SECRETS["inline_api_key"],
    }, marker="inline")  # fmt: skip


def for_the_cli(address: str) -> dict[str, Any]:
    return scenario("walk-cli", f"http://carol:{SECRETS['cli_password']}@{address}", {
        "x-api-key": SECRETS["cli_key"], "X-Walk-Ref": {"secret": f"env:{REFERENCE_VARIABLE}"},
    }, marker="cli")  # fmt: skip


def missing(address: str) -> dict[str, Any]:
    return scenario("walk-missing", f"http://{address}", {"Authorization": {"secret": "env:TARGET_WALK_UNSET"}},
                    marker="missing")  # fmt: skip


def leaks(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    yield stream
    root.handlers[:], root.level = handlers, level


@dataclass
class Served:
    client: TestClient[Any, Any]
    tokens: dict[TokenRole, str]

    async def get(
        self, path: str, role: TokenRole | None = TokenRole.VIEWER, cookie: str | None = None
    ) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role is not None else {}
        if cookie is not None:
            headers["Cookie"] = cookie
        async with self.client.get(path, headers=headers, allow_redirects=False) as response:
            return response.status, await response.text()

    async def send(self, method: str, path: str, body: Any, role: TokenRole = TokenRole.ADMIN) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"}
        async with self.client.request(method, path, json=body, headers=headers) as response:
            return response.status, await response.json()

    async def finished(self, run_id: str) -> dict[str, Any]:
        async with asyncio.timeout(60):
            while True:
                _, text = await self.get(f"/api/v1/runs/{run_id}")
                run: dict[str, Any] = json.loads(text)
                if run["status"] in TERMINAL:
                    return run
                await asyncio.sleep(0.2)

    async def gameday_ended(self, gameday_id: str) -> dict[str, Any]:
        async with asyncio.timeout(90):
            while True:
                _, text = await self.get(f"/api/v1/gamedays/{gameday_id}")
                gameday: dict[str, Any] = json.loads(text)
                if gameday["status"] != "running" and len(gameday["notifications"]) >= 1:
                    return gameday
                await asyncio.sleep(0.2)

    async def session(self) -> str:
        """A dashboard session of the admin (who sees every page a viewer does, and more): its Cookie header."""
        async with self.client.get("/ui/login", allow_redirects=False) as response:
            page = await response.text()
            login = response.cookies["cw_login"].value
        nonce = re.search(r'name="nonce" value="([^"]+)"', page)
        assert nonce is not None
        form = {"token": self.tokens[TokenRole.ADMIN], "nonce": nonce.group(1), "next": "/ui/runs"}
        async with self.client.post("/ui/login", data=form, headers={"Cookie": f"cw_login={login}"},
                                    allow_redirects=False) as response:  # fmt: skip
            assert response.status == 303
            return f"cw_session={response.cookies['cw_session'].value}"


async def test_no_secret_reaches_any_surface_while_every_run_sends_the_real_ones(
    target: tuple[Recorder, str], tmp_path: Path, log_lines: io.StringIO
) -> None:
    recorder, address = target
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    database = tmp_path / "walk.db"
    settings = Settings(allowlist=allowlist, database_url=f"sqlite+aiosqlite:///{database}",
                        state_dir=tmp_path / "state", sensitive_headers=("X-Tenant-Key",), lease_s=10,
                        secret_environment={REFERENCE_VARIABLE: SECRETS["reference"]})  # fmt: skip
    configure_logging(level="debug", fmt="json", stream=log_lines, rules=settings.redaction)

    async with open_service(settings) as service:
        tokens = {role: (await service.tokens.create(f"{role.value}-walk", role))[1] for role in TokenRole}
        async with TestClient(TestServer(service.app, host="127.0.0.1"), cookie_jar=DummyCookieJar()) as client:
            served = Served(client=client, tokens=tokens)
            status, version = await served.send("PUT", "/api/v1/scenarios/walk-url", registered(address))
            assert status == 200, version
            assert (await served.send("PUT", "/api/v1/scenarios/walk-missing", missing(address)))[0] == 200
            status, schedule = await served.send("POST", "/api/v1/schedules", {
                "name": "nightly-walk", "cron": "0 3 * * *", "timezone": "UTC", "scenario": "walk-url"})  # fmt: skip
            assert status == 201, schedule
            runs = []
            for body in ({"scenario": "walk-url"}, {"document": inline(address)}, {"scenario": "walk-missing"}):
                status, run = await served.send("POST", "/api/v1/runs", body, role=TokenRole.OPERATOR)
                assert status == 202, run
                runs.append(await served.finished(run["id"]))
            by_url, by_inline, by_missing = runs

            # The runs sent the real values.
            assert by_url["status"] == "succeeded", by_url["reason"]
            assert by_inline["status"] == "succeeded", by_inline["reason"]
            sent = recorder.headers_of("api")
            assert sent
            assert all(h["Authorization"] == basic("alice", SECRETS["url_password"]) for h in sent)
            names = ("x-api-key", "Cookie", "Proxy-Authorization", "X-Tenant-Key", "X-Walk-Ref")
            assert {tuple(h[n] for n in names) for h in sent} == {
                (SECRETS["api_key"], f"session={SECRETS['cookie']}", f"Basic {SECRETS['proxy']}", SECRETS["tenant"],
                 SECRETS["reference"])
            }  # fmt: skip
            assert {(h["Authorization"], h["api-key"]) for h in recorder.headers_of("inline")} == {
                (f"Bearer {SECRETS['inline_bearer']}", SECRETS["inline_api_key"])
            }
            # A missing secret fails the run before any load, naming the reference and nothing else.
            assert by_missing["status"] == "failed"
            assert "target.request.headers.Authorization: env:TARGET_WALK_UNSET is not set" in by_missing["reason"]
            assert recorder.headers_of("missing") == []

            # A game day of the inline scenario, its webhook's path a secret (nothing listens there).
            suite = {"name": "walk-day", "experiments": [{"scenario": inline(address)}],
                     "notify": [{"webhook": f"http://127.0.0.1:9/{SECRETS['webhook_path']}"}]}  # fmt: skip
            status, gameday = await served.send("POST", "/api/v1/gamedays", suite, role=TokenRole.OPERATOR)
            assert status == 202, gameday
            await served.gameday_ended(gameday["id"])

            # Every GET route of the API, as a viewer and as an admin.
            values = {"run_id": [r["id"] for r in runs], "name": ["walk-url", "walk-missing"],
                      "schedule_id": [schedule["id"]], "gameday_id": [gameday["id"]]}  # fmt: skip
            read = 0
            for route in ROUTE_TABLE:
                if route.method != "GET":
                    continue
                for path in _filled(route.path, values, by_inline):
                    for role in (TokenRole.VIEWER, TokenRole.ADMIN):
                        status, text = await served.get(path, role=role)
                        if status == 403:
                            continue
                        assert status == 200, (path, status, text[:300])
                        assert leaks(text) == [], (path, leaks(text))
                        read += 1
            assert read >= 20
            # Every GET page of the dashboard, with a session.
            cookie = await served.session()
            pages = 0
            for ui_route in UI_ROUTE_TABLE:
                if ui_route.method != "GET" or ui_route.path in ("/login", "/static/{name}"):
                    continue
                for path in _filled(f"/ui{ui_route.path}", values, by_inline):
                    status, text = await served.get(path, role=None, cookie=cookie)
                    assert status in (200, 303), (path, status, text[:300])
                    assert leaks(text) == [], (path, leaks(text))
                    pages += 1
            assert pages >= 10
            shown = json.loads((await served.get("/api/v1/scenarios/walk-url"))[1])
            assert shown["document"]["target"]["request"]["headers"]["x-api-key"] == "***"
            assert by_url["target_url"] == f"http://alice:***@{address}"

        # The CLI: a file with literals and a reference, run for real; its output, JSON and report.
        cli_file = tmp_path / "walk-cli.yaml"
        cli_file.write_text(yaml.safe_dump(for_the_cli(address)))
        env = {**os.environ, "CLIFFWATCH_LOG_FORMAT": "json", "CLIFFWATCH_LOG_LEVEL": "debug",
               "CLIFFWATCH_STATE_DIR": str(tmp_path / "cli-state"),
               REFERENCE_VARIABLE: SECRETS["reference"]}  # fmt: skip
        env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)
        outputs = []
        for args in (("-v", "run", str(cli_file), "--json", str(tmp_path / "cli.json")),
                     ("report", str(tmp_path / "cli.json"), "-o", str(tmp_path / "cli.html")),
                     ("validate", str(cli_file))):  # fmt: skip
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "cliffwatch", *args, cwd=REPO, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(process.communicate(), 90)
            assert process.returncode in (0, 1), (args, out.decode(), err.decode())
            outputs += [out.decode(), err.decode()]
        cli_sent = recorder.headers_of("cli")
        assert cli_sent
        assert {(h["Authorization"], h["x-api-key"], h["X-Walk-Ref"]) for h in cli_sent} == {
            (basic("carol", SECRETS["cli_password"]), SECRETS["cli_key"], SECRETS["reference"])
        }
        for text in (*outputs, (tmp_path / "cli.json").read_text(), (tmp_path / "cli.html").read_text()):
            assert leaks(text) == [], (leaks(text), text[:500])
        assert f"http://carol:***@{address}" in (tmp_path / "cli.json").read_text()

    # The service's log lines; and a resolved reference was never stored.
    logged = log_lines.getvalue()
    assert '"run ended"' in logged
    assert leaks(logged) == [], [line for line in logged.splitlines() if leaks(line)][:3]
    stored = b"".join(p.read_bytes() for p in sorted(database.parent.iterdir()) if p.name.startswith("walk.db"))
    assert SECRETS["reference"].encode() not in stored


def _filled(path: str, values: dict[str, list[str]], inline_run: dict[str, Any]) -> Iterator[str]:
    """``path`` with each of its parameters taken in turn from ``values`` (one path per value), plus the
    scenario by the hash of the inline run's version, and trends of each scenario."""
    names = re.findall(r"{(\w+)}", path)
    if not names:
        if path.endswith("/compare"):  # a run against itself: both sides' documents shown
            yield f"{path}?a={inline_run['id']}&b={inline_run['id']}"
            return
        yield path
        if path.endswith("/trends"):
            yield f"{path}?scenario=walk-url"
        return
    assert len(names) == 1, path
    for value in values[names[0]]:
        yield path.replace(f"{{{names[0]}}}", value)
    if names[0] == "name" and path.startswith("/api"):
        yield path.replace("{name}", "walk-inline") + f"?hash={inline_run['scenario_hash']}"
    if names[0] == "run_id" and path.endswith("/outcomes"):
        yield path.replace("{run_id}", inline_run["id"]) + "?limit=500"


async def test_a_missing_secret_stops_a_cli_run_and_a_prepared_run_or_sweep_before_anything_is_sent(
    target: tuple[Recorder, str], tmp_path: Path
) -> None:
    """The CLI exits 3 naming the reference; ``prepare_run`` and ``prepare_sweep`` raise before even the
    pre-flight request, and once the variable is there, the pre-flight carries its value."""
    recorder, address = target
    document = missing(address)
    path = tmp_path / "missing.yaml"
    path.write_text(yaml.safe_dump(document))
    env = {**os.environ, "CLIFFWATCH_STATE_DIR": str(tmp_path / "state")}
    env.pop("CLIFFWATCH_ALLOWED_TARGETS", None)
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "cliffwatch", "run", str(path), cwd=REPO,
                                                   env=env, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 60)

    assert process.returncode == 3
    assert "target.request.headers.Authorization: env:TARGET_WALK_UNSET is not set" in err.decode()
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    settings = Settings(allowlist=allowlist, state_dir=tmp_path / "state")
    spec = parse_sweep_spec({"start": 1, "stop": 2, "arrival": "constant"})
    with pytest.raises(SecretsUnavailable, match="env:TARGET_WALK_UNSET is not set"):
        async with prepare_run(settings, parse_scenario(document), observer=CollectingObserver()):
            pass
    with pytest.raises(SecretsUnavailable, match="env:TARGET_WALK_UNSET is not set"):
        async with prepare_sweep(settings, parse_scenario(document), spec, observer=CollectingObserver()):
            pass
    assert recorder.received == []
    fine = replace(settings, secret_environment={"TARGET_WALK_UNSET": "now-set"})
    async with prepare_run(fine, parse_scenario(document), observer=CollectingObserver()) as prepared:
        await prepared.service.generator.preflight()
    async with prepare_sweep(fine, parse_scenario(document), spec, observer=CollectingObserver()) as sweep:
        assert sweep.target_url == f"http://{address}"  # prepare_sweep sends its pre-flight itself
    assert [h["Authorization"] for _, h in recorder.received] == ["now-set", "now-set"]
    assert time.monotonic() - started < 60


async def test_query_and_body_references_send_their_secrets_and_every_log_line_masks_them(
    tmp_path: Path, log_lines: io.StringIO
) -> None:
    """A query parameter and a body string written as references reach the target as their values (the query
    percent-encoded, after the path's own parameters); the result and the log lines at debug hold neither."""
    received: list[tuple[str, bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        received.append((request.path_qs, await request.read()))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with TestServer(app, host="127.0.0.1") as server:
        document = {
            "name": "walk-query", "seed": 1, "slo": {"e2e_ms": 1000, "timeout_ms": 2000},
            "target": {"url": f"http://127.0.0.1:{server.port}", "api": "http", "request": {
                "method": "POST", "path": "/ask?page=2",
                "query": {"key": {"secret": "env:TARGET_QUERY_KEY"}, "n": 1},
                "body": {"auth": {"token": {"secret": "file:/run/secrets/body"}}, "q": "hello"}}},
            "phases": [{"name": "calm", "role": "baseline", "duration_s": 1,
                        "arrival": {"process": "constant", "rate": 2}}],
        }  # fmt: skip
        allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
        assert allowlist is not None
        secrets_dir = tmp_path / "secrets"
        secrets_dir.mkdir()
        settings = Settings(allowlist=allowlist, state_dir=tmp_path / "state", secret_dirs=(secrets_dir,),
                            secret_environment={"TARGET_QUERY_KEY": "q&k=1 2"})  # fmt: skip
        (secrets_dir / "body").write_text("body-token-77\n")
        document["target"]["request"]["body"]["auth"]["token"] = {"secret": f"file:{secrets_dir / 'body'}"}
        chosen = parse_scenario(document)
        configure_logging(level="debug", fmt="json", stream=log_lines, rules=settings.redaction)
        async with prepare_run(settings, chosen, observer=CollectingObserver()) as prepared:
            result = await prepared.service.execute(chosen, run_id=prepared.run_id, target_url=prepared.target_url)
            logging.getLogger("walk").warning("sent http://x/ask?page=2&token=body-token-77 with q&k=1 2")

    assert result.status.value == "succeeded"
    sent = [(path, body) for path, body in received if path != "/"]  # the pre-flight asks the root
    assert len(sent) == 2
    for path, body in sent:
        assert path == "/ask?page=2&key=q%26k%3D1%202&n=1"
        assert json.loads(body) == {"auth": {"token": "body-token-77"}, "q": "hello"}
    shown = json.dumps(result.to_dict()) + log_lines.getvalue()
    assert "sent http://x/ask?page=2&token=***" in log_lines.getvalue()
    assert "body-token-77" not in shown
    assert "q&k=1 2" not in shown
