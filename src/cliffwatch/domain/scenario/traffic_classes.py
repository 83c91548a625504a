"""Traffic classes: tenants sharing one target, each with its own request shape, SLO, retries and priority.

A scenario's ``classes`` (a mapping, in the order written) name what kinds of request share the target:

    classes:
      interactive:
        request: {prompt_tokens: 64, max_tokens: 32, headers: {Authorization: {secret: env:TENANT_A}}}
        slo: {ttft_ms: 500, e2e_ms: 2000}      # over the scenario's slo: what it leaves out is the scenario's
        priority: 0                             # sent as the body's "priority" (vLLM's field: lower is sooner)
      batch:
        request: {model: batch-lora, prompt_tokens: {dist: uniform, min: 1000, max: 3000}, max_tokens: 256}
        retry: {policy: exponential, max_retries: 3}

A class's request is the target's with the class's own fields over it: ``model``, ``prompt_tokens``,
``max_tokens``, ``headers`` (a header the class names replaces the target's of that name) and ``extra_body``
(merged into the target's) for the OpenAI APIs; ``headers`` and ``body`` for plain ``http``. Each phase then
gives each class its own arrival process, or one process shared out by ``share`` (``parse_phase_arrival``).
A scenario without ``classes`` has one implicit class, ``default``, which is the scenario as written.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cliffwatch.domain.outcomes import Slo
from cliffwatch.domain.scenario.arrivals import Arrival, Mix, parse_arrival
from cliffwatch.domain.scenario.conversations import PrefixPer, PrefixSpec, SessionSpec, parse_prefix, parse_sessions
from cliffwatch.domain.scenario.distributions import parse_distribution
from cliffwatch.domain.scenario.retry import RetryPolicy, parse_retry
from cliffwatch.domain.scenario.slo_spec import parse_slo
from cliffwatch.domain.scenario.target_spec import (
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    Api,
    RequestTemplate,
    Target,
    check_body,
    parse_headers,
)
from cliffwatch.domain.scenario.trace import TraceArrival
from cliffwatch.domain.security.secrets import SecretRef
from cliffwatch.domain.validation import Problems, Reader, short_repr

DEFAULT = "default"  # the one class of a scenario that declares none
MAX_CLASSES = 16
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
NEEDS_MIX = (
    "with traffic classes, give each class its own process ({interactive: {process: poisson, rate: 4}, …}) "
    "or share one process out (share: {interactive: 1, batch: 4})"
)


@dataclass(frozen=True, kw_only=True)
class TrafficClass:
    name: str
    request: RequestTemplate  # the target's request with the class's own fields over it
    slo: Slo
    retry: RetryPolicy | None = None  # None: the phase's policy, else the client's
    priority: int | None = None  # also in request.extra_body as "priority"
    declared: bool = True  # False for the implicit class of a scenario without classes
    sessions: SessionSpec | None = None  # its requests are conversations (the scenario's unless it says)
    prefix: PrefixSpec | None = None  # its prompts open with a shared prefix (likewise)

    def describe(self) -> dict[str, Any]:
        """What a result says of the class: its name, model, priority and SLO."""
        return {"name": self.name, "model": self.request.model, "priority": self.priority,
                "slo": {"ttft_ms": self.slo.ttft_ms, "tpot_ms": self.slo.tpot_ms, "ttfa_ms": self.slo.ttfa_ms,
                        "e2e_ms": self.slo.e2e_ms, "timeout_ms": self.slo.timeout_ms},
                "sessions": None if self.sessions is None else self.sessions.describe(),
                "prefix": None if self.prefix is None else self.prefix.describe()}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Shared:
    """What every class inherits from the scenario unless it sets its own: conversations and prefixes."""

    sessions: SessionSpec | None = None
    prefix: PrefixSpec | None = None


def implicit_class(target: Target, slo: Slo, shared: Shared = Shared()) -> TrafficClass:
    """The class of a scenario that declares none: the target's request and the scenario's SLO."""
    return TrafficClass(name=DEFAULT, request=target.request, slo=slo, declared=False, sessions=shared.sessions,
                        prefix=shared.prefix)  # fmt: skip


def parse_classes(
    reader: Reader, target: Target | None, slo: Slo | None, shared: Shared = Shared()
) -> tuple[TrafficClass, ...] | None:
    """``classes`` (the scenario's reader of it); None when a class is invalid, or the target or the SLO they
    build on is (those are reported where they are)."""
    if len(reader.data) > MAX_CLASSES:
        reader.error(None, f"at most {MAX_CLASSES} classes")
    if not reader.data:
        reader.error(None, "must name at least one class")
    found: list[TrafficClass] = []
    ok = bool(reader.data) and len(reader.data) <= MAX_CLASSES
    for name, value in reader.data.items():
        reader.raw(name)
        if not _NAME.fullmatch(name):
            reader.error(name, "a class name is lowercase letters, digits, '.', '_' or '-' (at most 64)")
            ok = False
            continue
        parsed = _parse_class(name, value, reader.child(name), reader.problems, target, slo, shared)
        ok = ok and parsed is not None
        if parsed is not None:
            found.append(parsed)
    reader.done()
    return tuple(found) if ok and target is not None and slo is not None else None


def _parse_class(name: str, value: object, path: str, problems: Problems, target: Target | None,
                 slo: Slo | None, shared: Shared) -> TrafficClass | None:  # fmt: skip
    reader = Reader.of({} if value is None else value, path, problems)
    if reader is None:
        return None
    sessions, prefix = shared.sessions, shared.prefix
    if reader.has("sessions"):  # its own, or false: single requests while the scenario's are conversations
        own = reader.raw("sessions")
        sessions = None if own is False else parse_sessions(own, reader.child("sessions"), problems)
        if own is not False and sessions is None:
            return None
    if reader.has("prefix"):
        own = reader.raw("prefix")
        prefix = None if own is False else parse_prefix(own, reader.child("prefix"), problems,
                                                         sessions=sessions is not None)  # fmt: skip
        if own is not False and prefix is None:
            return None
    elif prefix is not None and prefix.per is PrefixPer.CONVERSATION and sessions is None:
        reader.error(None, "inherits a prefix chosen per conversation but sends single requests (sessions: "
                           "false): give it its own prefix, or prefix: false")  # fmt: skip
        return None
    request_reader = reader.mapping("request", None)
    slo_reader = reader.mapping("slo", None)
    class_slo = slo if slo_reader is None or slo is None else parse_slo(slo_reader, base=slo)
    retry = parse_retry(reader.raw("retry"), reader.child("retry"), problems) if reader.has("retry") else None
    priority = reader.number("priority", None, ge=-(2**31), le=2**31 - 1, integer=True)
    reader.done()
    if target is None:
        return None
    request = target.request if request_reader is None else _parse_request(request_reader, target)
    if (reader.has("request") and request is None) or (reader.has("slo") and class_slo is None):
        return None
    if (reader.has("retry") and retry is None) or (reader.has("priority") and priority is None):
        return None
    if request is None or class_slo is None:
        return None
    if priority is not None:
        if target.api is Api.HTTP:
            reader.error("priority", "is a field of the OpenAI APIs' bodies (vLLM's priority)")
            return None
        request = dataclasses.replace(request, extra_body={**(request.extra_body or {}), "priority": priority})
    return TrafficClass(name=name, request=request, slo=class_slo, retry=retry, priority=priority,
                        sessions=sessions, prefix=prefix)  # fmt: skip


def _parse_request(reader: Reader, target: Target) -> RequestTemplate | None:
    """The target's request with the class's own fields over it."""
    base = target.request
    headers = _merged_headers(base.headers, parse_headers(reader))
    if target.api is Api.HTTP:
        body = reader.raw("body", base.body)
        body_ok = check_body(body, reader.child("body"), reader.problems)
        reader.done()
        if headers is None or not body_ok:
            return None
        return dataclasses.replace(base, headers=headers, body=body)
    model = reader.string("model", base.model)
    prompt = base.prompt_tokens
    if reader.has("prompt_tokens"):
        prompt = parse_distribution(reader.raw("prompt_tokens"), reader.child("prompt_tokens"), reader.problems,
                                    maximum=MAX_PROMPT_TOKENS)  # fmt: skip
    max_tokens = base.max_tokens
    if reader.has("max_tokens"):
        max_tokens = parse_distribution(reader.raw("max_tokens"), reader.child("max_tokens"), reader.problems,
                                        maximum=MAX_OUTPUT_TOKENS)  # fmt: skip
    extra = reader.raw("extra_body", None)
    extra_ok = extra is None or (isinstance(extra, Mapping) and check_body(extra, reader.child("extra_body"),
                                                                           reader.problems))  # fmt: skip
    if extra is not None and not isinstance(extra, Mapping):
        reader.error("extra_body", "must be a mapping")
    reader.done()
    if None in (model, prompt, max_tokens) or headers is None or not extra_ok:
        return None
    dataset = base.dataset
    if reader.has("prompt_tokens"):
        dataset = None  # the class's own lengths: synthetic prompts, whatever the target's dataset
    elif dataset is not None and reader.has("max_tokens"):
        dataset = dataclasses.replace(dataset, recorded_output=False)
    merged = {**(base.extra_body or {}), **(extra or {})} or None
    return dataclasses.replace(base, model=model, prompt_tokens=prompt, max_tokens=max_tokens, headers=headers,
                               extra_body=merged, dataset=dataset)  # fmt: skip


def _merged_headers(
    base: tuple[tuple[str, str | SecretRef], ...], own: tuple[tuple[str, str | SecretRef], ...] | None
) -> tuple[tuple[str, str | SecretRef], ...] | None:
    if own is None:
        return None
    names = {name.lower() for name, _ in own}
    return tuple((name, value) for name, value in base if name.lower() not in names) + own


def parse_phase_arrival(
    value: object, path: str, problems: Problems, *, duration_s: float | None, classes: tuple[str, ...] | None
) -> Arrival | None:
    """A phase's ``arrival``: a process (``classes`` None: the scenario declares none), or with classes either
    a mapping of class to process or one process shared out by ``share``."""
    if not isinstance(value, Mapping) or classes is None:
        if isinstance(value, Mapping) and "share" in value:
            problems.add(f"{path}.share", "shares a process out among traffic classes: declare classes first")
            return None
        if isinstance(value, Mapping) and value and "process" not in value:
            problems.add(path, f"gives classes their processes ({', '.join(map(str, value))}), but the scenario "
                               "declares no classes")  # fmt: skip
            return None
        return parse_arrival(value, path, problems, duration_s=duration_s)
    if "process" in value:
        return _shared(value, path, problems, duration_s=duration_s, classes=classes)
    parts: list[tuple[str, Arrival]] = []
    ok = bool(value)
    if not value:
        problems.add(path, "must give at least one class a process")
    for name, process in value.items():
        if name not in classes:
            problems.add(f"{path}.{name}", f"names no declared class ({', '.join(classes)})")
            ok = False
            continue
        arrival = parse_arrival(process, f"{path}.{name}", problems, duration_s=duration_s)
        if isinstance(arrival, TraceArrival):
            problems.add(f"{path}.{name}", "a trace replays its own requests: it cannot be one class's process")
            ok = False
        elif arrival is None:
            ok = False
        else:
            parts.append((str(name), arrival))
    return Mix(parts=tuple(parts)) if ok else None


def _shared(value: Mapping[Any, Any], path: str, problems: Problems, *, duration_s: float | None,
            classes: tuple[str, ...]) -> Arrival | None:  # fmt: skip
    process = {k: v for k, v in value.items() if k != "share"}
    whole = parse_arrival(process, path, problems, duration_s=duration_s)
    if "share" not in value:
        problems.add(path, NEEDS_MIX)
        return None
    shares = _parse_shares(value["share"], f"{path}.share", problems, classes)
    if isinstance(whole, TraceArrival):
        problems.add(path, "a trace replays its own requests: it cannot be shared out among classes")
        return None
    if whole is None or shares is None:
        return None
    return Mix(whole=whole, shares=shares)


def _parse_shares(value: object, path: str, problems: Problems,
                  classes: tuple[str, ...]) -> tuple[tuple[str, float], ...] | None:  # fmt: skip
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    weights: list[tuple[str, float]] = []
    ok = True
    for name in list(reader.data):
        weight = reader.number(name, gt=0)
        if name not in classes:
            reader.error(name, f"names no declared class ({', '.join(classes)})")
            ok = False
        elif weight is None:
            ok = False
        else:
            weights.append((name, float(weight)))
    reader.done()
    if not reader.data:
        reader.error(None, "must give at least one class a weight")
        return None
    total = math.fsum(w for _, w in weights)
    if not ok or not math.isfinite(total) or total <= 0:
        return None
    return tuple((name, weight / total) for name, weight in weights)


def class_index(classes: tuple[TrafficClass, ...], name: str) -> int:
    """The index of the class ``name`` (a plan names classes by index)."""
    for index, traffic_class in enumerate(classes):
        if traffic_class.name == name:
            return index
    raise KeyError(f"no traffic class {short_repr(name)}")
