"""The API's three middlewares, outermost first.

``observe``: gives each request its id (the client's ``X-Request-ID`` when it is sane, else a new one),
binds it to structlog's context, echoes it, logs one line per request and times it into the metrics.

``problems``: the one place an exception becomes an HTTP answer; every error leaves as
``application/problem+json``, and an unexpected one as a 500 that names nothing internal (it is logged).

``guard``: the token's request rate, bearer authentication and the route's role, the body size limit, and
the gate on expensive endpoints, in that order; so an unauthenticated caller learns nothing, not even which
paths exist, and a token over its rate is turned away before it costs a database lookup (its bucket is found
by the SHA-256 of the credential, which is the token's own stored hash when it is a token).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import structlog
from aiohttp import web

from cliffwatch.adapters.api.context import (
    CALLER,
    EXPENSIVE,
    FAILED_AUTH,
    REQUEST_ID,
    ROUTES,
    SELF_GUARDED,
    SERVICES,
    SETTINGS,
    TOKEN_RATES,
    Handler,
)
from cliffwatch.adapters.api.problems import ApiError, from_error, problem_response
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.service.runs import ApiToken, TokenRole
from cliffwatch.domain.traffic.rate_limit import retry_after_s
from cliffwatch.services.tokens import token_hash

log = structlog.get_logger(__name__)

_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
REALM = 'Bearer realm="cliffwatch"'
EXPENSIVE_RETRY_AFTER_S = 1
_QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})


def route_template(request: web.Request) -> str:
    """The matched route's template (``/api/v1/runs/{run_id}``), or ``unmatched``: never the raw path."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    offered = request.headers.get("X-Request-ID", "")
    request_id = offered if _SANE_REQUEST_ID.fullmatch(offered) else uuid.uuid4().hex
    started = time.perf_counter()
    reset = REQUEST_ID.set(request_id)
    try:
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            response = await handler(request)  # ``problems`` turns every error into a response
    finally:
        REQUEST_ID.reset(reset)
    response.headers["X-Request-ID"] = request_id
    seconds = time.perf_counter() - started
    route = route_template(request)
    request.app[SERVICES].metrics.observe_request(
        route=route, method=request.method, status=response.status, seconds=seconds
    )
    # Probes and scrapes come every few seconds from machines; a line each would drown the rest.
    emit = log.debug if route in _QUIET_ROUTES and response.status < 400 else log.info
    emit(
        "request served",
        request_id=request_id,
        method=request.method,
        route=route,
        status=response.status,
        duration_ms=round(seconds * 1000, 2),
    )
    return response


