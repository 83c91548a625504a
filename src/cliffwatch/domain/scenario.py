"""The scenario: what to send, to which target, judged by which SLO, in which phases; and its validation.

``parse_scenario`` turns an untrusted mapping (from YAML or JSON) into frozen values, or raises
``ScenarioInvalid`` listing every problem with its dotted path. Unknown keys are problems too.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from cliffwatch.domain.arrivals import Arrival, parse_arrival
from cliffwatch.domain.distributions import Distribution, parse_distribution
from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.faults import FaultSpec, ProxySpec, parse_fault, parse_proxy
from cliffwatch.domain.outcomes import Outcome, Slo
from cliffwatch.domain.retry import RetryPolicy, parse_retry
from cliffwatch.domain.target_model import TargetModel, parse_target_model
from cliffwatch.domain.validation import Problems, Reader, check_number, parse_each, short_repr

BUILTIN = "builtin"
MAX_PLANNED_REQUESTS = 2_000_000
MAX_RUN_SECONDS = 24 * 3600
MAX_SEED = 2**63 - 1
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


class Api(StrEnum):
    OPENAI_CHAT = "openai-chat"
    OPENAI_COMPLETIONS = "openai-completions"
    HTTP = "http"


class Role(StrEnum):
    BASELINE = "baseline"
    STRESS = "stress"
    RECOVERY = "recovery"


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
    headers: tuple[tuple[str, str], ...] = ()
    model: str | None = None
    prompt_tokens: Distribution | None = None
    max_tokens: Distribution | None = None
    stream: bool = True
    include_usage: bool = False
    extra_body: Mapping[str, Any] | None = None  # merged into OpenAI bodies (e.g. ignore_eos for vLLM)
    body: Any = None  # the JSON body of plain http requests


@dataclass(frozen=True, kw_only=True)
class Target:
    url: str  # ``builtin`` (cliffwatch starts its simulated server) or http(s)://host[:port][/prefix]
    api: Api
    request: RequestTemplate
    builtin: TargetModel | None = None  # the simulated server's parameters when url is builtin
    via_proxy: str | None = None  # send through this Toxiproxy proxy

    @property
    def is_builtin(self) -> bool:
        return self.url == BUILTIN


@dataclass(frozen=True, kw_only=True)
class ClientSpec:
    pool_size: int = 100
    connect_timeout_ms: float = 2_000.0
    read_timeout_ms: float | None = None  # longest silence between reads; None: only the attempt timeout
    attempt_timeout_ms: float | None = None  # None: the SLO's timeout_ms
    max_in_flight: int = 5_000  # beyond this the generator stops sending and says so
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass(frozen=True, kw_only=True)
class Phase:
    name: str
    role: Role
    duration_s: float
    arrival: Arrival
    retry: RetryPolicy | None = None  # overrides the client's policy for requests scheduled in this phase
    faults: tuple[FaultSpec, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BaselineGuard:
    """Abort before any stress when a baseline phase ended with fewer on-time requests than this share."""

    min_on_time_ratio: float


@dataclass(frozen=True, kw_only=True)
class ErrorRateGuard:
    """Abort when, over the last ``window_s``, the share of finished requests in ``outcomes`` is over the limit."""

    window_s: float
    max_ratio: float
    min_requests: int
    outcomes: frozenset[Outcome]


@dataclass(frozen=True, kw_only=True)
class AbortSpec:
    baseline: BaselineGuard | None = None
    error_rate: ErrorRateGuard | None = None


@dataclass(frozen=True, kw_only=True)
class ScoreSpec:
    threshold: float = 70.0  # pass mark, 0–100
    fast_fail_fraction: float = 0.1  # a refusal within this share of slo.e2e_ms counts as failing fast


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    description: str
    target: Target
    slo: Slo
    client: ClientSpec
    phases: tuple[Phase, ...]
    seed: int
    proxies: tuple[ProxySpec, ...] = ()
    abort: AbortSpec = AbortSpec()
    score: ScoreSpec = ScoreSpec()
    content_hash: str = ""

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    @property
    def attempt_timeout_ms(self) -> float:
        return self.client.attempt_timeout_ms or self.slo.timeout_ms

    def retry_for(self, phase_index: int) -> RetryPolicy:
        return self.phases[phase_index].retry or self.client.retry

    def phase_starts(self) -> tuple[float, ...]:
        starts, at = [], 0.0
        for phase in self.phases:
            starts.append(at)
            at += phase.duration_s
        return tuple(starts)

    def needs_faults(self) -> bool:
        return any(p.faults for p in self.phases)


def content_hash(document: Mapping[str, Any]) -> str:
    """A stable hash of a scenario document: equal documents (whatever their key order) hash equal."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def parse_scenario(document: object, *, source: str | None = None) -> Scenario:
    """A validated scenario from a mapping; raises ``ScenarioInvalid`` listing every problem."""
    problems = Problems()
    scenario = _parse(document, problems)
    if problems or scenario is None:
        raise ScenarioInvalid(problems.items or [Problem(path="", message="not a scenario")], source=source)
    assert isinstance(document, Mapping)
    return replace(scenario, content_hash=content_hash(document))


