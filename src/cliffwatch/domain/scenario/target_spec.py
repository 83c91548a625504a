"""The target of a scenario: where requests go, which API they speak, and how each one is built.

Parsed as part of a scenario (``parse_target``); ``check_url`` also validates command-line overrides.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from cliffwatch.domain.scenario.completeness import DEFAULT_EXPECTATION, Expectation, parse_expectation
from cliffwatch.domain.scenario.cost_spec import CostSpec, parse_cost
from cliffwatch.domain.scenario.dataset import DatasetSpec, parse_dataset
from cliffwatch.domain.scenario.distributions import Distribution, parse_distribution
from cliffwatch.domain.scenario.metrics_spec import MetricsSpec, parse_metrics
from cliffwatch.domain.scenario.target_model import TargetModel, parse_target_model
from cliffwatch.domain.security.masking import mask_url
from cliffwatch.domain.security.secrets import SecretRef, body_references, parse_reference
from cliffwatch.domain.validation import Problems, Reader, short_repr

BUILTIN = "builtin"
# Hard limits of one request's size, whatever the service's caps: a prompt is built (and held) in memory before
# it is sent, so its size must be bounded for building it to stay cheap (docs/security.md). A million is
# above every served context window but the largest few, and an output no server produces in one answer.
MAX_PROMPT_TOKENS = 1_000_000
MAX_OUTPUT_TOKENS = 1_000_000
BUILTIN_SPEAKS_OPENAI = "the built-in target speaks the OpenAI API: use openai-chat or openai-completions"
URL_AND_AUTHORIZATION = "carries a user and password, and target.request.headers sets Authorization: keep one"
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")  # an RFC 9110 token
# The allowlist checks the URL's host; a Host header of another name would reach a different virtual host
# behind an allowed shared proxy or ingress, so the request's Host is always the URL's own.
HOST_HEADER = "may not be set: requests carry the target URL's host; name the host in target.url instead"


SERVER = "server"  # request.tokenizer: the target's /tokenize fits the lengths (adapters.loadgen.server_tokenize)


class Api(StrEnum):
    OPENAI_CHAT = "openai-chat"
    OPENAI_COMPLETIONS = "openai-completions"
    HTTP = "http"


_DEFAULT_PATHS = {
    Api.OPENAI_CHAT: "/v1/chat/completions",
    Api.OPENAI_COMPLETIONS: "/v1/completions",
    Api.HTTP: "/",
}


@dataclass(frozen=True, kw_only=True)
class RequestTemplate:
    """How each request is built. OpenAI APIs use model/prompt/max_tokens; ``http`` sends ``body`` as is."""

    method: str
    path: str
    # A value is the header itself or a reference to a secret, read at the run's start (domain.security.secrets).
    headers: tuple[tuple[str, str | SecretRef], ...] = ()
    query: tuple[tuple[str, str | SecretRef], ...] = ()  # added to the path's query, a value or a reference each
    model: str | None = None
    prompt_tokens: Distribution | None = None
    max_tokens: Distribution | None = None
    stream: bool = True
    include_usage: bool = False
    extra_body: Mapping[str, Any] | None = None  # merged into OpenAI bodies (e.g. ignore_eos for vLLM)
    body: Any = None  # the JSON body of plain http requests
    tokenizer: str | None = (
        None  # a Hugging Face tokenizer's path: prompt_tokens counted by it (domain.workload.prompt_sizing)
    )
    dataset: DatasetSpec | None = None  # the users' own prompts instead of synthetic ones (domain.scenario.dataset)


@dataclass(frozen=True, kw_only=True)
class Target:
    url: str  # ``builtin`` (cliffwatch starts its simulated server) or http(s)://host[:port][/prefix]
    api: Api
    request: RequestTemplate
    builtin: TargetModel | None = None  # the simulated server's parameters when url is builtin
    via_proxy: str | None = None  # send through this Toxiproxy proxy
    expect: Expectation = DEFAULT_EXPECTATION  # what a whole answer shows (OpenAI APIs)
    metrics: MetricsSpec | None = None  # the server's Prometheus endpoint, scraped during the run
    cost: CostSpec | None = None  # what the target costs an hour (runs and sweeps price their figures with it)

    @property
    def metrics_url(self) -> str | None:
        """The URL to scrape for ``metrics``: its own, or the target's ``/metrics`` (None: not scraped, or
        the built-in target's, known only once it is started)."""
        if self.metrics is None:
            return None
        if self.metrics.url is not None:
            return self.metrics.url
        return None if self.is_builtin else metrics_url_of(self.url)

    @property
    def is_builtin(self) -> bool:
        return self.url == BUILTIN


