"""``target.cost``: what the target costs an hour, so runs and sweeps can price what they find.

Either ``per_hour`` (the whole deployment), or ``per_replica_hour`` with ``replicas`` (so a capacity review can
change one without working out the other); ``currency`` is only a label (``USD`` by default, shown as ``$``).
cliffwatch never converts it. What a run and a sweep make of it is in ``domain.results.cost``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cliffwatch.domain.validation import Reader

_CURRENCY = re.compile(r"^[A-Z]{3}$")  # an ISO 4217 code
MAX_PER_HOUR = 1_000_000.0
MAX_REPLICAS = 100_000


@dataclass(frozen=True, kw_only=True)
class CostSpec:
    per_hour: float  # the whole target, all replicas
    currency: str = "USD"
    per_replica_hour: float | None = None  # as given, when the cost was given per replica
    replicas: int | None = None

    def describe(self) -> str:
        whole = money(self.per_hour, self.currency, exact=True)
        if self.per_replica_hour is None or self.replicas is None:
            return f"{whole} an hour"
        return f"{whole} an hour ({self.replicas} × {money(self.per_replica_hour, self.currency, exact=True)})"


def money(amount: float, currency: str, *, exact: bool = False) -> str:
    """``$0.60`` for dollars, ``0.60 EUR`` for any other code. A price is shown in cents, or to three
    significant figures below ten cents (``$0.00417``); ``exact``: a figure as given, to up to four decimals
    (``$3.125`` a replica-hour is not rounded to ``$3.12``)."""
    if exact:
        text = f"{amount:,.4f}".rstrip("0")
        whole, _, decimals = text.partition(".")
        text = f"{whole}.{decimals.ljust(2, '0')}"
    elif amount >= 0.1 or amount == 0:
        text = f"{amount:,.2f}"
    else:
        text = f"{amount:.3g}" if amount >= 1e-4 else f"{amount:.2e}"
    return f"${text}" if currency == "USD" else f"{text} {currency}"


def parse_cost(reader: Reader) -> CostSpec | None:
    """``target.cost`` from its reader; problems name the field (``target.cost.replicas: is required``)."""
    per_hour = reader.number("per_hour", None, gt=0, le=MAX_PER_HOUR)
    per_replica = reader.number("per_replica_hour", None, gt=0, le=MAX_PER_HOUR)
    replicas = reader.number("replicas", None, ge=1, le=MAX_REPLICAS, integer=True)
    currency = reader.string("currency", "USD")
    reader.done()
    if currency is not None and not _CURRENCY.fullmatch(currency):
        reader.error("currency", "must be a three-letter ISO 4217 code such as USD or EUR")
        return None
    given = reader.has("per_hour"), reader.has("per_replica_hour")
    if given == (True, True):
        reader.error("per_replica_hour", "give per_hour or per_replica_hour with replicas, not both")
        return None
    if given == (False, False):
        reader.error(None, "give per_hour, or per_replica_hour with replicas")
        return None
    if reader.has("per_replica_hour") != reader.has("replicas"):
        missing = "replicas" if reader.has("per_replica_hour") else "per_replica_hour"
        reader.error(missing, "is required with " + ("per_replica_hour" if missing == "replicas" else "replicas"))
        return None
    if currency is None or (per_hour is None and (per_replica is None or replicas is None)):
        return None  # a bad value: its own problem is recorded
    if per_replica is not None and replicas is not None:
        return CostSpec(per_hour=per_replica * replicas, currency=currency, per_replica_hour=float(per_replica),
                        replicas=int(replicas))  # fmt: skip
    return CostSpec(per_hour=float(per_hour), currency=currency)