def with_overrides(
    scenario: Scenario,
    *,
    target_url: str | None = None,
    seed: int | None = None,
    threshold: float | None = None,
) -> Scenario:
    """The scenario with command-line overrides applied, each validated like the file's own fields."""
    problems = Problems()
    target = scenario.target
    if target_url is not None:
        url = _check_url(target_url, "--target", problems)
        if url is not None:
            # a real target has no simulator settings; the simulator needs them (the file's, or the defaults)
            builtin = (target.builtin or TargetModel()) if url == BUILTIN else None
            target = replace(target, url=url, builtin=builtin)
    new_seed = (
        scenario.seed if seed is None else check_number(seed, "--seed", problems, ge=0, le=MAX_SEED, integer=True)
    )
    new_threshold = None if threshold is None else check_number(threshold, "--threshold", problems, ge=0, le=100)
    if problems:
        raise ScenarioInvalid(problems.items)
    return replace(
        scenario,
        target=target,
        seed=new_seed,
        score=scenario.score if new_threshold is None else replace(scenario.score, threshold=new_threshold),
    )


def _parse(document: object, problems: Problems) -> Scenario | None:
    reader = Reader.of(document, "", problems)
    if reader is None:
        return None
    name = reader.string("name")
    if name is not None and not _NAME.fullmatch(name):
        reader.error(
            "name",
            "must be lowercase letters, digits, '.', '_' or '-' (at most 100), starting with a letter or digit",
        )
        name = None
    description = reader.string("description", "", nonempty=False)
    seed = reader.number("seed", 0, ge=0, le=MAX_SEED, integer=True)
    slo = _parse_slo(reader.mapping("slo"))
    proxies = parse_each(reader, "proxies", parse_proxy, [])
    target = _parse_target(reader.mapping("target"))
    client = _parse_client(reader.mapping("client", {}) or Reader({}, "client", problems), slo)
    phases = parse_each(reader, "phases", _parse_phase, nonempty=True)
    abort = _parse_abort(reader.mapping("abort", None))
    score = _parse_score(reader.mapping("score", None))
    reader.done()
    _check_references(reader)
    _check_plan_size(reader, phases)
    if (
        None in (name, description, seed)
        or slo is None
        or target is None
        or client is None
        or abort is None
        or score is None
        or problems
    ):
        return None
    return Scenario(
        name=name,
        description=description,
        target=target,
        slo=slo,
        client=client,
        phases=tuple(phases),
        seed=seed,
        proxies=tuple(proxies),
        abort=abort,
        score=score,
    )