def parse_target(reader: Reader | None) -> Target | None:
    if reader is None:
        return None
    url = check_url(reader.raw("url"), reader.child("url"), reader.problems) if reader.has("url") else reader.raw("url")
    api = reader.string("api", Api.OPENAI_CHAT.value, choices=tuple(a.value for a in Api))
    via_proxy = reader.string("via_proxy", None)
    builtin: TargetModel | None = None
    if reader.has("builtin"):
        builtin = parse_target_model(reader.raw("builtin"), reader.child("builtin"), reader.problems)
        if url is not None and url != BUILTIN:
            reader.error("builtin", f"only applies when url is {BUILTIN!r}")
    request = _parse_request(reader.mapping("request", {}) or Reader({}, reader.child("request"), reader.problems), api)
    expect = _parse_expect(reader, api, request)
    metrics_reader = reader.mapping("metrics", None)
    metrics = None if metrics_reader is None else parse_metrics(metrics_reader, check_url=check_url,
                                                                 builtin=url == BUILTIN)  # fmt: skip
    cost_reader = reader.mapping("cost", None)
    cost = None if cost_reader is None else parse_cost(cost_reader)
    reader.done()
    if url == BUILTIN and api == Api.HTTP:
        reader.error("api", BUILTIN_SPEAKS_OPENAI)
        return None
    if url is None or api is None or request is None or expect is None:
        return None
    if reader.has("metrics") and metrics is None:
        return None
    if reader.has("via_proxy") and via_proxy is None:
        return None
    if reader.has("cost") and cost is None:
        return None
    if url == BUILTIN and builtin is None:
        builtin = TargetModel()
    if credentials_clash(url, request.headers):
        reader.error("url", URL_AND_AUTHORIZATION)
        return None
    return Target(url=url, api=Api(api), request=request, builtin=builtin, via_proxy=via_proxy, expect=expect,
                  metrics=metrics, cost=cost)  # fmt: skip


