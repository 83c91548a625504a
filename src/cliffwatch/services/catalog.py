"""The scenario catalog of the service: the bundled scenarios and those registered by admins, versioned.

Every version is kept by its content hash, so a run always points at exactly the document it ran.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from cliffwatch.domain.errors import Problem, ScenarioInvalid, ScenarioNotFound
from cliffwatch.domain.runs import ScenarioSource, ScenarioVersion
from cliffwatch.domain.scenario import Scenario, content_hash, parse_scenario
from cliffwatch.domain.service_ports import ScenarioStore


class ScenarioCatalog:
    def __init__(self, store: ScenarioStore, *, now: Callable[[], datetime]) -> None:
        self.store = store
        self.now = now

    async def load_bundled(self, documents: Mapping[str, Mapping[str, Any]]) -> list[ScenarioVersion]:
        """Stores the bundled scenarios (file name → document); a changed file becomes a new version."""
        versions = []
        for source, document in sorted(documents.items()):
            scenario = parse_scenario(document, source=source)
            versions.append(await self._save(scenario, document, ScenarioSource.BUNDLED))
        return versions

    async def register(self, document: Mapping[str, Any]) -> ScenarioVersion:
        """Validates and stores a scenario sent by an admin; raises ``ScenarioInvalid`` listing every problem."""
        scenario = parse_scenario(document)
        return await self._save(scenario, document, ScenarioSource.REGISTERED)

    async def keep_inline(self, document: Mapping[str, Any]) -> tuple[ScenarioVersion, Scenario]:
        """Stores a document sent with one run, without making it its name's latest version."""
        scenario = parse_scenario(document)
        return await self._save(scenario, document, ScenarioSource.INLINE), scenario

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

    @staticmethod
    def validate(document: object) -> list[str]:
        """Every problem with a document, path-qualified; empty when it is a valid scenario."""
        return [str(p) for p in ScenarioCatalog.problems(document)]

    @staticmethod
    def problems(document: object) -> list[Problem]:
        """Every problem with a document, each with its path and message; empty when it is a valid scenario."""
        try:
            parse_scenario(document)
        except ScenarioInvalid as exc:
            return list(exc.problems)
        return []

    async def _save(self, scenario: Scenario, document: Mapping[str, Any], source: ScenarioSource) -> ScenarioVersion:
        return await self.store.save_scenario(
            name=scenario.name, document=document, content_hash=content_hash(document), source=source, at=self.now()
        )
