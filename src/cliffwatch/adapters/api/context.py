"""What the API's handlers and middlewares share: the services bundle, the app keys, the route table's rows
and the gate that keeps expensive endpoints from piling up.

Kept apart from ``app.py`` so the middlewares and handlers can import the keys without importing the app
factory (which imports them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from aiohttp import web

from cliffwatch.adapters.api.metrics import ServiceMetrics
from cliffwatch.config import Settings
from cliffwatch.domain.gameday_ports import DeliveryStore
from cliffwatch.domain.ports import RunStore
from cliffwatch.domain.service.runs import ApiToken, TokenRole
from cliffwatch.domain.traffic.rate_limit import KeyedBuckets
from cliffwatch.services.catalog import ScenarioCatalog
from cliffwatch.services.gamedays import GamedaysService
from cliffwatch.services.runs import RunsService
from cliffwatch.services.schedules import ScheduleService
from cliffwatch.services.tokens import TokenService
from cliffwatch.services.trends import TrendsService

Readiness = Callable[[], Awaitable[list[str]]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, kw_only=True)
class ApiServices:
    """Everything the API calls, built by the bootstrap; the API opens and closes none of it."""

    runs: RunsService
    catalog: ScenarioCatalog
    tokens: TokenService
    schedules: ScheduleService
    trends: TrendsService
    run_store: RunStore  # for what no service wraps: outcomes, time series, counts for /metrics
    readiness: Readiness  # the problems that make this instance unready (database, migrations); [] when ready
    metrics: ServiceMetrics
    gamedays: GamedaysService | None = None  # game days (None: an API without them, as some tests build)
    deliveries: DeliveryStore | None = None  # webhook deliveries (None: an API that keeps none, as some tests build)


@dataclass(frozen=True, kw_only=True)
class Route:
    """One row of the route table: what it answers, who may call it, and whether it is expensive."""

    method: str
    path: str
    handler: Handler
    role: TokenRole | None  # None: public (liveness and readiness only)
    expensive: bool = False  # counted against Settings.api_max_expensive


class ConcurrencyGate:
    """At most ``limit`` holders at once; a caller over the limit is turned away at once, never queued.

    A queue in front of a saturated endpoint only turns a quick, honest 429 into a slow timeout, which is
    the failure mode cliffwatch measures in other services. The event loop is single-threaded and there is
    no await between the check and the increment, so a plain counter is enough.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a concurrency limit must be at least 1, got {limit}")
        self.limit = limit
        self.in_use = 0

    def try_acquire(self) -> bool:
        """True (and a slot taken) when there was room; False, and nothing taken, when full."""
        if self.in_use >= self.limit:
            return False
        self.in_use += 1
        return True

    def release(self) -> None:
        if self.in_use <= 0:
            raise RuntimeError("released a slot that was never taken")
        self.in_use -= 1


SERVICES = web.AppKey("services", ApiServices)
SETTINGS = web.AppKey("settings", Settings)
ROUTES = web.AppKey[Mapping[web.AbstractRoute, Route]]("routes")
EXPENSIVE = web.AppKey("expensive", ConcurrencyGate)
# The request rate of each bearer credential presented (its SHA-256: a token's own hash when it is one).
TOKEN_RATES = web.AppKey("token_rates", KeyedBuckets)
# Unknown bearer tokens per client address: made-up tokens cost a database lookup each, and a bucket each in
# TOKEN_RATES, so an address's flood of them is refused before either.
FAILED_AUTH = web.AppKey("failed_auth", KeyedBuckets)
# Set on a sub-application that authenticates its own requests (the dashboard's sessions): the bearer-token
# guard leaves them to it.
SELF_GUARDED = web.AppKey("self_guarded", bool)
# Per-request values, set by the middlewares and reset when the request ends. Context variables rather
# than request storage: aiohttp warns about string keys on requests, and its typed request keys are newer
# than the aiohttp this project supports. The middlewares reset each value when their request ends, so
# requests that share a context (aiohttp may serve a keep-alive connection's requests in one task) never
# see each other's values.
REQUEST_ID: ContextVar[str | None] = ContextVar("cliffwatch_api_request_id", default=None)
CALLER: ContextVar[ApiToken | None] = ContextVar("cliffwatch_api_caller", default=None)


def services(request: web.Request) -> ApiServices:
    return request.app[SERVICES]


def caller(request: web.Request) -> ApiToken:
    """The token that authenticated this request; only routes that need a role have one."""
    token = CALLER.get()
    if token is None:
        raise RuntimeError(f"no authenticated caller on {request.method} {request.path}")
    return token
