"""The scenario: what to send, to which target, judged by which SLO, in which phases; and its validation.

``parse_scenario`` turns an untrusted mapping (from YAML or JSON) into frozen values, or raises
``ScenarioInvalid`` listing every problem with its dotted path. Unknown keys are problems too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeGuard

from cliffwatch.domain.errors import Problem, ScenarioInvalid
from cliffwatch.domain.outcomes import Slo
from cliffwatch.domain.scenario.arrivals import Arrival
from cliffwatch.domain.scenario.client_spec import ClientSpec, parse_client
from cliffwatch.domain.scenario.conversations import PrefixSpec, SessionSpec, parse_prefix, parse_sessions
from cliffwatch.domain.scenario.faults import FaultSpec, ProxySpec, parse_fault, parse_proxy
from cliffwatch.domain.scenario.guards import AbortSpec, ScoreSpec, parse_abort, parse_score
from cliffwatch.domain.scenario.notify_spec import SCENARIO_EVENTS, WebhookSpec, parse_webhooks
from cliffwatch.domain.scenario.retry import RetryPolicy, parse_retry
from cliffwatch.domain.scenario.slo_spec import parse_slo
from cliffwatch.domain.scenario.target_spec import (
    Api,
    RequestTemplate,
    Target,
    parse_target,
)
from cliffwatch.domain.scenario.trace import TraceArrival
from cliffwatch.domain.scenario.traffic_classes import (
    Shared,
    TrafficClass,
    implicit_class,
    parse_classes,
    parse_phase_arrival,
)
from cliffwatch.domain.security.redaction import DEFAULT_RULES, RedactionRules, redact_document
from cliffwatch.domain.security.redaction import content_hash as content_hash  # a document's hash, used by many
from cliffwatch.domain.validation import Problems, Reader, parse_each, short_repr

MAX_PLANNED_REQUESTS = 2_000_000
MAX_RUN_SECONDS = 24 * 3600
MAX_SEED = 2**63 - 1
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


class PhaseRole(StrEnum):
    BASELINE = "baseline"
    STRESS = "stress"
    RECOVERY = "recovery"


@dataclass(frozen=True, kw_only=True)
class Phase:
    name: str
    role: PhaseRole
    duration_s: float
    arrival: Arrival  # a ``Mix`` when the scenario has traffic classes
    retry: RetryPolicy | None = None  # overrides the client's policy for requests scheduled in this phase
    faults: tuple[FaultSpec, ...] = ()


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
    abort: AbortSpec = field(default_factory=AbortSpec)
    score: ScoreSpec = field(default_factory=ScoreSpec)
    content_hash: str = ""  # of the document with its credentials masked (domain.security.redaction)
    # Who shares the target (domain.scenario.traffic_classes); () means the one implicit class: the scenario as written.
    classes: tuple[TrafficClass, ...] = ()
    # What every class inherits unless it says otherwise: conversations and shared prefixes (conversations.py).
    shared: Shared = field(default_factory=Shared)
    # Whom to tell of its runs' and sweeps' ends (domain.scenario.notify_spec). Part of the document and so of
    # its hash (the catalog keys documents by it); compare's likeness and trends look at neither.
    notify: tuple[WebhookSpec, ...] = ()

    @property
    def traffic_classes(self) -> tuple[TrafficClass, ...]:
        """Every class, the implicit one of a scenario that declares none included; a plan's ``klass`` indexes it."""
        return self.classes or (implicit_class(self.target, self.slo, self.shared),)

    def slo_for(self, klass: int) -> Slo:
        """The SLO the requests of class ``klass`` are judged by."""
        return self.classes[klass].slo if self.classes else self.slo

    def sessions_for(self, klass: int) -> SessionSpec | None:
        """Whether class ``klass`` sends conversations, and how."""
        return self.classes[klass].sessions if self.classes else self.shared.sessions

    def prefix_for(self, klass: int) -> PrefixSpec | None:
        return self.classes[klass].prefix if self.classes else self.shared.prefix

    @property
    def has_sessions(self) -> bool:
        return any(self.sessions_for(k) is not None for k in range(len(self.traffic_classes)))

    def request_for(self, klass: int) -> RequestTemplate:
        return self.classes[klass].request if self.classes else self.target.request

    def attempt_timeout_for(self, klass: int) -> float:
        """The per-attempt limit of class ``klass``: the client's, within the class's SLO timeout."""
        timeout = self.slo_for(klass).timeout_ms
        return min(self.client.attempt_timeout_ms, timeout) if self.client.attempt_timeout_ms else timeout

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    @property
    def attempt_timeout_ms(self) -> float:
        return self.client.attempt_timeout_ms or self.slo.timeout_ms

    def retry_for(self, phase_index: int, klass: int | None = None) -> RetryPolicy:
        """The retry policy of a phase's requests (of class ``klass``): the class's own, else the phase's, else
        the client's."""
        own = self.classes[klass].retry if self.classes and klass is not None else None
        return own or self.phases[phase_index].retry or self.client.retry

    def phase_starts(self) -> tuple[float, ...]:
        starts, at = [], 0.0
        for phase in self.phases:
            starts.append(at)
            at += phase.duration_s
        return tuple(starts)

    def needs_faults(self) -> bool:
        return any(p.faults for p in self.phases)


