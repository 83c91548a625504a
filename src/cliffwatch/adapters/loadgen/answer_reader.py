"""How an attempt reads the target's answer: one hop sent, then its status, server-state headers and body read
into the ``AttemptState`` (a stream as it arrives, an error's message, a redirect followed or not).
``HttpExecutor`` (``http_client``) sends the hops and turns what failed on the way into the attempt's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import time
from collections.abc import Iterable

import aiohttp

from cliffwatch.adapters.loadgen.attempt_state import AttemptState
from cliffwatch.adapters.loadgen.attempt_trace import AttemptTrace
from cliffwatch.adapters.loadgen.openai_body import error_message, parse_completion
from cliffwatch.adapters.loadgen.openai_stream import OpenAIStream
from cliffwatch.adapters.loadgen.redirects import Hop, next_hop, shown_url
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.errors import CliffwatchError
from cliffwatch.domain.outcomes import CAP_REASON, TokenSource
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.server.state_headers import readings, watched
from cliffwatch.domain.traffic.rate_limit import TokenBucket

MAX_ERROR_BODY = 64 * 1024
MAX_BODY = 16 * 1024 * 1024
DRAIN_TIMEOUT_S = 0.5


class AnswerReader:
    """The executor's part that sends one hop and reads its answer, on the executor's state."""

    scenario: Scenario
    url: str
    stream: bool
    openai: bool
    tokens: float
    destinations: Destinations
    cap: TokenBucket | None
    capped_hops: int

    async def _exchange(
        self,
        session: aiohttp.ClientSession,
        hop: Hop,
        hops: int,
        state: AttemptState,
        timing: AttemptTrace,
        headers: dict[str, str],
    ) -> Hop | None:
        """Sends one hop and reads its answer into ``state``; returns the next hop when the answer is a
        redirect the scenario follows and the allowlist admits, else None (the attempt is over)."""
        async with session.request(
            hop.method, hop.url, data=hop.body, headers=hop.headers, trace_request_ctx=timing, allow_redirects=False
        ) as response:
            state.first_byte = time.perf_counter_ns()
            state.status = response.status
            state.state = server_state(response)
            if 300 <= response.status < 400:
                return await self._redirected(response, hop, hops, state, headers)
            if not 200 <= response.status < 300:
                await self._read_error(response, state)
            elif self.stream:
                await self._read_stream(response, state)
            else:
                await self._read_body(response, state)
        return None

    async def _redirected(
        self, response: aiohttp.ClientResponse, hop: Hop, hops: int, state: AttemptState, headers: dict[str, str]
    ) -> Hop | None:
        """A 3xx answer: the next hop when followed and admitted; otherwise the attempt ends as a redirect
        (or, for a hop the allowlist refuses, as refused, naming the URL), and nothing more is sent."""
        await _drain(response)  # a small body, read so the connection is reused
        return await self._follow(response.status, response.headers.get("Location"), hop, hops, state, headers)

    async def _follow(
        self, code: int, location: str | None, hop: Hop, hops: int, state: AttemptState, headers: dict[str, str]
    ) -> Hop | None:
        """Whether a 3xx answer's ``location`` is the next hop: followed when the scenario follows redirects, the
        hops are not used up, and the allowlist and the attempt cap admit it; else the attempt's failure says why."""
        client = self.scenario.client
        status = f"HTTP {code}"
        following: Hop | str | None = None
        if not client.follow_redirects:
            where = f" to {shown_url(location)}" if location else ""
            state.fail(FailureKind.REDIRECT, f"{status} redirect{where}, not followed (client.follow_redirects)")
        elif hops >= client.max_redirects:
            state.fail(FailureKind.REDIRECT, f"{status}: still redirected after {hops} hops (client.max_redirects)")
        else:
            following = next_hop(hop, code, location, origin=self.url, headers=headers)
            if isinstance(following, str):
                state.fail(FailureKind.REDIRECT, f"{status} not followed: {following}")
        if not isinstance(following, Hop):
            return None
        try:
            await self.destinations.admit(following.url)
        except CliffwatchError as exc:  # outside the allowlist, or a name that does not resolve: nothing sent
            reason = getattr(exc, "reason", str(exc))
            state.fail(FailureKind.REFUSED, f"{status} redirect to {shown_url(following.url)} refused: {reason}")
            return None
        if self.cap is not None and not self.cap.try_take(time.perf_counter_ns()):
            self.capped_hops += 1
            state.fail(
                FailureKind.REDIRECT, f"{status} redirect to {shown_url(following.url)} not followed: {CAP_REASON}"
            )
            return None
        return following

    async def _read_error(self, response: aiohttp.ClientResponse, state: AttemptState) -> None:
        # The status is the answer; the body only adds a message, so a slow or broken body cannot change it.
        error_status(state, response.status, response.reason, response.headers.get("Retry-After"))
        parts = bytearray()
        with contextlib.suppress(TimeoutError, aiohttp.ClientError):
            async with asyncio.timeout(DRAIN_TIMEOUT_S):
                await _read_into(response, parts, MAX_ERROR_BODY)
        error_body(state, response.status, response.reason, bytes(parts))

    async def _read_stream(self, response: aiohttp.ClientResponse, state: AttemptState) -> None:
        parser = state.stream = OpenAIStream(keep_text=state.reply is not None)
        counted = 0
        async for data in response.content.iter_any():
            now = time.perf_counter_ns()
            ended = parser.feed(data, now)
            if parser.token_chunks != counted:
                self.tokens += parser.token_chunks - counted
                counted = parser.token_chunks
            if ended:
                state.end = now
                if parser.error is None:
                    await _drain(response)
                break

    async def _read_body(self, response: aiohttp.ClientResponse, state: AttemptState) -> None:
        parts = bytearray()
        await _read_into(response, parts, MAX_BODY)
        self.tokens += whole_body(state, bytes(parts), time.perf_counter_ns(), openai=self.openai)


