"""A store whose database can be taken down: every call of the chosen methods raises ``StoreUnavailable``
until it is brought back, as the SQL store does when its database is unreachable or locked."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from cliffwatch.domain.errors import StoreUnavailable
from cliffwatch.services.memory_store import InMemoryStore

EVERYTHING = "*"


class OutageStore:
    """Wraps an ``InMemoryStore``; ``down()`` makes the named methods (default: all) fail, ``up()`` heals."""

    def __init__(self, store: InMemoryStore) -> None:
        self.store = store
        self.failing: frozenset[str] = frozenset()
        self.refused: dict[str, int] = {}  # calls refused, by method

    def down(self, methods: Iterable[str] = (EVERYTHING,)) -> None:
        self.failing = frozenset(methods)

    def up(self) -> None:
        self.failing = frozenset()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.store, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute
        return self._guarded(name, attribute)

    def _guarded(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if EVERYTHING in self.failing or name in self.failing:
                self.refused[name] = self.refused.get(name, 0) + 1
                raise StoreUnavailable("memory://test", "down for the test")
            return await method(*args, **kwargs)

        return call