def parse_scenario(document: object, *, source: str | None = None, rules: RedactionRules = DEFAULT_RULES) -> Scenario:
    """A validated scenario from a mapping; raises ``ScenarioInvalid`` listing every problem.

    Its ``content_hash`` is that of the document with its credentials masked by ``rules``, so a result that
    shows it never lets anyone test guesses of a credential; the service's catalog keys its versions by a
    hash that also tells credentials apart (``Redaction.content_hash``) and passes that one on.
    """
    problems = Problems()
    scenario = _parse(document, problems)
    if problems or scenario is None:
        raise ScenarioInvalid(problems.items or [Problem(path="", message="not a scenario")], source=source)
    assert isinstance(document, Mapping)
    return replace(scenario, content_hash=redact_document(document, rules).content_hash())


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
    slo = parse_slo(reader.mapping("slo"))
    proxies = parse_each(reader, "proxies", parse_proxy, [])
    target = parse_target(reader.mapping("target"))
    client = parse_client(reader.mapping("client", {}) or Reader({}, "client", problems), slo)
    sessions = parse_sessions(reader.raw("sessions"), "sessions", problems) if reader.has("sessions") else None
    prefix = (parse_prefix(reader.raw("prefix"), "prefix", problems, sessions=sessions is not None)
              if reader.has("prefix") else None)  # fmt: skip
    shared = Shared(sessions=sessions, prefix=prefix)
    classes_reader = reader.mapping("classes", None)
    classes = () if classes_reader is None else parse_classes(classes_reader, target, slo, shared)
    names = _class_names(reader.data.get("classes"))

    def phase(value: object, path: str, problems: Problems) -> Phase | None:
        return _parse_phase(value, path, problems, classes=names)

    phases = parse_each(reader, "phases", phase, nonempty=True)
    abort = parse_abort(reader.mapping("abort", None))
    score = parse_score(reader.mapping("score", None))
    notify = parse_webhooks(reader, events=SCENARIO_EVENTS, defaults=None)
    reader.done()
    _check_references(reader)
    declared = [c.sessions for c in classes or ()] + [sessions]
    _check_plan_size(reader, phases, [s for s in declared if s is not None])
    if target is not None and classes is not None:
        _check_conversations(reader, target, classes, shared, phases)
    if (
        None in (name, description, seed)
        or slo is None
        or target is None
        or client is None
        or abort is None
        or score is None
        or classes is None
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
        classes=classes,
        shared=shared,
        notify=notify,
    )


def _check_conversations(reader: Reader, target: Target, classes: tuple[TrafficClass, ...], shared: Shared,
                         phases: list[Phase]) -> None:  # fmt: skip
    """Conversations and prefixes need prompts of the OpenAI APIs; conversations cannot replay a trace or a
    dataset's recorded requests (each turn's prompt is written for it)."""
    each = [(f"classes.{c.name}.", c.sessions, c.prefix, c.request) for c in classes] or [
        ("", shared.sessions, shared.prefix, target.request)
    ]
    for where, sessions, prefix, request in each:
        if target.api is Api.HTTP:
            for key, value in (("sessions", sessions), ("prefix", prefix)):
                if value is not None:
                    reader.problems.add(f"{where}{key}", "needs the OpenAI APIs' prompts (target.api openai-chat "
                                                         "or openai-completions)")  # fmt: skip
        elif sessions is not None and request.dataset is not None:
            reader.problems.add(f"{where}sessions", "conversations write each turn's prompt: they cannot draw "
                                                    "from request.dataset (drop one of them)")  # fmt: skip
    if any(s is not None for _, s, _, _ in each) and any(isinstance(p.arrival, TraceArrival) for p in phases):
        reader.problems.add("sessions", "a trace replays its own requests: it cannot start conversations")


def _class_names(value: object) -> tuple[str, ...] | None:
    """The class names the document declares (valid or not, so that phases naming them are not also told
    they name none); None without ``classes``."""
    if not isinstance(value, Mapping):
        return None
    return tuple(str(name) for name in value)


def _parse_phase(value: object, path: str, problems: Problems, *, classes: tuple[str, ...] | None) -> Phase | None:
    reader = Reader.of(value, path, problems)
    if reader is None:
        return None
    name = reader.string("name")
    role = reader.string("role", choices=tuple(r.value for r in PhaseRole))
    duration = reader.number("duration_s", gt=0, le=MAX_RUN_SECONDS)
    arrival = (
        parse_phase_arrival(reader.raw("arrival"), reader.child("arrival"), problems, duration_s=duration,
                            classes=classes)
        if reader.has("arrival")
        else reader.raw("arrival")
    )  # fmt: skip
    retry = parse_retry(reader.raw("retry"), reader.child("retry"), problems) if reader.has("retry") else None
    faults = parse_each(reader, "faults", parse_fault, [])
    reader.done()
    if None in (name, role, duration) or arrival is None or (reader.has("retry") and retry is None):
        return None
    return Phase(
        name=name,
        role=PhaseRole(role),
        duration_s=float(duration),
        arrival=arrival,
        retry=retry,
        faults=tuple(faults),
    )


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
        if role == PhaseRole.RECOVERY and not stressed:
            reader.problems.add(f"phases[{index}].role", "a recovery phase must come after a stress phase")
        stressed = stressed or role == PhaseRole.STRESS
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


def _check_plan_size(reader: Reader, phases: list[Phase], sessions: Sequence[SessionSpec] = ()) -> None:
    total_s = sum(p.duration_s for p in phases)
    if total_s > MAX_RUN_SECONDS:
        reader.problems.add("phases", f"last {total_s:g}s in all; the limit is {MAX_RUN_SECONDS}s")
    # With sessions each arrival is a conversation: its turns are requests too (their mean number)
    turns = max((s.turns.mean for s in sessions), default=1.0)
    planned = sum(p.arrival.mean_rate(p.duration_s) * p.duration_s for p in phases) * max(1.0, turns)
    if planned > MAX_PLANNED_REQUESTS:
        reader.problems.add("phases", f"plan about {planned:,.0f} requests; the limit is {MAX_PLANNED_REQUESTS:,}")