def _parse_slo(reader: Reader | None) -> Slo | None:
    if reader is None:
        return None
    e2e = reader.number("e2e_ms", gt=0, le=3_600_000)
    timeout = reader.number("timeout_ms", gt=0, le=3_600_000)
    ttft = reader.number("ttft_ms", None, gt=0, le=3_600_000)
    tpot = reader.number("tpot_ms", None, gt=0, le=3_600_000)
    reader.done()
    if (
        e2e is None
        or timeout is None
        or (reader.has("ttft_ms") and ttft is None)
        or (reader.has("tpot_ms") and tpot is None)
    ):
        return None
    ok = True
    if timeout < e2e:
        reader.error("timeout_ms", f"must be >= e2e_ms ({e2e:g}): a request cannot be late after it was given up")
        ok = False
    if ttft is not None and ttft > e2e:
        reader.error("ttft_ms", f"must be <= e2e_ms ({e2e:g})")
        ok = False
    if not ok:
        return None
    return Slo(e2e_ms=float(e2e), timeout_ms=float(timeout), ttft_ms=ttft, tpot_ms=tpot)


def _parse_target(reader: Reader | None) -> Target | None:
    if reader is None:
        return None
    url = (
        _check_url(reader.raw("url"), reader.child("url"), reader.problems) if reader.has("url") else reader.raw("url")
    )
    api = reader.string("api", Api.OPENAI_CHAT.value, choices=tuple(a.value for a in Api))
    via_proxy = reader.string("via_proxy", None)
    builtin: TargetModel | None = None
    if reader.has("builtin"):
        builtin = parse_target_model(reader.raw("builtin"), reader.child("builtin"), reader.problems)
        if url is not None and url != BUILTIN:
            reader.error("builtin", f"only applies when url is {BUILTIN!r}")
    request = _parse_request(reader.mapping("request", {}) or Reader({}, reader.child("request"), reader.problems), api)
    reader.done()
    if url is None or api is None or request is None or (reader.has("via_proxy") and via_proxy is None):
        return None
    if url == BUILTIN and builtin is None:
        builtin = TargetModel()
    return Target(url=url, api=Api(api), request=request, builtin=builtin, via_proxy=via_proxy)


def _check_url(value: object, path: str, problems: Problems) -> str | None:
    if not isinstance(value, str) or not value.strip():
        problems.add(path, f"must be {BUILTIN!r} or an http(s) URL")
        return None
    if value == BUILTIN:
        return value
    if any(c.isspace() or not c.isprintable() for c in value):
        # urlsplit silently drops tabs and newlines, so the URL checked would not be the URL used
        problems.add(path, f"must not contain spaces or control characters, got {short_repr(value)}")
        return None
    try:
        parts = urlsplit(value)  # raises on a malformed IPv6 host, among others
    except ValueError as exc:
        problems.add(path, f"is not a valid URL ({exc}): {short_repr(value)}")
        return None
    try:
        port = parts.port
    except ValueError:
        problems.add(path, f"has an invalid port: {short_repr(value)}")
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.add(path, f"must be {BUILTIN!r} or an http(s) URL with a host, got {short_repr(value)}")
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
    headers = _parse_headers(reader)
    if openai:
        model = reader.string("model")
        prompt = parse_distribution(reader.raw("prompt_tokens", 128), reader.child("prompt_tokens"), reader.problems)
        max_tokens = parse_distribution(reader.raw("max_tokens", 128), reader.child("max_tokens"), reader.problems)
        stream = reader.boolean("stream", True)
        usage = reader.boolean("include_usage", False)
        extra = reader.raw("extra_body", None)
        extra_ok = extra is None or _check_json(extra, reader.child("extra_body"), reader.problems)
        if extra is not None and not isinstance(extra, Mapping):
            reader.error("extra_body", "must be a mapping")
            extra_ok = False
        reader.done()
        if None in (method, path, model, prompt, max_tokens, stream, usage) or headers is None or not extra_ok:
            return None
        return RequestTemplate(
            method=method,
            path=path,
            headers=headers,
            model=model,
            prompt_tokens=prompt,
            max_tokens=max_tokens,
            stream=stream,
            include_usage=usage,
            extra_body=extra,
        )
    body = reader.raw("body", None)
    body_ok = _check_json(body, reader.child("body"), reader.problems)
    reader.done()
    if method is None or path is None or headers is None or not body_ok:
        return None
    return RequestTemplate(method=method, path=path, headers=headers, stream=False, body=body)


