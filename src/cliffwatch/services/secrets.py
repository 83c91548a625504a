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
from cliffwatch.domain.target_spec import header_value_problem

HEADERS_PATH = "target.request.headers"


def resolve_secrets(scenario: Scenario, resolver: SecretResolver) -> Scenario:
    """``scenario`` with every secret reference replaced by the secret it names; raises ``SecretsUnavailable``
    listing each reference that cannot be read (or reads as something a header cannot carry)."""
    request = scenario.target.request
    if not any(isinstance(value, SecretRef) for _, value in request.headers):
        return scenario
    headers: list[tuple[str, str | SecretRef]] = []
    problems: list[tuple[str, SecretUnavailable]] = []
    for name, value in request.headers:
        if isinstance(value, SecretRef):
            try:
                value = _header_value(value, resolver.resolve(value))
            except SecretUnavailable as exc:
                problems.append((f"{HEADERS_PATH}.{name}", exc))
        headers.append((name, value))
    if problems:
        raise SecretsUnavailable(problems)
    return replace(scenario, target=replace(scenario.target, request=replace(request, headers=tuple(headers))))


def secret_values(scenario: Scenario, resolved: Scenario, rules: RedactionRules) -> list[str]:
    """Every credential the run of ``scenario`` (as ``resolved`` from it) sends: the values of its referenced
    and its sensitive headers, and its URL's password; to be masked wherever they might turn up (log lines)."""
    values = url_credentials(resolved.target.url)
    pairs = zip(scenario.target.request.headers, resolved.target.request.headers, strict=True)
    for (name, written), (_, sent) in pairs:
        if isinstance(sent, str) and (isinstance(written, SecretRef) or rules.is_sensitive(name)):
            values.append(sent)
    return values


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
