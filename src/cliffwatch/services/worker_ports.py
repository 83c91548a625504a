"""What the worker is given: how to prepare a run or a sweep (the bootstrap's ``prepare_run`` and
``prepare_sweep``, or a test's), and the faces of what those return that the worker uses."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.ports import RecordSink
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.services.runner import RunService
from cliffwatch.services.sweep import SweepObserver


class ReadyRunLike(Protocol):
    """A run prepared and its parts started (``bootstrap.run.ReadyRun``)."""

    @property
    def service(self) -> RunService: ...

    @property
    def target_url(self) -> str: ...

    @property
    def run_id(self) -> str: ...


class Stoppable(Protocol):
    """What the lease and abort watchers and the shutdown stop: a run's service, or a sweep."""

    def interrupt(self) -> None: ...

    def abort(self, reason: str) -> None: ...


class SweepOutcomeLike(Protocol):
    """How a sweep ended (``bootstrap.sweep.SweepOutcome``)."""

    @property
    def status(self) -> RunStatus: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def usable_rps(self) -> float | None: ...

    def to_dict(self) -> dict[str, Any]: ...


class SweepHandleLike(Stoppable, Protocol):
    """A prepared sweep (``bootstrap.sweep.SweepHandle``): run once, stoppable meanwhile."""

    @property
    def target_url(self) -> str: ...

    async def run(self) -> SweepOutcomeLike: ...


Prepare = Callable[[Scenario, str, RecordSink], AbstractAsyncContextManager[ReadyRunLike]]
# (scenario, spec, run id, the observer told of every step) → a prepared sweep
PrepareSweep = Callable[[Scenario, SweepSpec, str, SweepObserver], AbstractAsyncContextManager[SweepHandleLike]]
OutcomeCounter = Callable[[str, Counter[str]], None]