@web.middleware
async def problems(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        error = exc
    except CliffwatchError as exc:
        mapped = from_error(exc)
        error = mapped if mapped is not None else _internal(request, exc)
        if mapped is not None and mapped.status >= 500:
            log.error("request failed", error=str(exc), error_type=type(exc).__name__)
    except web.HTTPException as exc:  # the router's 404 and 405, aiohttp's 413 while reading a body
        error = _from_http(request, exc)
    except asyncio.CancelledError:
        raise  # the client went away or the server is stopping: there is nobody to answer
    except Exception as exc:
        error = _internal(request, exc)
    return problem_response(error, instance=request.path, request_id=REQUEST_ID.get())


def _internal(request: web.Request, exc: BaseException) -> ApiError:
    log.exception("unexpected error", method=request.method, route=route_template(request), exc_info=exc)
    return ApiError(
        500,
        "internal",
        "Internal server error",
        "the server failed to answer this request; it has been logged under this request_id",
    )


def _from_http(request: web.Request, exc: web.HTTPException) -> ApiError:
    if isinstance(exc, web.HTTPNotFound):
        return ApiError(404, "not-found", "Not found", f"no resource at {request.path}")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return ApiError(
            405,
            "method-not-allowed",
            "Method not allowed",
            f"{request.method} is not allowed on {request.path}; allowed: {allowed}",
            headers={"Allow": allowed},
        )
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return _too_large(request)
    return ApiError(exc.status, f"http-{exc.status}", exc.reason, exc.text or exc.reason)


def _too_large(request: web.Request) -> ApiError:
    limit = request.app[SETTINGS].api_max_body_bytes
    return ApiError(413, "body-too-large", "Request body too large", f"request bodies are limited to {limit} bytes")


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    route = request.app[ROUTES].get(request.match_info.route)
    if route is not None and route.role is None:
        return await handler(request)
    if route is None and any(app.get(SELF_GUARDED, False) for app in request.match_info.apps[1:]):
        return await handler(request)  # a sub-application with its own authentication (the dashboard)
    # Everything else needs a token, paths that do not exist included: 404 versus 401 would tell a caller
    # without a token which paths are real.
    credentials = _credentials(request)
    unknown = not request.app[SERVICES].tokens.known(credentials)
    if unknown:
        _within_failures(request)
    _within_rate(request, credentials)
    token = await _authenticate(request, credentials, count_failure=unknown)
    if route is None:
        return await handler(request)  # the router's 404 or 405
    needed = route.role or TokenRole.VIEWER  # never None here: public routes returned above
    if not token.role.allows(needed):
        raise _forbidden(token.role, needed)
    limit = request.app[SETTINGS].api_max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(request)  # refused before a byte of it is read
    # Bound for this request only (see context.CALLER).
    reset = CALLER.set(token)
    try:
        with structlog.contextvars.bound_contextvars(caller=token.name):
            return await _limited(request, handler, expensive=route.expensive)
    finally:
        CALLER.reset(reset)


async def _limited(request: web.Request, handler: Handler, *, expensive: bool) -> web.StreamResponse:
    if not expensive:
        return await handler(request)
    gate = request.app[EXPENSIVE]
    if not gate.try_acquire():
        raise ApiError(
            429,
            "overloaded",
            "Too many expensive requests",
            f"{gate.limit} expensive requests (outcomes, time series, trends) are being served already; "
            f"retry in {EXPENSIVE_RETRY_AFTER_S}s",
            headers={"Retry-After": str(EXPENSIVE_RETRY_AFTER_S)},
        )
    try:
        return await handler(request)
    finally:
        gate.release()


def _credentials(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, credentials = header.partition(" ")
    if not header or scheme.lower() != "bearer" or not credentials.strip():
        raise ApiError(
            401,
            "unauthenticated",
            "Authentication required",
            "this endpoint needs a bearer token: Authorization: Bearer <token>",
            headers={"WWW-Authenticate": REALM},
        )
    return credentials.strip()


def _within_rate(request: web.Request, credentials: str) -> None:
    """Takes one request from the credential's bucket; raises 429 ``rate-limited`` when it is empty."""
    buckets = request.app[TOKEN_RATES]
    wait_s = buckets.take(token_hash(credentials), time.monotonic_ns())
    if wait_s is None:
        return
    limit, seconds = buckets.limit, retry_after_s(wait_s)
    raise ApiError(
        429,
        "rate-limited",
        "Too many requests",
        f"this token may make {limit.rate:g} requests/s (bursts of {limit.burst:g}); retry in {seconds}s",
        headers={"Retry-After": str(seconds)},
    )


def _within_failures(request: web.Request) -> None:
    """Refuses (429) a token this instance does not know from an address that presented too many unknown ones
    lately, before it costs a lookup; takes nothing (only a failed lookup counts, in ``_authenticate``)."""
    buckets = request.app[FAILED_AUTH]
    wait_s = buckets.waiting(request.remote or "?", time.monotonic_ns())
    if wait_s is None:
        return
    seconds = retry_after_s(wait_s)
    raise ApiError(
        429,
        "rate-limited",
        "Too many requests",
        f"this address presented too many unknown tokens (at most {buckets.limit.burst:g} a minute); retry in "
        f"{seconds}s",
        headers={"Retry-After": str(seconds)},
    )


async def _authenticate(request: web.Request, credentials: str, *, count_failure: bool) -> ApiToken:
    token = await request.app[SERVICES].tokens.authenticate(credentials)
    if token is None:
        if count_failure:
            request.app[FAILED_AUTH].take(request.remote or "?", time.monotonic_ns())
        # The same answer for unknown and revoked tokens, and the token is never echoed or logged.
        raise ApiError(
            401,
            "invalid-token",
            "Invalid token",
            "the bearer token is unknown or revoked",
            headers={"WWW-Authenticate": f'{REALM}, error="invalid_token"'},
        )
    return token


def _forbidden(has: TokenRole, needs: TokenRole) -> ApiError:
    return ApiError(
        403,
        "forbidden",
        "TokenRole too low",
        f"this needs the {needs.value} role; the token has {has.value}",
        headers={"WWW-Authenticate": f'{REALM}, error="insufficient_scope"'},
    )
