"""Which rate a capacity sweep measures next: a coarse pass up to the first failing rate, then bisection.

The search is a state machine fed one measured step at a time (``next_rate`` → run the step → ``record``),
so the service owns the clock and the load and this module stays pure. Each rate is settled by
``capacity_steps.settle``: repeated while another trial could clear its interval, else settled on the point
estimate. The rule and its reasons are in docs/sweep.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from cliffwatch.domain.capacity.arrival_luck import LuckCorrection
from cliffwatch.domain.capacity.capacity_steps import SettledRate, StepStats, StepVerdict, fit_luck, pool_rates, settle

if TYPE_CHECKING:
    from cliffwatch.domain.capacity.sweep_spec import SweepSpec

FLOOR_DIVISOR = 64
# The usable rate's confirmation stops at this many times --trials, whatever its request count: a slow server's
# windows may never add up to the rule of three's requests, and the search must still end on its bracket.
CONFIRMING_TRIALS = 3  # when the first rate already fails, bisection goes down to start / 64 and no further


class NextStep(NamedTuple):
    """What the search asks to measure next: a rate, its trial number, whether over the extended window, and
    whether it is the end-of-sweep recheck (the first rate again: ``drift``)."""

    rate: float
    trial: int
    extended: bool = False
    recheck: bool = False


def round_sig(value: float, digits: int = 3) -> float:
    """``value`` rounded to ``digits`` significant digits (0 stays 0)."""
    return 0.0 if value == 0 else float(f"{value:.{digits}g}")


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """How the search runs: the range or doubling, the target, how precise, how many measurements at most.

    ``integer`` searches whole concurrency levels (clients) instead of arrival rates. Raises ``ValueError``
    for inconsistent values (``parse_sweep_spec`` has already named the field to the user by then).
    """

    target: float = 0.99
    start: float
    stop: float | None = None
    auto: bool = False
    coarse_steps: int = 6
    max_rate: float = 1_000.0
    resolution: float = 0.05
    max_trials: int = 3
    max_steps: int = 30
    confidence: float = 0.95
    integer: bool = False  # concurrency levels: whole numbers only
    unit: str = "req/s"
    # Once the search has ended, measure its first rate once more (same window as its first reading), so a
    # target whose speed drifted over the sweep shows it (``drift``; docs/sweep.md). Counts beyond max_steps.
    recheck: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.target < 1:
            raise ValueError(f"the attainment target must be in (0, 1), got {self.target}")
        if not (math.isfinite(self.start) and self.start > 0):
            raise ValueError(f"start must be finite and > 0, got {self.start}")
        if self.auto:
            if not self.max_rate > self.start:
                raise ValueError(f"max_rate ({self.max_rate}) must be > start ({self.start})")
        elif self.stop is None or not self.stop > self.start:
            raise ValueError(f"a range search needs stop > start ({self.start}), got {self.stop}")
        if self.coarse_steps < 2 or self.max_trials < 1 or self.max_steps < 1:
            raise ValueError("coarse_steps must be >= 2, max_trials and max_steps >= 1")
        if not 0 < self.resolution < 1 or not 0 < self.confidence < 1:
            raise ValueError("resolution and confidence must be in (0, 1)")

    @classmethod
    def from_spec(cls, spec: SweepSpec) -> SearchConfig:
        from cliffwatch.domain.capacity.sweep_spec import SweepMode

        integer = spec.mode is SweepMode.CONCURRENCY
        return cls(
            target=spec.target,
            start=spec.first_rate,
            stop=spec.stop,
            auto=spec.auto,
            coarse_steps=spec.coarse_steps,
            max_rate=spec.max_rate,
            resolution=spec.resolution,
            max_trials=spec.trials,
            max_steps=spec.max_steps,
            confidence=spec.confidence,
            integer=integer,
            unit="clients" if integer else "req/s",
            recheck=spec.rechecks,
        )

    @property
    def highest(self) -> float:
        """The highest rate the coarse pass may reach: ``max_rate`` when doubling, else ``stop``."""
        return self.max_rate if self.auto or self.stop is None else self.stop

    def tidy(self, rate: float) -> float:
        """A rate as the search offers it: a whole level >= 1 in integer mode, else 3 significant digits."""
        return float(max(1, round(rate))) if self.integer else round_sig(rate)

    def coarse_rates(self) -> Iterator[float]:
        """The coarse pass, lowest first: ``coarse_steps`` evenly spaced from start to stop inclusive, or with
        ``auto`` start, 2 × start, 4 × start, … and then max_rate itself (never above it)."""
        seen: set[float] = set()
        for rate in self._raw_coarse():
            tidy = self.tidy(rate)
            if tidy not in seen and tidy <= self.highest:
                seen.add(tidy)
                yield tidy

    def _raw_coarse(self) -> Iterator[float]:
        if self.auto:
            rate = self.start
            while rate < self.max_rate:
                yield rate
                rate *= 2
            yield self.max_rate
            return
        assert self.stop is not None  # checked in __post_init__
        step = (self.stop - self.start) / (self.coarse_steps - 1)
        for i in range(self.coarse_steps - 1):
            yield self.start + i * step
        yield self.stop

    def unit_text(self, rate: float) -> str:
        return f"{rate:g} {self.unit}"


class CapacitySearch:
    """Asks for rates to measure until the usable capacity is bracketed, a limit is hit, or nothing is left.

    ``next_rate`` returns a ``NextStep`` (rate, trial, extended, recheck) or None when finished; asking again
    before ``record`` returns the same one. ``record`` takes the step measured for it and raises ``ValueError`` for
    any other step. A trial whose queue grew inside its window is followed by an extended trial at the same rate.
    With ``config.recheck``, the search's end (``finished``) is followed by one more step: the first rate again.
    """

    def __init__(self, config: SearchConfig) -> None:
        self._config = config
        self._coarse = config.coarse_rates()
        self._coarse_last: float | None = None
        self._steps: list[StepStats] = []
        self._pending: NextStep | None = None
        self._good: float | None = None  # the highest GOOD rate below the ceiling
        self._ceiling: SettledRate | None = None  # the lowest BAD or INVALID rate
        self._finished: str | None = None
        self._rechecked = False
        self._luck = fit_luck(())

    @property
    def config(self) -> SearchConfig:
        return self._config

    @property
    def steps(self) -> tuple[StepStats, ...]:
        return tuple(self._steps)

    @property
    def luck(self) -> LuckCorrection:
        """The arrival-luck correction fitted on the steps so far (``arrival_luck``): refitted at every step, so
        a verdict may move as the sweep learns whether the reference fits."""
        return self._luck

    @property
    def finished(self) -> bool:
        return self._finished is not None

    @property
    def finished_because(self) -> str:
        """Why the search ended, as a clause for the result; while it runs, how far it got."""
        if self._finished is None:
            return f"unfinished after {len(self._steps)} steps"
        return self._finished

    def next_rate(self) -> NextStep | None:
        if self._pending is None and self._finished is None:
            self._pending = self._searching()
        if self._pending is None and self._finished is not None:
            self._pending = self._recheck()
        return self._pending

    def _searching(self) -> NextStep | None:
        """The search's next step, or None once it has ended (``_finished`` then says why)."""
        if self._steps:
            step = self._steps[-1]
            last = step.rate
            due = self._settle(last)
            if due is None:
                # a growing queue asks for the extended window; a rate measured over it stays there (confirming)
                extend = (step.growing and not step.extended) or (step.extended and not step.growing)
                return self._ask(last, self._trials_at(last) + 1, extended=extend)
        confirm = self._unconfirmed_usable()
        if confirm is not None:  # over the longer window: more requests a step, and further from the drained start
            return self._ask(confirm, self._trials_at(confirm) + 1, extended=True)
        rate = self._next_new_rate()
        return None if rate is None else self._ask(rate, 1)

    def _recheck(self) -> NextStep | None:
        """The end-of-sweep recheck, once: the first rate measured, over the same window as its first reading.
        After the search, so that it is as far from that reading as the sweep allows."""
        if not self._config.recheck or self._rechecked or not self._steps:
            return None
        first = self._steps[0].rate
        return NextStep(first, self._trials_at(first) + 1, extended=False, recheck=True)

    def record(self, step: StepStats) -> None:
        if self._pending is None:
            raise ValueError(f"no step was asked for; got one at {step.rate:g}, trial {step.trial}")
        rate, trial = self._pending.rate, self._pending.trial
        if not math.isclose(step.rate, rate, rel_tol=1e-9) or step.trial != trial:
            raise ValueError(f"expected the step at {rate:g}, trial {trial}; got {step.rate:g}, trial {step.trial}")
        self._rechecked = self._rechecked or self._pending.recheck
        self._pending = None
        self._steps.append(step)
        self._luck = fit_luck(self._steps)
        # From every settled rate, not just this one: a rate confirmed again may have turned bad.
        settled = [s for s in self.settled() if s.verdict is not StepVerdict.UNSURE]
        failing = [s for s in settled if s.verdict is not StepVerdict.GOOD]
        self._ceiling = min(failing, key=lambda s: s.rate, default=None)
        good = [s.rate for s in settled if s.verdict is StepVerdict.GOOD
                and (self._ceiling is None or s.rate < self._ceiling.rate)]  # fmt: skip
        self._good = max(good, default=None)

    def settled(self) -> tuple[SettledRate, ...]:
        """Every rate whose verdict is settled, lowest first. While the search runs, a rate awaiting another
        trial is left out; once it has finished (max_steps can stop it mid-repeat), every rate is settled."""
        found = (self._settle(rate, final=self.finished) for rate in sorted({s.rate for s in self._steps}))
        return tuple(s for s in found if s is not None)

    def _unconfirmed_usable(self) -> float | None:
        """The rate the search is about to call usable, when it was only settled on the point estimate of fewer
        than ``max_trials`` trials: it is measured again first. One lucky window (a Poisson draw that brought
        far fewer requests than its rate, or none of its few requests late) must not become the answer; the
        trials it could not clear the interval with are spent on the one rate that matters."""
        config = self._config
        low, high = self._good, None if self._ceiling is None else self._ceiling.rate
        if low is None or high is None:
            return None
        if not ((high - low <= 1) if config.integer else ((high - low) / high <= config.resolution)):
            return None  # not bracketed yet: bisection goes on
        settled = self._settle(low)
        if settled is None or not settled.on_point_estimate:
            return None
        trials = self._trials_at(low)
        if trials < config.max_trials:
            return low
        if (
            settled.pooled.offered < confirming_requests(config.target)
            and trials < CONFIRMING_TRIALS * config.max_trials
        ):
            return low
        return None

    def _trials_at(self, rate: float) -> int:
        return sum(1 for s in self._steps if s.rate == rate)

    def _settle(self, rate: float, *, final: bool = False) -> SettledRate | None:
        (pooled,) = pool_rates(
            [s for s in self._steps if s.rate == rate],
            target=self._config.target,
            confidence=self._config.confidence,
            luck=self._luck,
        )
        config = self._config
        return settle(
            pooled, target=config.target, max_trials=config.max_trials, confidence=config.confidence, final=final
        )

    def _ask(self, rate: float, trial: int, *, extended: bool = False) -> NextStep | None:
        if len(self._steps) >= self._config.max_steps:
            self._finished = f"stopped after {len(self._steps)} steps (max_steps)"
            return None
        return NextStep(rate, trial, extended)

    def _next_new_rate(self) -> float | None:
        config = self._config
        if self._ceiling is None:
            rate = next(self._coarse, None)
            if rate is None:
                self._finished = f"no cliff found up to {config.unit_text(self._coarse_last or config.highest)}"
            self._coarse_last = rate or self._coarse_last
            return rate
        high = self._ceiling.rate
        if self._good is None:
            mid = config.tidy(high / 2)
            floor = config.tidy(config.start / FLOOR_DIVISOR)  # tidied as the rates are: 1/64 is offered as 0.0156
            if mid >= high or mid < floor:
                self._finished = self._nothing_good(high)
                return None
            return mid
        low = self._good
        if (high - low <= 1) if config.integer else ((high - low) / high <= config.resolution):
            self._finished = self._bracketed(low)
            return None
        return _midpoint(low, high, integer=config.integer)

    def _generator_ceiling(self) -> bool:
        """Whether the lowest failing rate failed because the generator fell behind, not the target."""
        return self._ceiling is not None and any(s.generator_limited for s in self._ceiling.pooled.trials)

    def _nothing_good(self, lowest: float) -> str:
        config = self._config
        if self._generator_ceiling():
            return f"the generator could not keep its schedule at any rate down to {config.unit_text(lowest)}"
        return f"no rate down to {config.unit_text(lowest)} met the target"

    def _bracketed(self, good: float) -> str:
        config = self._config
        if self._generator_ceiling():
            return f"above {config.unit_text(good)} the generator could not keep its schedule"
        if config.integer:
            return "bracketed within 1 client"
        return f"bracketed within {config.resolution * 100:g} %"


def confirming_requests(target: float) -> int:
    """How many requests the usable rate must have been measured on before the search may end on it: with none
    of ``3 / (1 − target)`` requests failing, the failing share is below ``1 − target`` at 95 % confidence (the
    rule of three): 300 at the default 0.99."""
    return math.ceil(3 / (1 - target) - 1e-9)


def _midpoint(low: float, high: float, *, integer: bool) -> float:
    """The bisection point between a good and a bad rate: a whole level, else 3 significant digits (more when
    3 would land on an end)."""
    if integer:
        return float((int(low) + int(high)) // 2)
    exact = (low + high) / 2
    for digits in range(3, 16):
        mid = round_sig(exact, digits)
        if low < mid < high:
            return mid
    return exact