def error_status(state: AttemptState, status: int, reason: str | None, retry_after: str | None) -> None:
    """An answer with an error status, known from its head: its Retry-After, and the status as its failure."""
    state.retry_after_s = parse_retry_after(retry_after)
    state.fail(FailureKind.STATUS, f"HTTP {status}: {reason or ''}".rstrip(": "))


def error_body(state: AttemptState, status: int, reason: str | None, body: bytes) -> None:
    """The failure's message from the error's body (an OpenAI error's message), when it has one."""
    message = error_message(body) or reason or ""
    state.fail(FailureKind.STATUS, f"HTTP {status}: {message}".rstrip(": "))


def whole_body(state: AttemptState, body: bytes, arrived: int, *, openai: bool) -> float:
    """A successful answer read whole (not streamed): its completion taken into ``state``; the tokens it adds."""
    state.first_token = state.first_answer = arrived
    if not openai:
        return 0.0
    completion = parse_completion(body)
    if completion.error is not None:
        state.fail(completion.failure or FailureKind.TRUNCATED, completion.error)
        return 0.0
    if completion.usage_tokens is not None:
        state.tokens, state.token_source = completion.usage_tokens, TokenSource.USAGE
    else:
        state.tokens, state.token_source = completion.estimated_tokens, TokenSource.ESTIMATED
    state.finish_reason = completion.finish_reason
    state.empty = completion.empty
    state.reasoning_tokens = completion.reasoning_tokens
    state.prompt_tokens = completion.prompt_tokens
    if state.reply is not None:
        state.reply = completion.text
    state.answered = True
    return float(state.tokens)


async def _read_into(response: aiohttp.ClientResponse, parts: bytearray, limit: int) -> None:
    """Appends the body to ``parts`` until it ends or ``limit`` bytes are in: ``read(n)`` alone returns
    whatever one network read brought, which for a body sent in pieces is only its beginning."""
    while len(parts) < limit:
        data = await response.content.read(limit - len(parts))
        if not data:
            return
        parts += data


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Reads what follows [DONE] (normally just the end of the chunked body) so the connection is reused;
    a server that keeps the body open gets its connection closed instead of holding the attempt."""
    with contextlib.suppress(TimeoutError, aiohttp.ClientError):
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            while await response.content.read(MAX_ERROR_BODY):
                pass


def server_state(response: aiohttp.ClientResponse) -> tuple[tuple[str, float], ...]:
    """The readings of the answer's server-state headers (queue time, rate limits, back-off, load); () without."""
    return server_state_of(response.headers.items(), response.headers.get("Date"))


def server_state_of(headers: Iterable[tuple[str, str]], date: str | None) -> tuple[tuple[str, float], ...]:
    """``server_state`` from an answer's headers as (name, value) pairs and its Date header."""
    return state_of_found([(lower, value) for name, value in headers if watched(lower := name.lower())], date)


def state_of_found(found: list[tuple[str, str]], date: str | None) -> tuple[tuple[str, float], ...]:
    """``server_state_of`` from the watched headers alone, their names in lower case."""
    if not found:
        return ()
    try:
        when = None if date is None else email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError):
        when = None
    return readings(found, date=when if when is not None and when.tzinfo is not None else None)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delay-seconds or an HTTP-date); None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # str.isdigit alone also accepts "²", which float() refuses
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
