"""Secrets at the start of a run: every reference of the scenario read through the ``SecretResolver`` port.

``resolve_secrets`` is called where a run is executed, once, before anything is sent (``bootstrap``'s
``prepare_run`` and ``prepare_sweep``: the CLI's run, sweep and demo, and the service's worker), never when a
run is submitted; the resolved scenario lives only in that process's memory for the run. A secret that
cannot be read fails the run with every missing reference named, and no value.

``InMemorySecrets`` is the port's twin for tests; ``adapters.secret_sources.LocalSecrets`` reads the real
environment and files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from cliffwatch.domain.masking import url_credentials
from cliffwatch.domain.ports import SecretResolver
from cliffwatch.domain.redaction import RedactionRules
from cliffwatch.domain.scenario import Scenario
from cliffwatch.domain.secrets import SecretRef, SecretsUnavailable, SecretUnavailable
from cliffwatch.domain.target_spec import RequestTemplate, header_value_problem

HEADERS_PATH = "target.request.headers"


def resolve_secrets(scenario: Scenario, resolver: SecretResolver) -> Scenario:
    """``scenario`` with every secret reference replaced by the secret it names, in the target's headers and in
    every traffic class's (each reference read once); raises ``SecretsUnavailable`` listing each reference that
    cannot be read (or reads as something a header cannot carry)."""
    sources = [(HEADERS_PATH, scenario.target.request)] + [
        (f"classes.{c.name}.request.headers", c.request) for c in scenario.classes
    ]
    if not any(isinstance(value, SecretRef) for _, request in sources for _, value in request.headers):
        return scenario
    read: dict[SecretRef, str] = {}
    problems: list[tuple[str, SecretUnavailable]] = []
    failed: set[SecretRef] = set()

    def resolved(path: str, request: RequestTemplate) -> RequestTemplate:
        headers: list[tuple[str, str | SecretRef]] = []
        for name, value in request.headers:
            if isinstance(value, SecretRef) and value not in failed:
                reference = value
                try:
                    if reference not in read:
                        read[reference] = _header_value(reference, resolver.resolve(reference))
                    value = read[reference]
                except SecretUnavailable as exc:
                    failed.add(reference)
                    problems.append((f"{path}.{name}", exc))
            headers.append((name, value))
        return replace(request, headers=tuple(headers))

    target = replace(scenario.target, request=resolved(HEADERS_PATH, scenario.target.request))
    classes = tuple(replace(c, request=resolved(f"classes.{c.name}.request.headers", c.request))
                    for c in scenario.classes)  # fmt: skip
    if problems:
        raise SecretsUnavailable(problems)
    return replace(scenario, target=target, classes=classes)


def secret_values(scenario: Scenario, resolved: Scenario, rules: RedactionRules) -> list[str]:
    """Every credential the run of ``scenario`` (as ``resolved`` from it) sends: the values of its referenced
    and its sensitive headers (the target's and each class's), and its URL's password; to be masked wherever
    they might turn up (log lines)."""
    values = url_credentials(resolved.target.url)
    requests = [(scenario.target.request, resolved.target.request)] + [
        (written.request, sent.request) for written, sent in zip(scenario.classes, resolved.classes, strict=True)
    ]
    for written_request, sent_request in requests:
        for (name, written), (_, sent) in zip(written_request.headers, sent_request.headers, strict=True):
            if isinstance(sent, str) and (isinstance(written, SecretRef) or rules.is_sensitive(name)):
                values.append(sent)
    return list(dict.fromkeys(values))


def _header_value(reference: SecretRef, value: str) -> str:
    if not value:
        raise SecretUnavailable(reference, "is empty")
    if (problem := header_value_problem(value)) is not None:
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
