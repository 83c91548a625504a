"""The analytic truth of a single-server queue's usable capacity, for checking a sweep against a known answer.

A server that handles one request at a time, each in a fixed time ``D`` (the built-in target with
``max_batch: 1``; any single-worker FIFO server), is the M/D/1 queue under Poisson arrivals and the D/D/1
queue under constant ones. Its usable capacity at an attainment target ``p`` and an end-to-end SLO ``T`` is
the highest arrival rate λ at which a share ``p`` of requests end within ``T``, i.e. wait at most ``T − D``:

- constant arrivals: nobody waits below saturation, so every rate up to ``μ = 1/D`` is usable (when ``T ≥ D``);
- Poisson arrivals: the M/D/1 waiting time has the exact distribution (Erlang 1909; Crommelin 1932)

      P(W ≤ t) = (1 − ρ) · Σ_{k=0}^{⌊t/D⌋} (λ(kD − t))^k / k! · e^{−λ(kD − t)},      ρ = λD < 1

  and the usable rate is where ``P(W ≤ T − D) = p``, found by bisection (it falls as λ rises).

The derivation and the figures it gives are in docs/capacity-model.md ("A single slot"). Pure maths.
"""

from __future__ import annotations

import math


def md1_wait_cdf(wait_s: float, *, rate: float, service_s: float) -> float:
    """P(W ≤ ``wait_s``) in an M/D/1 queue with arrivals at ``rate`` (/s) and service time ``service_s``.

    Raises ``ValueError`` for a rate at or above saturation (no steady state) or a non-positive service time.
    The alternating sum loses precision for waits of many service times; up to 50 it keeps 1e-6.
    """
    if service_s <= 0:
        raise ValueError(f"the service time must be > 0, got {service_s}")
    load = rate * service_s
    if not 0 <= load < 1:
        raise ValueError(f"the load λD must be in [0, 1) for a steady state, got {load:g}")
    if wait_s < 0:
        return 0.0
    terms = []
    for k in range(math.floor(wait_s / service_s) + 1):
        x = rate * (k * service_s - wait_s)  # <= 0
        terms.append(x**k / math.factorial(k) * math.exp(-x))
    return min(1.0, max(0.0, (1 - load) * math.fsum(terms)))


def md1_usable_rate(*, service_s: float, slo_s: float, attainment: float, tolerance: float = 1e-9) -> float:
    """The highest Poisson arrival rate at which ``attainment`` of the requests end within ``slo_s``; 0 when even
    a lone request cannot (``slo_s < service_s``)."""
    if slo_s < service_s:
        return 0.0
    budget = slo_s - service_s
    low, high = 0.0, 1.0 / service_s
    while high - low > tolerance * high:
        middle = (low + high) / 2
        if md1_wait_cdf(budget, rate=middle, service_s=service_s) >= attainment:
            low = middle
        else:
            high = middle
    return low


def dd1_usable_rate(*, service_s: float, slo_s: float) -> float:
    """The highest constant arrival rate whose requests all end within ``slo_s``: saturation, ``1 / service_s``
    (no request waits below it; above it every one waits longer than the one before), or 0 when a lone request
    cannot meet the SLO."""
    return 0.0 if slo_s < service_s else 1.0 / service_s
