"""The scenario catalog of the service: the bundled scenarios and those registered by admins, versioned.

Every version is kept by its content hash, so a run always points at exactly the document it ran.

Every document enters through ``_save``, and is stored redacted (``domain.security.redaction``): its literal
credentials masked in the document every view shows, and kept apart (``ScenarioStore.scenario_credentials``)
for the run alone. The version's hash fingerprints them under the store's key, so a document that differs
only in a credential is a version of its own, and the hash shown confirms no guess of one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from cliffwatch.domain.errors import Problem, ScenarioInvalid, ScenarioNotFound
from cliffwatch.domain.ports import ScenarioStore
from cliffwatch.domain.scenario.scenario import Scenario, parse_scenario
from cliffwatch.domain.security.redaction import DEFAULT_RULES, Redaction, RedactionRules, redact_document
from cliffwatch.domain.service.runs import ScenarioSource, ScenarioVersion

T = TypeVar("T")
Offload = Callable[[Callable[[], Any]], Awaitable[Any]]


async def inline(work: Callable[[], T]) -> T:
    """Runs ``work`` where it is called: the catalog's default, for tests and the CLI."""
    return work()


@dataclass(frozen=True, kw_only=True)
class Identified:
    """A document parsed and redacted once: the scenario as written, its masked form and credentials, and the
    content hash its version has (or will have, once kept)."""

    scenario: Scenario
    redaction: Redaction
    content_hash: str


class ScenarioCatalog:
    def __init__(
        self,
        store: ScenarioStore,
        *,
        now: Callable[[], datetime],
        rules: RedactionRules = DEFAULT_RULES,
        offload: Offload = inline,
    ) -> None:
        self.store = store
        self.now = now
        self.rules = rules
        # Where a document is validated and redacted: the service's documents thread, since a document at the
        # limits takes tens of milliseconds to validate, which the event loop must not wait for.
        self.offload = offload

    async def load_bundled(self, documents: Mapping[str, Mapping[str, Any]]) -> list[ScenarioVersion]:
        """Stores the bundled scenarios (file name → document); a changed file becomes a new version."""
        versions = []
        for source, document in sorted(documents.items()):
            versions.append(await self._store(await self.identify(document, source=source), ScenarioSource.BUNDLED))
        return versions

    async def register(self, document: Mapping[str, Any]) -> ScenarioVersion:
        """Validates and stores a scenario sent by an admin; raises ``ScenarioInvalid`` listing every problem."""
        return await self._store(await self.identify(document), ScenarioSource.REGISTERED)

    async def keep_inline(self, identified: Identified) -> ScenarioVersion:
        """Stores a document sent with one run (``identify``'s), without making it its name's latest version."""
        return await self._store(identified, ScenarioSource.INLINE)

    async def identify(self, document: Mapping[str, Any], *, source: str | None = None) -> Identified:
        """The document parsed and redacted once, with the content hash its version has, nothing stored;
        raises ``ScenarioInvalid`` for an invalid document, or one that sends the mask back as a credential."""

        def read() -> tuple[Scenario, Redaction]:
            return parse_scenario(document, source=source, rules=self.rules), redact_document(document, self.rules)

        scenario, redaction = await self.offload(read)
        if redaction.problems:
            raise ScenarioInvalid(redaction.problems)
        key = await self.store.fingerprint_key() if redaction.credentials else None
        return Identified(scenario=scenario, redaction=redaction, content_hash=redaction.content_hash(key))

    async def latest(self, name: str) -> ScenarioVersion:
        version = await self.store.latest_scenario(name)
        if version is None:
            raise ScenarioNotFound(name)
        return version

    async def has_version(self, name: str, content_hash: str) -> bool:
        return await self.store.scenario_version(name, content_hash) is not None

    async def version(self, name: str, content_hash: str) -> ScenarioVersion:
        version = await self.store.scenario_version(name, content_hash)
        if version is None:
            raise ScenarioNotFound(f"{name}@{content_hash[:12]}")
        return version

    async def all_latest(self) -> list[ScenarioVersion]:
        return await self.store.list_scenarios()

    async def problems(self, document: object) -> list[Problem]:
        """Every problem with a document, each with its path and message; empty when it is a valid scenario
        that may be stored (no credential is the mask itself, as in a document read back from cliffwatch)."""

        def check() -> list[Problem]:
            try:
                parse_scenario(document, rules=self.rules)
            except ScenarioInvalid as exc:
                return list(exc.problems)
            assert isinstance(document, Mapping)
            return list(redact_document(document, self.rules).problems)

        found: list[Problem] = await self.offload(check)
        return found

    async def _store(self, identified: Identified, source: ScenarioSource) -> ScenarioVersion:
        redaction = identified.redaction
        return await self.store.save_scenario(
            name=identified.scenario.name, document=redaction.document, content_hash=identified.content_hash,
            source=source, at=self.now(), credentials=redaction.credentials,
        )  # fmt: skip
