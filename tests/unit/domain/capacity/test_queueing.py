"""The single slot's analytic capacity: the M/D/1 waiting time against a simulation, and the usable rates."""

from __future__ import annotations

import random

import pytest

from cliffwatch.domain.capacity.queueing import dd1_usable_rate, md1_usable_rate, md1_wait_cdf


def simulated_wait_share(wait_s: float, *, rate: float, service_s: float, requests: int = 200_000) -> float:
    """The share of an M/D/1 queue's requests that waited at most ``wait_s`` (Lindley's recursion)."""
    rng = random.Random(7)
    at = free = 0.0
    within = 0
    for _ in range(requests):
        at += rng.expovariate(rate)
        start = max(at, free)
        free = start + service_s
        within += start - at <= wait_s
    return within / requests


@pytest.mark.parametrize(("load", "wait_in_services"), [(0.3, 0.5), (0.56, 4.0), (0.77, 9.0), (0.9, 2.0)])
def test_the_waiting_time_distribution_matches_a_simulated_queue(load: float, wait_in_services: float) -> None:
    service = 0.32
    exact = md1_wait_cdf(wait_in_services * service, rate=load / service, service_s=service)
    assert exact == pytest.approx(simulated_wait_share(wait_in_services * service, rate=load / service,
                                                       service_s=service), abs=0.01)  # fmt: skip


def test_with_no_wait_allowed_only_an_idle_server_will_do() -> None:
    assert md1_wait_cdf(0.0, rate=2.0, service_s=0.25) == pytest.approx(1 - 0.5)  # P(idle) = 1 − ρ
    assert md1_wait_cdf(-1.0, rate=2.0, service_s=0.25) == 0.0


def test_the_usable_rate_is_where_the_target_share_meets_the_slo() -> None:
    service = 0.32
    for factor, load in ((5, 0.561), (10, 0.773)):
        rate = md1_usable_rate(service_s=service, slo_s=factor * service, attainment=0.99)
        assert rate * service == pytest.approx(load, abs=0.001)
        assert md1_wait_cdf((factor - 1) * service, rate=rate, service_s=service) == pytest.approx(0.99, abs=1e-6)


def test_constant_arrivals_are_usable_up_to_saturation_and_nothing_is_when_one_request_misses_the_slo() -> None:
    assert dd1_usable_rate(service_s=0.32, slo_s=1.6) == pytest.approx(3.125)
    assert dd1_usable_rate(service_s=0.32, slo_s=0.3) == 0.0
    assert md1_usable_rate(service_s=0.32, slo_s=0.3, attainment=0.99) == 0.0


def test_a_load_without_a_steady_state_is_refused() -> None:
    with pytest.raises(ValueError, match="load"):
        md1_wait_cdf(1.0, rate=4.0, service_s=0.25)
    with pytest.raises(ValueError, match="service time"):
        md1_wait_cdf(1.0, rate=1.0, service_s=0.0)
