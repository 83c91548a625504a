"""What a capacity sweep is asked to do: the rates it may try, how long each step lasts, the attainment
target, and the client retry policies it repeats under. Read from the CLI's options and the API's JSON
alike, with every problem named by its field, so a bad request loses nothing and says what to fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cliffwatch.domain.errors import SweepInvalid
from cliffwatch.domain.scenario.retry import RetryBudget, RetryKind, RetryPolicy
from cliffwatch.domain.validation import Problems, Reader, short_repr

AS_WRITTEN = "as-written"  # the scenario's own client retry policy
_VARIANT = re.compile(r"^(none|as-written|(immediate|exponential|budget):([1-9]|10))$")
VARIANT_HELP = "as-written, none, immediate:N, exponential:N or budget:N (N from 1 to 10)"
MAX_VARIANTS = 5
EXTEND_FACTOR = 3  # an extended step's window, in step windows


class SweepMode(StrEnum):
    RATE = "rate"  # each step is an open-loop arrival rate (requests/s)
    CONCURRENCY = "concurrency"  # each step is a number of closed-loop clients, each sending back to back


class SweepArrival(StrEnum):
    POISSON = "poisson"  # what users do: independent arrivals, so queues form before saturation
    CONSTANT = "constant"  # evenly spaced: the sharpest cliff, the one a model predicts


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A sweep's parameters, validated. ``start`` is None only with ``auto`` (the mode's default start)."""

    mode: SweepMode = SweepMode.RATE
    start: float | None = None
    stop: float | None = None
    auto: bool = False
    target: float = 0.99  # SLO attainment a usable rate must meet
    trials: int = 3  # most measurements at one rate while its interval straddles the target
    # A step lasts about warm-up + window + in-flight tail + cool-down: 15–20 s with these, so that
    # `cliffwatch sweep burst-storm --auto` (about 9 steps) ends in about 3 minutes (docs/sweep.md).
    step_s: float = 10.0  # the measured window of each step
    warmup_s: float = 4.0  # before it, at the same rate, not measured
    cooldown_s: float = 1.0  # idle time after each step (once nothing is in flight), so the target's queues drain
    arrival: SweepArrival = SweepArrival.POISSON
    coarse_steps: int = 6
    resolution: float = 0.05  # bisection stops when (first bad − last good) / first bad ≤ this
    max_steps: int = 30
    max_rate: float = 1_000.0  # --auto never goes above this
    variants: tuple[str, ...] = (AS_WRITTEN,)
    confidence: float = 0.95
    # A step whose queue grew inside its window (domain.capacity.growth) is measured again over this longer window
    # (None: 3 × step_s); a rate still growing there is not sustainable. growth_check False judges a rate by its
    # SLO attainment alone, as before the check existed.
    extend_s: float | None = None
    growth_check: bool = True
    # Poisson rate steps judged on their attainment corrected for the luck of their draws, where a reference
    # queue fits the target (domain.capacity.arrival_luck); False: on the counted attainment alone.
    luck_correction: bool = True
    # One more step once the search has ended: the first rate again, to see whether the target's speed drifted
    # during the sweep (domain.capacity.drift). None: the default, on for auto sweeps (the issue's: a doubling sweep
    # runs long and reads every rate once), off for ranges; True or False as asked.
    recheck: bool | None = None
    # After each step (once nothing is in flight at the client), the most the sweep waits for the target itself to
    # be idle: its own waiting and running requests at 0, or a probe answered as fast as on the idle target
    # (domain.capacity.step_drain). A server keeps working on requests whose clients gave up.
    drain_timeout_s: float = 60.0

    @property
    def rechecks(self) -> bool:
        """Whether the sweep ends with the recheck: as asked, else only for auto sweeps."""
        return self.auto if self.recheck is None else self.recheck

    @property
    def extended_s(self) -> float:
        """The measured window of an extended step."""
        return self.extend_s if self.extend_s is not None else EXTEND_FACTOR * self.step_s

    @property
    def first_rate(self) -> float:
        if self.start is not None:
            return self.start
        return 1.0 if self.mode is SweepMode.CONCURRENCY else 0.5

    @property
    def highest_rate(self) -> float:
        """The most the sweep may offer: ``stop`` for a range, ``max_rate`` for ``auto``."""
        return self.stop if self.stop is not None else self.max_rate

    def max_duration_s(self) -> float:
        """An upper bound on the sweep's length: every step of every variant at its full length (the recheck
        included), each over the extended window (a growing queue, or the usable rate confirmed, asks for it)."""
        return len(self.variants) * (self.max_steps + self.rechecks) * self.longest_step_s

    @property
    def longest_step_s(self) -> float:
        """Warm-up, the longer of the two windows, and cool-down: the most one step takes before its tail (its
        requests still in flight, and the target's drain, which ``drain_timeout_s`` bounds and a drained target
        does not reach: counting it would make a default two-variant sweep look an hour and a half long)."""
        return self.warmup_s + max(self.step_s, self.extended_s) + self.cooldown_s

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``parse_sweep_spec`` reads back."""
        return {
            "mode": self.mode.value,
            "start": self.start,
            "stop": self.stop,
            "auto": self.auto,
            "target": self.target,
            "trials": self.trials,
            "step_s": self.step_s,
            "warmup_s": self.warmup_s,
            "cooldown_s": self.cooldown_s,
            "arrival": self.arrival.value,
            "coarse_steps": self.coarse_steps,
            "resolution": self.resolution,
            "max_steps": self.max_steps,
            "max_rate": self.max_rate,
            "variants": list(self.variants),
            "confidence": self.confidence,
            "extend_s": self.extend_s,
            "growth_check": self.growth_check,
            "luck_correction": self.luck_correction,
            "recheck": self.recheck,
            "drain_timeout_s": self.drain_timeout_s,
        }


def parse_sweep_spec(data: object, path: str = "sweep") -> SweepSpec:
    """A ``SweepSpec`` from its JSON form (absent keys take the defaults; an explicit null for ``start`` or
    ``stop`` means absent). Raises ``SweepInvalid`` naming every bad field."""
    problems = Problems()
    reader = Reader.of(data, path, problems)
    if reader is None:
        raise SweepInvalid(problems.items)
    defaults = SweepSpec()
    mode = reader.string("mode", defaults.mode.value, choices=tuple(m.value for m in SweepMode))
    start = None if reader.data.get("start") is None else reader.number("start", gt=0)
    reader.raw("start", None)
    stop = None if reader.data.get("stop") is None else reader.number("stop", gt=0)
    reader.raw("stop", None)
    auto = reader.boolean("auto", False)
    target = reader.number("target", defaults.target, gt=0)
    if target is not None and target >= 1:
        reader.error("target", "must be < 1 (an attainment of 100 % can never be shown)")
        target = None
    trials = reader.number("trials", defaults.trials, ge=1, le=10, integer=True)
    step_s = reader.number("step_s", defaults.step_s, ge=1, le=600)
    warmup_s = reader.number("warmup_s", defaults.warmup_s, ge=0, le=300)
    cooldown_s = reader.number("cooldown_s", defaults.cooldown_s, ge=0, le=300)
    arrival = reader.string("arrival", defaults.arrival.value, choices=tuple(a.value for a in SweepArrival))
    coarse_steps = reader.number("coarse_steps", defaults.coarse_steps, ge=2, le=50, integer=True)
    resolution = reader.number("resolution", defaults.resolution, gt=0, le=0.5)
    max_steps = reader.number("max_steps", defaults.max_steps, ge=2, le=200, integer=True)
    max_rate = reader.number("max_rate", defaults.max_rate, gt=0)
    confidence = reader.number("confidence", defaults.confidence, ge=0.5, le=0.999)
    variants = _parse_variants(reader)
    extend_s = None if reader.data.get("extend_s") is None else reader.number("extend_s", gt=0, le=1800)
    reader.raw("extend_s", None)
    growth_check = reader.boolean("growth_check", True)
    luck_correction = reader.boolean("luck_correction", True)
    # absent or null: the default (on for auto sweeps)
    recheck = None if reader.data.get("recheck") is None else reader.boolean("recheck")
    reader.raw("recheck", None)
    drain_timeout_s = reader.number("drain_timeout_s", defaults.drain_timeout_s, ge=1, le=600)
    reader.done()
    if extend_s is not None and step_s is not None and not extend_s > step_s:
        reader.error("extend_s", f"must be > step_s ({step_s:g}): an extended step measures longer")
    if auto is True and stop is not None:
        reader.error("stop", "give either a range (start and stop) or auto, not both")
    # A start or stop that was given but is wrong has its own problem already.
    if auto is False and not (reader.data.get("start") is not None and reader.data.get("stop") is not None):
        reader.error(None, "give a range (start and stop) or set auto: true")
    if start is not None and stop is not None and not stop > start:
        reader.error("stop", f"must be > start ({start:g})")
    if auto is True and start is not None and max_rate is not None and not start < max_rate:
        reader.error("start", f"must be < max_rate ({max_rate:g})")
    if mode == SweepMode.CONCURRENCY.value and arrival == SweepArrival.CONSTANT.value and reader.has("arrival"):
        reader.error("arrival", "applies to rate sweeps; a concurrency sweep's clients send back to back")
    if problems:
        raise SweepInvalid(problems.items)
    return SweepSpec(
        mode=SweepMode(mode),
        start=start,
        stop=stop,
        auto=auto,
        target=target,
        trials=trials,
        step_s=step_s,
        warmup_s=warmup_s,
        cooldown_s=cooldown_s,
        arrival=SweepArrival(arrival),
        coarse_steps=coarse_steps,
        resolution=resolution,
        max_steps=max_steps,
        max_rate=max_rate,
        variants=variants,
        confidence=confidence,
        extend_s=extend_s,
        growth_check=growth_check,
        luck_correction=luck_correction,
        recheck=recheck,
        drain_timeout_s=drain_timeout_s,
    )


def _parse_variants(reader: Reader) -> tuple[str, ...]:
    if not reader.has("variants"):
        reader.raw("variants", None)
        return (AS_WRITTEN,)
    found: list[str] = []
    for item_path, item in reader.items("variants", nonempty=True):
        if not isinstance(item, str) or not _VARIANT.fullmatch(item):
            reader.problems.add(item_path, f"must be {VARIANT_HELP}; got {short_repr(item)}")
        elif item in found:
            reader.problems.add(item_path, f"{item} is listed twice")
        else:
            found.append(item)
    if len(found) > MAX_VARIANTS:
        reader.error("variants", f"at most {MAX_VARIANTS} retry policies per sweep")
    return tuple(found) or (AS_WRITTEN,)


def variant_policy(variant: str) -> RetryPolicy | None:
    """The client retry policy a variant stands for; None for the scenario's own (``as-written``).

    The presets are the behaviours operators meet in practice: no retries, an SDK's immediate retries,
    exponential backoff with full jitter that honours Retry-After, and the same under a 10 % retry budget.
    """
    match = _VARIANT.fullmatch(variant)
    if match is None:
        raise ValueError(f"unknown retry variant {variant!r}: use {VARIANT_HELP}")
    if variant == AS_WRITTEN:
        return None
    if variant == "none":
        return RetryPolicy()
    kind, retries = match.group(2), int(match.group(3))
    if kind == "immediate":
        return RetryPolicy(kind=RetryKind.IMMEDIATE, max_retries=retries)
    budget = RetryBudget(ratio=0.1, reserve=10.0) if kind == "budget" else None
    return RetryPolicy(kind=RetryKind.EXPONENTIAL, max_retries=retries, honour_retry_after=True, budget=budget)


def parse_sweep_options(options: Mapping[str, Any]) -> SweepSpec:
    """A ``SweepSpec`` from CLI options (names as in ``to_dict``; None means not given): the same rules and
    messages as the API, with paths named after the options (``--to: must be > start (2)``)."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return parse_sweep_spec(given, path="")
    except SweepInvalid as exc:
        flags = {
            "start": "--from",
            "stop": "--to",
            "target": "--attainment",
            "step_s": "--step-seconds",
            "warmup_s": "--warmup-seconds",
            "cooldown_s": "--cooldown-seconds",
            "mode": "--concurrency",
            "variants": "--retry-variants",
            "extend_s": "--extend-seconds",
            "growth_check": "--no-growth-check",
            "luck_correction": "--no-luck-correction",
            "recheck": "--recheck",
            "drain_timeout_s": "--drain-timeout",
        }

        def flag(path: str) -> str:
            name, bracket, rest = path.partition("[")  # variants[1] → --retry-variants[1]
            return flags.get(name, f"--{name.replace('_', '-')}") + bracket + rest if path else ""

        renamed = [type(p)(path=flag(p.path), message=p.message) for p in exc.problems]
        raise SweepInvalid(renamed, source="sweep options") from exc
