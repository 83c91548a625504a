"""The aiohttp side of an attempt: build the request, send it, read the answer as it streams in
(``answer_reader``).

One ``ClientSession`` per run with a bounded connection pool; time spent waiting for a pooled
connection is measured through aiohttp's tracing hooks, apart from the target's own latency. Every
failure of the target becomes an ``Attempt`` with a ``FailureKind``; nothing the target does raises.

Nothing leaves for a place the run did not admit (``target_access.Destinations``): the connector's
resolver answers only the run's pins, aiohttp never follows a redirect, and a 3xx is the attempt's answer
(``redirect``) unless the scenario follows redirects, which ``redirects`` does hop by hop.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import aiohttp

from cliffwatch import __version__
from cliffwatch.adapters.loadgen.answer_reader import MAX_ERROR_BODY
from cliffwatch.adapters.loadgen.attempt_state import AttemptState
from cliffwatch.adapters.loadgen.attempt_trace import AttemptTrace, attempt_trace_config
from cliffwatch.adapters.loadgen.bodies import RequestBodies
from cliffwatch.adapters.loadgen.deadline import Deadline
from cliffwatch.adapters.loadgen.pinned_resolver import PinnedResolver, PinRefused
from cliffwatch.adapters.loadgen.prompt_fitting import fit_prompts
from cliffwatch.adapters.loadgen.redirects import Hop
from cliffwatch.adapters.loadgen.wire.pool import WirePool
from cliffwatch.adapters.loadgen.wire.reader import WireReader
from cliffwatch.adapters.network.target_access import Destinations
from cliffwatch.domain.errors import TargetUnreachable
from cliffwatch.domain.outcomes import Attempt
from cliffwatch.domain.scenario.client_spec import Transport
from cliffwatch.domain.scenario.dataset import LoadedDataset
from cliffwatch.domain.scenario.retry import FailureKind
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import Api, RequestTemplate
from cliffwatch.domain.security.allowlist import DEFAULT_ALLOWLIST, Allowlist, parse_allowlist
from cliffwatch.domain.security.masking import MASK
from cliffwatch.domain.security.redaction import DEFAULT_RULES
from cliffwatch.domain.security.secrets import sendable_headers, sendable_path
from cliffwatch.domain.traffic.plan import PlannedRequest
from cliffwatch.domain.traffic.rate_limit import TokenBucket
from cliffwatch.domain.workload.prepared import PromptMaker
from cliffwatch.domain.workload.prompt_sizing import WORDS_SIZING, PromptSizing

PREFLIGHT_TIMEOUT_S = 5.0
MIN_QUOTED = 4  # shorter query values are not masked in error texts (they would mask ordinary words)


# A sweep step's prompts are numbered from this many times its round up (``next_prompts``): above every id one
# plan hands out (fewer than 2,000,000 requests, and their conversations' later turns 128 apart), so no two
# steps send the same prompt text.
PROMPT_ROUND = 1 << 28


class HttpExecutor(WireReader):
    """Implements ``AttemptExecutor`` over HTTP for the scenario's API (OpenAI chat/completions or plain): the
    attempts over the scenario's ``client.transport`` (aiohttp, or the lean client of ``wire``); the preflight and
    the prompt calibration over aiohttp in either case."""

    def __init__(
        self,
        scenario: Scenario,
        base_url: str,
        *,
        destinations: Destinations | None = None,
        cap: TokenBucket | None = None,
        prompts: PromptMaker | None = None,
        dataset: LoadedDataset | None = None,
        server_lengths: Sequence[int] | None = None,
        sizing: PromptSizing = WORDS_SIZING,
        calibrate: bool = False,
    ) -> None:
        self.scenario = scenario
        # The run's attempt cap, also the generator's: each followed redirect hop is a request of its own and
        # takes a token, so a target redirecting to itself cannot multiply what is sent past the cap.
        self.cap = cap
        self.capped_hops = 0
        # Where the run may connect: the composition root's, with the target already admitted; alone (tests,
        # tools), loopback only, the base URL admitted on entry.
        self.destinations = destinations or Destinations(_loopback())
        self.base_url = base_url.rstrip("/")
        template = scenario.target.request
        self.url = self.base_url + sendable_path(template.path, template.query)  # every secret reference read
        # Values an error must not quote (``quoted``), longest first; short ones (a page number) would mask words.
        values = {v for _, v in template.query if isinstance(v, str) and len(v) >= MIN_QUOTED}
        values |= {quote(v, safe="") for v in values}
        self._query_values = sorted(values, key=len, reverse=True)
        self.method = template.method
        self.openai = scenario.target.api is not Api.HTTP
        self.stream = self.openai and template.stream
        self.headers = self._headers(template)
        # Each traffic class sends its own headers (a tenant's key) and bodies (its model, lengths, priority).
        self._class_headers = [self._headers(c.request) for c in scenario.traffic_classes]
        self.in_flight = 0
        self.tokens = 0.0
        self._dataset = dataset
        self._bodies = self._class_bodies(prompts)
        sessions = [scenario.sessions_for(k) for k in range(len(scenario.traffic_classes))]
        self._keeps_history = [s is not None and s.history for s in sessions]
        # How prompts are sized: given (a tokenizer's, the built-in target's words), or found by the preflight's
        # calibration probes when ``calibrate`` (a real OpenAI target without a tokenizer).
        self.sizing = sizing
        self._calibrate = calibrate and self.openai
        self._server_lengths = server_lengths  # request.tokenizer: server: fit these with the target's /tokenize
        self._session: aiohttp.ClientSession | None = None
        self._heads = {}
        # Each conversation's turns so far (the user's prompts and the server's real replies, as JSON-ready
        # pieces), for the next turn to resend; forgotten when the conversation ends.
        self._histories: dict[int, list[bytes]] = {}
        self._prompt_round = 0

    def end_conversation(self, conversation: int) -> None:
        self._histories.pop(conversation, None)

    def next_prompts(self) -> None:
        self._prompt_round += 1
        for bodies in self._bodies:
            bodies.salt = self._prompt_round * PROMPT_ROUND

    async def __aenter__(self) -> HttpExecutor:
        client = self.scenario.client
        await self.destinations.admit(self.base_url)  # already admitted by the run: the pins are reused
        trace = attempt_trace_config()
        # The resolver answers from the run's pins only (no cache needed: it never looks anything up).
        connector = aiohttp.TCPConnector(
            limit=client.pool_size,
            limit_per_host=client.pool_size,
            resolver=PinnedResolver(self.destinations),
            use_dns_cache=False,
            # The system's roots as they are when the run starts (SSL_CERT_FILE included), as the lean pool reads
            # them: aiohttp's own default context is made once, when it is imported.
            ssl=ssl.create_default_context(),
        )
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=client.connect_timeout_ms / 1000.0,
            sock_read=None if client.read_timeout_ms is None else client.read_timeout_ms / 1000.0,
        )
        # trust_env off: no HTTP(S)_PROXY from the environment may route the load somewhere unchecked. No
        # cookie jar: every request is another user, so a cookie one answer sets must not ride on the rest.
        self._session = aiohttp.ClientSession(
            connector=connector, trace_configs=[trace], timeout=self._timeout, trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )  # fmt: skip
        if client.transport is Transport.LEAN:
            read_s = None if client.read_timeout_ms is None else client.read_timeout_ms / 1000.0
            connect_s = client.connect_timeout_ms / 1000.0
            self._wire = WirePool(self.destinations, limit=client.pool_size, connect_timeout_s=connect_s,
                                  read_timeout_s=read_s)  # fmt: skip
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._wire is not None:
            await self._wire.close()
            self._wire = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def preflight(self) -> PromptSizing:
        """Any HTTP answer from the target's root proves it is there (a redirect too: it is not followed);
        no answer means no load is sent. Then, when asked to, the calibration probes size the prompts."""
        session = self._require_session()
        try:
            async with asyncio.timeout(PREFLIGHT_TIMEOUT_S + self.scenario.client.connect_timeout_ms / 1000.0):
                async with session.get(self.base_url + "/", headers=self.headers, allow_redirects=False) as response:
                    await response.content.read(MAX_ERROR_BODY)
        except TimeoutError as exc:
            raise TargetUnreachable(self.base_url, f"no answer within {PREFLIGHT_TIMEOUT_S:g}s") from exc
        except aiohttp.ClientError as exc:
            raise TargetUnreachable(self.base_url, _describe(exc)) from exc
        lengths = self._server_lengths if self.openai else None
        if lengths is not None or self._calibrate:
            self._server_lengths, self._calibrate = None, False
            self.sizing, maker = await fit_prompts(session, self.base_url, self.url, self.headers, self.scenario,
                                                   server_lengths=lengths, cap=self.cap)  # fmt: skip
            self._bodies = self._class_bodies(maker)
        return self.sizing

    def _headers(self, template: RequestTemplate) -> dict[str, str]:
        # Header names are case-insensitive: a template's "content-type" replaces our default, never joins it.
        headers = sendable_headers(template.headers)  # every secret reference already read
        _default_header(headers, "User-Agent", f"cliffwatch/{__version__}")
        if self.openai or template.body is not None:
            _default_header(headers, "Content-Type", "application/json")
        if self.stream:
            _default_header(headers, "Accept", "text/event-stream")
        return headers

    def settled_prompts(self) -> dict[str, Any]:
        """The prompts as the preflight settled them, as keyword arguments for another executor that must send
        the same ones (a generator worker's) without measuring them again."""
        return {"prompts": self._prompt_source, "dataset": self._dataset, "sizing": self.sizing}

    def _class_bodies(self, source: PromptMaker | None) -> list[RequestBodies]:
        self._prompt_source = source
        bodies = [RequestBodies(self.scenario, source, self._dataset, template=c.request, prefix=c.prefix)
                  for c in self.scenario.traffic_classes]  # fmt: skip
        for made in bodies:
            made.salt = getattr(self, "_prompt_round", 0) * PROMPT_ROUND
        return bodies

    def body(self, request: PlannedRequest) -> bytes | None:
        # prepared ahead: one copy per request (bodies.py); a conversation's turn comes after its history
        return self._bodies[request.klass].render(request, self._histories.get(request.conversation, ()))

    async def attempt(
        self, request: PlannedRequest, number: int, timeout_s: float, *, origin_ns: int, deadline_bound: bool
    ) -> Attempt:
        session = self._require_session()
        timing = AttemptTrace()
        body = self.body(request)
        sent = time.perf_counter_ns()
        state = AttemptState()
        keeps = request.turn > 0 and request.turn < request.turns and self._keeps_history[request.klass]
        state.reply = "" if keeps else None  # a conversation that resends its history keeps the answer
        self.in_flight += 1
        try:
            with Deadline(timeout_s):
                headers = self._class_headers[request.klass]
                hop: Hop | None = Hop(method=self.method, url=self.url, body=body, headers=headers)
                hops = 0
                while hop is not None:
                    if self._wire is not None:
                        hop = await self._wire_exchange(hop, hops, state, timing, headers)
                    else:
                        hop = await self._exchange(session, hop, hops, state, timing, headers)
                    hops += 1
        except aiohttp.ServerTimeoutError as exc:
            # aiohttp's own limits (connect, read gap) are TimeoutErrors too, but not the attempt's limit.
            state.fail(FailureKind.TIMEOUT, self._socket_timeout_text(exc))
        except TimeoutError:
            # Not when the answer was already known and only reading what follows it ran out of time.
            if state.end is None and state.failure is None:
                ran_out = (
                    f"request deadline reached after {timeout_s:.3g}s"
                    if deadline_bound
                    else f"attempt timeout after {timeout_s:.3g}s"
                )
                unsent = timing.unsent_reason(ran_out, time.perf_counter_ns())
                if unsent is not None:
                    state.fail(FailureKind.UNSENT, unsent)
                else:
                    state.fail(FailureKind.TIMEOUT, ran_out)
        except aiohttp.ClientPayloadError as exc:
            state.fail(FailureKind.TRUNCATED, f"response body cut off: {_describe(exc)}")
        except aiohttp.ClientConnectorDNSError as exc:
            if isinstance(exc.os_error, PinRefused):  # our resolver: nothing was sent, and a retry would not be
                state.fail(FailureKind.REFUSED, str(exc.os_error))
            else:
                state.fail(FailureKind.CONNECTION, _describe(exc))
        except aiohttp.ClientError as exc:
            state.fail(FailureKind.CONNECTION, _describe(exc))
        except OSError as exc:
            state.fail(FailureKind.CONNECTION, f"{type(exc).__name__}: {exc}")
        finally:
            self.in_flight -= 1
            timing.close(time.perf_counter_ns())
        if state.stream is not None:
            state.harvest(state.stream)
        if state.answered and state.failure is None:
            state.judge(self.scenario.target.expect, max_tokens=request.max_tokens)
        if state.prompt_tokens is not None and request.entry < 0 and request.prefix < 0 and request.turn <= 1:
            self._bodies[request.klass].observe(request, state.prompt_tokens)  # the sizing learns from each answer
        if keeps and state.failure is None and state.reply is not None:
            self._histories.setdefault(request.conversation, []).extend(
                self._bodies[request.klass].turn(request, state.reply)
            )
        end = state.end or time.perf_counter_ns()
        if state.error is not None:  # stored with the outcome and shown to viewers: never a key the URL carried
            state.error = self.quoted(state.error)
        return state.attempt(number, sent_ns=sent, end_ns=end, origin_ns=origin_ns, pool_wait_ns=timing.pool_wait_ns)

    def quoted(self, text: str) -> str:
        """``text`` as an error may quote it: a redirect's ``Location`` or an exception's URL often carries the query
        back, so every value of this run's query parameters, and of any sensitive one, is masked."""
        text = DEFAULT_RULES.mask_text(text)
        for value in self._query_values:
            text = text.replace(value, MASK)
        return text

    def _socket_timeout_text(self, exc: aiohttp.ServerTimeoutError) -> str:
        client = self.scenario.client
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return f"connect timeout after {client.connect_timeout_ms / 1000.0:.3g}s"
        if client.read_timeout_ms is not None:
            return f"read timeout: no data for {client.read_timeout_ms / 1000.0:.3g}s"
        return _describe(exc)

    def _require_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("HttpExecutor used outside 'async with'")
        return self._session


def _default_header(headers: dict[str, str], name: str, value: str) -> None:
    """Sets ``name`` unless the headers already carry it under any capitalisation."""
    if not any(key.lower() == name.lower() for key in headers):
        headers[name] = value


def _loopback() -> Allowlist:
    allowlist, _ = parse_allowlist(DEFAULT_ALLOWLIST)
    assert allowlist is not None
    return allowlist


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text
