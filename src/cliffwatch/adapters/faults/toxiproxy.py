"""An asyncio client for Toxiproxy's HTTP API (v2.12): proxies, toxics, and nothing that touches the rest.

Every call is bounded: one attempt lasts at most ``timeout_s``; timeouts, connection errors and 5xx answers
are retried ``retries`` times with a short backoff, because Toxiproxy's API can stall while it removes a toxic
under traffic (Shopify/toxiproxy#558, #500). What still fails becomes ``FaultInjectionFailed`` naming the
server, the proxy, the toxic and the status. Toxiproxy's own 4xx validation messages are passed on, not
retried: asking again would get the same answer.

The server may be shared, so the client never calls ``POST /reset`` (it clears every proxy's toxics) and
never takes over a proxy it was not asked to: ``ensure_proxy`` and ``populate`` refuse an existing proxy
whose upstream or listen address differs, where Toxiproxy itself would silently replace it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
import structlog
from yarl import URL

from cliffwatch.domain.errors import FaultInjectionFailed
from cliffwatch.domain.scenario.faults import ProxySpec, ProxyState, ToxicState, proxy_matches

log = structlog.get_logger(__name__)
T = TypeVar("T")

ANY_PROXY = "*"  # the ``proxy`` of errors from calls about the server rather than one proxy
BACKOFF_S = 0.1  # doubled after each failed attempt: 0.1 s, 0.2 s, … — a stall is either brief or hopeless
# Hosts that Toxiproxy turns into another spelling once it has bound the address.


@dataclass(frozen=True, kw_only=True)
class _Answer:
    """An answer below 500, with what the error messages about it need to say."""

    status: int
    text: str
    attempts: int  # more than 1: an earlier attempt may have done the work before its answer was lost
    where: str  # "METHOD url"
    proxy: str
    toxic: str | None


class _Malformed(ValueError):
    """An answer that is not what Toxiproxy's API documents."""


