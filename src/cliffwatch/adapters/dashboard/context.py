"""What the dashboard's handlers and middleware share: its services, its route rows, the logged-in user."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from aiohttp import web

from cliffwatch.adapters.api.context import ApiServices, Handler
from cliffwatch.config import Settings
from cliffwatch.domain.service.runs import ApiToken, TokenRole
from cliffwatch.domain.traffic.rate_limit import KeyedBuckets
from cliffwatch.services.sessions import SessionService, csrf_token


@dataclass(frozen=True, kw_only=True)
class DashboardServices:
    api: ApiServices  # the API's services: the dashboard calls exactly what the API calls
    sessions: SessionService


@dataclass(frozen=True, kw_only=True)
class UiRoute:
    """One row of the dashboard's route table: who may call it, and whether it answers JSON (polling)."""

    method: str
    path: str  # below the prefix, e.g. "/runs/{run_id}"
    handler: Handler
    role: TokenRole | None  # None: public (the login page, static files)
    json: bool = False  # a polling view: 401/403 as JSON rather than a redirect or a page


@dataclass(frozen=True, kw_only=True)
class User:
    """The logged-in user of this request: the session's token, and the session id (for its CSRF token)."""

    token: ApiToken
    session_id: str

    @property
    def csrf(self) -> str:
        return csrf_token(self.session_id)

    def can(self, role: TokenRole) -> bool:
        return self.token.role.allows(role)


UI_SERVICES = web.AppKey("ui_services", DashboardServices)
UI_SETTINGS = web.AppKey("ui_settings", Settings)
UI_ROUTES = web.AppKey[Mapping[web.AbstractRoute, UiRoute]]("ui_routes")
# Login attempts, per client address and per token tried (auth.login_wait).
LOGIN_LIMITS = web.AppKey("login_limits", KeyedBuckets)
# As in the API's middlewares: set for one request by the guard and reset when it ends.
USER: ContextVar[User | None] = ContextVar("cliffwatch_ui_user", default=None)


def ui_services(request: web.Request) -> DashboardServices:
    return request.app[UI_SERVICES]


def current_user(request: web.Request) -> User:
    """The logged-in user; only routes with a role have one."""
    found = USER.get()
    if found is None:
        raise RuntimeError(f"no logged-in user on {request.method} {request.path}")
    return found


def maybe_user() -> User | None:
    return USER.get()