def _check_json(value: object, path: str, problems: Problems) -> bool:
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
        return all(_check_json(item, f"{path}[{i}]", problems) for i, item in enumerate(value))
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            problems.add(path, f"keys must be strings, got {short_repr(bad[0])}")
            return False
        return all(_check_json(item, f"{path}.{key}", problems) for key, item in value.items())
    problems.add(path, f"must be null, true/false, a number, a string, a list or a mapping, got {short_repr(value)}")
    return False


def _parse_headers(reader: Reader) -> tuple[tuple[str, str], ...] | None:
    headers = reader.mapping("headers", None)
    if headers is None:
        return None if reader.has("headers") else ()
    out: list[tuple[str, str]] = []
    for key, value in headers.data.items():
        headers.raw(key)
        if not _HEADER.fullmatch(key):
            headers.error(key, "is not a valid header name")
        elif not isinstance(value, str) or "\n" in value or "\r" in value:
            headers.error(key, "must be a single-line string")
        else:
            out.append((key, value))
    headers.done()
    return tuple(out) if len(out) == len(headers.data) else None


def _parse_client(reader: Reader, slo: Slo | None) -> ClientSpec | None:
    pool = reader.number("pool_size", 100, ge=1, le=100_000, integer=True)
    connect = reader.number("connect_timeout_ms", 2_000.0, gt=0, le=600_000)
    read = reader.number("read_timeout_ms", None, gt=0, le=3_600_000)
    attempt = reader.number("attempt_timeout_ms", None, gt=0, le=3_600_000)
    in_flight = reader.number("max_in_flight", 5_000, ge=1, le=1_000_000, integer=True)
    retry = parse_retry(reader.raw("retry", {"policy": "none"}), reader.child("retry"), reader.problems)
    reader.done()
    if slo is not None and attempt is not None and attempt > slo.timeout_ms:
        reader.error("attempt_timeout_ms", f"must be <= slo.timeout_ms ({slo.timeout_ms:g})")
        return None
    if (
        None in (pool, connect, in_flight, retry)
        or (reader.has("read_timeout_ms") and read is None)
        or (reader.has("attempt_timeout_ms") and attempt is None)
    ):
        return None
    assert retry is not None
    return ClientSpec(
        pool_size=pool,
        connect_timeout_ms=connect,
        read_timeout_ms=read,
        attempt_timeout_ms=attempt,
        max_in_flight=in_flight,
        retry=retry,
    )


def _parse_phase(value: object, path: str, problems: Problems) -> Phase | None:
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    name = reader.string("name")
    role = reader.string("role", choices=tuple(r.value for r in Role))
    duration = reader.number("duration_s", gt=0, le=MAX_RUN_SECONDS)
    arrival = (
        parse_arrival(reader.raw("arrival"), reader.child("arrival"), problems, duration_s=duration)
        if reader.has("arrival")
        else reader.raw("arrival")
    )
    retry = parse_retry(reader.raw("retry"), reader.child("retry"), problems) if reader.has("retry") else None
    faults = parse_each(reader, "faults", parse_fault, [])
    reader.done()
    if None in (name, role, duration) or arrival is None or (reader.has("retry") and retry is None):
        return None
    return Phase(
        name=name,
        role=Role(role),
        duration_s=float(duration),
        arrival=arrival,
        retry=retry,
        faults=tuple(faults),
    )


def _parse_abort(reader: Reader | None) -> AbortSpec | None:
    if reader is None:
        return AbortSpec()
    baseline: BaselineGuard | None = None
    error_rate: ErrorRateGuard | None = None
    ok = True
    guard = reader.mapping("baseline_unhealthy", None)
    if guard is not None:
        ratio = guard.number("min_on_time_ratio", gt=0, le=1)
        guard.done()
        ok = ok and ratio is not None
        baseline = BaselineGuard(min_on_time_ratio=ratio) if ratio is not None else None
    rate = reader.mapping("error_rate", None)
    if rate is not None:
        window = rate.number("window_s", 10.0, gt=0, le=3600)
        max_ratio = rate.number("max_ratio", gt=0, le=1)
        minimum = rate.number("min_requests", 20, ge=1, integer=True)
        outcomes = _parse_outcomes(rate)
        rate.done()
        if None in (window, max_ratio, minimum, outcomes):
            ok = False
        else:
            assert outcomes is not None
            error_rate = ErrorRateGuard(window_s=window, max_ratio=max_ratio, min_requests=minimum, outcomes=outcomes)
    reader.done()
    return AbortSpec(baseline=baseline, error_rate=error_rate) if ok else None


