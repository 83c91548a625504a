"""Every error cliffwatch raises on purpose; each formats its own message from the facts it carries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cliffwatch.domain.security.masking import mask_url, without_password


class CliffwatchError(Exception):
    """Root of cliffwatch's errors: catching it catches everything we raise deliberately."""


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One thing wrong with an input document: where (a dotted path) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ScenarioInvalid(CliffwatchError):
    """A scenario document (or an override applied to one) breaks the rules; lists every problem found."""

    what = "scenario"

    def __init__(self, problems: Sequence[Problem], *, source: str | None = None) -> None:
        self.problems = tuple(problems)
        self.source = source
        where = f"{source}: " if source else ""
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{where}invalid {self.what} ({len(self.problems)} problem(s)):\n{lines}")


class SweepInvalid(ScenarioInvalid):
    """A sweep's parameters break the rules; lists every problem found, as a scenario's would."""

    what = "sweep"


class SuiteInvalid(ScenarioInvalid):
    """A game day's suite breaks the rules, or one of its experiments would be refused as a run (its scenario, its
    target, the caps); every problem names its field in the suite (``experiments[1].scenario.target.url``)."""

    what = "suite"


class TargetConfigInvalid(CliffwatchError):
    """The built-in target's parameters are inconsistent."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("invalid target configuration: " + "; ".join(str(p) for p in self.problems))


class TargetNotAllowed(CliffwatchError):
    """A run was aimed at a host outside the configured allowlist, or on its deny list; names the URL without its
    password, and the scenario's field that gave it when known (``target.url``, ``target.metrics.url``)."""

    def __init__(self, url: str, reason: str, *, field: str | None = None) -> None:
        self.url = mask_url(url)
        self.reason = mask_url(reason)
        self.field = field
        where = f"{field}: " if field else "target "
        super().__init__(f"{where}{self.url} is not allowed: {self.reason}")


class TargetUnreachable(CliffwatchError):
    """The target did not answer the pre-flight check, so no load was sent; names it without its password."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = mask_url(url)
        self.reason = mask_url(reason)
        super().__init__(f"target {self.url} is unreachable, no load was sent: {self.reason}")


class BuiltinTargetFailed(CliffwatchError):
    """The built-in simulated target could not be started."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the built-in target did not start: {reason}")


class WorkersFailed(CliffwatchError):
    """The generator's worker processes (``client.workers``) could not be started: no load was sent."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the generator's worker processes did not start, no load was sent: {reason}")


class FaultInjectionFailed(CliffwatchError):
    """A fault could not be applied or removed; names the proxy, the toxic and what went wrong."""

    def __init__(self, *, proxy: str, toxic: str | None, reason: str, status: int | None = None) -> None:
        self.proxy = proxy
        self.toxic = toxic
        self.status = status
        self.reason = reason
        what = f"toxic {toxic!r} on proxy {proxy!r}" if toxic else f"proxy {proxy!r}"
        code = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"fault injection failed for {what}{code}: {reason}")


class RunNotFound(CliffwatchError):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run {run_id!r}")


class GamedayNotFound(CliffwatchError):
    def __init__(self, gameday_id: str) -> None:
        self.gameday_id = gameday_id
        super().__init__(f"no game day {gameday_id!r}")


class ScenarioNotFound(CliffwatchError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no scenario named {name!r} (bundled or registered)")


class RunRefused(CliffwatchError):
    """A run request is valid but over a limit this service keeps (caps), so it was not queued; each problem
    names the field to change, the worst case and the cap."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("run refused: " + "; ".join(str(p) for p in self.problems))

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(str(p) for p in self.problems)


class QuotaExceeded(CliffwatchError):
    """A caller holds as much of the service as one caller may (queued runs, stored documents): nothing was
    stored; the same request may succeed after ``retry_after_s``."""

    def __init__(self, what: str, *, limit: int, retry_after_s: float) -> None:
        self.what = what
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(f"quota reached: {what} (at most {limit} per token); retry in {retry_after_s:.0f}s")


class EmergencyStopActive(CliffwatchError):
    """The emergency stop is on: no run is accepted until an admin releases it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the emergency stop is on ({reason}); no run is accepted until it is released")


class StoreUnavailable(CliffwatchError):
    """The database could not be reached or did not answer; names it by its URL, never with its password."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = without_password(url)
        self.reason = reason
        super().__init__(f"the database {self.url} is unavailable: {reason}")


class IdempotencyKeyReused(CliffwatchError):
    """An idempotency key already named another request (another kind, scenario, overrides or sweep)."""

    def __init__(self, run_id: str, *, what: str = "run") -> None:
        self.run_id = run_id
        verb = "queued" if what == "run" else "started"
        super().__init__(f"this Idempotency-Key already {verb} {what} {run_id} for another request; use a new key")


class EmergencyStopNotRecorded(CliffwatchError):
    """The emergency stop stopped this instance's runs, but the database could not record it for the others."""

    def __init__(
        self, stopped_here: Sequence[str], cause: StoreUnavailable | None = None, *, reason: str | None = None
    ) -> None:
        self.stopped_here = tuple(stopped_here)
        self.cause = cause
        if cause is None:  # a run asked for while the stop is held here, unrecorded
            super().__init__(
                f"this instance holds an emergency stop ({reason}) that the database has not recorded: no run is "
                f"accepted until the stop is recorded (POST /api/v1/stop-all again) or released here"
            )
            return
        runs = ", ".join(self.stopped_here) or "none were running"
        super().__init__(
            f"this instance stopped its runs ({runs}) and takes no more until the stop is recorded or released "
            f"here, but the database could not record the stop for the other instances; retry"
        )


class ScheduleInvalid(CliffwatchError):
    """A schedule (its cron expression, time zone, scenario or overrides) breaks the rules; lists every problem."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid schedule ({len(self.problems)} problem(s)):\n{lines}")


class ScheduleNotFound(CliffwatchError):
    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"no schedule {schedule_id!r}")


class CompareRefused(CliffwatchError):
    """Two documents that cannot be compared as asked: unlike workloads or score versions (unless the caller
    asks anyway), a run beside a sweep, or a run that measured nothing; each reason says which and how."""

    def __init__(self, reasons: Sequence[str]) -> None:
        self.reasons = tuple(reasons)
        super().__init__("cannot compare: " + "; ".join(self.reasons))


class GamedayOverlap(CliffwatchError):
    """A schedule's game day fired while its previous one still runs: two suites would load one target at once,
    and the caps judge each run alone, so nothing would bound them together."""

    def __init__(self, schedule_id: str, running: str) -> None:
        self.schedule_id = schedule_id
        self.running = running
        super().__init__(f"game day {running} of this schedule is still running")


class ServiceStopping(CliffwatchError):
    """This instance is shutting down: it starts nothing more (a schedule's fire is caught up at the next start)."""
