"""Logging in and out of the dashboard.

The login form takes an API token (never in a URL: POST only, and the field is not echoed back); a valid,
unrevoked token gets a new session (a new id at every login, so a planted cookie is worthless). The form
itself is protected against login CSRF by a double-submit value: a random nonce in an HttpOnly,
SameSite=Strict cookie and in a hidden field, which must match.

Login attempts are rate-limited per client address and per token tried (token buckets, settings
``CLIFFWATCH_UI_LOGIN_PER_MINUTE`` and ``CLIFFWATCH_UI_LOGIN_BURST``), before anything else is done with them:
over either, 429 with Retry-After. Every attempt counts, a good one too: each makes a session row, and one
stolen token tried from many addresses is held back as one guessed from a single address is.
"""

from __future__ import annotations

import hmac
import time

import structlog
from aiohttp import web

from cliffwatch.adapters.dashboard.context import LOGIN_LIMITS, current_user, ui_services
from cliffwatch.adapters.dashboard.render import render
from cliffwatch.adapters.dashboard.security import (
    LOGIN_COOKIE,
    LOGIN_PATH,
    SESSION_COOKIE,
    clear_cookie,
    new_login_nonce,
    safe_next,
    see_other,
    set_session_cookie,
)
from cliffwatch.domain.traffic.rate_limit import KeyedBuckets, retry_after_s
from cliffwatch.services.tokens import token_hash

log = structlog.get_logger(__name__)
MAX_TOKEN_LENGTH = 200


def _login_page(
    request: web.Request,
    *,
    status: int = 200,
    error: str | None = None,
    next_path: str,
    headers: dict[str, str] | None = None,
) -> web.Response:
    response = web.Response()  # only to carry the new cookie into the page's response
    nonce = new_login_nonce(request, response)
    page = render("login.html", status=status, headers=headers, nonce=nonce, error=error, next_path=next_path)
    for cookie in response.cookies.values():
        page.cookies[cookie.key] = cookie
    return page


async def login_form(request: web.Request) -> web.Response:
    return _login_page(request, next_path=safe_next(request.query.get("next")))


def login_wait(limits: KeyedBuckets, *, address: str | None, token: str | None, now_ns: int) -> float | None:
    """None when a login attempt from ``address`` with ``token`` may go ahead (counted against both), else the
    seconds until it may; an attempt the address's limit refuses is not counted against the token."""
    wait = limits.take(("address", address or "?"), now_ns)
    if wait is None and token:
        wait = limits.take(("token", token_hash(token)), now_ns)
    return wait


async def login(request: web.Request) -> web.Response:
    form = await request.post()
    token, nonce, next_path = form.get("token"), form.get("nonce"), safe_next(_text(form.get("next")))
    tried = token.strip() if isinstance(token, str) and len(token) <= MAX_TOKEN_LENGTH else None
    wait = login_wait(request.app[LOGIN_LIMITS], address=request.remote, token=tried, now_ns=time.monotonic_ns())
    if wait is not None:
        seconds = retry_after_s(wait)
        log.warning("dashboard login rate-limited", retry_after_s=seconds)  # neither the token nor a guess of it
        return _login_page(request, status=429, error=f"Too many login attempts: try again in {seconds} s.",
                           next_path=next_path, headers={"Retry-After": str(seconds)})  # fmt: skip
    expected = request.cookies.get(LOGIN_COOKIE)
    if not isinstance(nonce, str) or not expected or not hmac.compare_digest(nonce, expected):
        detail = "the login form expired or was not sent from this site: reload it and try again"
        return render("error.html", status=403, code=403, title="Forbidden", detail=detail)
    if not isinstance(token, str) or not token.strip() or len(token) > MAX_TOKEN_LENGTH:
        return _login_page(request, status=401, error="Enter an API token.", next_path=next_path)
    logged_in = await ui_services(request).sessions.login(token.strip())
    if logged_in is None:
        log.info("dashboard login refused")  # the token is never logged
        return _login_page(request, status=401, error="That token is unknown or revoked.", next_path=next_path)
    old = request.cookies.get(SESSION_COOKIE)
    if old:
        await ui_services(request).sessions.logout(old)  # one browser, one session
    log.info("dashboard login", caller=logged_in.token.name, role=logged_in.token.role.value)
    response = see_other(next_path)
    set_session_cookie(request, response, logged_in.session_id)
    clear_cookie(request, response, LOGIN_COOKIE)
    return response


async def logout(request: web.Request) -> web.Response:
    user = current_user(request)
    await ui_services(request).sessions.logout(user.session_id)
    log.info("dashboard logout", caller=user.token.name)
    response = see_other(LOGIN_PATH)
    clear_cookie(request, response, SESSION_COOKIE)
    return response


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