class ToxiproxyClient:
    """``async with ToxiproxyClient(url) as client:`` — the ``ToxiproxyApi`` port, and the rest of the API.

    The client owns its ``aiohttp.ClientSession``: it is opened on entry and closed on exit. A call that gets
    no answer gives up after ``timeout_s × (retries + 1)`` plus the backoff (0.1 s, 0.2 s, …): 15.3 s with the
    defaults, 1.2 s with ``timeout_s=0.3``.
    """

    def __init__(self, url: str, *, timeout_s: float = 5.0, retries: int = 2, backoff_s: float = BACKOFF_S) -> None:
        if timeout_s <= 0 or retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be > 0, retries and backoff_s >= 0")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ToxiproxyClient:
        # trust_env stays off: an HTTP_PROXY meant for the internet must not reroute a loopback API
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # -- the server -------------------------------------------------------------------------------------

    async def version(self) -> str:
        """The server's version string, e.g. ``"2.12.0"`` (``"git"`` for a build without one)."""
        answer = await self._call("GET", "/version", proxy=ANY_PROXY)
        return self._json(answer, 200, lambda data: _text(_object(data, "the version"), "version"))

    async def proxies(self) -> dict[str, ProxyState]:
        """Every proxy on the server by name, each with its toxics."""
        return self._json(await self._call("GET", "/proxies", proxy=ANY_PROXY), 200, _proxies_from)

    # -- proxies ----------------------------------------------------------------------------------------

    async def get_proxy(self, name: str) -> ProxyState | None:
        """The proxy with its toxics, or None when there is no such proxy."""
        answer = await self._call("GET", _proxy_path(name), proxy=name)
        return None if answer.status == 404 else self._json(answer, 200, _proxy_from)

    async def create_proxy(self, *, name: str, listen: str, upstream: str, enabled: bool = True) -> ProxyState:
        """Creates a proxy; the answer's ``listen`` has the actual port when ``listen`` asked for port 0.

        Raises ``FaultInjectionFailed`` (status 409) when a proxy of that name exists — ``ensure_proxy``
        reuses a matching one instead — unless only a retry of this very call found it, with our settings.
        """
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": enabled}
        answer = await self._call("POST", "/proxies", proxy=name, body=body)
        if answer.status == 409 and answer.attempts > 1:
            existing = await self.get_proxy(name)
            if existing is not None and proxy_matches(existing, listen=listen, upstream=upstream):
                return existing
        return self._json(answer, 201, _proxy_from)

    async def ensure_proxy(self, name: str, listen: str, upstream: str) -> tuple[ProxyState, bool]:
        """The proxy ``name`` and whether this call created it.

        An existing proxy is reused when its upstream is ``upstream`` and its listen address is ``listen``
        (any address when ``listen`` asks for port 0). One that differs belongs to someone else: it is left
        alone and ``FaultInjectionFailed`` is raised.
        """
        existing = await self.get_proxy(name)
        if existing is None:
            try:
                return await self.create_proxy(name=name, listen=listen, upstream=upstream), True
            except FaultInjectionFailed as exc:
                if exc.status != 409:
                    raise
            existing = await self.get_proxy(name)  # created meanwhile by someone else: theirs, or a twin
            if existing is None:
                raise FaultInjectionFailed(
                    proxy=name, toxic=None, reason=f"{self.url}: the proxy appeared and vanished while creating it"
                )
        if not proxy_matches(existing, listen=listen, upstream=upstream):
            raise self._taken(existing, listen=listen, upstream=upstream)
        return existing, False

    async def update_proxy(
        self, name: str, *, listen: str | None = None, upstream: str | None = None, enabled: bool | None = None
    ) -> ProxyState:
        """Changes what is given (a new listen or upstream restarts the proxy); returns the proxy after."""
        body: dict[str, Any] = {"listen": listen, "upstream": upstream, "enabled": enabled}
        body = {key: value for key, value in body.items() if value is not None}
        return self._json(await self._call("PATCH", _proxy_path(name), proxy=name, body=body), 200, _proxy_from)

    async def delete_proxy(self, name: str) -> bool:
        """Deletes the proxy (and its toxics); False when it was already gone."""
        answer = await self._call("DELETE", _proxy_path(name), proxy=name)
        return answer.status != 404 and self._json(answer, 204, lambda _: True)

    async def populate(self, proxies: Iterable[ProxySpec]) -> list[ProxyState]:
        """Creates the missing proxies in one ``POST /populate``; returns all of them in the order given.

        Existing proxies are reused on the same terms as ``ensure_proxy`` and not sent: Toxiproxy would
        restart one whose listen asked for port 0 on a new port, and replace one that differs. A proxy created
        by someone else between the check and the call is still replaced by Toxiproxy — the API has no
        conditional create.
        """
        wanted = list(proxies)
        names = ", ".join(spec.name for spec in wanted) or ANY_PROXY
        missing_upstream = [spec.name for spec in wanted if spec.upstream is None]
        if missing_upstream:
            raise FaultInjectionFailed(proxy=names, toxic=None, reason=f"no upstream for {', '.join(missing_upstream)}")
        existing = await self.proxies()
        for spec in wanted:
            found = existing.get(spec.name)
            if found is not None and not proxy_matches(found, listen=spec.listen, upstream=spec.upstream or ""):
                raise self._taken(found, listen=spec.listen, upstream=spec.upstream or "")
        body = [
            {"name": spec.name, "listen": spec.listen, "upstream": spec.upstream}
            for spec in wanted
            if spec.name not in existing
        ]
        if body:
            answer = await self._call("POST", "/populate", proxy=names, body=body)
            existing.update(self._json(answer, 201, _populated_from))
        return [existing[spec.name] for spec in wanted]

    # -- toxics -----------------------------------------------------------------------------------------

    async def toxics(self, proxy: str) -> list[ToxicState]:
        """The proxy's toxics; raises ``FaultInjectionFailed`` (404) when there is no such proxy."""
        answer = await self._call("GET", _proxy_path(proxy) + "/toxics", proxy=proxy)
        return self._json(answer, 200, _toxics_from)

    async def add_toxic(self, proxy: str, toxic: ToxicState) -> ToxicState:
        """Adds the toxic; returns it as Toxiproxy stored it (attributes it filled in included)."""
        body = {
            "name": toxic.name,
            "type": toxic.type,
            "stream": toxic.stream,
            "toxicity": toxic.toxicity,
            "attributes": dict(toxic.attributes),
        }
        answer = await self._call("POST", _proxy_path(proxy) + "/toxics", proxy=proxy, toxic=toxic.name, body=body)
        if answer.status == 409 and answer.attempts > 1:
            found = next((t for t in await self.toxics(proxy) if t.name == toxic.name), None)
            if found is not None and _toxic_matches(found, toxic):
                return found
        return self._json(answer, 200, _toxic_from)

    async def update_toxic(
        self, proxy: str, name: str, *, toxicity: float | None = None, attributes: Mapping[str, int] | None = None
    ) -> ToxicState:
        """Changes the toxicity and the attributes given (the others keep their values); returns the toxic."""
        body: dict[str, Any] = {}
        if toxicity is not None:
            body["toxicity"] = toxicity
        if attributes is not None:
            body["attributes"] = dict(attributes)
        answer = await self._call("PATCH", _toxic_path(proxy, name), proxy=proxy, toxic=name, body=body)
        return self._json(answer, 200, _toxic_from)

    async def remove_toxic(self, proxy: str, name: str) -> bool:
        """Removes the toxic; False when it (or its proxy) was already gone, which is as good as removed."""
        answer = await self._call("DELETE", _toxic_path(proxy, name), proxy=proxy, toxic=name)
        return answer.status != 404 and self._json(answer, 204, lambda _: True)

    # -- transport --------------------------------------------------------------------------------------

    async def _call(
        self, method: str, path: str, *, proxy: str, toxic: str | None = None, body: object = None
    ) -> _Answer:
        """One API call with bounded retries; any answer below 500 is returned for the caller to judge."""
        if self._session is None:
            raise RuntimeError("ToxiproxyClient is used outside `async with`")
        url = URL(self.url + path, encoded=True)
        status: int | None = None
        reason = ""
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 2))
            try:
                async with asyncio.timeout(self.timeout_s):
                    async with self._session.request(method, url, json=body) as response:
                        text = await response.text(errors="replace")
            except TimeoutError:
                status, reason = None, f"no answer within {self.timeout_s:g}s"
            except aiohttp.ClientError as exc:
                status, reason = None, f"cannot reach the server: {str(exc) or type(exc).__name__}"
            else:
                if response.status < 500:
                    where = f"{method} {url}"
                    return _Answer(
                        status=response.status, text=text, attempts=attempt, where=where, proxy=proxy, toxic=toxic
                    )
                status, reason = response.status, _error_message(text)
            if attempt < attempts:
                log.warning("toxiproxy.retry", method=method, url=str(url), attempt=attempt, reason=reason)
        raise FaultInjectionFailed(
            proxy=proxy, toxic=toxic, status=status, reason=f"{method} {url}: {reason} (after {attempts} attempts)"
        )

    def _json(self, answer: _Answer, status: int, parse: Callable[[object], T]) -> T:
        """``parse`` of the answer's JSON body when the status is ``status``; ``FaultInjectionFailed`` if not."""
        if answer.status != status:
            reason = f"{answer.where}: Toxiproxy says: {_error_message(answer.text)}"
            raise FaultInjectionFailed(proxy=answer.proxy, toxic=answer.toxic, status=answer.status, reason=reason)
        try:
            return parse(json.loads(answer.text) if answer.text.strip() else None)
        except ValueError as exc:  # json.JSONDecodeError and _Malformed are both ValueErrors
            reason = f"{answer.where}: unexpected answer ({exc}): {answer.text[:200]!r}"
            raise FaultInjectionFailed(
                proxy=answer.proxy, toxic=answer.toxic, status=answer.status, reason=reason
            ) from exc

    def _taken(self, found: ProxyState, *, listen: str, upstream: str) -> FaultInjectionFailed:
        return FaultInjectionFailed(
            proxy=found.name,
            toxic=None,
            status=409,
            reason=f"{self.url} already has this proxy with listen {found.listen} and upstream {found.upstream}, "
            f"not listen {listen} and upstream {upstream}; it belongs to someone else and is left alone",
        )