def metrics_url_of(base_url: str) -> str:
    """Where a server's Prometheus page usually is: ``/metrics`` at the root of its host (vLLM, SGLang,
    TGI and llama.cpp serve it beside their API; a URL prefix is a path to the API, not to the page)."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}/metrics"


def _parse_expect(reader: Reader, api: str | None, request: RequestTemplate | None) -> Expectation | None:
    """``target.expect``: only for the OpenAI APIs, whose answers say how they ended."""
    if api == Api.HTTP:
        if reader.has("expect"):
            reader.raw("expect")
            reader.error("expect", "only applies to the OpenAI APIs: a plain http answer has no finish_reason")
            return None
        return DEFAULT_EXPECTATION
    extra = request.extra_body if request is not None else None
    section = reader.mapping("expect", None)
    if reader.has("expect") and section is None:
        return None
    return parse_expectation(section, extra_body=extra)


def credentials_clash(url: str, headers: tuple[tuple[str, str | SecretRef], ...]) -> bool:
    """Whether ``url`` carries a user (and password) while ``headers`` set Authorization: aiohttp sends the
    former as the latter, and refuses a request with both."""
    return (
        url != BUILTIN
        and urlsplit(url).username is not None
        and any(name.lower() == "authorization" for name, _ in headers)
    )


def check_url(value: object, path: str, problems: Problems) -> str | None:
    if not isinstance(value, str) or not value.strip():
        problems.add(path, f"must be {BUILTIN!r} or an http(s) URL")
        return None
    if value == BUILTIN:
        return value
    if any(c.isspace() or not c.isprintable() for c in value):
        # urlsplit silently drops tabs and newlines, so the URL checked would not be the URL used
        problems.add(path, f"must not contain spaces or control characters, got {short_repr(mask_url(value))}")
        return None
    try:
        parts = urlsplit(value)  # raises on a malformed IPv6 host, among others
    except ValueError as exc:
        problems.add(path, f"is not a valid URL ({mask_url(str(exc))}): {short_repr(mask_url(value))}")
        return None
    try:
        port = parts.port
    except ValueError:
        problems.add(path, f"has an invalid port: {short_repr(mask_url(value))}")
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.add(path, f"must be {BUILTIN!r} or an http(s) URL with a host, got {short_repr(mask_url(value))}")
        return None
    if parts.query or parts.fragment:
        problems.add(path, "must not carry a query or fragment")
        return None
    del port
    return value.rstrip("/")


def _parse_request(reader: Reader, api: str | None) -> RequestTemplate | None:
    if api is None:
        # Which keys belong depends on the api, which is already reported as wrong.
        for key in reader.data:
            reader.raw(key, None)
        return None
    openai = api in (Api.OPENAI_CHAT, Api.OPENAI_COMPLETIONS)
    default_path = _DEFAULT_PATHS[Api(api)]
    method = reader.string(
        "method", "POST" if openai else "GET", choices=("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
    )
    path = reader.string("path", default_path)
    if path is not None and not path.startswith("/"):
        reader.error("path", "must start with '/'")
        path = None
    headers = parse_headers(reader)
    query = parse_query(reader)
    if openai:
        model = reader.string("model")
        prompt = parse_distribution(reader.raw("prompt_tokens", 128), reader.child("prompt_tokens"), reader.problems,
                                    maximum=MAX_PROMPT_TOKENS)  # fmt: skip
        max_tokens = parse_distribution(reader.raw("max_tokens", 128), reader.child("max_tokens"), reader.problems,
                                        maximum=MAX_OUTPUT_TOKENS)  # fmt: skip
        stream = reader.boolean("stream", True)
        usage = reader.boolean("include_usage", False)
        dataset_reader = reader.mapping("dataset", None)
        dataset = (
            None if dataset_reader is None else parse_dataset(dataset_reader, max_tokens_given=reader.has("max_tokens"))
        )
        if dataset is not None and reader.has("prompt_tokens"):
            reader.error("prompt_tokens", "comes from the dataset: remove it, or the dataset")
            dataset = None
        tokenizer = reader.string("tokenizer", None)
        if tokenizer is not None and tokenizer != SERVER and ("\x00" in tokenizer or len(tokenizer) > 4096):
            reader.error("tokenizer", "must be a path")
            tokenizer = None
        extra = reader.raw("extra_body", None)
        extra_ok = extra is None or check_body(extra, reader.child("extra_body"), reader.problems)
        if extra is not None and not isinstance(extra, Mapping):
            reader.error("extra_body", "must be a mapping")
            extra_ok = False
        reader.done()
        if None in (method, path, model, prompt, max_tokens, stream, usage) or headers is None or not extra_ok:
            return None
        if query is None:
            return None
        if (reader.has("tokenizer") and tokenizer is None) or (reader.has("dataset") and dataset is None):
            return None
        return RequestTemplate(
            method=method,
            path=path,
            headers=headers,
            query=query,
            model=model,
            prompt_tokens=prompt,
            max_tokens=max_tokens,
            stream=stream,
            include_usage=usage,
            extra_body=extra,
            tokenizer=tokenizer,
            dataset=dataset,
        )
    body = reader.raw("body", None)
    body_ok = check_body(body, reader.child("body"), reader.problems)
    reader.done()
    if method is None or path is None or headers is None or query is None or not body_ok:
        return None
    return RequestTemplate(method=method, path=path, headers=headers, query=query, stream=False, body=body)


def check_body(value: object, path: str, problems: Problems) -> bool:
    """Whether ``value`` can be sent as a JSON body once its secret references (``{secret: env:NAME}`` as any
    string's value) are read; records the first part that cannot, and every malformed reference."""
    before = len(problems.items)
    body_references(value, path, problems)
    return check_json(value, path, problems) and len(problems.items) == before


def parse_query(reader: Reader) -> tuple[tuple[str, str | SecretRef], ...] | None:
    """``request.query``: parameter names to values (a string, a number, true/false) or secret references, added to
    the path's own query when a request is sent; None when any is not one of those."""
    query = reader.mapping("query", None)
    if query is None:
        return None if reader.has("query") else ()
    out: list[tuple[str, str | SecretRef]] = []
    for key, value in query.data.items():
        query.raw(key)
        if not key or any(not c.isprintable() for c in key):
            query.error(key, "is not a valid query parameter name")
        elif isinstance(value, Mapping):
            reference = parse_reference(value, query.child(key), query.problems)
            if reference is not None:
                out.append((key, reference))
        elif isinstance(value, bool):
            out.append((key, "true" if value else "false"))
        elif isinstance(value, int | float) and math.isfinite(value):
            out.append((key, str(value)))
        elif not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            query.error(key, "must be a single-line string, a number, true/false or a secret reference")
        else:
            out.append((key, value))
    query.done()
    return tuple(out) if len(out) == len(query.data) else None


def check_json(value: object, path: str, problems: Problems) -> bool:
    """Whether ``value`` can be sent as a JSON body; records the first part that cannot.

    YAML gives more than JSON can carry (non-string keys, dates, NaN), and the scenario's content hash
    serialises the document, so anything else would fail later, far from its cause.
    """
    if value is None or isinstance(value, bool | str):
        return True
    if isinstance(value, int | float):
        try:
            finite = math.isfinite(value)
        except OverflowError:
            finite = False
        if not finite:
            problems.add(path, "must be a finite number that fits in a float")
        return finite
    if isinstance(value, list | tuple):
        return all(check_json(item, f"{path}[{i}]", problems) for i, item in enumerate(value))
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            problems.add(path, f"keys must be strings, got {short_repr(bad[0])}")
            return False
        return all(check_json(item, f"{path}.{key}", problems) for key, item in value.items())
    problems.add(path, f"must be null, true/false, a number, a string, a list or a mapping, got {short_repr(value)}")
    return False


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as a header value (a line break or NUL would end or split the header), or
    None; the rule for values written in a scenario and for values its secret references resolve to alike."""
    if any(c in value for c in "\r\n\0"):
        return "holds a line break or NUL, which a header value cannot carry"
    return None


def parse_headers(reader: Reader) -> tuple[tuple[str, str | SecretRef], ...] | None:
    headers = reader.mapping("headers", None)
    if headers is None:
        return None if reader.has("headers") else ()
    out: list[tuple[str, str | SecretRef]] = []
    for key, value in headers.data.items():
        headers.raw(key)
        if not HEADER_NAME.fullmatch(key):
            headers.error(key, "is not a valid header name")
        elif key.lower() == "host":
            headers.error(key, HOST_HEADER)
        elif isinstance(value, Mapping):
            reference = parse_reference(value, headers.child(key), headers.problems)
            if reference is not None:
                out.append((key, reference))
        elif not isinstance(value, str) or header_value_problem(value) is not None:
            headers.error(key, "must be a single-line string")
        else:
            out.append((key, value))
    headers.done()
    return tuple(out) if len(out) == len(headers.data) else None
