"""Secrets at the start of a run: every reference of the scenario read through the ``SecretResolver`` port.

``resolve_secrets`` is called where a run is executed, once, before anything is sent (``bootstrap``'s
``prepare_run`` and ``prepare_sweep``: the CLI's run, sweep and demo, and the service's worker), never when a
run is submitted; the resolved scenario lives only in that process's memory for the run. A secret that
cannot be read fails the run with every missing reference named, and no value.

``InMemorySecrets`` is the port's twin for tests; ``adapters.runtime.secret_sources.LocalSecrets`` reads the real
environment and files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cliffwatch.domain.ports import SecretResolver
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.scenario.target_spec import RequestTemplate, header_value_problem
from cliffwatch.domain.security.masking import url_credentials
from cliffwatch.domain.security.redaction import RedactionRules
from cliffwatch.domain.security.secrets import (
    SecretRef,
    SecretsUnavailable,
    SecretUnavailable,
    body_references,
    is_body_reference,
    with_body_secrets,
)
from cliffwatch.domain.validation import Problems

REQUEST_PATH = "target.request"


def resolve_secrets(scenario: Scenario, resolver: SecretResolver) -> Scenario:
    """``scenario`` with every secret reference replaced by the secret it names, in the target's request and in
    every traffic class's (headers, query parameters, bodies; each reference read once); raises
    ``SecretsUnavailable`` listing each reference that cannot be read (or reads as something its place cannot
    carry: a header or query value holds no line break)."""
    requests = [(REQUEST_PATH, scenario.target.request)] + [
        (f"classes.{c.name}.request", c.request) for c in scenario.classes
    ]
    if not any(_references(request) for _, request in requests):
        return scenario
    read: dict[SecretRef, str] = {}
    problems: list[tuple[str, SecretUnavailable]] = []
    failed: set[SecretRef] = set()

    def value_of(path: str, reference: SecretRef, *, line: bool) -> str | None:
        if reference in failed:
            return None
        try:
            if reference not in read:
                read[reference] = _value(reference, resolver.resolve(reference), line=line)
            return read[reference]
        except SecretUnavailable as exc:
            failed.add(reference)
            problems.append((path, exc))
            return None

    def pairs(path: str, items: tuple[tuple[str, str | SecretRef], ...]) -> tuple[tuple[str, str | SecretRef], ...]:
        out: list[tuple[str, str | SecretRef]] = []
        for name, value in items:
            if isinstance(value, SecretRef):
                value = value_of(f"{path}.{name}", value, line=True) or value
            out.append((name, value))
        return tuple(out)

    def body(path: str, value: Any) -> Any:
        for where, reference in body_references(value, path, Problems()):
            value_of(where, reference, line=False)
        return with_body_secrets(value, lambda reference: read.get(reference, ""))

    def resolved(path: str, request: RequestTemplate) -> RequestTemplate:
        return replace(request, headers=pairs(f"{path}.headers", request.headers),
                       query=pairs(f"{path}.query", request.query), body=body(f"{path}.body", request.body),
                       extra_body=body(f"{path}.extra_body", request.extra_body))  # fmt: skip

    target = replace(scenario.target, request=resolved(REQUEST_PATH, scenario.target.request))
    classes = tuple(replace(c, request=resolved(f"classes.{c.name}.request", c.request))
                    for c in scenario.classes)  # fmt: skip
    if problems:
        raise SecretsUnavailable(problems)
    return replace(scenario, target=target, classes=classes)


def secret_values(scenario: Scenario, resolved: Scenario, rules: RedactionRules) -> list[str]:
    """Every credential the run of ``scenario`` (as ``resolved`` from it) sends: its URL's password, the values of
    its referenced and its sensitive headers and query parameters (the target's and each class's), the secrets
    its bodies reference and the strings under their sensitive keys, and the sensitive query values its paths
    carry; to be masked wherever they might turn up (log lines)."""
    values = url_credentials(resolved.target.url)
    requests = [(scenario.target.request, resolved.target.request)] + [
        (written.request, sent.request) for written, sent in zip(scenario.classes, resolved.classes, strict=True)
    ]
    for written_request, sent_request in requests:
        for written_pairs, sent_pairs, sensitive in (
            (written_request.headers, sent_request.headers, rules.is_sensitive),
            (written_request.query, sent_request.query, rules.is_sensitive_param),
        ):
            for (name, written), (_, sent) in zip(written_pairs, sent_pairs, strict=True):
                if isinstance(sent, str) and (isinstance(written, SecretRef) or sensitive(name)):
                    values.append(sent)
        values += rules.credentials_in(sent_request.path)
        for written_body, sent_body in ((written_request.body, sent_request.body),
                                        (written_request.extra_body, sent_request.extra_body)):  # fmt: skip
            values += _body_secrets(written_body, sent_body, rules)
    return list(dict.fromkeys(value for value in values if value))


def _references(request: RequestTemplate) -> bool:
    if any(isinstance(value, SecretRef) for _, value in (*request.headers, *request.query)):
        return True
    return any(body_references(body, "", Problems()) for body in (request.body, request.extra_body))


def _body_secrets(written: Any, sent: Any, rules: RedactionRules) -> list[str]:
    """The strings of a sent body that were references in the written one, or sit under a sensitive key."""
    if is_body_reference(written) and isinstance(sent, str):
        return [sent]
    if isinstance(written, Mapping) and isinstance(sent, Mapping):
        found = []
        for key, value in written.items():
            if key not in sent:
                continue
            if isinstance(sent[key], str) and rules.is_sensitive_body_key(key):
                found.append(sent[key])
            else:
                found += _body_secrets(value, sent[key], rules)
        return found
    if isinstance(written, list | tuple) and isinstance(sent, list | tuple):
        return [v for w, s in zip(written, sent, strict=False) for v in _body_secrets(w, s, rules)]
    return []


def _value(reference: SecretRef, value: str, *, line: bool) -> str:
    """``value`` as its place can carry it: never empty; a header's or a query parameter's on one line."""
    if not value:
        raise SecretUnavailable(reference, "is empty")
    if line and (problem := header_value_problem(value)) is not None:
        raise SecretUnavailable(reference, problem)
    return value


class InMemorySecrets:
    """A ``SecretResolver`` over a mapping of reference text (``env:NAME``, ``file:/path``) to value."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self.values = dict(values or {})
        self.resolved: list[str] = []  # the references read, in order

    def resolve(self, reference: SecretRef) -> str:
        self.resolved.append(str(reference))
        try:
            return self.values[str(reference)]
        except KeyError:
            raise SecretUnavailable(reference, "is not set") from None
