"""Scrapes the target's Prometheus endpoint on a fixed schedule during a run: ``PrometheusWatcher``.

The page is fetched with its own small aiohttp session whose resolver answers only the run's pins, so a
metrics URL reaches nothing the allowlist did not admit. Only the lines of the samples some series needs
are handed to ``prometheus_client``'s parser (the page of a real engine holds hundreds of histogram lines
that no series reads), so a scrape costs the event loop little however large the page. A scrape that fails
(refused, timed out, an error status, a page that does not parse) is counted with its reason and the run
goes on: the server's view is evidence, never a reason to lose a run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

import aiohttp
import structlog
from prometheus_client.parser import text_string_to_metric_families

from cliffwatch import __version__
from cliffwatch.adapters.loadgen.pinned_resolver import PinnedResolver
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.outcomes import NS_PER_S
from cliffwatch.domain.ports import Clock
from cliffwatch.domain.scenario.metric_expr import Samples
from cliffwatch.domain.scenario.metrics_spec import MetricsSpec, Signal
from cliffwatch.domain.server.server_view import ServerRecorder, ServerView

BACKLOG_SIGNALS = frozenset((Signal.WAITING, Signal.RUNNING))

log = structlog.get_logger(__name__)

MAX_PAGE = 16 * 1024 * 1024  # a metrics page larger than this is not read (and the scrape counts as failed)
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"  # the classic text format, which the parser reads


class ScrapeFailed(Exception):
    """One scrape did not give a page of samples; ``reason`` is what the result counts it under."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def parse_page(text: str, needed: frozenset[str] | None) -> Samples:
    """The samples of a text-format page, only those named in ``needed`` (every one when None), each under
    its name on the wire. Raises ``ScrapeFailed`` when the kept lines do not parse.

    The HELP and TYPE comments are dropped before parsing: without them the parser keeps every sample's
    name as written, where with them it would add ``_total`` to a counter that has none on the wire (TGI's,
    Triton's), and expressions name what a user reads on the page."""
    kept = "\n".join(_needed_lines(text.splitlines(), needed))
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(kept):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise ScrapeFailed(f"the page does not parse as Prometheus text: {str(exc)[:120]}") from exc
    return samples


def _needed_lines(lines: Iterable[str], needed: frozenset[str] | None) -> Iterable[str]:
    """The sample lines whose metric name is in ``needed`` (every sample line when None)."""
    for line in lines:
        if not line or line[0] == "#":
            continue
        if needed is None:
            yield line
            continue
        end = len(line)
        for mark in ("{", " ", "\t"):
            found = line.find(mark)
            if 0 <= found < end:
                end = found
        if line[:end] in needed:
            yield line


class PrometheusWatcher:
    """Implements the ``ServerWatcher`` port: scrapes ``url`` every ``spec.interval_ms`` between ``start``
    and ``stop``. Use as ``async with``; ``shown_url`` is the URL as results show it (no password)."""

    def __init__(
        self, spec: MetricsSpec, url: str, *, destinations: Destinations, shown_url: str, clock: Clock
    ) -> None:
        self.spec = spec
        self.clock = clock
        self.url = url
        self.shown_url = shown_url
        self.destinations = destinations
        self._session: aiohttp.ClientSession | None = None
        self._recorder: ServerRecorder | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PrometheusWatcher:
        await self.destinations.admit(self.url)
        connector = aiohttp.TCPConnector(limit=2, resolver=PinnedResolver(self.destinations), use_dns_cache=False)
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"Accept": ACCEPT, "User-Agent": f"cliffwatch/{__version__}"},
            trust_env=False,  # no proxy from the environment may route a scrape somewhere unchecked
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def check(self) -> str | None:
        """One scrape before any load: None when it gave a page, else why not (the run goes on without it
        until a scrape works)."""
        try:
            parse_page(await self._fetch(), needed=frozenset())
        except ScrapeFailed as exc:
            return f"the target's metrics at {self.shown_url} could not be scraped: {exc.reason}"
        return None

    def start(self, origin_ns: int) -> None:
        """Scrapes from now on, at ``origin_ns`` + k × interval (ns on the run's clock)."""
        if self._task is not None:
            raise RuntimeError("the watcher is already scraping")
        self._recorder = ServerRecorder(self.spec, url=self.shown_url)
        self._task = asyncio.create_task(self._loop(origin_ns, self._recorder), name="cliffwatch-scraper")

    async def stop(self) -> ServerView | None:
        """Stops scraping and returns what was scraped since ``start`` (None when it was never started)."""
        await self._cancel()
        recorder, self._recorder = self._recorder, None
        return None if recorder is None else recorder.view()

    async def backlog(self) -> float | None:
        """The server's waiting plus running requests by one scrape now (read as a run reads them: the
        engine's profile, detected from the page when ``engine: auto``); None when the page has neither."""
        try:
            text = await self._fetch()
        except ScrapeFailed:
            return None
        recorder = ServerRecorder(self.spec, url=self.shown_url)
        recorder.scraped(0.0, parse_page(text, None))
        values = [s.values[-1] for s in recorder.view().series if s.signal in BACKLOG_SIGNALS and s.values]
        held = [v for v in values if v is not None]
        return sum(held) if held else None

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self, origin_ns: int, recorder: ServerRecorder) -> None:
        interval_ns = round(self.spec.interval_ms * 1_000_000)
        due = max(0, self.clock.now_ns() - origin_ns)  # the first at the origin, or at once when that has passed
        while True:
            delay = (origin_ns + due - self.clock.now_ns()) / NS_PER_S
            if delay > 0:
                await asyncio.sleep(delay)
            sent = self.clock.now_ns()
            try:
                text = await self._fetch()
                samples = parse_page(text, recorder.needed())
            except ScrapeFailed as exc:
                recorder.failed((sent - origin_ns) / NS_PER_S, exc.reason)
            else:
                # The page was rendered between the request leaving and the answer arriving: take the middle.
                at = (sent + self.clock.now_ns()) // 2
                recorder.scraped((at - origin_ns) / NS_PER_S, samples)
            # The next due time after now: a slow scrape skips the slots it overran instead of bunching up.
            due = max(due + interval_ns, -(-(self.clock.now_ns() - origin_ns) // interval_ns) * interval_ns)

    async def _fetch(self) -> str:
        session = self._session
        if session is None:
            raise RuntimeError("PrometheusWatcher used outside 'async with'")
        try:
            async with asyncio.timeout(self.spec.timeout_ms / 1000.0):
                async with session.get(self.url, allow_redirects=False) as response:
                    if response.status != 200:
                        raise ScrapeFailed(f"HTTP {response.status}")
                    body = await response.content.read(MAX_PAGE + 1)
                    while len(body) <= MAX_PAGE and (more := await response.content.read(MAX_PAGE + 1 - len(body))):
                        body += more
        except TimeoutError as exc:
            raise ScrapeFailed(f"no page within {self.spec.timeout_ms:g} ms") from exc
        except aiohttp.ClientError as exc:
            raise ScrapeFailed(f"{type(exc).__name__}: {str(exc)[:120] or 'connection failed'}") from exc
        except OSError as exc:
            raise ScrapeFailed(f"{type(exc).__name__}: {str(exc)[:120]}") from exc
        if len(body) > MAX_PAGE:
            raise ScrapeFailed(f"the page is larger than {MAX_PAGE // (1024 * 1024)} MiB")
        return body.decode("utf-8", "replace")