def _parse_outcomes(reader: Reader) -> frozenset[Outcome] | None:
    failures = (Outcome.LATE, Outcome.SHED, Outcome.TIMEOUT, Outcome.ERROR)
    if not reader.has("outcomes"):
        reader.raw("outcomes", None)
        return frozenset({Outcome.ERROR, Outcome.TIMEOUT})
    found: set[Outcome] = set()
    ok = True
    for path, item in reader.items("outcomes", nonempty=True):
        if item not in [o.value for o in failures]:
            reader.problems.add(path, f"must be one of {', '.join(o.value for o in failures)}, got {short_repr(item)}")
            ok = False
        else:
            found.add(Outcome(item))
    return frozenset(found) if ok and found else None


def _parse_score(reader: Reader | None) -> ScoreSpec | None:
    if reader is None:
        return ScoreSpec()
    threshold = reader.number("threshold", 70.0, ge=0, le=100)
    fast = reader.number("fast_fail_fraction", 0.1, gt=0, le=1)
    reader.done()
    if threshold is None or fast is None:
        return None
    return ScoreSpec(threshold=float(threshold), fast_fail_fraction=float(fast))


def _check_references(reader: Reader) -> None:
    """Names that must match across the document: proxies, the phases' order and names, the faults' proxies.

    Checked on the document itself rather than on the parsed values, so each problem names its real
    position even when an earlier element was invalid, and an element invalid for another reason still
    counts (a fault naming a proxy with a bad listen address is not also told that no such proxy exists).
    """
    names: list[str] = []
    for index, proxy in _mappings(reader.data.get("proxies")):
        name = proxy.get("name")
        if not _is_name(name):
            continue
        if name in names:
            reader.problems.add(f"proxies[{index}].name", f"duplicate proxy name {short_repr(name)}")
        else:
            names.append(name)
    undeclared = f"names no declared proxy ({', '.join(names) or 'none declared'})"
    target = reader.data.get("target")
    if isinstance(target, Mapping) and _is_name(via := target.get("via_proxy")) and via not in names:
        reader.problems.add("target.via_proxy", undeclared)
    seen: set[str] = set()
    stressed = False
    for index, phase in _mappings(reader.data.get("phases")):
        name, role = phase.get("name"), phase.get("role")
        if _is_name(name):
            if name in seen:
                reader.problems.add(f"phases[{index}].name", f"duplicate phase name {short_repr(name)}")
            seen.add(name)
        if role == Role.RECOVERY and not stressed:
            reader.problems.add(f"phases[{index}].role", "a recovery phase must come after a stress phase")
        stressed = stressed or role == Role.STRESS
        for fault_index, fault in _mappings(phase.get("faults")):
            if _is_name(named := fault.get("proxy")) and named not in names:
                reader.problems.add(f"phases[{index}].faults[{fault_index}].proxy", undeclared)


def _mappings(value: object) -> Iterator[tuple[int, Mapping[Any, Any]]]:
    """The mappings in a document list, with their positions; anything else is the parsers' to report."""
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if isinstance(item, Mapping):
                yield index, item


def _is_name(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and bool(value.strip())


def _check_plan_size(reader: Reader, phases: list[Phase]) -> None:
    total_s = sum(p.duration_s for p in phases)
    if total_s > MAX_RUN_SECONDS:
        reader.problems.add("phases", f"last {total_s:g}s in all; the limit is {MAX_RUN_SECONDS}s")
    planned = sum(p.arrival.mean_rate(p.duration_s) * p.duration_s for p in phases)
    if planned > MAX_PLANNED_REQUESTS:
        reader.problems.add("phases", f"plan about {planned:,.0f} requests; the limit is {MAX_PLANNED_REQUESTS:,}")
