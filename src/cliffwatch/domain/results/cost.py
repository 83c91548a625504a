"""What the figures cost: ``target.cost`` turned into the price of what was served on time.

Capacity is bought by the hour, and what the hour buys is on-time work, not requests sent: a target that
serves 10 req/s with half of them late costs twice as much per useful answer as its throughput suggests.

- A run: the target's hourly cost over each phase's length, per 1,000 requests that finished on time in it
  and per million output tokens of those requests (the requests scheduled in the phase); and over the whole
  run. A phase with nothing on time has no price (None), not an infinite one.
- A sweep: at the usable rate, the usable step's goodput (on-time completions a second) is what an hour buys:
  the price per 1,000 on-time requests, and per million on-time output tokens from its output tokens per
  completion. The sentence: "at 5.75 req/s usable: $0.60 per 1,000 on-time requests".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cliffwatch.domain.scenario.cost_spec import CostSpec, money

SECONDS_AN_HOUR = 3600.0


@dataclass(frozen=True, kw_only=True)
class Price:
    """What ``seconds`` of the target cost, set against the on-time work done in them."""

    cost: float  # in the spec's currency
    currency: str
    on_time: int
    on_time_output_tokens: float

    @property
    def per_1000_on_time(self) -> float | None:
        return None if not self.on_time else 1000.0 * self.cost / self.on_time

    @property
    def per_million_on_time_tokens(self) -> float | None:
        return None if not self.on_time_output_tokens else 1e6 * self.cost / self.on_time_output_tokens

    def to_dict(self) -> dict[str, Any]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 6)

        return {"cost": round(self.cost, 6), "currency": self.currency, "on_time": self.on_time,
                "on_time_output_tokens": round(self.on_time_output_tokens, 1),
                "per_1000_on_time": rounded(self.per_1000_on_time),
                "per_million_on_time_output_tokens": rounded(self.per_million_on_time_tokens)}  # fmt: skip

    def sentence(self) -> str:
        """ "$0.60 per 1,000 on-time requests ($4.10 per million on-time output tokens)", or why there is none."""
        per_request = self.per_1000_on_time
        if per_request is None:
            return f"{money(self.cost, self.currency)} for nothing on time"
        text = f"{money(per_request, self.currency)} per 1,000 on-time requests"
        per_token = self.per_million_on_time_tokens
        if per_token is not None:
            text += f" ({money(per_token, self.currency)} per million on-time output tokens)"
        return text


def priced(spec: CostSpec, *, seconds: float, on_time: int, on_time_output_tokens: float) -> Price:
    """The price of ``seconds`` of the target that served ``on_time`` requests on time."""
    return Price(cost=spec.per_hour * seconds / SECONDS_AN_HOUR, currency=spec.currency, on_time=on_time,
                 on_time_output_tokens=on_time_output_tokens)  # fmt: skip


def usable_price(spec: CostSpec, *, goodput_rps: float, tokens_per_s: float, completions_per_s: float) -> Price:
    """An hour at the usable rate: what the usable step's goodput would serve on time in it."""
    per_completion = tokens_per_s / completions_per_s if completions_per_s > 0 else 0.0
    on_time = goodput_rps * SECONDS_AN_HOUR
    return Price(cost=spec.per_hour, currency=spec.currency, on_time=round(on_time),
                 on_time_output_tokens=on_time * per_completion)  # fmt: skip


def usable_cost(spec: CostSpec, usable_rps: float | None, steps: Sequence[UsableStep]) -> dict[str, Any] | None:
    """A sweep variant's price at its usable rate, from the steps measured there (pooled by window length);
    None without a usable rate or a step at it."""
    at = [s for s in steps if usable_rps is not None and s.rate == usable_rps and not s.recheck]
    seconds = sum(s.duration_s for s in at)
    if usable_rps is None or not seconds:
        return None

    def pooled(pick: Callable[[UsableStep], float]) -> float:
        return sum(pick(s) * s.duration_s for s in at) / seconds

    price = usable_price(spec, goodput_rps=pooled(lambda s: s.goodput_rps),
                         tokens_per_s=pooled(lambda s: s.tokens_per_s),
                         completions_per_s=pooled(lambda s: s.completions_per_s))  # fmt: skip
    sentence = f"at {usable_rps:g} usable: {price.sentence()}"
    return {
        "per_hour": spec.per_hour,
        "currency": spec.currency,
        "described": spec.describe(),
        "usable_rps": usable_rps,
        "hour": price.to_dict(),
        "sentence": sentence,
    }


class UsableStep(Protocol):
    """What a sweep step says of the on-time work an hour at its rate buys (``StepStats`` has it)."""

    @property
    def rate(self) -> float: ...
    @property
    def recheck(self) -> bool: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def goodput_rps(self) -> float: ...
    @property
    def tokens_per_s(self) -> float: ...
    @property
    def completions_per_s(self) -> float: ...
