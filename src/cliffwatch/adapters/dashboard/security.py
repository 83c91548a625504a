"""The dashboard's security: session cookie, CSRF, origin checks, response headers, and the guard.

- Session: the cookie ``cw_session`` holds a random id (HttpOnly, SameSite=Strict, Path=/ui, Secure unless
  ``ui_cookie_secure`` is off); the server keeps its hash, its expiry and its token (services/sessions.py).
- CSRF: every form carries the session's CSRF token; every POST with a session must carry it (403
  otherwise). The login form, which has no session yet, uses a double-submit cookie (``cw_login``).
- Origin: a POST whose ``Origin`` (or, without one, ``Referer``) names another host is refused (403).
- Roles: each route needs a role, as in the API; a user below it gets 403.
- Headers: a Content-Security-Policy allowing only our own scripts and styles (no inline script, no other
  origin, no framing), nosniff, no referrer beyond our origin, no caching of pages.
"""

from __future__ import annotations

import asyncio
import secrets
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from cliffwatch.adapters.api.context import Handler
from cliffwatch.adapters.api.problems import from_error
from cliffwatch.adapters.dashboard.context import UI_ROUTES, UI_SERVICES, UI_SETTINGS, USER, UiRoute, User
from cliffwatch.adapters.dashboard.render import error_page
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.services.sessions import csrf_matches

log = structlog.get_logger(__name__)

SESSION_COOKIE = "cw_session"
LOGIN_COOKIE = "cw_login"  # the login form's double-submit CSRF value
COOKIE_PATH = "/ui"
LOGIN_PATH = "/ui/login"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")  # fmt: skip
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class Redirect(Exception):
    """Ends a handler with a 303 to ``location`` (a path of ours)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def see_other(location: str, *, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=303, headers={"Location": location, "Cache-Control": "no-store", **(headers or {})})


def cookie_options(request: web.Request) -> dict[str, object]:
    return {"path": COOKIE_PATH, "httponly": True, "samesite": "Strict",
            "secure": request.app[UI_SETTINGS].ui_cookie_secure}  # fmt: skip


def set_session_cookie(request: web.Request, response: web.StreamResponse, session_id: str) -> None:
    # No Max-Age: a browser session cookie; the server's expiry is what counts.
    response.set_cookie(SESSION_COOKIE, session_id, **cookie_options(request))  # type: ignore[arg-type]


def clear_cookie(request: web.Request, response: web.StreamResponse, name: str) -> None:
    response.set_cookie(name, "", max_age=0, expires="Thu, 01 Jan 1970 00:00:00 GMT",
                        **cookie_options(request))  # type: ignore[arg-type]  # fmt: skip


def new_login_nonce(request: web.Request, response: web.StreamResponse) -> str:
    nonce = secrets.token_urlsafe(24)
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=1_800, **cookie_options(request))  # type: ignore[arg-type]
    return nonce


def same_origin(request: web.Request) -> bool:
    """False when the browser says the request comes from another origin (``Origin``, else ``Referer``).

    Compared by host and port only: behind a TLS-terminating proxy this process sees http, the browser
    https. Requests without either header (not a browser, or one that sends neither) pass: the CSRF token
    still guards them.
    """
    claimed = request.headers.get("Origin") or request.headers.get("Referer")
    if not claimed:
        return True
    if claimed == "null":
        return False  # an opaque origin: a sandboxed frame, a data: URL
    return urlsplit(claimed).netloc.lower() == request.host.lower()


def safe_next(value: str | None) -> str:
    """Where to go after logging in: a dashboard path only (no open redirect), else the runs page."""
    if value and value.startswith("/ui/") and not value.startswith("//") and "\\" not in value and "//" not in value:
        return value
    return "/ui/runs"


def _forbidden(route: UiRoute, detail: str) -> web.Response:
    if route.json:
        return web.json_response({"error": "forbidden", "detail": detail}, status=403)
    return error_page(403, "Forbidden", detail)


async def _guarded(request: web.Request, handler: Handler, route: UiRoute | None) -> web.StreamResponse:
    if route is None:
        return await handler(request)  # the router's 404 or 405
    if request.method == "POST" and not same_origin(request):
        return _forbidden(route, "this form was sent from another site")
    if route.role is None:
        return await handler(request)
    services = request.app[UI_SERVICES]
    session_id = request.cookies.get(SESSION_COOKIE, "")
    found = await services.sessions.resolve(session_id) if session_id else None
    if found is None:
        if route.json:
            return web.json_response({"error": "unauthenticated", "detail": "log in again"}, status=401)
        response = see_other(f"{LOGIN_PATH}?next={request.rel_url.path}" if request.method == "GET" else LOGIN_PATH)
        if session_id:
            clear_cookie(request, response, SESSION_COOKIE)
        return response
    _, token = found
    user = User(token=token, session_id=session_id)
    if request.method == "POST":
        form = await request.post()
        offered = form.get("csrf")
        if not csrf_matches(session_id, offered if isinstance(offered, str) else None):
            log.warning("dashboard csrf check failed", path=request.path, caller=token.name)
            return _forbidden(route, "the form's CSRF token is missing or wrong: reload the page and try again")
    if not token.role.allows(route.role):
        return _forbidden(route, f"this needs the {route.role.value} role; you are logged in as "
                                 f"{token.role.value}")  # fmt: skip
    reset = USER.set(user)
    try:
        with structlog.contextvars.bound_contextvars(caller=token.name):
            return await handler(request)
    finally:
        USER.reset(reset)


@web.middleware
async def ui_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authentication, CSRF and roles, then the handler; every error as an HTML page (or JSON for polling
    views), and the security headers on every answer."""
    route = request.app[UI_ROUTES].get(request.match_info.route)
    try:
        response = await _guarded(request, handler, route)
    except Redirect as redirect:
        response = see_other(redirect.location)
    except web.HTTPException as exc:  # the router's 404 and 405, aiohttp's 413
        detail = "there is no such page here" if exc.status == 404 else exc.text or ""
        response = error_page(exc.status, exc.reason, detail)
    except CliffwatchError as exc:
        mapped = from_error(exc)
        if mapped is None:
            log.exception("unexpected error", path=request.path, exc_info=exc)
            response = error_page(500, "Internal server error", "the failure has been logged")
        else:
            response = error_page(mapped.status, mapped.title, mapped.detail)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("unexpected error", path=request.path, exc_info=exc)
        response = error_page(500, "Internal server error", "the failure has been logged")
    if route is not None and route.json and response.status >= 400 and response.content_type == "text/html":
        response = web.json_response({"error": "failed", "status": response.status}, status=response.status)
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response
