"""The API under test: the real app and services over one ``InMemoryStore`` with a token of each role, and
the check every response goes through against the OpenAPI document. Nothing executes runs here (no
worker): runs just queue, and a "finished" run is finished through the store, as a worker would, with a
real result document.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import yaml
from aiohttp.test_utils import TestClient, TestServer

from cliffwatch.adapters.api import ApiServices, ServiceMetrics, create_app
from cliffwatch.adapters.documents import off_loop
from cliffwatch.adapters.documents.scenario_files import BUNDLED_DIR
from cliffwatch.adapters.network.target_policies import AllowlistPolicy
from cliffwatch.adapters.scheduler.cron import ApschedulerCron
from cliffwatch.config import Settings
from cliffwatch.domain.capacity.capacity import StepVerdict
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.histogram import Histogram
from cliffwatch.domain.outcomes import NS_PER_MS, Attempt, Outcome, RequestRecord, TokenSource
from cliffwatch.domain.results.metrics import RunAggregator
from cliffwatch.domain.results.result import RunResult, RunStatus
from cliffwatch.domain.results.scoring import score_run
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import parse_scenario
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, parse_allowlist
from cliffwatch.domain.server.server_view import ServerView
from cliffwatch.domain.service.runs import Run, Schedule, TokenRole, Trigger
from cliffwatch.domain.traffic.generator_health import GeneratorLimits, judge_generator
from cliffwatch.domain.traffic.plan import iter_plan, phase_windows
from cliffwatch.services.catalog import ScenarioCatalog
from cliffwatch.services.gamedays import GamedaysService
from cliffwatch.services.memory_store import InMemoryStore
from cliffwatch.services.memory_sweep import ModelStepRunner
from cliffwatch.services.runs import RunsService
from cliffwatch.services.schedules import ScheduleService
from cliffwatch.services.sweep_progress import SweepProgress
from cliffwatch.services.tokens import TokenService
from cliffwatch.services.trends import TrendsService
from cliffwatch.services.worker import run_end
from openapi_kit import DOCUMENT, operation, resolve

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
PROBLEM_JSON = "application/problem+json"
FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    # RFC 3339: a full date and time with an offset (jsonschema checks this format only with extra packages).
    if not isinstance(value, str):
        return True
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", value):
        raise ValueError(f"not an RFC 3339 date-time: {value!r}")
    datetime.fromisoformat(value)
    return True


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    body: Any  # parsed JSON, or the text for other media types
    operation: str | None  # "GET /api/v1/runs/{run_id}", None for paths the document does not have


def assert_conforms(method: str, path: str, status: int, headers: Mapping[str, str], text: str) -> Reply:
    """Checks a real response against the OpenAPI document: a documented status (or the default), a
    documented media type, the required headers, and the body valid against the schema. Errors must be
    problem+json whatever the path."""
    media = headers.get("Content-Type", "").split(";")[0].strip()
    body: Any = json.loads(text) if media.endswith("json") else text
    if status >= 400:
        assert media == PROBLEM_JSON, (status, media, text)
        assert body["status"] == status
        assert body["type"].startswith("tag:cliffwatch.dev,2026:problem:")
        assert body["title"]
        assert body["detail"]
    found = operation(method, path.split("?")[0])
    if found is None:
        assert status in (401, 404, 405), f"{method} {path} is not in the document but answered {status}"
        return Reply(status=status, headers=headers, body=body, operation=None)
    template, documented = found
    responses = documented["responses"]
    spec = resolve(responses.get(str(status)) or responses["default"])
    assert str(status) in responses or status >= 500, f"{method} {template}: status {status} is not documented"
    for name, header in spec.get("headers", {}).items():
        if header.get("required"):
            assert name in headers, f"{method} {template} {status}: no {name} header"
    if "content" not in spec:
        assert text == "", f"{method} {template} {status}: a body where none is documented"
    else:
        assert media in spec["content"], f"{method} {template} {status}: {media} is not documented"
        schema = {"components": DOCUMENT["components"], "allOf": [spec["content"][media]["schema"]]}
        jsonschema.validate(body, schema, cls=jsonschema.Draft202012Validator, format_checker=FORMATS)
    return Reply(status=status, headers=headers, body=body, operation=f"{method} {template}")


class TickingClock:
    """Each reading is one second after the last, so every stored time is distinct and in call order."""

    def __init__(self, start: datetime = START) -> None:
        self.at = start

    def __call__(self) -> datetime:
        self.at += timedelta(seconds=1)
        return self.at


async def _never_fires(schedule: Schedule, fire_time: datetime) -> Run:
    raise AssertionError(f"the API must never fire a schedule ({schedule.id} at {fire_time})")


def bundled_documents() -> dict[str, Mapping[str, Any]]:
    return {p.name: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(BUNDLED_DIR.glob("*.yaml"))}


def small_scenario(name: str = "api-small", *, rate: float = 4, target: str = "builtin") -> dict[str, Any]:
    """A short, valid scenario document (three phases, a few requests each)."""
    return {
        "name": name,
        "seed": 7,
        "slo": {"e2e_ms": 1000, "timeout_ms": 3000, "ttft_ms": 500},
        "target": {"url": target, "api": "openai-chat", "request": {"model": "m", "max_tokens": 10}},
        "phases": [
            {"name": "calm", "role": "baseline", "duration_s": 2, "arrival": {"process": "constant", "rate": rate}},
            {"name": "burst", "role": "stress", "duration_s": 1, "arrival": {"process": "constant", "rate": rate}},
            {"name": "after", "role": "recovery", "duration_s": 2, "arrival": {"process": "constant", "rate": rate}},
        ],
    }


@dataclass
class Api:
    """The served app and what a test needs around it."""

    client: TestClient[Any, Any]
    store: InMemoryStore
    services: ApiServices
    settings: Settings
    tokens: dict[TokenRole, str]
    clock: TickingClock
    not_ready: list[str] = field(default_factory=list)

    def auth(self, role: TokenRole = TokenRole.ADMIN) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    async def call(
        self,
        method: str,
        path: str,
        *,
        role: TokenRole | None = TokenRole.ADMIN,
        headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Reply:
        """One request as ``role`` (None: no token); the response is checked against the OpenAPI document."""
        sent = {**(self.auth(role) if role is not None else {}), **(headers or {})}
        async with self.client.request(method, path, headers=sent, **kwargs) as response:
            text = await response.text()
            return assert_conforms(method, path, response.status, response.headers, text)

    async def queue(
        self, body: Mapping[str, Any] | None = None, *, role: TokenRole = TokenRole.OPERATOR
    ) -> dict[str, Any]:
        """Queues a run (by default the bundled burst-storm) and returns it."""
        reply = await self.call("POST", "/api/v1/runs", role=role, json=body or {"scenario": "burst-storm"})
        assert reply.status == 202, reply.body
        run: dict[str, Any] = reply.body
        return run

    async def finish(
        self,
        run_id: str,
        *,
        document: Mapping[str, Any] | None = None,
        redirect_every: int = 0,
        server: ServerView | None = None,
    ) -> list[RequestRecord]:
        """Claims and ends the run as a worker would (it must be the oldest queued one, as claims take that):
        its outcomes stored, a real result recorded; every ``redirect_every``-th request (by id) was answered
        with a 307 that was not followed, the others on time."""
        run = await self.store.get_run(run_id)
        assert run is not None
        scenario = parse_scenario(document or small_scenario(run.scenario_name))
        claimed = await self.store.claim_run(
            owner="test", now=self.clock(), lease_until=self.clock() + timedelta(seconds=60)
        )
        assert claimed is not None
        assert claimed.id == run_id
        records = [
            _redirected(r.id, r.phase, r.scheduled_ns)
            if redirect_every and r.id % redirect_every == 0
            else _on_time(r.id, r.phase, r.scheduled_ns)
            for r in iter_plan(scenario)
        ]
        aggregator = RunAggregator(phase_windows(scenario), e2e_ms=scenario.slo.e2e_ms, fast_fail_ms=100)
        for record in records:
            aggregator.add(record)
        metrics = aggregator.result()
        started, finished = self.clock(), self.clock()
        result = RunResult(
            run_id=run_id, scenario=scenario, target_url=run.target_url, status=RunStatus.SUCCEEDED,
            abort_reason=None, started_at=started, finished_at=finished, duration_s=5.0, metrics=metrics,
            generator=judge_generator(Histogram(), max_stall_ms=1.0, cpu_busy=0.1, overflow=0,
                                      limits=GeneratorLimits()),
            score=score_run(metrics, slo=scenario.slo, spec=scenario.score, server=server), server=server,
        )  # fmt: skip
        await self.store.add_outcomes(run_id, records)
        assert await self.store.finish_run(run_id, owner="test", end=run_end(result, finished))
        return records


def _on_time(request_id: int, phase: int, scheduled_ns: int) -> RequestRecord:
    start = scheduled_ns + NS_PER_MS
    attempt = Attempt(
        number=1, sent_ns=start, end_ns=start + 200 * NS_PER_MS, failure=None, status=200,
        first_token_ns=start + 50 * NS_PER_MS, chunk_times_ns=(start + 60 * NS_PER_MS,), output_tokens=10,
        token_source=TokenSource.USAGE,
    )  # fmt: skip
    return RequestRecord(id=request_id, phase=phase, scheduled_ns=scheduled_ns, prompt_tokens=10, max_tokens=10,
                         attempts=(attempt,), outcome=Outcome.ON_TIME)  # fmt: skip


def _redirected(request_id: int, phase: int, scheduled_ns: int) -> RequestRecord:
    start = scheduled_ns + NS_PER_MS
    error = "HTTP 307 redirect to http://127.0.0.1:9/, not followed (client.follow_redirects)"
    attempt = Attempt(number=1, sent_ns=start, end_ns=start + 5 * NS_PER_MS, failure=FailureKind.REDIRECT, status=307,
                      error=error)  # fmt: skip
    return RequestRecord(id=request_id, phase=phase, scheduled_ns=scheduled_ns, prompt_tokens=10, max_tokens=10,
                         attempts=(attempt,), outcome=Outcome.REDIRECT)  # fmt: skip


def provisional_sweep(run_id: str, spec: SweepSpec, rates: Sequence[float], *, capacity: float = 6.0,
                      scenario: str = "burst-storm") -> dict[str, Any]:  # fmt: skip
    """The provisional document a worker stores after measuring ``rates`` (one trial each, the first variant)
    of a bundled scenario against a target of ``capacity`` req/s (``ModelStepRunner``)."""
    parsed = parse_scenario(bundled_documents()[f"{scenario}.yaml"])
    progress = SweepProgress(sweep_id=run_id, scenario=parsed, spec=spec, target_url="http://127.0.0.1:1",
                             started_at=START)  # fmt: skip
    model = ModelStepRunner(capacity=capacity, step_s=spec.step_s)
    for rate in rates:
        progress.step_finished(spec.variants[0], model.step(rate, 1), StepVerdict.UNSURE)
    return progress.document(START + timedelta(seconds=10 * len(rates)))


def make_settings(**changes: Any) -> Settings:
    allowlist, problems = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None, problems
    return Settings(allowlist=allowlist, **changes)


@dataclass
class Parts:
    """The services of one API before it is served (a test may swap one, e.g. the run store)."""

    services: ApiServices
    store: InMemoryStore
    clock: TickingClock
    not_ready: list[str]
    tokens: dict[TokenRole, str]


async def build_parts(settings: Settings) -> Parts:
    clock = TickingClock()
    store = InMemoryStore(now=clock)
    catalog = ScenarioCatalog(store, now=clock, offload=off_loop)  # where the service validates documents
    await catalog.load_bundled(bundled_documents())
    tokens = TokenService(store, now=clock)
    not_ready: list[str] = []

    async def readiness() -> list[str]:
        return list(not_ready)

    runs = RunsService(runs=store, control=store, catalog=catalog,
                       policy=AllowlistPolicy(settings.allowlist, listen=settings.proxy_listen,
                                              toxiproxy_url=settings.toxiproxy_url),
                       caps=settings.caps, quotas=settings.quotas, now=clock)  # fmt: skip
    gamedays = GamedaysService(store=store, runs=runs, run_store=store, scenarios=store, control=store,
                               owner="api-harness", lease_s=settings.lease_s, now=clock)  # fmt: skip

    async def check_suite(suite: Mapping[str, Any]) -> None:
        await gamedays.check(suite, trigger=Trigger.SCHEDULE, triggered_by="schedule")

    services = ApiServices(
        runs=runs,
        gamedays=gamedays,
        catalog=catalog,
        tokens=tokens,
        schedules=ScheduleService(schedules=store, runs=store, scenarios=store, calendar=ApschedulerCron(),
                                  make_run=_never_fires, now=clock, check_suite=check_suite),
        trends=TrendsService(store, margin=settings.trend_regression_margin),
        run_store=store,
        readiness=readiness,
        metrics=ServiceMetrics(),
    )  # fmt: skip
    issued = {role: (await tokens.create(f"{role.value}-token", role))[1] for role in TokenRole}
    return Parts(services=services, store=store, clock=clock, not_ready=not_ready, tokens=issued)


@asynccontextmanager
async def serve(parts: Parts, settings: Settings) -> AsyncIterator[Api]:
    """The app on a free 127.0.0.1 port, with a client, for the length of the block."""
    app = create_app(parts.services, settings=settings)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield Api(client=client, store=parts.store, services=parts.services, settings=settings, tokens=parts.tokens,
                  clock=parts.clock, not_ready=parts.not_ready)  # fmt: skip
