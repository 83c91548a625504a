"""What the worker is given: how to prepare a run or a sweep (the bootstrap's ``prepare_run`` and
``prepare_sweep``, or a test's), and the faces of what those return that the worker uses."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Protocol

from cliffwatch.domain.capacity.capacity import StepStats, StepVerdict
from cliffwatch.domain.capacity.sweep_spec import SweepSpec
from cliffwatch.domain.errors import Problem
from cliffwatch.domain.ports import RecordSink
from cliffwatch.domain.results.result import RunStatus
from cliffwatch.domain.scenario.notify_spec import Delivery, WebhookSpec
from cliffwatch.domain.scenario.scenario import Scenario
from cliffwatch.domain.service.runs import Run, Schedule
from cliffwatch.services.runner import RunService


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


class LocalRuns(Protocol):
    """The runs this instance executes (its worker), reachable without the database."""

    def abort_local(self, run_id: str, reason: str) -> Run | None:
        """Stops the run at once if it runs here; the run as held here, or None."""

    def stop_local(self, reason: str) -> list[Run]:
        """Aborts every run here (as stopped by the emergency stop whose reason is ``reason``) and claims no more
        until ``release_local``; the runs stopped."""

    def release_local(self) -> None: ...

    def unrecorded_stop(self) -> str | None:
        """The reason (as given to ``stop_local``) of an emergency stop this instance holds that the database has
        not recorded, or None."""


class TargetPolicy(Protocol):
    async def check(self, url: str) -> str | None:
        """Why load may not be aimed at ``url`` (an http URL or ``http://host:port``), or None."""

    async def check_upstream(self, url: str) -> str | None:
        """Why a Toxiproxy proxy may not forward to ``url`` (``check``'s reasons, and where Toxiproxy runs), or None."""

    async def check_listen(self, address: str) -> str | None:
        """Why a Toxiproxy proxy may not listen on ``address`` (host:port), or None."""


class StepRunner(Protocol):
    """Measures one steady step against the target (one retry variant; the runner knows which)."""

    async def run_step(self, rate: float, *, trial: int, extended: bool = False) -> StepStats:
        """The step at ``rate`` (req/s, or clients in concurrency mode), measured after its warm-up (over the
        spec's extended window when ``extended``) and followed by its cool-down. After ``stop`` it returns
        early; what it returns then is discarded."""

    def stop(self, reason: str, *, aborted: bool) -> None:
        """Ends the step in progress at once (nothing more is sent, in-flight requests are cut)."""


class SweepObserver(Protocol):
    def step_started(self, variant: str, rate: float, trial: int) -> None: ...

    def step_finished(self, variant: str, step: StepStats, verdict: StepVerdict) -> None:
        """``verdict`` is the rate's settled verdict so far: UNSURE when the search will measure it again."""


class RunFactory(Protocol):
    async def __call__(self, schedule: Schedule, fire_time: datetime) -> Run:
        """The queued run one fire asks for, not yet stored: the schedule's scenario resolved to its latest
        version, its overrides applied. Raises a ``CliffwatchError`` when the run must not be queued (the
        emergency stop, a scenario gone or invalid, a target outside the allowlist, the caps); the fire is then
        refused, logged with that reason and not retried. ``StoreUnavailable`` is not a refusal: it propagates.
        Whatever the run says, it is stored with this schedule, fire time and trigger, and as queued."""


class SuiteCheck(Protocol):
    async def __call__(self, suite: Mapping[str, Any]) -> None:
        """Raises ``SuiteInvalid`` naming each bad field of a schedule's suite, as starting it would."""


class GamedayFactory(Protocol):
    async def __call__(self, schedule: Schedule, fire_time: datetime) -> tuple[str, bool]:
        """Starts the game day of the schedule's suite for one fire: its id, and whether it is new (False: this
        fire's was started before). Raises a ``CliffwatchError`` when it must not start (the suite refused as it
        is now, the emergency stop): the fire is refused. ``StoreUnavailable`` propagates."""


class Notifier(Protocol):
    async def __call__(
        self, webhooks: Sequence[WebhookSpec], event: str, payload: Mapping[str, Any], *, defaults: Sequence[str] = ()
    ) -> Sequence[Delivery]:
        """Posts ``event`` to the webhooks listening for it (their own ``on``, else ``defaults``); each delivery
        as recorded. A failed delivery is a record, never an error."""

    async def problems(self, webhooks: Sequence[WebhookSpec], at: str = "notify") -> list[Problem]:
        """Why each webhook could not be told (its URL not allowed, its secret unreadable), named ``{at}[i].…``."""


class Interruptible(Protocol):
    def interrupt(self) -> None: ...


Prepare = Callable[[Scenario, str, RecordSink], AbstractAsyncContextManager[ReadyRunLike]]
# (scenario, spec, run id, the observer told of every step) → a prepared sweep
PrepareSweep = Callable[[Scenario, SweepSpec, str, SweepObserver], AbstractAsyncContextManager[SweepHandleLike]]
OutcomeCounter = Callable[[str, Counter[str]], None]