def _proxy_path(name: str) -> str:
    # quoted whole: a name with "/" or "?" must stay one path segment, not change the route
    return f"/proxies/{quote(name, safe='')}"


def _toxic_path(proxy: str, name: str) -> str:
    return f"{_proxy_path(proxy)}/toxics/{quote(name, safe='')}"


def _error_message(text: str) -> str:
    """Toxiproxy's ``{"error": ..., "status": ...}`` message, or the start of whatever else came back."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return text.strip()[:200] or "(empty answer)"


def _toxic_matches(found: ToxicState, wanted: ToxicState) -> bool:
    """Whether a stored toxic is the one asked for (Toxiproxy fills in attributes that were left out)."""
    return (found.type, found.stream, found.toxicity) == (wanted.type, wanted.stream, wanted.toxicity) and all(
        found.attributes.get(key) == value for key, value in wanted.attributes.items()
    )


# -- parsing Toxiproxy's answers (raise _Malformed on anything the API does not document) -----------------


def _object(data: object, what: str) -> dict[str, object]:
    if not isinstance(data, dict):
        raise _Malformed(f"{what} is not a JSON object")
    return data


def _text(data: dict[str, object], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _Malformed(f"{key!r} is not a string")
    return value


def _toxic_from(data: object) -> ToxicState:
    toxic = _object(data, "the toxic")
    toxicity = toxic.get("toxicity", 1.0)
    if isinstance(toxicity, bool) or not isinstance(toxicity, int | float):
        raise _Malformed("'toxicity' is not a number")
    attributes: dict[str, int] = {}
    for key, value in _object(toxic.get("attributes", {}), "'attributes'").items():
        # Toxiproxy's attributes are Go int64s; JSON may still spell one as 5.0
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise _Malformed(f"attribute {key!r} is not an integer")
        attributes[key] = int(value)
    return ToxicState(
        name=_text(toxic, "name"),
        type=_text(toxic, "type"),
        stream=_text(toxic, "stream"),
        toxicity=float(toxicity),
        attributes=attributes,
    )


def _toxics_from(data: object) -> list[ToxicState]:
    if not isinstance(data, list):
        raise _Malformed("the toxics are not a JSON array")
    return [_toxic_from(item) for item in data]


def _proxy_from(data: object) -> ProxyState:
    proxy = _object(data, "the proxy")
    enabled = proxy.get("enabled")
    if not isinstance(enabled, bool):
        raise _Malformed("'enabled' is not a boolean")
    toxics = proxy.get("toxics")
    return ProxyState(
        name=_text(proxy, "name"),
        listen=_text(proxy, "listen"),
        upstream=_text(proxy, "upstream"),
        enabled=enabled,
        toxics=tuple(_toxics_from([] if toxics is None else toxics)),  # Go marshals an empty slice as null
    )


def _proxies_from(data: object) -> dict[str, ProxyState]:
    return {name: _proxy_from(item) for name, item in _object(data, "the proxy list").items()}


def _populated_from(data: object) -> dict[str, ProxyState]:
    proxies = _object(data, "the populate answer").get("proxies")
    if proxies is None:
        return {}
    if not isinstance(proxies, list):
        raise _Malformed("'proxies' is not a JSON array")
    return {proxy.name: proxy for proxy in map(_proxy_from, proxies)}
